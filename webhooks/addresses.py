"""Where a webhook may go: never inside (its own port, the cloud's metadata, the private network).
Checked when the endpoint is saved (the URL as written) and when a delivery connects (every
address the name resolves to, then a connection to that checked address only)."""

from __future__ import annotations

import contextvars
import ipaddress
import socket
import time
import typing
from urllib.parse import urlsplit

import httpcore
import httpx
from django.conf import settings
from django.core.exceptions import ValidationError

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
NAT64 = ipaddress.ip_network("64:ff9b::/96")
# Names that never leave the machine or the cloud's own network, whatever DNS says.
INSIDE_NAMES = ("localhost", ".localhost", ".internal")


class UnsafeURL(ValueError):
    """This URL or the address it resolves to may not receive webhooks; the message says why."""


def check_url(url: str) -> None:
    """Refuse what the URL says by itself: scheme, user info, a literal inside address."""
    try:
        parts = urlsplit(url.strip())
        port = parts.port
    except ValueError as exc:
        raise UnsafeURL(f"This is not a URL: {exc}.") from None
    scheme = parts.scheme.lower()
    if scheme not in ("https", "http"):
        raise UnsafeURL(f"Use an https:// URL; {scheme or 'no'} scheme cannot receive webhooks.")
    if scheme == "http" and not settings.WEBHOOK_ALLOW_HTTP:
        raise UnsafeURL(
            "Use https://: plain http is allowed only in the demo (WEBHOOK_ALLOW_HTTP)."
        )
    if "@" in parts.netloc:
        raise UnsafeURL(
            "Put no user name or password in the URL: receivers check the signature instead."
        )
    host = (parts.hostname or "").rstrip(".")
    if not host:
        raise UnsafeURL("The URL names no host.")
    if port == 0:
        raise UnsafeURL("Port 0 cannot receive webhooks.")
    if settings.WEBHOOK_ALLOW_PRIVATE:
        return
    if host == INSIDE_NAMES[0] or host.endswith(INSIDE_NAMES[1:]):
        raise UnsafeURL(f"{host} is a name for this machine or its private network.")
    address = literal_address(host)
    if address is not None and (reason := refusal(address)):
        raise UnsafeURL(f"{address} is {reason}: webhooks go only to public addresses.")


def literal_address(host: str) -> Address | None:
    """The address a host written as a number means, in every spelling the C resolver accepts
    (127.1, 0x7f.0.0.1, 2130706433 all connect to 127.0.0.1); None for a name."""
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        pass
    try:
        return ipaddress.IPv4Address(socket.inet_aton(host))
    except OSError:
        return None


def refusal(address: Address) -> str:
    """Why this address is not public, or "" when it is."""
    if isinstance(address, ipaddress.IPv6Address):
        # An IPv4 address inside an IPv6 one reaches the IPv4 host: judge that one.
        inner = address.ipv4_mapped or address.sixtofour
        if address.teredo:
            inner = address.teredo[1]
        if address in NAT64:
            inner = ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
        if inner is not None and refusal(inner):
            return refusal(inner)
    for flag, words in (
        ("is_loopback", "a loopback address"),
        ("is_link_local", "a link-local address (where cloud metadata answers)"),
        ("is_multicast", "a multicast address"),
        ("is_unspecified", "the unspecified address"),
        ("is_reserved", "a reserved address"),
        ("is_private", "a private address"),
    ):
        if getattr(address, flag):
            return words
    if not address.is_global:
        return "not a public address"
    return ""


def validate_webhook_url(url: str) -> None:
    """The model field's validator: Django admin shows the message under the URL."""
    try:
        check_url(url)
    except UnsafeURL as exc:
        raise ValidationError(str(exc), code="unsafe_url") from None


# --- at send time --------------------------------------------------------------------------------
# Each POST's end (time.monotonic()), set by the thread that sends it: WEBHOOK_TIMEOUT bounds
# the whole POST, not each read, so a receiver that drips a byte at a time cannot hold a sender.
_deadline: contextvars.ContextVar[float | None] = contextvars.ContextVar(
    "webhook_deadline", default=None
)


def resolve(host: str, port: int) -> list[str]:
    """Every address the name resolves to, each checked: one inside address refuses the name."""
    try:
        found = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except OSError as exc:
        raise httpcore.ConnectError(f"cannot resolve {host}: {exc}") from exc
    addresses = list(dict.fromkeys(str(info[4][0]) for info in found))
    if not settings.WEBHOOK_ALLOW_PRIVATE:
        for address in addresses:
            reason = refusal(ipaddress.ip_address(address.split("%", 1)[0]))
            if reason:
                raise UnsafeURL(
                    f"{host} resolves to {address}, {reason}: webhooks go only to public addresses."
                )
    return addresses


class _Bounded(httpcore.NetworkStream):
    """A connection whose every wait ends by the POST's deadline."""

    def __init__(self, stream: httpcore.NetworkStream) -> None:
        self.stream = stream

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self.stream.read(max_bytes, _within(timeout, httpcore.ReadTimeout))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self.stream.write(buffer, _within(timeout, httpcore.WriteTimeout))

    def close(self) -> None:
        self.stream.close()

    def start_tls(
        self,
        ssl_context: typing.Any,
        server_hostname: str | None = None,
        timeout: float | None = None,
    ) -> httpcore.NetworkStream:
        wait = _within(timeout, httpcore.ConnectTimeout)
        return _Bounded(self.stream.start_tls(ssl_context, server_hostname, wait))

    def get_extra_info(self, info: str) -> typing.Any:
        return self.stream.get_extra_info(info)


def _within(timeout: float | None, error: type[Exception]) -> float | None:
    deadline = _deadline.get()
    if deadline is None:
        return timeout
    left = deadline - time.monotonic()
    if left <= 0:
        raise error("the endpoint took longer than WEBHOOK_TIMEOUT in all")
    return left if timeout is None else min(timeout, left)


class CheckedBackend(httpcore.SyncBackend):
    """Resolves the name itself and connects to a checked address; TLS and the Host header still
    use the name from the URL."""

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: typing.Iterable[typing.Any] | None = None,
    ) -> httpcore.NetworkStream:
        last: Exception = httpcore.ConnectError(f"{host} has no address")
        for address in resolve(host, port):
            try:
                wait = _within(timeout, httpcore.ConnectTimeout)
                stream = super().connect_tcp(address, port, wait, local_address, socket_options)
            except (httpcore.ConnectError, httpcore.ConnectTimeout) as exc:
                last = exc
                continue
            return _Bounded(stream)
        raise last

    def connect_unix_socket(self, *args: typing.Any, **kwargs: typing.Any) -> typing.NoReturn:
        raise UnsafeURL("webhooks never go to a Unix socket")


class CheckedTransport(httpx.HTTPTransport):
    """httpx's own transport on CheckedBackend. No proxy: it would connect to an unchecked
    address. (httpx 0.28 takes no network backend: the pool is replaced after __init__.)"""

    def __init__(self) -> None:
        super().__init__(trust_env=False, retries=0)
        self._pool = httpcore.ConnectionPool(
            ssl_context=httpx.create_ssl_context(),
            max_connections=100,
            max_keepalive_connections=20,
            keepalive_expiry=5.0,
            network_backend=CheckedBackend(),
        )


def client() -> httpx.Client:
    """The one client deliveries use: checked addresses, no redirects (httpx's), no proxy."""
    return httpx.Client(
        transport=CheckedTransport(), timeout=settings.WEBHOOK_TIMEOUT, trust_env=False
    )


def post(
    http: httpx.Client, url: str, *, content: bytes, headers: dict[str, str]
) -> httpx.Response:
    """POST within WEBHOOK_TIMEOUT in all, to a URL checked again now (the row may predate it)."""
    check_url(url)
    token = _deadline.set(time.monotonic() + settings.WEBHOOK_TIMEOUT)
    try:
        return http.post(url, content=content, headers=headers)
    finally:
        _deadline.reset(token)
