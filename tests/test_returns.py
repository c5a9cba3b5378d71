"""Return, then refund: an approval on return tells the customer once what to send back, where,
and under which reference; the thread waits for the goods; the warehouse's "received" refunds
exactly what came back (restocked), "flagged" sends it to a manager, nothing by the deadline ends
it as the setting says. Wrong references, lines never asked back and too many units are refused
and change nothing; the same word twice is harmless."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
import time_machine
from django.db import transaction
from django.utils import timezone

from refunds import enqueue, policy, runner, services
from refunds.flow import answers as flow_answers
from refunds.flow.nodes.returns import reference_read, return_reference
from refunds.models import AuditEvent, ChargePart, Decision, Email, ReturnRequest, Ticket
from refunds.services import Back, RefundError, returns
from refunds.services.sweep import tickets_recover
from tests.conftest import give_lines, make_order
from tests.reviewing import decide


@pytest.fixture(autouse=True)
def no_broker(monkeypatch, settings):
    """The test runs the threads itself; no worker is asked."""
    monkeypatch.setattr(enqueue, "send", lambda name, pk: True)
    settings.REFUNDS_RETURN_REASONS = [policy.WRONG_ITEM]
    settings.REFUNDS_RETURN_ADDRESS = "Returns, Example Shop, 1 Warehouse Road, Springfield"
    settings.REFUNDS_UNDO_SECONDS = 0


@pytest.fixture
def shirts(db):
    order = make_order("2001", late=0, fee_cents=500)
    return give_lines(order, [("Linen shirt", 2000, 3), ("Silk scarf", 1500, 1)])


def waiting_return(order, opener, reviewer, *, reason=policy.WRONG_ITEM) -> Ticket:
    ticket = services.ticket_open(
        order_number=order.number,
        opened_by=opener,
        reason=reason,
        note="Wrong size: the shirts and the scarf",
    )
    assert runner.advance(ticket.pk) == "awaiting_review"
    ticket.refresh_from_db()
    decide(ticket, reviewer)
    assert runner.advance(ticket.pk) == "awaiting_return"
    ticket.refresh_from_db()
    return ticket


def emails_of(ticket: Ticket) -> list[Email]:
    return list(Email.objects.filter(ticket=ticket).order_by("pk"))


def shirt_line(order) -> int:
    return order.lines.get(title="Linen shirt").pk


def test_references_carry_check_digits_that_catch_a_mistyped_digit():
    ref = return_reference(1234)
    assert reference_read(ref) == 1234
    assert reference_read(ref.lower().replace("-", "- ")) == 1234  # as scanned or typed
    wrong = ref.replace("1234", "1243")
    assert reference_read(wrong) is None
    assert reference_read("RT-1234") is None and reference_read("hello") is None


def test_the_policy_proposes_a_return_and_the_customer_is_told_once_what_to_send_where(
    transactional_db, colleague, manager, shirts
):
    ticket = waiting_return(shirts, colleague, manager)
    found = ReturnRequest.objects.get(ticket=ticket)
    assert ticket.pending_payload["kind"] == "return"
    assert ticket.pending_payload["reference"] == found.reference
    assert found.orders == {"2001": found.orders["2001"]}
    assert {p["line"] for p in found.orders["2001"]} == {line.pk for line in shirts.lines.all()}
    (told,) = emails_of(ticket)
    assert found.reference in told.body
    assert "1 Warehouse Road" in told.body
    assert "3 x Linen shirt" in told.body and "1 x Silk scarf" in told.body
    assert "return label" in told.body
    # Running it again (a redelivered wake-up) tells nothing twice.
    assert runner.advance(ticket.pk) == "awaiting_return"
    assert len(emails_of(ticket)) == 1


def test_a_partial_return_refunds_exactly_what_came_back_restocked_and_says_so_once(
    transactional_db, colleague, manager, shirts
):
    ticket = waiting_return(shirts, colleague, manager)
    found = ReturnRequest.objects.get(ticket=ticket)
    shirt = shirt_line(shirts)
    arrival = services.return_arrived(
        reference=found.reference,
        status="received",
        lines=[Back(quantity=2, line=shirt)],
        source="test",
    )
    assert arrival.outcome == "recorded"
    assert runner.advance(ticket.pk) == "refunded"
    ticket.refresh_from_db()
    (part,) = ChargePart.objects.filter(charge__ticket=ticket)
    assert (part.line_id, part.quantity, part.amount_cents, part.restock) == (shirt, 2, 4000, True)
    told, refunded = emails_of(ticket)
    assert "$40.00" in refunded.body and "2 x Linen shirt" in refunded.body
    assert "received back, thank you" in refunded.body
    assert "send it back" not in refunded.body and "Silk scarf" not in refunded.body
    # The same word again is harmless; another one is refused; nothing moves.
    again = services.return_arrived(
        reference=found.reference,
        status="received",
        lines=[Back(quantity=2, line=shirt)],
        source="test",
    )
    assert again.outcome == "already"
    with pytest.raises(RefundError, match="recorded as received already"):
        services.return_arrived(reference=found.reference, status="received", source="test")
    assert ChargePart.objects.filter(charge__ticket=ticket).count() == 1
    assert len(emails_of(ticket)) == 2


def test_the_scan_of_the_reference_alone_refunds_everything_asked_back(
    transactional_db, colleague, manager, shirts
):
    ticket = waiting_return(shirts, colleague, manager)
    found = ReturnRequest.objects.get(ticket=ticket)
    services.return_arrived(reference=found.reference.lower(), status="received", source="scan")
    assert runner.advance(ticket.pk) == "refunded"
    parts = ChargePart.objects.filter(charge__ticket=ticket)
    assert sum(p.amount_cents for p in parts) == 3 * 2000 + 1500
    assert all(p.restock for p in parts if p.line_id)


@pytest.mark.parametrize(
    ("given", "said"),
    [
        ({"reference": "RT-99-00"}, "is not a return reference"),
        ({"lines": [Back(quantity=4, line=None, sku="SKU-1")]}, "3 were asked back"),
        ({"lines": [Back(quantity=1, sku="NOPE")]}, "no line with the SKU"),
        ({"lines": [Back(quantity=1, line=1, order="9999")]}, "not 9999"),
        ({"lines": [Back(quantity=0, sku="SKU-1")]}, "nothing came back"),
        ({"status": "lost"}, "received or flagged"),
        ({"status": "flagged"}, "Say why"),
    ],
)
def test_a_wrong_word_on_the_goods_is_refused_and_changes_nothing(
    transactional_db, colleague, manager, shirts, given, said
):
    ticket = waiting_return(shirts, colleague, manager)
    found = ReturnRequest.objects.get(ticket=ticket)
    word = {"reference": found.reference, "status": "received", "source": "test"} | given
    with pytest.raises(RefundError, match=said):
        services.return_arrived(**word)
    found.refresh_from_db()
    assert found.arrived is None and found.arrived_at is None
    assert not Decision.objects.filter(ticket=ticket, answer="received").exists()
    assert runner.advance(ticket.pk) == "awaiting_return"


def test_another_tickets_reference_is_refused(transactional_db, colleague, manager, shirts):
    ticket = waiting_return(shirts, colleague, manager)
    other = give_lines(make_order("2002", late=0, name="Bo Lee"), [("Wool coat", 9000, 1)])
    mine = ReturnRequest.objects.get(ticket=ticket)
    with pytest.raises(RefundError, match="line .* was not asked back"):
        services.return_arrived(
            reference=mine.reference,
            status="received",
            lines=[Back(quantity=1, line=other.lines.get().pk)],
            source="test",
        )


def test_a_flagged_return_goes_back_to_a_manager_with_the_reason(
    transactional_db, colleague, agent, manager, shirts
):
    ticket = waiting_return(shirts, colleague, manager)
    found = ReturnRequest.objects.get(ticket=ticket)
    services.return_arrived(
        reference=found.reference, status="flagged", reason="Box empty, seal cut", source="test"
    )
    assert runner.advance(ticket.pk) == "awaiting_review"
    ticket.refresh_from_db()
    assert ticket.required_role == "manager"
    assert "Box empty, seal cut" in ticket.pending_payload["description"]
    assert not ChargePart.objects.filter(charge__ticket=ticket).exists()
    assert len(emails_of(ticket)) == 1  # the instructions only
    # The manager rejects: one email, no money.
    decide(ticket, manager, "reject", reason="The box came back empty.")
    assert runner.advance(ticket.pk) == "rejected"
    assert len(emails_of(ticket)) == 2


def test_nothing_back_by_the_deadline_ends_it_with_one_email_after_one_reminder(
    transactional_db, colleague, manager, shirts, settings
):
    ticket = waiting_return(shirts, colleague, manager)
    found = ReturnRequest.objects.get(ticket=ticket)
    later = timezone.now() + timedelta(days=settings.REFUNDS_RETURN_REMIND_DAYS + 1)
    with time_machine.travel(later):
        assert services.returns_wait_timers()["reminded"] == [ticket.pk]
        assert services.returns_wait_timers()["reminded"] == []  # a second beat: once
    reminder = emails_of(ticket)[-1]
    assert reminder.key.endswith(":reminder") and reminder.status == Email.Status.SENT
    assert "not received the items back yet" in reminder.body and found.reference in reminder.body
    end = timezone.now() + timedelta(days=settings.REFUNDS_RETURN_GIVE_UP_DAYS + 1)
    with time_machine.travel(end):
        assert services.returns_wait_timers()["ended"] == [ticket.pk]
    assert runner.advance(ticket.pk) == "rejected"
    told = emails_of(ticket)[-1]
    assert "did not come back" in told.body
    assert len(emails_of(ticket)) == 3
    assert not ChargePart.objects.filter(charge__ticket=ticket).exists()


def test_nothing_back_by_the_deadline_can_go_to_a_manager_instead(
    transactional_db, colleague, manager, shirts, settings
):
    settings.REFUNDS_RETURN_DEFAULT_OUTCOME = "queue"
    ticket = waiting_return(shirts, colleague, manager)
    end = timezone.now() + timedelta(days=settings.REFUNDS_RETURN_GIVE_UP_DAYS + 1)
    with time_machine.travel(end):
        services.returns_wait_timers()
    assert runner.advance(ticket.pk) == "awaiting_review"
    ticket.refresh_from_db()
    assert "nothing came back in 21 days" in ticket.pending_payload["description"]


def test_an_arrival_before_the_thread_waits_is_kept_and_applied_once_it_does(
    transactional_db, colleague, manager, shirts
):
    ticket = services.ticket_open(
        order_number=shirts.number,
        opened_by=colleague,
        reason=policy.WRONG_ITEM,
        note="Wrong size: the shirts",
    )
    assert runner.advance(ticket.pk) == "awaiting_review"
    ticket.refresh_from_db()
    decision = decide(ticket, manager)
    Ticket.objects.filter(pk=ticket.pk).update(status=Ticket.Status.RUNNING)  # being applied
    found = ReturnRequest.objects.get(decision=decision)
    kept = services.return_arrived(reference=found.reference, status="received", source="test")
    assert kept.outcome == "kept"
    assert runner.advance(ticket.pk) == "awaiting_return"
    tickets_recover()  # the sweep applies what was kept
    assert runner.advance(ticket.pk) == "refunded"
    assert AuditEvent.objects.filter(ticket=ticket, action="return").count() == 2


def test_refunding_at_once_what_the_policy_asks_back_is_a_managers_edit(
    transactional_db, colleague, settings
):
    order = give_lines(make_order("2003", late=0, fee_cents=100), [("Mug", 900, 1)])
    ticket = services.ticket_open(
        order_number=order.number, opened_by=colleague, reason=policy.DAMAGED, note="mug broke"
    )
    assert runner.advance(ticket.pk) == "awaiting_review"
    ticket.refresh_from_db()
    review = ticket.pending_payload["orders"]
    assert not review[0].get("on_return")  # not for this reason, nor this amount
    answers = flow_answers.checked(review, services.review_answers(ticket, answer="approve"))
    assert not flow_answers.edited(review, answers)
    # Where the policy asks the mug back (from $5), the same approval without it is an edit.
    settings.REFUNDS_RETURN_FROM_CENTS = 500
    other = give_lines(make_order("2004", late=0, fee_cents=100, name="Cy Dor"), [("Mug", 900, 1)])
    ticket = services.ticket_open(
        order_number=other.number, opened_by=colleague, reason=policy.DAMAGED, note="mug broke"
    )
    runner.advance(ticket.pk)
    ticket.refresh_from_db()
    review = ticket.pending_payload["orders"]
    assert review[0]["on_return"] is True
    proposed = services.review_answers(ticket, answer="approve")
    assert proposed["2004"]["on_return"] is True  # the shorthand takes the proposal
    assert not flow_answers.edited(review, flow_answers.checked(review, proposed))
    proposed["2004"]["on_return"] = False
    assert flow_answers.edited(review, flow_answers.checked(review, proposed))


def _ticket_posting(client, ticket, shirts, **extra):
    shirt = shirt_line(shirts)
    return client.post(
        f"/reviews/{ticket.pk}/decide/",
        {
            "interrupt_id": ticket.pending_interrupt_id,
            "approve": "1",
            "parts-2001": "1",
            f"part-2001-qty-{shirt}": "3",
        }
        | extra,
    )


def test_the_ticket_page_ticks_the_return_the_policy_asks_for_and_posts_it(
    transactional_db, client, colleague, manager, shirts
):
    ticket = services.ticket_open(
        order_number=shirts.number, opened_by=colleague, reason=policy.WRONG_ITEM, note="shirts"
    )
    assert runner.advance(ticket.pk) == "awaiting_review"
    ticket.refresh_from_db()
    client.force_login(manager)
    page = client.get(f"/tickets/{ticket.pk}/").content.decode()
    box = re.search(r'<input[^>]*name="part-2001-on_return"[^>]*>', page)
    assert box and "checked" in box.group()
    answer = _ticket_posting(client, ticket, shirts, **{"part-2001-on_return": "1"})
    assert answer.status_code == 302, answer.content.decode()[:500]
    assert runner.advance(ticket.pk) == "awaiting_return"
    assert ReturnRequest.objects.get(ticket=ticket).orders["2001"][0]["quantity"] == 3


def test_a_manager_unticking_the_return_refunds_at_once(
    transactional_db, client, colleague, manager, shirts
):
    ticket = services.ticket_open(
        order_number=shirts.number, opened_by=colleague, reason=policy.WRONG_ITEM, note="shirts"
    )
    assert runner.advance(ticket.pk) == "awaiting_review"
    ticket.refresh_from_db()
    client.force_login(manager)
    answer = _ticket_posting(client, ticket, shirts)  # the box left unticked
    assert answer.status_code == 302, answer.content.decode()[:500]
    assert runner.advance(ticket.pk) == "refunded"
    assert not ReturnRequest.objects.filter(ticket=ticket).exists()


def test_the_thread_checks_the_goods_again_and_refunds_nothing_never_asked_back(
    transactional_db, colleague, manager, shirts
):
    """The late guard: a word recorded past the service (a bug, an old row) is checked again by
    the waiting node itself, which refunds nothing and hands the ticket to a manager."""
    ticket = waiting_return(shirts, colleague, manager)
    shirt = shirt_line(shirts)
    Decision.objects.create(
        ticket=ticket,
        interrupt_id=ticket.pending_interrupt_id,
        answer="received",
        orders={"2001": {str(shirt): 7}},  # three were asked back
    )
    assert runner.advance(ticket.pk) == "awaiting_review"
    ticket.refresh_from_db()
    assert "return_refused" in ticket.nodes_run and ticket.required_role == "manager"
    assert "3 were asked back" in ticket.pending_payload["description"]
    assert not ChargePart.objects.filter(charge__ticket=ticket).exists()


def test_of_two_words_on_the_goods_at_once_one_is_recorded(
    transactional_db, colleague, manager, shirts
):
    """The race: both read the return before either wrote; the second finds it taken."""
    ticket = waiting_return(shirts, colleague, manager)
    reference = ReturnRequest.objects.get(ticket=ticket).reference
    first, second = services.return_find(reference), services.return_find(reference)
    with transaction.atomic():
        returns._record(first, {"answer": "flagged", "orders": None, "reason": "empty"}, {}, None)
    with pytest.raises(returns._NotRecorded), transaction.atomic():
        returns._record(second, {"answer": "received", "orders": None, "reason": ""}, {}, None)
    assert Decision.objects.filter(ticket=ticket, answer__in=["flagged", "received"]).count() == 1
    assert ReturnRequest.objects.get(ticket=ticket).arrived["answer"] == "flagged"
