"""A payment processor on a loopback port, speaking what refunds.payments.HttpGateway expects:
`POST /refunds` with an Idempotency-Key (a repeated key answers the first refund), and
`GET /refunds/<key>`, and `GET /refunds?payment=<reference>` (a payment's refunds, with the keys
they were made with; `refund_outside()` makes one without, as a dashboard does), and
`GET /disputes?payment=<reference>` (`dispute()` opens one, as a customer's bank does). It counts
every call, so the tests see money where it lands.

Behaviours can be queued for the next charge calls: "decline" (402), "unavailable" (503, nothing
recorded), "timeout_after" (records the refund, then answers too late), "reset_after" (records it,
then drops the connection without an answer), "error_after" (records it, then answers 500)."""

from __future__ import annotations

import json
import secrets
import threading
import time
import urllib.parse
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from devtools.smtp_sink import free_port


class FakeProcessor:
    def __init__(self, *, answer_late_by: float = 3.0) -> None:
        self.port = free_port()
        # key -> {"amount_cents", "receipt", "reference", "payment", "key", "created"}; a refund
        # made outside the desk is kept under "outside:<receipt>", with no key.
        self.refunds: dict[str, dict] = {}
        self.charge_calls: Counter = Counter()  # key -> POSTs received
        self.lookup_calls: Counter = Counter()
        self.answer_late_by = answer_late_by
        self.disputes: dict[str, dict] = {}  # id -> {"id", "payment", "status", "created"}
        self._queue: list[str] = []
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", self.port), self._handler())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def queue(self, *behaviours: str) -> None:
        with self._lock:
            self._queue.extend(behaviours)

    def start(self) -> FakeProcessor:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def env(self, *, timeout: float = 1.0) -> dict[str, str]:
        """Settings that point a Django process's gateway here."""
        return {
            "REFUNDS_GATEWAY": "refunds.payments.HttpGateway",
            "REFUNDS_GATEWAY_URL": self.url,
            "REFUNDS_GATEWAY_TIMEOUT": str(timeout),
        }

    def refunds_for(self, reference_prefix: str) -> list[dict]:
        with self._lock:
            return [r for r in self.refunds.values() if r["reference"].startswith(reference_prefix)]

    def refund_outside(self, payment: str, amount_cents: int) -> str:
        """A refund of `payment` made at the processor, not through the desk's API."""
        receipt = f"re_{secrets.token_hex(6)}"
        with self._lock:
            self.refunds[f"outside:{receipt}"] = {
                "amount_cents": amount_cents,
                "receipt": receipt,
                "reference": "",
                "payment": payment,
                "key": "",
                "created": int(time.time()),
                "parts": "",
            }
        return receipt

    def dispute(self, payment: str, status: str = "needs_response") -> str:
        """A dispute of `payment` opened by the customer's bank (or, with `status` won or lost,
        one already closed)."""
        dispute_id = f"dp_{secrets.token_hex(6)}"
        with self._lock:
            self.disputes[dispute_id] = {
                "id": dispute_id,
                "payment": payment,
                "status": status,
                "created": int(time.time()),
            }
        return dispute_id

    def _listed(self, payment: str) -> list[dict]:
        with self._lock:
            found = [r for r in self.refunds.values() if payment and r.get("payment") == payment]
        return [
            {
                "receipt": r["receipt"],
                "amount_cents": r["amount_cents"],
                "key": r["key"],
                "status": "succeeded",
                "created": r["created"],
            }
            for r in found
        ]

    def _charge(self, key: str, body: dict) -> tuple[int, dict, str]:
        with self._lock:
            self.charge_calls[key] += 1
            behaviour = self._queue.pop(0) if self._queue else "ok"
            if behaviour == "decline":
                return 402, {"error": "card_declined: the card issuer declined the refund"}, ""
            if behaviour == "unavailable":
                return 503, {"error": "processor busy, nothing was done"}, ""
            earlier = self.refunds.get(key)
            if earlier is not None and earlier["amount_cents"] != body["amount_cents"]:
                return 409, {"error": f"key {key} was used for another amount"}, ""
            if earlier is None:
                earlier = self.refunds[key] = {
                    "amount_cents": body["amount_cents"],
                    "receipt": f"re_{secrets.token_hex(6)}",
                    "reference": body.get("reference", ""),
                    "parts": body.get("parts", ""),  # "11x2,shipping": what it gives back
                    "payment": body.get("payment", ""),
                    "key": key,
                    "created": int(time.time()),
                }
            return 201, {"receipt": earlier["receipt"]}, behaviour

    def _handler(self):
        processor = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:
                pass

            def _answer(self, status: int, body: dict) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_POST(self) -> None:  # noqa: N802
                length = int(self.headers.get("Content-Length", 0))
                body = json.loads(self.rfile.read(length) or b"{}")
                key = self.headers.get("Idempotency-Key", "")
                status, answer, behaviour = processor._charge(key, body)
                if behaviour == "timeout_after":
                    time.sleep(processor.answer_late_by)
                elif behaviour == "reset_after":
                    self.close_connection = True
                    self.connection.close()
                    return
                elif behaviour == "error_after":
                    status, answer = 500, {"error": "internal error"}
                self._answer(status, answer)

            def do_GET(self) -> None:  # noqa: N802
                if self.path.startswith("/disputes?"):
                    query = urllib.parse.parse_qs(self.path.split("?", 1)[1])
                    payment = (query.get("payment") or [""])[0]
                    with processor._lock:
                        held = [d for d in processor.disputes.values() if d["payment"] == payment]
                    self._answer(200, {"disputes": held})
                    return
                if self.path.startswith("/refunds?"):
                    query = urllib.parse.parse_qs(self.path.split("?", 1)[1])
                    payment = (query.get("payment") or [""])[0]
                    self._answer(200, {"refunds": processor._listed(payment)})
                    return
                segment = self.path.removeprefix("/refunds/")
                if "/" in segment:  # routed as a processor's REST API is: the key is one segment
                    self._answer(404, {"error": "no such route"})
                    return
                key = urllib.parse.unquote(segment)
                with processor._lock:
                    processor.lookup_calls[key] += 1
                    found = processor.refunds.get(key)
                if found is None:
                    self._answer(404, {"error": "no such refund"})
                else:
                    self._answer(200, {"receipt": found["receipt"]})

        return Handler
