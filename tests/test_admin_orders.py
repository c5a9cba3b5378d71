"""Django admin's orders: the fee is typed and shown in the currency's major unit ("8.99"),
never in cents; junk is refused with the reason; an order with money refunded keeps its fee."""

from __future__ import annotations

import pytest
from django.urls import reverse

from refunds.models import Charge, Order, Ticket
from tests.conftest import give_lines, make_order


def form(**changes) -> dict:
    return {
        "number": "9001",
        "customer_name": "Ana Souza",
        "customer_email": "ana@example.com",
        "currency": "USD",
        "shipping_fee": "8.99",
        "promised_on": "2026-11-02",
        "delivered_on": "2026-11-06",
        "payment_reference": "",
        # The read-only inlines (lines, outside refunds, disputes) post their management forms,
        # as the browser does.
        "lines-TOTAL_FORMS": "0",
        "lines-INITIAL_FORMS": "0",
        "outside_refunds-TOTAL_FORMS": "0",
        "outside_refunds-INITIAL_FORMS": "0",
        "disputes-TOTAL_FORMS": "0",
        "disputes-INITIAL_FORMS": "0",
        **changes,
    }


@pytest.fixture
def admin_client(client, admin_user):
    client.force_login(admin_user)
    return client


def test_the_change_page_shows_the_fee_in_dollars(admin_client, late_order):
    page = admin_client.get(reverse("admin:refunds_order_change", args=[late_order.pk]))

    html = page.content.decode()
    assert page.status_code == 200
    assert 'name="shipping_fee"' in html and 'value="6.99"' in html
    assert "Shipping fee cents" not in html and 'value="699"' not in html


def test_the_list_shows_dollars_and_other_currencies_in_their_own_unit(admin_client, late_order):
    yen = make_order("9100", fee_cents=899)
    Order.objects.filter(pk=yen.pk).update(currency="JPY")

    html = admin_client.get(reverse("admin:refunds_order_changelist")).content.decode()

    assert "$6.99" in html and "899 JPY" in html


@pytest.mark.parametrize(
    "typed, currency, cents",
    [("8.99", "USD", 899), ("$1,020.50", "USD", 102050), ("899", "jpy", 899), ("12", "USD", 1200)],
)
def test_an_admin_adds_an_order_with_the_fee_in_its_currency(admin_client, typed, currency, cents):
    response = admin_client.post(
        reverse("admin:refunds_order_add"), form(shipping_fee=typed, currency=currency)
    )

    assert response.status_code == 302, response.content.decode()[:3000]
    order = Order.objects.get(number="9001")
    assert (order.shipping_fee_cents, order.currency) == (cents, currency.upper())


@pytest.mark.parametrize(
    "typed, says",
    [
        ("８.９９", "is not an amount"),  # full-width digits
        ("8.999", "USD has 2 digit(s) after the point"),
        ("-1", "it is negative"),
        ("eight", "is not an amount"),
        ("8.99 USD", "is not an amount"),
        ("1e3", "is not an amount"),
        ("NaN", "is not an amount"),
        ("99999999999", "is too large"),
    ],
)
def test_junk_in_the_fee_is_refused_with_the_reason(admin_client, late_order, typed, says):
    response = admin_client.post(
        reverse("admin:refunds_order_change", args=[late_order.pk]),
        form(number="1042", shipping_fee=typed),
    )

    assert response.status_code == 200  # the form again, with the error
    assert says in response.content.decode()
    late_order.refresh_from_db()
    assert late_order.shipping_fee_cents == 699


def test_an_unknown_currency_is_refused(admin_client):
    response = admin_client.post(reverse("admin:refunds_order_add"), form(currency="XYZ"))

    assert response.status_code == 200
    assert "unknown currency &#x27;XYZ&#x27;" in response.content.decode()
    assert not Order.objects.exists()


def test_the_fee_of_an_order_with_money_refunded_stays(admin_client, late_order):
    ticket = Ticket.objects.create(thread_id="refund-1042-x", order=late_order, status="refunded")
    Charge.objects.create(
        ticket=ticket, order=late_order, idempotency_key="k", amount_cents=699, status="succeeded"
    )
    change = reverse("admin:refunds_order_change", args=[late_order.pk])

    refused = admin_client.post(change, form(number="1042", shipping_fee="20.00"))
    fixed_name = admin_client.post(
        change,
        form(
            number="1042",
            shipping_fee="6.99",
            customer_name="Ana M. Souza",
            customer_email=late_order.customer_email,
        ),
    )

    assert "6.99 USD was refunded or is under way" in refused.content.decode()
    assert fixed_name.status_code == 302
    late_order.refresh_from_db()
    assert (late_order.shipping_fee_cents, late_order.customer_name) == (699, "Ana M. Souza")


def test_an_order_with_an_open_ticket_is_not_changed_in_the_admin(admin_client, late_order):
    from tests.reviewing import awaiting_review

    ticket = awaiting_review(late_order)
    url = reverse("admin:refunds_order_change", args=[late_order.pk])
    response = admin_client.post(
        url, form(number="1042", shipping_fee="6.99", payment_reference="pi_elsewhere")
    )
    assert response.status_code == 200
    assert f"has an open ticket ({ticket.pk}, awaiting review)" in response.content.decode()
    assert Order.objects.get(pk=late_order.pk).payment_reference == late_order.payment_reference


def test_a_ticket_opened_after_the_admins_form_was_checked_keeps_its_order(
    rf, admin_user, late_order
):
    """The late guard: the form found no open ticket; one opened before the save."""
    from django.contrib.admin.sites import site
    from django.core.exceptions import PermissionDenied

    from tests.reviewing import awaiting_review

    order_admin = site._registry[Order]
    bound = order_admin.get_form(rf.get("/"), late_order)(
        form(number="1042", shipping_fee="6.99", payment_reference="pi_elsewhere"),
        instance=late_order,
    )
    assert bound.is_valid(), bound.errors
    awaiting_review(late_order)
    request = rf.post("/")
    request.user = admin_user
    with pytest.raises(PermissionDenied, match="has an open ticket"):
        order_admin.save_model(request, bound.save(commit=False), bound, change=True)
    assert Order.objects.get(pk=late_order.pk).payment_reference == ""


def test_the_change_page_shows_the_lines_bought_refunded_and_left(admin_client, late_order):
    give_lines(late_order, [("Blue vase", 4500, 2), ("Desk lamp", 1500, 1)])

    page = admin_client.get(reverse("admin:refunds_order_change", args=[late_order.pk]))

    html = page.content.decode()
    assert page.status_code == 200
    assert "Blue vase" in html and "Desk lamp" in html and "$45.00" in html
    assert "0 · $0.00" in html  # refunded of each line: nothing yet
    assert "2 · $90.00" in html and "1 · $15.00" in html  # left of each
    assert "$111.99" in html  # the total: 2 × 45.00 + 15.00 + the 6.99 fee
    assert 'name="lines-0-title"' not in html  # shown, never edited by hand


def test_an_order_without_lines_says_only_its_fee_is_refundable(admin_client, late_order):
    page = admin_client.get(reverse("admin:refunds_order_change", args=[late_order.pk]))

    assert "only the shipping fee is refundable" in page.content.decode()


def test_the_lines_show_no_blank_row_and_no_delete_box(admin_client, late_order):
    give_lines(late_order, [("Blue vase", 4500, 2), ("Desk lamp", 1500, 1)])

    html = admin_client.get(reverse("admin:refunds_order_change", args=[late_order.pk])).content

    assert b'name="lines-TOTAL_FORMS" value="2"' in html  # the two lines bought, nothing blank
    assert b"-DELETE" not in html and b"__prefix__" not in html  # no row to delete or to add
