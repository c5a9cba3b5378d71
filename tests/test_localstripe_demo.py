"""`manage.py localstripe_demo`: the demo's opt-in Stripe, on localstripe (devtools/)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import urllib.request

import pytest

from devtools.processes import ROOT, wait_for
from devtools.smtp_sink import free_port
from tests.test_settings import manage_check


@pytest.mark.slow
def test_it_serves_localstripe_with_a_paid_payment_intent_per_demo_order(tmp_path):
    port = free_port()
    clean = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("REFUNDS_", "CELERY_", "DATABASE_URL", "CHECKPOINT_URL", "STRIPE_"))
    }
    env = {**clean, "REFUNDS_DATA_DIR": str(tmp_path), "REFUNDS_DEMO": "true", "DEBUG": "true"}
    proc = subprocess.Popen(
        [sys.executable, "manage.py", "localstripe_demo", "--port", str(port)],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        said: list[str] = []
        assert proc.stdout is not None
        threading.Thread(target=lambda: said.extend(proc.stdout), daemon=True).start()

        def started() -> bool:
            assert proc.poll() is None, "".join(said)
            return any("bin/run" in line for line in said)

        wait_for(started, timeout=120, what="localstripe_demo to start")
        output = "".join(said)
        assert f"STRIPE_API_BASE=http://127.0.0.1:{port}" in output
        assert "REFUNDS_GATEWAY=refunds.payments.StripeGateway" in output
        # The secret the demo's desk checks stripe_fails_refund's events with, and the command.
        assert "STRIPE_WEBHOOK_SECRET=whsec_localstripe_demo_0000000000" in output
        assert f"manage.py stripe_fails_refund <ticket> --port {port}" in output
        request = urllib.request.Request(
            f"http://127.0.0.1:{port}/v1/payment_intents?limit=100",
            headers={"Authorization": "Bearer sk_test_x"},
        )
        with urllib.request.urlopen(request, timeout=10) as answer:
            intents = json.loads(answer.read())["data"]
        # What each customer paid: the order's own paid amount (goods, shipping, tax), so a whole
        # order's refund fits in its payment; $50.00 besides the fee for an order without lines.
        orders = read_rows(
            tmp_path, "SELECT number, paid_cents, shipping_fee_cents FROM refunds_order"
        )
        assert sorted(i["amount"] for i in intents) == sorted(
            o["paid_cents"] if o["paid_cents"] is not None else 5000 + o["shipping_fee_cents"]
            for o in orders
        )
        # Every order of the demo, its customers' messages' too (the smashed vase of 1095).
        from devtools.management.commands.demo_data import ORDERS

        numbers = {o["number"] for o in orders}
        assert {number for number, *_ in ORDERS} | {"1095", "1096", "1097"} <= numbers
        assert any(o["paid_cents"] for o in orders), "the demo's orders have lines and payments"
        assert {i["status"] for i in intents} == {"succeeded"}

        proc.terminate()  # as a supervisor stops it: localstripe stops with it
        proc.wait(timeout=20)
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(("127.0.0.1", port), timeout=5).close()
    finally:
        proc.terminate()
        proc.wait(timeout=20)


def read_rows(data_dir, sql: str) -> list[dict]:
    """Rows of the demo's SQLite database in `data_dir`, read as another process would."""
    import sqlite3

    with sqlite3.connect(data_dir / "db.sqlite3") as connection:
        connection.row_factory = sqlite3.Row
        return [dict(row) for row in connection.execute(sql)]


def test_it_refuses_to_run_outside_the_demo(tmp_path):
    result = manage_check(
        tmp_path,
        "localstripe_demo",
        REFUNDS_DEMO="false",
        REFUNDS_ALLOW_FAKES="true",
        SECRET_KEY="x" * 50,
    )

    assert result.returncode != 0
    assert "demo only" in result.stderr
    assert "Traceback" not in result.stderr
