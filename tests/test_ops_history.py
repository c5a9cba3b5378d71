"""The thread history page: every checkpoint in words and dollars, what caused it, branches after
a fork, the diagram; and a fork from any checkpoint before the charge, previewed first."""

from __future__ import annotations

import re

import pytest
from django.urls import reverse

from refunds import enqueue, persistence, runner, services
from refunds.models import Charge, Fork, Ticket
from refunds.payments.demo import DemoProcessorRefund
from tests.reviewing import advance_to_review as review
from tests.reviewing import decide


@pytest.fixture(autouse=True)
def no_broker(monkeypatch):
    monkeypatch.setattr(enqueue, "wake", lambda ticket_id: None)  # the tests advance by hand


@pytest.fixture
def refunded(transactional_db, agent, manager, admin_user, late_order) -> Ticket:
    ticket = review(services.ticket_open(order_number="1042"))
    decide(ticket, admin_user, reason="late by four days")
    assert runner.advance(ticket.pk) == "refunded"
    ticket.refresh_from_db()
    return ticket


def approval_checkpoint(client, ticket: Ticket) -> str:
    page = client.get(reverse("ops:history", args=[ticket.pk])).content.decode()
    found = re.search(r"fork/\?checkpoint=([0-9a-f-]+)", page)
    assert found, "no checkpoint offers a fork"
    return found.group(1)


def fork_through_the_page(client, ticket: Ticket, amount: str, reason: str = "fee was wrong"):
    checkpoint = approval_checkpoint(client, ticket)
    url = reverse("ops:fork", args=[ticket.pk])
    form = {"checkpoint": checkpoint, "amount": amount, "reason": reason}
    preview = client.post(url, form | {"preview": "1"})
    return checkpoint, preview, client.post(url, form | {"apply": "1"})


def test_the_history_of_a_finished_thread_reads_in_words_and_dollars(client, refunded, admin_user):
    client.force_login(admin_user)
    page = client.get(reverse("ops:history", args=[refunded.pk]))
    assert page.status_code == 200
    html = page.content.decode()
    for words in (
        "Checked order 1042",
        "Delivered 4 days late: shipping is refundable.",
        "Chose who reviews",
        "Charged the refund of order 1042",
        "Emailed the confirmation",
        "Refund amount",
        "$6.99",
        "Nov 2, 2026",  # the promised date, as a date
        "4 days",
        "approved by admin",
        "Caused by the decision of <strong>admin</strong>",
        "Waiting on a support agent",
        "UTC",  # times are labelled with their zone
    ):
        assert words in html, words
    # No cents: 699 on its own, not inside an id, a time or "$6.99" (a random id can hold 699),
    # nor the diagram's coordinates.
    words_only = re.sub(r"<code>.*?</code>|<svg.*?</svg>", "", html, flags=re.S)
    assert not re.search(r"(?<![\w.:$-])699(?!\w)", words_only)
    assert '"amount_cents"' not in html  # no JSON
    assert 'id="branch-count">1<' in html
    assert '<svg class="flow"' in html and "node visited" in html
    assert "style=" not in html and "<script>" not in html  # the CSP allows neither


def test_managers_read_the_history_but_may_not_fork(client, refunded, manager):
    client.force_login(manager)
    html = client.get(reverse("ops:history", args=[refunded.pk])).content.decode()
    assert "Charged the refund" in html and "Fork from here" not in html
    assert client.get(reverse("ops:fork", args=[refunded.pk])).status_code == 403


def test_a_fork_with_a_corrected_fee_charges_the_corrected_amount_once_and_never_the_old(
    client, transactional_db, agent, admin_user, late_order
):
    ticket = review(services.ticket_open(order_number="1042"))
    old_interrupt = ticket.pending_interrupt_id
    client.force_login(admin_user)
    checkpoint, preview, applied = fork_through_the_page(client, ticket, "$5")
    shown = preview.content.decode()
    assert preview.status_code == 200 and "What happens" in shown
    assert "Chose who reviews" in shown and f"{ticket.thread_id}:charge_card:1042:500" in shown
    assert applied.status_code == 302
    fork = Fork.objects.get()
    assert fork.amount_cents == 500 and fork.from_checkpoint_id == checkpoint

    ticket = review(ticket)
    html = client.get(reverse("ops:history", args=[ticket.pk])).content.decode()
    assert "withdrawn by a fork" in html  # the review the fork replaced
    assert ticket.amount_cents == 500 and ticket.pending_interrupt_id != old_interrupt
    decide(ticket, agent)
    assert runner.advance(ticket.pk) == "refunded"
    assert runner.advance(ticket.pk) == "refunded"  # a second run charges nothing
    assert list(Charge.objects.values_list("amount_cents", flat=True)) == [500]
    assert list(DemoProcessorRefund.objects.values_list("amount_cents", flat=True)) == [500]
    assert not Charge.objects.filter(idempotency_key__endswith=":699").exists()


def test_the_history_of_a_forked_thread_shows_both_branches(
    client, transactional_db, agent, admin_user, late_order
):
    ticket = review(services.ticket_open(order_number="1042"))
    decide(ticket, admin_user, "reject", "fee looked wrong")
    assert runner.advance(ticket.pk) == "rejected"
    client.force_login(admin_user)
    fork_through_the_page(client, ticket, "5.00", "partial refund")
    ticket = review(ticket)
    html = client.get(reverse("ops:history", args=[ticket.pk])).content.decode()
    assert 'id="branch-count">2 (branch 2 is current' in html
    assert "Branch 1 · replaced" in html and "Branch 2 · current" in html
    assert "Fork point" in html and "Branches off step" in html
    assert "An admin forked the thread with a correction" in html
    assert "Forked by <strong>admin</strong>: amount $6.99 → $5.00" in html
    assert "rejected by admin" in html  # the old branch, as it ended
    # The review's answer, as the review was answered: one order, so not "per order".
    assert "answered: rejected by <strong>admin</strong>" in html


def test_a_fork_to_the_same_amount_is_refused(
    client, transactional_db, agent, admin_user, late_order
):
    ticket = review(services.ticket_open(order_number="1042"))
    client.force_login(admin_user)
    _, preview, applied = fork_through_the_page(client, ticket, "6.99")
    assert preview.status_code == 400 and "already $6.99" in preview.content.decode()
    assert applied.status_code == 400 and Fork.objects.count() == 0
    with pytest.raises(services.RefundError, match="already"):
        services.ticket_fork(ticket=ticket, amount_cents=699, reason="same", by=admin_user)


def test_the_preview_refuses_an_amount_above_the_orders_balance(
    client, transactional_db, agent, admin_user, late_order
):
    ticket = review(services.ticket_open(order_number="1042"))
    client.force_login(admin_user)
    _, preview, applied = fork_through_the_page(client, ticket, "7.00")
    assert preview.status_code == 400
    page = preview.content.decode()
    assert "$6.99 left to refund" in page and "Apply the fork" not in page
    assert applied.status_code == 400 and Fork.objects.count() == 0


@pytest.mark.parametrize(
    ("typed", "cents"), [("$20", 2000), ("20", 2000), ("$1,000.50", 100050), ("5.5", 550)]
)
def test_dollar_amounts_are_read_as_people_write_them(typed, cents):
    from ops.forms import parse_dollars

    assert parse_dollars(typed) == cents


@pytest.mark.parametrize("typed", ["twenty", "20.005", "-5", "$", "2 0"])
def test_amounts_that_are_not_dollars_are_refused_clearly(typed):
    from django import forms

    from ops.forms import parse_dollars

    with pytest.raises(forms.ValidationError, match="not an amount in US dollars"):
        parse_dollars(typed)


def test_a_decision_on_the_review_a_fork_replaced_is_refused(
    client, transactional_db, agent, admin_user, late_order
):
    ticket = review(services.ticket_open(order_number="1042"))
    stale = ticket.pending_interrupt_id
    client.force_login(admin_user)
    fork_through_the_page(client, ticket, "5")
    ticket = review(ticket)
    with pytest.raises(services.RefundError, match="no longer pending"):
        services.ticket_decide(
            ticket=ticket,
            interrupt_id=stale,
            reviewer=agent,
            orders=services.review_answers(ticket, answer="approve"),
        )
    assert Charge.objects.count() == 0


def test_a_fork_from_an_old_branch_checkpoint_after_money_moved_is_refused(
    client, refunded, admin_user
):
    client.force_login(admin_user)
    html = client.get(reverse("ops:history", args=[refunded.pk])).content.decode()
    assert "Fork from here" not in html  # money moved: no fork is offered
    with pytest.raises(services.RefundError, match="Money already moved"):
        services.ticket_fork(ticket=refunded, amount_cents=100, reason="x", by=admin_user)


@pytest.mark.parametrize("persona", ["agent", "nobody"])
def test_every_admin_page_is_refused_to_agents_and_to_users_in_no_group(
    client, refunded, persona, django_user_model
):
    user = (
        django_user_model.objects.get(username="agent")
        if persona == "agent"
        else django_user_model.objects.create_user("nobody", password="pw")
    )
    client.force_login(user)
    email = refunded.emails.first()
    gets = [
        reverse("ops:history", args=[refunded.pk]),
        reverse("ops:fork", args=[refunded.pk]),
        reverse("ops:failed"),
        reverse("ops:undelivered"),
        reverse("ops:customer", args=["ana@example.com"]),
    ]
    posts = [
        reverse("ops:fork", args=[refunded.pk]),
        reverse("ops:retry", args=[refunded.pk]),
        reverse("ops:resend", args=[email.pk]),
    ]
    for url in gets:
        assert client.get(url).status_code == 403, url
    for url in posts:
        assert client.post(url, {}).status_code == 403, url
    assert "Failed" not in client.get(reverse("reviews:queue")).content.decode()


def test_a_thread_with_hundreds_of_checkpoints_is_paged_and_quick(
    client, transactional_db, agent, admin_user, late_order
):
    import time

    from refunds import persistence

    ticket = review(services.ticket_open(order_number="1042"))
    config = persistence.thread_config(ticket.thread_id)
    for n in range(300):  # an admin's notes, one checkpoint each
        persistence.graph().update_state(config, {"notes": [f"note {n}"]}, as_node="triage")
    client.force_login(admin_user)
    url = reverse("ops:history", args=[ticket.pk])
    started = time.monotonic()
    first = client.get(url).content.decode()
    took = time.monotonic() - started
    assert 'id="checkpoint-count">301<' in first and first.count('class="checkpoint ') == 20
    assert "note 299" in first and "note 250" not in first
    assert took < 3, took
    older = re.search(r'href="([^"]+before=[^"]+)" rel="next"', first).group(1)
    second = client.get(older.replace("&amp;", "&")).content.decode()
    assert "note 279" in second and "note 299" not in second


def test_the_fork_page_refuses_a_ticket_whose_money_moved(client, refunded, admin_user):
    from refunds import persistence

    checkpoint = next(
        s.config["configurable"]["checkpoint_id"]
        for s in persistence.history(refunded.thread_id)
        if s.next == ("approve",)
    )
    client.force_login(admin_user)
    url = reverse("ops:fork", args=[refunded.pk])
    form = {"checkpoint": checkpoint, "amount": "5", "reason": "x", "preview": "1"}
    answer = client.post(url, form)
    assert answer.status_code == 400 and "Money already moved" in answer.content.decode()
    assert "What happens" not in answer.content.decode() and Fork.objects.count() == 0


def test_the_history_of_a_ticket_that_never_ran_says_so(client, db, agent, admin_user, late_order):
    ticket = services.ticket_open(order_number="1042", opened_by=agent)
    client.force_login(admin_user)
    html = client.get(reverse("ops:history", args=[ticket.pk])).content.decode()
    assert "No checkpoints" in html and 'id="checkpoint-count">0<' in html


@pytest.mark.parametrize("typed", ["１２", "1e3"])
def test_a_fork_to_full_width_digits_or_an_exponent_is_refused_and_changes_nothing(
    client, transactional_db, agent, admin_user, late_order, typed
):
    ticket = review(services.ticket_open(order_number="1042"))
    client.force_login(admin_user)
    _, preview, applied = fork_through_the_page(client, ticket, typed)
    for answer in (preview, applied):
        assert answer.status_code == 400
        assert f"“{typed}” is not an amount in US dollars" in answer.content.decode()
    assert Fork.objects.count() == 0
    assert Ticket.objects.get(pk=ticket.pk).pending_interrupt_id == ticket.pending_interrupt_id


TECHNICAL = re.compile(r'<details class="technical[^"]*"[^>]*>.*?</details>', re.S)


def shown_text(html: str) -> str:
    """What a person reads: the text, without tags, attributes or the technical disclosures."""
    return re.sub(r"<[^>]+>", " ", TECHNICAL.sub("", html))


def checkpoint_ids(ticket: Ticket) -> list[str]:
    return [
        s.config["configurable"]["checkpoint_id"] for s in persistence.history(ticket.thread_id)
    ]


def test_a_managers_history_reads_without_ids_or_versions(client, refunded, manager):
    client.force_login(manager)
    html = client.get(reverse("ops:history", args=[refunded.pk])).content.decode()
    assert "Technical details" not in html
    text = shown_text(html)
    for words in [refunded.thread_id, "flow version", *checkpoint_ids(refunded)]:
        assert words.lower() not in text.lower(), words


def test_an_admins_history_keeps_thread_and_checkpoint_ids_in_the_technical_details(
    client, refunded, admin_user
):
    client.force_login(admin_user)
    html = client.get(reverse("ops:history", args=[refunded.pk])).content.decode()
    inside = "".join(TECHNICAL.findall(html))
    for words in [refunded.thread_id, *checkpoint_ids(refunded)]:
        assert words in inside and words not in shown_text(html), words
    assert f"Flow version</dt><dd>{refunded.flow_version}" in inside


def test_the_fork_preview_says_once_in_words_and_keeps_the_keys_for_the_disclosure(
    client, transactional_db, agent, admin_user, late_order
):
    ticket = review(services.ticket_open(order_number="1042"))
    client.force_login(admin_user)
    checkpoint = approval_checkpoint(client, ticket)
    url = reverse("ops:fork", args=[ticket.pk])
    html = client.post(
        url, {"checkpoint": checkpoint, "amount": "$5", "reason": "x", "preview": "1"}
    )
    html = html.content.decode()
    assert "The charge moves $5.00 once" in html
    inside = "".join(TECHNICAL.findall(html))
    assert f"{ticket.thread_id}:charge_card:1042:500" in inside and checkpoint in inside
    for words in [":charge_card:", "idempotency key", checkpoint]:
        assert words not in shown_text(html), words


def test_the_fork_form_marks_why_as_required_and_its_error_names_the_box(
    client, transactional_db, agent, admin_user, late_order
):
    ticket = review(services.ticket_open(order_number="1042"))
    client.force_login(admin_user)
    checkpoint = approval_checkpoint(client, ticket)
    url = reverse("ops:fork", args=[ticket.pk])
    empty = client.get(url, {"checkpoint": checkpoint}).content.decode()
    assert re.search(r'<label for="id_reason">Why <span class="required">required</span>', empty)
    assert re.search(r'<textarea name="reason" id="id_reason" required', empty)
    answer = client.post(url, {"checkpoint": checkpoint, "amount": "$5", "reason": " "})
    html = answer.content.decode()
    assert answer.status_code == 400 and not Fork.objects.exists()
    error = re.search(r'<div class="error" role="alert" id="fork-error">(.*?)</div>', html, re.S)
    assert error and '<a href="#id_reason">Why</a>: Say why you fork the ticket' in error[1]
    assert 'id="id_reason" required aria-invalid="true"' in html


def test_the_audit_trail_says_the_amount_a_manager_lowered_from(
    client, transactional_db, agent, manager, big_order
):
    ticket = review(services.ticket_open(order_number="1045", opened_by=agent))
    services.ticket_decide(
        ticket=ticket,
        interrupt_id=ticket.pending_interrupt_id,
        reviewer=manager,
        orders=services.review_answers(ticket, answer="approve", amount_cents=2500),
    )
    client.force_login(manager)
    html = client.get(reverse("ops:history", args=[ticket.pk])).content.decode()
    trail = html.split("<h2>Audit trail</h2>")[1]
    assert "amount $48.00 → $25.00" in trail and "?" not in trail


def test_no_edge_of_the_diagram_runs_across_a_box(db):
    from ops import diagram

    drawn = str(diagram.svg(["check_order", "gather", "decline", "notify"], []))
    boxes = [
        tuple(float(v) for v in box)
        for box in re.findall(
            r'<rect x="([\d.-]+)" y="([\d.-]+)" width="(\d+)" height="(\d+)"', drawn
        )
    ]
    lines = [
        [(float(a), float(b)), (float(c), float(d))]
        for a, b, c, d in re.findall(
            r'<line [^>]*x1="([\d.-]+)" y1="([\d.-]+)" x2="([\d.-]+)" y2="([\d.-]+)"', drawn
        )
    ] + [
        [tuple(float(v) for v in p.split(",")) for p in points.split()]
        for points in re.findall(r'<polyline [^>]*points="([^"]+)"', drawn)
    ]

    def inside(x: float, y: float) -> bool:
        return any(bx + 1 < x < bx + w - 1 and by + 1 < y < by + h - 1 for bx, by, w, h in boxes)

    crossing = []
    for points in lines:
        for (x1, y1), (x2, y2) in zip(points, points[1:], strict=False):
            steps = int(max(abs(x2 - x1), abs(y2 - y1))) + 1
            if any(
                inside(x1 + (x2 - x1) * i / steps, y1 + (y2 - y1) * i / steps)
                for i in range(steps + 1)
            ):
                crossing.append(points)
                break
    assert crossing == []
    assert len(lines) == drawn.count('class="edge')  # every edge was looked at
    width = float(re.search(r'viewBox="0 0 ([\d.]+)', drawn)[1])
    assert all(0 <= x <= width for points in lines for x, _ in points)


# --- a ticket of several orders: one lane per order ----------------------------------------------
@pytest.fixture
def three_orders(transactional_db):
    from tests.conftest import make_order

    make_order("1044")
    make_order("1047", late=0)  # on time: the policy declines it


def history_text(client, ticket: Ticket) -> str:
    html = client.get(reverse("ops:history", args=[ticket.pk])).content.decode()
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", html))


def test_a_ticket_of_several_orders_shows_one_lane_per_order_while_it_waits(
    client, admin_user, late_order, three_orders
):
    ticket = review(services.ticket_open(order_numbers=["1042", "1044", "1047"]))
    client.force_login(admin_user)
    html = client.get(reverse("ops:history", args=[ticket.pk])).content.decode()
    assert "History of ticket" in html and "orders 1042, 1044, 1047</h1>" in html
    lanes = re.findall(r'<li class="lane lane-(\w+)" id="lane-(\d+)">', html)
    assert lanes == [("now", "1042"), ("now", "1044"), ("declined", "1047")]
    text = history_text(client, ticket)
    assert "Order 1042 checked: $6.99 to refund, late by 4 days waiting on the review" in text
    assert "Order 1047 declined by policy:" in text
    assert "Checked order 1042, Checked order 1044, Checked order 1047, Gathered the checks" in text
    assert "Orders 1042, 1044, 1047" in text  # the orders line, not the raw list
    assert not re.search(r"\{(&#x27;|')", html) and "check_order:" not in text  # no dict, no ids
    assert "Fork from here" not in html  # ticket_fork refuses a ticket of several orders
    # The diagram marks the fan-out's node as run (its trail entries are "check_order:<n>").
    assert '<g class="node visited"><title>check_order</title>' in html
    assert '<g class="node visited"><title>lookup</title>' not in html  # one order's path


def test_a_refunded_ticket_of_several_orders_tells_each_orders_charge_from_its_send(
    client, admin_user, late_order, three_orders
):
    ticket = review(services.ticket_open(order_numbers=["1042", "1044", "1047"]))
    decide(ticket, admin_user, reason="late, both")
    assert runner.advance(ticket.pk) == "refunded"
    client.force_login(admin_user)
    html = client.get(reverse("ops:history", args=[ticket.pk])).content.decode()
    lanes = re.findall(r'<li class="lane lane-(\w+)" id="lane-(\d+)">', html)
    assert lanes == [("done", "1042"), ("done", "1044"), ("declined", "1047")]
    text = history_text(client, ticket)
    receipts = dict(Charge.objects.values_list("order__number", "receipt"))
    assert set(receipts) == {"1042", "1044"}
    for number in ("1042", "1044"):
        lane = f"Order {number} checked: $6.99 to refund, late by 4 days approved $6.99 charged"
        assert f"{lane} $6.99, receipt {receipts[number]}" in text
    # The checkpoint before the charges waits on one task per order: named from its Send.
    assert "Next: Charged the refund of order 1042, Charged the refund of order 1044" in text
    assert "Charged the refund of order 1042, Charged the refund of order 1044 " in text
    assert not re.search(r"\{(&#x27;|')", html)  # the checks and charges in words, not dicts
    # The ticket page's trail says each fan-out once, with its orders.
    ticket_page = client.get(reverse("reviews:ticket", args=[ticket.pk])).content.decode()
    assert (
        "Checked orders 1042, 1044 and 1047 → Gathered the checks → Chose who "
        "reviews → Review by a person → Charged the refunds of orders 1042 and 1044 → Settled"
    ) in ticket_page


def test_the_history_says_a_decisions_parts_in_words(client, agent, manager, admin_user):
    from tests.conftest import give_lines, make_order
    from tests.reviewing import refunded_by_parts

    order = give_lines(
        make_order("1047", name="Iris Vale"), [("Ceramic vase", 2400, 2), ("Linen runner", 2450, 1)]
    )
    vase, runner_line = order.lines.order_by("id")
    ticket = refunded_by_parts(
        "1047",
        [
            {"line": vase.pk, "quantity": 1, "amount_cents": 2000},
            {"line": runner_line.pk, "quantity": 1, "restock": True},
            {"shipping": True},
        ],
        opened_by=agent,
        reviewer=manager,
    )
    client.force_login(admin_user)
    html = client.get(reverse("ops:history", args=[ticket.pk])).content.decode()
    assert (
        ": approved $51.49 (1 x Ceramic vase, $20.00, stays with the customer; "
        "1 x Linen runner, $24.50, comes back; shipping, $6.99)"
    ) in html
    # The ticket page says it in the same words.
    page = client.get(reverse("reviews:ticket", args=[ticket.pk])).content.decode()
    assert "1 x Ceramic vase, $20.00, stays with the customer" in page
