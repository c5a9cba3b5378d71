"""manage.py import_orders: an idempotent upsert by order number from CSV or JSON Lines, every
refused line reported with its number and reason, never a change to an order with money
refunded, and a dry run that writes nothing."""

from __future__ import annotations

import io
import json
import threading
from datetime import date
from pathlib import Path

import pytest
from django.conf import settings
from django.core.management import CommandError, call_command
from django.db import connection
from django.test.utils import CaptureQueriesContext

from refunds import services
from refunds.management.commands.import_orders import FIELDS
from refunds.models import Charge, Order, Ticket
from refunds.services import orders
from tests.conftest import in_another_session, make_order, wait_for

HEADER = (
    "order_number,customer_name,customer_email,currency,shipping_fee,promised_on,delivered_on,"
    "payment_reference\n"
)
GOOD = [
    "2001,Ana Souza,ana@example.com,USD,8.99,2026-11-02,2026-11-06,pi_2001\n",
    "2002,Ben Okafor,ben@example.com,JPY,899,2026-11-02,2026-11-03,\n",
    '2003,"Souza, Ana",ana@example.com,KWD,"1.250",2026-11-02,2026-11-09,ch_2003\n',
]


def write(tmp_path: Path, lines: list[str], name: str = "orders.csv") -> Path:
    path = tmp_path / name
    path.write_text(HEADER + "".join(lines) if name.endswith(".csv") else "".join(lines))
    return path


def run(path: Path, *args: str) -> tuple[int, str]:
    out = io.StringIO()
    try:
        call_command("import_orders", str(path), "--no-progress", *args, stdout=out, stderr=out)
    except CommandError as exc:
        return exc.returncode, out.getvalue() + str(exc)
    return 0, out.getvalue()


def snapshot() -> list[tuple]:
    return list(Order.objects.order_by("number").values_list())


# --- taking orders in ----------------------------------------------------------------------------
def test_it_creates_orders_in_minor_units_of_each_currency(db, tmp_path):
    code, out = run(write(tmp_path, GOOD))

    assert code == 0, out
    assert "3 created, 0 updated, 0 unchanged, 0 refused" in out
    ana, ben, kwd = Order.objects.order_by("number")
    assert (ana.shipping_fee_cents, ana.currency, ana.payment_reference) == (899, "USD", "pi_2001")
    assert (ana.promised_on, ana.delivered_on) == (date(2026, 11, 2), date(2026, 11, 6))
    assert (ben.shipping_fee_cents, ben.currency, ben.payment_reference) == (899, "JPY", "")
    assert (kwd.shipping_fee_cents, kwd.currency, kwd.customer_name) == (1250, "KWD", "Souza, Ana")


def test_a_second_import_of_the_same_file_changes_nothing(db, tmp_path):
    path = write(tmp_path, GOOD)
    run(path)
    before = snapshot()

    with CaptureQueriesContext(connection) as queries:
        code, out = run(path)

    assert code == 0
    assert "0 created, 0 updated, 3 unchanged, 0 refused" in out
    assert snapshot() == before and Order.objects.count() == 3
    writes = [q["sql"] for q in queries if q["sql"].lstrip().upper().startswith(("INSERT", "UPD"))]
    assert writes == []


def test_a_changed_line_updates_the_order(db, tmp_path):
    run(write(tmp_path, GOOD))
    changed = (
        GOOD[0]
        .replace("8.99", "9.50")
        .replace("ana@example.com", "ana@souza.example")
        .replace("2026-11-06", "2026-11-07")
    )

    code, out = run(write(tmp_path, [changed, *GOOD[1:]]))

    assert code == 0
    assert "0 created, 1 updated, 2 unchanged, 0 refused" in out
    ana = Order.objects.get(number="2001")
    assert (ana.shipping_fee_cents, ana.customer_email) == (950, "ana@souza.example")
    assert (ana.promised_on, ana.delivered_on) == (date(2026, 11, 2), date(2026, 11, 7))
    assert ana.payment_reference == "pi_2001"


def test_an_order_with_money_refunded_is_never_changed(db, tmp_path, agent):
    order = make_order("2001", fee_cents=899)
    ticket = Ticket.objects.create(thread_id="refund-2001-x", order=order, status="refunded")
    Charge.objects.create(
        ticket=ticket, order=order, idempotency_key="k", amount_cents=899, status="succeeded"
    )
    before = snapshot()
    changed = f"2001,Ana Souza,ana@example.com,USD,19.99,{order.promised_on},2026-12-30,\n"

    code, out = run(write(tmp_path, [changed]))

    assert code == 1
    assert "line 2 (order 2001): order 2001 has 8.99 USD refunded or under way" in out
    assert "0 created, 0 updated, 0 unchanged, 1 refused" in out
    assert snapshot() == before


@pytest.mark.parametrize("status", ["new", "running", "awaiting_review", "failed"])
def test_an_order_with_an_open_ticket_is_not_changed(db, tmp_path, status):
    order = make_order("2001", fee_cents=899)
    ticket = Ticket.objects.create(thread_id="refund-2001-x", order=order, status=status)
    before = snapshot()
    changed = f"2001,Ana Souza,ana@example.com,USD,19.99,{order.promised_on},2026-12-30,pi_x\n"

    code, out = run(write(tmp_path, [changed]))

    assert code == 1
    assert f"line 2 (order 2001): order 2001 has an open refund ticket ({ticket.pk})" in out
    assert "(shipping_fee_cents, delivered_on, payment_reference differ)" in out
    assert snapshot() == before


def test_an_unchanged_line_of_a_refunded_order_is_not_a_refusal(db, tmp_path):
    order = make_order("2001", fee_cents=899)
    ticket = Ticket.objects.create(thread_id="refund-2001-x", order=order, status="refunded")
    Charge.objects.create(
        ticket=ticket, order=order, idempotency_key="k", amount_cents=899, status="succeeded"
    )
    same = (
        f"2001,{order.customer_name},{order.customer_email},USD,8.99,{order.promised_on},"
        f"{order.delivered_on},\n"
    )

    code, out = run(write(tmp_path, [same]))

    assert code == 0, out
    assert "1 unchanged" in out


# --- refusals ------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "line, reason",
    [
        (
            "3001,Cy,cy@example.com,USD,1.00,2026-13-02,2026-11-06,\n",
            "bad date in promised_on: '2026-13-02' (write it as YYYY-MM-DD)",
        ),
        (
            "3001,Cy,cy@example.com,USD,1.00,2026-11-02,6/11/2026,\n",
            "bad date in delivered_on: '6/11/2026'",
        ),
        ("3001,Cy,cy@example.com,USD,-1.00,2026-11-02,2026-11-06,\n", "negative amount '-1.00'"),
        ("3001,Cy,cy@example.com,XYZ,1.00,2026-11-02,2026-11-06,\n", "unknown currency 'XYZ'"),
        ("3001,Cy,cy@example.com,DEM,1.00,2026-11-02,2026-11-06,\n", "unknown currency 'DEM'"),
        (
            "3001,Cy,cy@example.com,USD,1.005,2026-11-02,2026-11-06,\n",
            "'1.005' has more than 2 decimal(s), the most USD has",
        ),
        ("3001,Cy,cy@example.com,JPY,8.5,2026-11-02,2026-11-06,\n", "more than 0 decimal(s)"),
        (
            "3001,Cy,cy@example.com,USD,１.00,2026-11-02,2026-11-06,\n",
            "'１.00' is not an amount",
        ),
        ("3001,Cy,not-an-email,USD,1.00,2026-11-02,2026-11-06,\n", "is not an email address"),
        ("3001,,cy@example.com,USD,1.00,2026-11-02,2026-11-06,\n", "missing customer_name"),
    ],
)
def test_each_refused_line_is_reported_with_its_number_and_reason(db, tmp_path, line, reason):
    code, out = run(write(tmp_path, [GOOD[0], line]))

    assert code == 1
    assert "line 3 (order 3001): " in out and reason in out, out
    assert "1 created, 0 updated, 0 unchanged, 1 refused" in out
    assert list(Order.objects.values_list("number", flat=True)) == ["2001"]


@pytest.mark.parametrize(
    ("line", "field"),
    [
        ("2004,Ana\x00Souza,ana@example.com,USD,8.99,2026-11-02,2026-11-06,\n", "customer_name"),
        ("20\x0004,Ana Souza,ana@example.com,USD,8.99,2026-11-02,2026-11-06,\n", "order_number"),
        (
            "2004,Ana Souza,ana@example.com,USD,8.99,2026-11-02,2026-11-06,pi\x00\n",
            "payment_reference",
        ),
    ],
    ids=["customer_name", "order_number", "payment_reference"],
)
def test_a_nul_is_refused_on_its_line_and_the_good_lines_are_taken(db, tmp_path, line, field):
    code, out = run(write(tmp_path, [GOOD[0], line, GOOD[1]]))

    assert code == 1
    assert "line 3" in out and f"{field}: Null characters are not allowed." in out
    assert "2 created, 0 updated, 0 unchanged, 1 refused" in out
    assert sorted(Order.objects.values_list("number", flat=True)) == ["2001", "2002"]


def test_a_nul_in_json_lines_is_refused_on_its_line(db, tmp_path):
    good = {**dict(zip(FIELDS, GOOD[0].strip().split(","), strict=True))}
    bad = {**good, "order_number": "2009", "customer_name": "Ana\u0000"}
    path = write(tmp_path, [json.dumps(good) + "\n", json.dumps(bad) + "\n"], "orders.jsonl")

    code, out = run(path)

    assert code == 1
    assert "line 2 (order 2009): customer_name: Null characters are not allowed." in out
    assert list(Order.objects.values_list("number", flat=True)) == ["2001"]


def test_a_line_with_too_few_fields_is_refused(db, tmp_path):
    code, out = run(write(tmp_path, [GOOD[0], "3001,Cy,cy@example.com,USD,1.00,2026-11-02\n"]))

    assert code == 1
    assert "line 3: 6 fields, the header has 8" in out


def test_a_number_twice_in_the_file_refuses_every_copy(db, tmp_path):
    code, out = run(write(tmp_path, [GOOD[0], GOOD[1], GOOD[0].replace("8.99", "9.99")]))

    assert code == 1
    for line in (2, 4):
        assert (
            f"line {line} (order 2001): duplicate order number 2001 in this input (lines 2, 4)"
            in out
        )
    assert list(Order.objects.values_list("number", flat=True)) == ["2002"]


def test_a_line_number_counts_physical_lines_of_a_quoted_field(db, tmp_path):
    multi = '3001,"Cy\nSecond line",cy@example.com,USD,1.00,2026-11-02,2026-11-06,\n'
    bad = "3002,Di,di@example.com,USD,-2,2026-11-02,2026-11-06,\n"

    code, out = run(write(tmp_path, [multi, bad]))

    assert "line 4 (order 3002): shipping_fee: negative amount" in out


def test_a_header_without_a_column_refuses_the_file(db, tmp_path):
    path = tmp_path / "orders.csv"
    path.write_text("order_number,customer_name\n2001,Ana\n")

    code, out = run(path)

    assert code == 2
    assert "missing: customer_email, currency, shipping_fee, promised_on, delivered_on" in out
    assert not Order.objects.exists()


def test_a_file_that_is_not_utf8_is_refused_whole(db, tmp_path):
    path = tmp_path / "orders.csv"
    path.write_bytes((HEADER + GOOD[0]).encode() + "Zoë,\n".encode("latin-1"))

    code, out = run(path)

    assert code == 2 and "is not UTF-8 text" in out
    assert not Order.objects.exists()


# --- the file's own notation ---------------------------------------------------------------------
def test_it_reads_json_lines_with_exact_decimals(db, tmp_path):
    lines = [
        json.dumps(
            {
                "order_number": 4001,
                "customer_name": "Ana",
                "customer_email": "ana@example.com",
                "currency": "usd",
                "shipping_fee": "8.99",
                "promised_on": "2026-11-02",
                "delivered_on": "2026-11-06",
            }
        )
        + "\n",
        "\n",
        '{"order_number": "4002", "customer_name": "Ben", "customer_email": "b@example.com", '
        '"currency": "EUR", "shipping_fee": 0.29, "promised_on": "2026-11-02", '
        '"delivered_on": "2026-11-06"}\n',
        '{"order_number": "4003", "oops"\n',
        '{"order_number": "4004", "colour": "red"}\n',
    ]

    code, out = run(write(tmp_path, lines, name="orders.jsonl"))

    assert code == 1
    assert "line 4 (order 4003)" not in out and "line 4: not valid JSON" in out
    assert "line 5 (order 4004): unknown field(s): colour" in out
    fees = dict(Order.objects.values_list("number", "shipping_fee_cents"))
    assert fees == {"4001": 899, "4002": 29}
    assert Order.objects.get(number="4001").currency == "USD"


def test_it_reads_a_decimal_comma_file(db, tmp_path):
    path = tmp_path / "bestellungen.csv"
    path.write_text(
        HEADER.replace(",", ";") + "5001;Jonas;j@example.com;EUR;8,99;2026-11-02;2026-11-06;\n"
    )

    code, out = run(path, "--delimiter", ";", "--decimal-mark", ",")

    assert code == 0, out
    assert Order.objects.get(number="5001").shipping_fee_cents == 899


# --- dry run and progress ------------------------------------------------------------------------
def test_a_dry_run_reports_the_same_and_writes_nothing(db, tmp_path):
    make_order("2001", fee_cents=100)
    before = snapshot()

    code, out = run(write(tmp_path, GOOD), "--dry-run")

    assert code == 0
    assert "Dry run, nothing written." in out
    assert "2 would be created, 1 would be updated, 0 unchanged, 0 refused" in out
    assert snapshot() == before


def test_the_progress_bar_shows_rate_and_eta(db, tmp_path):
    err = io.StringIO()
    call_command("import_orders", str(write(tmp_path, GOOD)), stdout=io.StringIO(), stderr=err)

    assert "3/3" in err.getvalue() and "orders/s" in err.getvalue() and "ETA" in err.getvalue()


# --- the guard holds at the write --------------------------------------------------------------
@pytest.mark.skipif(
    not settings.IS_POSTGRES,
    reason="on SQLite the import's IMMEDIATE transaction holds the whole database",
)
def test_a_ticket_opened_between_the_check_and_the_write_reads_the_order_written(
    transactional_db, broker
):
    """The import has found no open ticket and is about to write; a ticket for the order is
    opened from another session and its lookup reads the order. It must read what the import
    writes, never the old order that the import then changes under an open ticket."""
    make_order("2001", fee_cents=899)
    read_by_the_ticket: list[str] = []
    opener: list[threading.Thread] = []

    def open_and_look_up() -> None:
        services.ticket_open(order_number="2001")
        read_by_the_ticket.append(Order.objects.get(number="2001").payment_reference)

    def waiting_on_a_lock() -> bool:
        with connection.cursor() as cursor:  # pg_locks is live; pg_stat_activity is a snapshot
            cursor.execute("SELECT count(*) FROM pg_locks WHERE NOT granted")
            return cursor.fetchone()[0] > 0

    def before_the_write(execute, sql, params, many, context):
        if sql.startswith(f"UPDATE {Order._meta.db_table}") and not opener:
            opener.append(in_another_session(open_and_look_up))
            wait_for(
                lambda: waiting_on_a_lock() or not opener[0].is_alive(),
                timeout=10,
                what="the ticket to open or wait",
            )
        return execute(sql, params, many, context)

    line = {**dict(zip(FIELDS, GOOD[0].strip().split(","), strict=True))}
    line |= {"order_number": "2001", "payment_reference": "pi_new"}
    with connection.execute_wrapper(before_the_write):
        outcomes = orders.orders_upsert([orders.order_read(1, line)])
    opener[0].join(10)

    assert [o.result for o in outcomes] == [orders.UPDATED]
    assert read_by_the_ticket == ["pi_new"] == [Order.objects.get(number="2001").payment_reference]
