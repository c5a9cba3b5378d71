"""manage.py import_orders with what an order holds: its lines (CSV: one row per line with the
order's columns repeated; JSON Lines: nested `lines`), its total and the amount paid. A refused
order changes nothing, and names the line and the reason."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from refunds.models import Order, OrderLine
from refunds.order_in import TOTAL_TOLERANCE_PER_LINE

ORDER = "order_number,customer_name,customer_email,currency,shipping_fee,promised_on,delivered_on"
HEADER = f"{ORDER},payment_reference,total,paid,line_id,sku,title,unit_price,quantity,tax\n"
ANA = "4001,Ana Souza,ana@example.com,USD,5.00,2026-11-02,2026-11-06,pi_4001,112.00,112.00"
VASE = f"{ANA},L1,VASE-01,Blue vase,45.00,2,2.00\n"
LAMP = f"{ANA},L2,LAMP-7,Desk lamp,15.00,1,\n"
BEN = "4002,Ben Okafor,ben@example.com,EUR,0.00,2026-11-02,2026-11-03,,25.00,20.00"
SHIRT = f"{BEN},S1,,T-shirt,12.50,2,\n"

JSON_ORDER = {
    "order_number": "4001",
    "customer_name": "Ana Souza",
    "customer_email": "ana@example.com",
    "currency": "USD",
    "shipping_fee": "5.00",
    "promised_on": "2026-11-02",
    "delivered_on": "2026-11-06",
    "payment_reference": "pi_4001",
    "total": "112.00",
    "paid": "112.00",
    "lines": [
        {
            "line_id": "L1",
            "sku": "VASE-01",
            "title": "Blue vase",
            "unit_price": "45.00",
            "quantity": 2,
            "tax": "2.00",
        },
        {"line_id": "L2", "sku": "LAMP-7", "title": "Desk lamp", "unit_price": 15, "quantity": 1},
    ],
}


def run(path: Path) -> tuple[int, str]:
    out = io.StringIO()
    try:
        call_command("import_orders", str(path), "--no-progress", stdout=out, stderr=out)
    except CommandError as exc:
        return exc.returncode, out.getvalue() + str(exc)
    return 0, out.getvalue()


def csv_file(tmp_path: Path, rows: list[str], header: str = HEADER) -> Path:
    path = tmp_path / "orders.csv"
    path.write_text(header + "".join(rows))
    return path


def jsonl_file(tmp_path: Path, objects: list[dict]) -> Path:
    path = tmp_path / "orders.jsonl"
    path.write_text("".join(json.dumps(o) + "\n" for o in objects))
    return path


def held() -> list[tuple]:
    """Every order and every line, as stored."""
    return [
        *Order.objects.order_by("number").values_list(),
        *OrderLine.objects.order_by("order__number", "id").values_list(),
    ]


def bought(number: str) -> list[tuple]:
    return list(
        OrderLine.objects.filter(order__number=number)
        .order_by("id")
        .values_list("line_id", "sku", "title", "unit_price_cents", "quantity", "tax_cents")
    )


# --- taking orders with their lines in ---------------------------------------------------------
def test_a_csv_of_one_row_per_line_imports_each_order_with_its_lines(db, tmp_path):
    code, out = run(csv_file(tmp_path, [VASE, LAMP, SHIRT]))

    assert code == 0, out
    assert "2 created, 0 updated, 0 unchanged, 0 refused" in out
    ana, ben = Order.objects.order_by("number")
    assert (ana.total_cents, ana.paid_cents, ana.shipping_fee_cents) == (11200, 11200, 500)
    assert bought("4001") == [
        ("L1", "VASE-01", "Blue vase", 4500, 2, 200),
        ("L2", "LAMP-7", "Desk lamp", 1500, 1, 0),
    ]
    assert (ben.total_cents, ben.paid_cents, ben.currency) == (2500, 2000, "EUR")
    assert bought("4002") == [("S1", "", "T-shirt", 1250, 2, 0)]


def test_json_lines_with_nested_lines_import_the_same_order(db, tmp_path):
    code, out = run(jsonl_file(tmp_path, [JSON_ORDER]))

    assert code == 0, out
    order = Order.objects.get()
    assert (order.total_cents, order.paid_cents) == (11200, 11200)
    assert bought("4001") == [
        ("L1", "VASE-01", "Blue vase", 4500, 2, 200),
        ("L2", "LAMP-7", "Desk lamp", 1500, 1, 0),
    ]


def test_a_second_import_of_the_same_lines_changes_nothing(db, tmp_path):
    path = csv_file(tmp_path, [VASE, LAMP, SHIRT])
    run(path)
    before = held()

    code, out = run(path)

    assert code == 0
    assert "0 created, 0 updated, 2 unchanged, 0 refused" in out
    assert held() == before


def test_changed_lines_replace_the_old_ones(db, tmp_path):
    run(csv_file(tmp_path, [VASE, LAMP]))
    cheaper = ANA.replace("112.00,112.00", "97.00,97.00")

    code, out = run(csv_file(tmp_path, [f"{cheaper},L1,VASE-01,Blue vase,45.00,2,2.00\n"]))

    assert code == 0, out
    assert "1 updated" in out
    assert bought("4001") == [("L1", "VASE-01", "Blue vase", 4500, 2, 200)]
    assert Order.objects.get().total_cents == 9700


def test_an_order_sent_without_lines_keeps_the_lines_it_has(db, tmp_path):
    run(csv_file(tmp_path, [VASE, LAMP]))
    before = held()
    old_form = (
        f"{ORDER},payment_reference\n"
        "4001,Ana Souza,ana@example.com,USD,5.00,2026-11-02,2026-11-06,pi_4001\n"
    )
    path = tmp_path / "old.csv"
    path.write_text(old_form)

    code, out = run(path)

    assert code == 0, out
    assert "1 unchanged" in out
    assert held() == before


def test_the_old_csv_columns_import_an_order_without_lines(db, tmp_path):
    path = tmp_path / "old.csv"
    path.write_text(
        f"{ORDER},payment_reference\n4003,Cy Ng,cy@example.com,USD,6.99,2026-11-02,2026-11-06,\n"
    )

    code, out = run(path)

    assert code == 0, out
    order = Order.objects.get()
    assert (order.total_cents, order.paid_cents, order.lines.count()) == (None, None, 0)


def test_a_total_within_the_tolerance_is_taken(db, tmp_path):
    # Two lines: up to 2 minor units from what they and the fee come to.
    off = ANA.replace("112.00,112.00", "112.02,112.00")

    code, out = run(csv_file(tmp_path, [off + VASE[len(ANA) :], off + LAMP[len(ANA) :]]))

    assert code == 0, out
    assert Order.objects.get().total_cents == 11202


# --- refusals: named, and nothing changed ------------------------------------------------------
def _with(line: str, **changes: str) -> str:
    """A CSV row of Ana's order with some of its line columns changed."""
    cells = line.rstrip("\n").split(",")
    names = HEADER.strip().split(",")
    for name, value in changes.items():
        cells[names.index(name)] = value
    return ",".join(cells) + "\n"


CSV_REFUSALS = [
    ({"unit_price": ""}, "line 3: missing unit_price"),
    ({"quantity": ""}, "line 3: missing quantity"),
    ({"quantity": "0"}, "line 3: quantity must be 1 or more, not 0"),
    ({"quantity": "-1"}, "line 3: quantity must be 1 or more, not -1"),
    ({"quantity": "1.5"}, "line 3: quantity must be a whole number"),
    ({"line_id": "L1"}, "line 3: line_id 'L1' is also line 2's"),
    ({"total": "113.00"}, "total 113.00 USD does not add up"),
    ({"paid": "112.01"}, "paid 112.01 USD is more than the total 112.00 USD"),
    ({"customer_name": "Ana S."}, "line 3: customer_name differ(s) from line 2"),
]


@pytest.mark.parametrize(("change", "reason"), CSV_REFUSALS, ids=[r for _, r in CSV_REFUSALS])
def test_a_refused_csv_order_changes_nothing_and_names_its_line(db, tmp_path, change, reason):
    run(csv_file(tmp_path, [VASE, LAMP]))
    before = held()
    # The whole order again, one row spoiled; the refusal is on its first line.
    lamp = LAMP if "total" not in change and "paid" not in change else _with(LAMP, **change)
    vase = VASE if "total" not in change and "paid" not in change else _with(VASE, **change)
    code, out = run(csv_file(tmp_path, [vase, _with(lamp, **change)]))

    assert code == 1
    assert "line 2 (order 4001): " in out and reason in out, out
    assert "0 created, 0 updated, 0 unchanged, 1 refused" in out
    assert held() == before


def test_a_refused_new_order_is_not_created_and_the_good_one_is(db, tmp_path):
    code, out = run(csv_file(tmp_path, [VASE, _with(LAMP, quantity="0"), SHIRT]))

    assert code == 1
    assert "line 2 (order 4001): line 3: quantity must be 1 or more, not 0" in out
    assert list(Order.objects.values_list("number", flat=True)) == ["4002"]
    assert list(OrderLine.objects.values_list("line_id", flat=True)) == ["S1"]


def test_an_order_whose_rows_come_again_later_is_refused_twice(db, tmp_path):
    code, out = run(csv_file(tmp_path, [VASE, SHIRT, LAMP]))

    assert code == 1
    assert "line 2 (order 4001): " in out and "line 4 (order 4001): " in out
    assert list(Order.objects.values_list("number", flat=True)) == ["4002"]


def test_a_header_with_some_line_columns_refuses_the_file(db, tmp_path):
    header = f"{ORDER},payment_reference,total,paid,line_id,title\n"

    code, out = run(csv_file(tmp_path, [], header=header))

    assert code == 2
    assert "missing: unit_price, quantity" in out


def _spoiled(**line: object) -> dict:
    return {**JSON_ORDER, "lines": [{**JSON_ORDER["lines"][0], **line}, JSON_ORDER["lines"][1]]}


JSON_REFUSALS = [
    (_spoiled(unit_price=None), "lines[0]: missing unit_price"),
    (_spoiled(quantity=None), "lines[0]: missing quantity"),
    (_spoiled(quantity=0), "lines[0]: quantity must be 1 or more, not 0"),
    (_spoiled(quantity=-1), "lines[0]: quantity must be 1 or more, not -1"),
    (_spoiled(quantity=True), "lines[0]: quantity must be a whole number"),
    (_spoiled(line_id="L2"), "lines[1]: line_id 'L2' is also lines[0]'s"),
    (_spoiled(colour="blue"), "lines[0]: unknown field(s): colour"),
    ({**JSON_ORDER, "total": "100.00"}, "total 100.00 USD does not add up"),
    ({**JSON_ORDER, "paid": "200.00"}, "paid 200.00 USD is more than the total 112.00 USD"),
    ({**JSON_ORDER, "lines": []}, "lines must be a list of at least one line"),
    ({k: v for k, v in JSON_ORDER.items() if k != "paid"}, "missing paid"),
]


@pytest.mark.parametrize(("sent", "reason"), JSON_REFUSALS, ids=[r for _, r in JSON_REFUSALS])
def test_a_refused_json_lines_order_changes_nothing_and_names_its_line(db, tmp_path, sent, reason):
    run(jsonl_file(tmp_path, [JSON_ORDER]))
    before = held()

    code, out = run(jsonl_file(tmp_path, [sent]))

    assert code == 1
    assert "line 1 (order 4001): " in out and reason in out, out
    assert held() == before


def test_the_tolerance_is_one_minor_unit_per_line():
    assert TOTAL_TOLERANCE_PER_LINE == 1


def test_changed_lines_of_an_order_with_an_open_ticket_are_refused(db, tmp_path):
    from refunds import services

    run(csv_file(tmp_path, [VASE, LAMP]))
    services.ticket_open(order_number="4001")
    before = held()

    code, out = run(csv_file(tmp_path, [_with(VASE, total="97.00", paid="97.00")]))

    assert code == 1
    assert "has an open refund ticket" in out and "total_cents, paid_cents, lines differ" in out
    assert held() == before
