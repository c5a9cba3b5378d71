"""localstripe (a stateful Stripe emulator on PyPI) as a real HTTP server on a loopback port, for
the tests that refund through refunds.payments.StripeGateway.

A thin test-side launcher, not a fix of the emulator: `python -m devtools.localstripe` serves
localstripe's own aiohttp app with two differences from its `localstripe` command, both about
running many copies on one shared machine. It binds 127.0.0.1 on a port the OS picks (printed
as the first line), where the command binds every interface on a fixed port; and it keeps its
state in memory, where the command pickles the whole store to /tmp/localstripe.pickle after every
write (one file for every copy on the machine). Everything the emulator answers is its own: its
gaps (no Idempotency-Key, no Refund search) are documented by tests/test_payments_stripe.py, and
the proof that money moves once comes from our ledger and the gateway's lookup.

One gap is covered here, test-side, and said so: localstripe 1.15.10 has no Dispute resource
(`GET /v1/disputes` answers 404), and the desk lists a payment's disputes before every charge. So
the launcher adds Stripe's `GET /v1/disputes` (by `payment_intent` or `charge`) and
`GET /v1/disputes/<id>` in Stripe's shapes, answering the disputes a test opened with
`LocalStripe.dispute()` (through `POST /_config/disputes`, which no Stripe has): a payment nobody
disputed lists none, as at Stripe (tests/test_disputes.py).

A second gap, covered the same way: localstripe's refunds are `succeeded` for good, where Stripe
fails some days later (a closed card) and says so by its events. `POST /_config/refunds/<id>/fail`
(no Stripe has it; `LocalStripe.fail_refund()`) marks a refund of the emulator's store `failed`
with a `failure_reason`, so every read of it (one refund, a payment's list) says so from then on,
and answers the events Stripe would send for it (`refund.failed`, `charge.refund.updated`), kept
in the emulator's store as its own events. Sending them is the caller's part (localstripe signs
and sends events only to endpoints registered beforehand): `manage.py stripe_fails_refund` signs
them and posts them to the desk's webhook, as Stripe would.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from devtools.processes import ROOT, wait_for

SECRET_KEY = "sk_test_localstripe_0000000000"  # localstripe accepts any key of this shape
# The demo's webhook signing secret (localstripe_demo prints it, stripe_fails_refund signs with
# it): a fixed value, as public as the demo's passwords; never a production secret.
DEMO_WEBHOOK_SECRET = "whsec_localstripe_demo_0000000000"
# Why Stripe says a refund failed (Refund.failure_reason), as its API reference lists them.
FAILURE_REASONS = (
    "expired_or_canceled_card",
    "lost_or_stolen_card",
    "declined",
    "insufficient_funds",
    "merchant_request",
    "unknown",
)


class LocalStripe:
    def __init__(self, log_dir: Path, *, port: int = 0) -> None:
        self.log = log_dir / "localstripe.log"
        self.proc: subprocess.Popen | None = None
        self.port = port  # 0: one the OS picks

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 30) -> LocalStripe:
        log = self.log.open("ab")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "devtools.localstripe", str(self.port)],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=log,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        assert self.proc.stdout is not None
        first = self.proc.stdout.readline().strip()
        if not first.isdigit():
            self.stop()
            raise RuntimeError(f"localstripe did not start (see {self.log}): {first!r}")
        self.port = int(first)
        wait_for(self._answers, timeout=timeout, what="localstripe to answer")
        return self

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def env(self, *, timeout: float = 2.0) -> dict[str, str]:
        """Settings that point a Django process's gateway here."""
        return {
            "REFUNDS_GATEWAY": "refunds.payments.StripeGateway",
            "STRIPE_SECRET_KEY": SECRET_KEY,
            "STRIPE_API_BASE": self.url,
            "STRIPE_TIMEOUT": str(timeout),
        }

    # --- what the shop did, and what landed: straight HTTP, apart from the gateway's client --
    def payment_intent(self, amount_cents: int, currency: str = "usd") -> str:
        """A PaymentIntent the customer paid (confirmed, captured): what an order refers to."""
        method = self.call("POST", "/v1/payment_methods", type="card", **_CARD)["id"]
        intent = self.call(
            "POST",
            "/v1/payment_intents",
            amount=str(amount_cents),
            currency=currency,
            payment_method=method,
            capture_method="automatic",
        )
        confirmed = self.call("POST", f"/v1/payment_intents/{intent['id']}/confirm")
        assert confirmed["status"] == "succeeded", confirmed
        return intent["id"]

    def refunds(self, payment_reference: str = "") -> list[dict[str, Any]]:
        """Refunds at the emulator, oldest first; of one PaymentIntent or Charge when named."""
        query: dict[str, str] = {"limit": "100"}
        if payment_reference.startswith("pi_"):
            query["payment_intent"] = payment_reference
        elif payment_reference:
            query["charge"] = payment_reference
        listed = self.call("GET", "/v1/refunds?" + urllib.parse.urlencode(query))
        return sorted(listed["data"], key=lambda r: (r["created"], r["id"]))

    def refund_outside(self, payment_reference: str, amount_cents: int) -> str:
        """A refund made straight at Stripe (its dashboard, the shop's admin): no desk key."""
        kind = "payment_intent" if payment_reference.startswith("pi_") else "charge"
        made = self.call(
            "POST", "/v1/refunds", **{kind: payment_reference, "amount": str(amount_cents)}
        )
        return made["id"]

    def fail_refund(
        self, refund_id: str, reason: str = "expired_or_canceled_card"
    ) -> list[dict[str, Any]]:
        """Stripe fails a refund it had accepted (the card was closed): every read of it says
        `failed` from now on. Returns the events Stripe would send, for the caller to deliver.
        Test- and demo-side: localstripe cannot fail a refund (see the module's docstring)."""
        made = self.call("POST", f"/_config/refunds/{refund_id}/fail", failure_reason=reason)
        return made["events"]

    def dispute(
        self, payment_intent: str, *, status: str = "needs_response", amount_cents: int = 0
    ) -> str:
        """The customer's bank disputes the payment (Stripe opens a Dispute): its id. Test-side:
        localstripe has no disputes (see the module's docstring)."""
        made = self.call(
            "POST",
            "/_config/disputes",
            payment_intent=payment_intent,
            status=status,
            amount=str(amount_cents),
        )
        return made["id"]

    def dispute_closes(self, dispute_id: str, status: str = "won") -> None:
        """The bank decided (won: the merchant keeps the money; lost: the customer got it)."""
        self.call("POST", f"/_config/disputes/{dispute_id}", status=status)

    def call(self, method: str, path: str, **form: str) -> dict[str, Any]:
        body = urllib.parse.urlencode(form).encode() if method == "POST" else None
        request = urllib.request.Request(
            self.url + path,
            data=body,
            method=method,
            headers={"Authorization": f"Bearer {SECRET_KEY}"},
        )
        with urllib.request.urlopen(request, timeout=10) as response:
            return json.loads(response.read())

    def _answers(self) -> bool:
        try:
            self.call("GET", "/v1/refunds?limit=1")
        except OSError:
            return False
        return True


class StripeFaults:
    """A loopback proxy in front of localstripe that misbehaves on cue, as the network and a busy
    Stripe do: the gateway under test talks to it as to Stripe. Test-side only.

    `go_down()` and `come_back()` make Stripe unreachable for a while (an outage).
    Behaviours, queued for the next `POST /v1/refunds` calls (everything else passes through):
    "rate_limited" answers 429 with Stripe's error body and forwards nothing; "answer_late"
    forwards the request (the refund is made) and answers after `late_by` seconds, past the
    client's timeout; "reset_after" forwards it and drops the connection without an answer.

    On reads of one refund (`GET /v1/refunds/<id>`): `says[id]` is laid over localstripe's
    answer (a refund `failed` with a reason, which localstripe cannot say), and while `held` is
    set each read waits until `release()` (a worker caught inside the event handler's re-read);
    `reads` counts them. `says` is laid over the refunds a list of them answers too (the
    gateway's lookup). `creating = {"status": "pending"}` answers each refund made from then on
    so, as Stripe answers most card refunds, and puts it in `says` for the reads that follow.
    On listings of a payment's refunds (`GET /v1/refunds?...`): while `lists_held` is set each
    waits until `release()` (a worker caught inside the ledger's pre-charge lookup); `lists`
    counts them."""

    def __init__(self, upstream: str, *, late_by: float = 1.5) -> None:
        self.upstream = upstream
        self.late_by = late_by
        self.refund_posts = 0
        self.idempotency_keys: list[str] = []  # of every refund POST, as the request carried it
        self._queue: list[str] = []
        self._lock = threading.Lock()
        self.says: dict[str, dict[str, Any]] = {}
        self.creating: dict[str, Any] = {}
        self.reads = 0
        self.held = False
        self.lists = 0
        self.lists_held = False
        self._released = threading.Event()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._up = False

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def queue(self, *behaviours: str) -> None:
        with self._lock:
            self._queue.extend(behaviours)

    def start(self) -> StripeFaults:
        self._thread.start()
        self._up = True
        return self

    def stop(self) -> None:
        if self._up:
            self._server.shutdown()
            self._server.server_close()
            self._up = False

    def go_down(self) -> None:
        """Stripe unreachable: the proxy stops listening, so every connection is refused and
        nothing reaches the emulator, until come_back()."""
        self.stop()

    def come_back(self) -> None:
        """Listen again on the same port, the emulator's state untouched."""
        port = self._server.server_address[1]
        self._server = ThreadingHTTPServer(("127.0.0.1", port), self._handler())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self.start()

    def hold(self) -> None:
        self._released.clear()
        self.held = True

    def hold_lists(self) -> None:
        self._released.clear()
        self.lists_held = True

    def release(self) -> None:
        self.held = False
        self.lists_held = False
        self._released.set()

    def _listing(self, method: str, path: str) -> None:
        if method != "GET" or path.split("?")[0].rstrip("/") != "/v1/refunds":
            return
        with self._lock:
            self.lists += 1
        if self.lists_held:
            self._released.wait(timeout=60)

    def _as_said(self, method: str, path: str, answer: bytes) -> bytes:
        parts = path.split("?")[0].strip("/").split("/")
        if parts != ["v1", "refunds"]:
            return self._read_of_one_refund(method, parts, answer)
        found = json.loads(answer)
        if method == "POST" and self.creating:
            self.says[found["id"]] = dict(self.creating)
            return json.dumps(found | self.creating).encode()
        if method == "GET" and isinstance(found.get("data"), list):
            found["data"] = [r | self.says.get(r.get("id"), {}) for r in found["data"]]
            return json.dumps(found).encode()
        return answer

    def _read_of_one_refund(self, method: str, parts: list[str], answer: bytes) -> bytes:
        if method != "GET" or len(parts) != 3 or parts[:2] != ["v1", "refunds"]:
            return answer
        with self._lock:
            self.reads += 1
        if self.held:
            self._released.wait(timeout=60)
        said = self.says.get(parts[2])
        return json.dumps(json.loads(answer) | said).encode() if said else answer

    def _next(self, method: str, path: str, idempotency_key: str) -> str:
        if (method, path.split("?")[0]) != ("POST", "/v1/refunds"):
            return "pass"
        with self._lock:
            self.refund_posts += 1
            self.idempotency_keys.append(idempotency_key)
            return self._queue.pop(0) if self._queue else "pass"

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        faults = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                self._proxy("GET")

            def do_POST(self) -> None:
                self._proxy("POST")

            def _proxy(self, method: str) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else None
                key = self.headers.get("Idempotency-Key", "")
                behaviour = faults._next(method, self.path, key)
                if behaviour == "rate_limited":
                    error = {
                        "error": {
                            "type": "invalid_request_error",
                            "code": "rate_limit",
                            "message": "Too many requests hit the API too quickly.",
                        }
                    }
                    return self._answer(429, json.dumps(error).encode())
                faults._listing(method, self.path)
                headers = {k: v for k, v in self.headers.items() if k.lower() != "host"}
                request = urllib.request.Request(
                    faults.upstream + self.path, data=body, method=method, headers=headers
                )
                try:
                    with urllib.request.urlopen(request, timeout=10) as response:
                        status, answer = response.status, response.read()
                except urllib.error.HTTPError as exc:
                    status, answer = exc.code, exc.read()
                if status == 200:
                    answer = faults._as_said(method, self.path, answer)
                if behaviour == "answer_late":
                    time.sleep(faults.late_by)
                elif behaviour == "reset_after":
                    self.close_connection = True
                    self.connection.shutdown(socket.SHUT_RDWR)
                    return
                self._answer(status, answer)

            def _answer(self, status: int, body: bytes) -> None:
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                except OSError:
                    pass  # the client gave up waiting: what "answer_late" is for

        return Handler


_CARD = {
    "card[number]": "4242424242424242",
    "card[exp_month]": "12",
    "card[exp_year]": "2040",
    "card[cvc]": "123",
}


def serve(port: int = 0) -> None:
    from aiohttp import web
    from localstripe import resources
    from localstripe.server import app

    resources.Store.dump_to_disk = lambda self: None  # in memory only: see the module's docstring
    _add_disputes(app)
    _add_refund_failures(app)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", port))
    print(sock.getsockname()[1], flush=True)
    web.run_app(app, sock=sock, print=None, access_log=None)


def _add_disputes(app: Any) -> None:
    """Stripe's Dispute reads, which localstripe lacks (the module's docstring), and a way for a
    test to open and close one. Kept in memory beside the emulator's store."""
    from aiohttp import web
    from localstripe import resources

    disputes: dict[str, dict[str, Any]] = {}

    def no_such(dispute_id: str) -> web.Response:
        error = {"type": "invalid_request_error", "message": f"No such dispute: '{dispute_id}'"}
        return web.json_response({"error": error}, status=404)

    async def open_one(request: web.Request) -> web.Response:
        form = await request.post()
        intent = str(form["payment_intent"])
        charge = resources.PaymentIntent._api_retrieve(intent).latest_charge
        made = {
            "id": f"dp_{os.urandom(8).hex()}",
            "object": "dispute",
            "amount": int(str(form.get("amount") or 0)),
            "currency": "usd",
            "charge": getattr(charge, "id", charge),
            "payment_intent": intent,
            "status": str(form.get("status") or "needs_response"),
            "reason": "product_not_received",
            "created": int(time.time()),
            "livemode": False,
            "metadata": {},
        }
        disputes[made["id"]] = made
        return web.json_response(made)

    async def close_one(request: web.Request) -> web.Response:
        found = disputes.get(request.match_info["id"])
        if found is None:
            return no_such(request.match_info["id"])
        found["status"] = str((await request.post()).get("status") or "won")
        return web.json_response(found)

    async def list_them(request: web.Request) -> web.Response:
        wanted = {k: request.query[k] for k in ("payment_intent", "charge") if k in request.query}
        found = [d for d in disputes.values() if all(d[k] == v for k, v in wanted.items())]
        found.sort(key=lambda d: d["created"], reverse=True)  # newest first, as Stripe lists
        listed = {"object": "list", "data": found, "has_more": False, "url": "/v1/disputes"}
        return web.json_response(listed)

    async def read_one(request: web.Request) -> web.Response:
        found = disputes.get(request.match_info["id"])
        return web.json_response(found) if found else no_such(request.match_info["id"])

    app.router.add_post("/_config/disputes", open_one)
    app.router.add_post("/_config/disputes/{id}", close_one)
    app.router.add_get("/v1/disputes", list_them)
    app.router.add_get("/v1/disputes/{id}", read_one)


def _add_refund_failures(app: Any) -> None:
    """A way to fail a refund the emulator made, as Stripe fails one days later (the module's
    docstring): its status and failure_reason change in the emulator's own store."""
    from aiohttp import web
    from localstripe import resources
    from localstripe.errors import UserError

    async def fail_one(request: web.Request) -> web.Response:
        refund_id = request.match_info["id"]
        reason = str((await request.post()).get("failure_reason") or "")
        if reason not in FAILURE_REASONS:
            raise UserError(400, f"failure_reason must be one of {', '.join(FAILURE_REASONS)}")
        refund = resources.Refund._api_retrieve(refund_id)  # 404 as Stripe when unknown
        if refund.status not in ("pending", "succeeded"):
            raise UserError(400, f"Refund {refund_id} is {refund.status}: it cannot fail now")
        refund.status = "failed"
        refund.failure_reason = reason
        sent = ("refund.failed", "charge.refund.updated")  # what Stripe sends as one fails
        events = [resources.Event(kind, refund)._export() for kind in sent]
        return web.json_response({"refund": refund._export(), "events": events})

    app.router.add_post("/_config/refunds/{id}/fail", fail_one)


if __name__ == "__main__":
    serve(int(sys.argv[1]) if len(sys.argv) > 1 else 0)
