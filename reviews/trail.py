"""The words of a ticket's trail, its audit entries and the decisions that caused its steps
(template filters, registered in reviews/templatetags/desk.py)."""

from django.template.defaultfilters import truncatechars
from django.utils.html import format_html

from refunds import selectors
from refunds.flow import parts as refund_parts
from refunds.flow import words
from refunds.statuses import DecisionAnswer


def _said(note: str) -> str:
    return f": “{note}”" if note else "."


def _open_words(event, who: str, answer: dict) -> str:
    # Said as the ticket's page and the list say it; a sorter acts but opens nothing.
    opener = event.ticket.opener_words
    if event.ticket.opened_by_id is None:  # "The intake", never a username's case
        opener = opener[:1].upper() + opener[1:]
    sorted_by = event.actor and event.actor.pk != event.ticket.opened_by_id
    return (
        f"{opener} opened the ticket"
        + (f", sorted by {event.actor.username}" if sorted_by else "")
        + _said(event.note)
    )


def _escalate_words(event, who: str, answer: dict) -> str:
    text = "sent the review to managers" if event.actor else "escalated the review to managers"
    return f"{who} {text}" + _said(event.note)


def _decision_words(event, who: str, answer: dict) -> str | None:
    orders = answer.get("orders")
    if isinstance(orders, dict) and len(orders) > 1:
        return f"{who} answered per order: {_per_order_words(orders, event.seen or {})}."
    if isinstance(orders, dict) and orders:  # a ticket of one order: its answer is the review's
        answer = answer | {"reason": next(iter(orders.values())).get("reason", "")}
    if event.action == "approve":
        amount = words.dollars(((event.seen or {}).get("review") or {}).get("amount_cents"))
        return f"{who} approved {amount or 'the refund'}."
    if event.action == "edit":
        return (
            f"{who} lowered the amount from {words.dollars(answer.get('asked_cents'))} to "
            f"{words.dollars(answer.get('amount_cents'))} and approved it."
        )
    if event.action == "reject":
        return f"{who} rejected the refund; told the customer: “{answer.get('reason', '')}”"
    return None


def _ask_words(event, who: str, answer: dict) -> str:
    if answer.get("reminder"):
        question = answer.get("question")
        return f"{who} reminded the customer of the question" + (
            f": “{question}”" if question else "."
        )
    return f"{who} asked the customer: “{answer.get('question', '')}”"


def _reply_words(event, who: str, answer: dict) -> str:
    if answer.get("chose"):  # an offer of store credit
        chose = "store credit" if answer["chose"] == "credit" else "money"
        return f"The customer chose {chose}; the refund is paid so."
    if not answer.get("resumed"):
        return f"A reply to the question resumed nothing: {answer.get('why', '')}."
    if answer.get("no_reply") and answer.get("outcome") == "close":
        return (
            "No reply from the customer: the ticket is closed as no reply, and they are "
            "told that replying reopens it."
        )
    if answer.get("no_reply"):
        return "No reply from the customer: the review is back in the queue without one."
    if answer.get("reopened"):
        return (
            f"The customer replied after the close: “{event.note}”; the ticket is reopened and "
            "the review is back in the queue."
        )
    return f"The customer replied: “{event.note}”; the review is back in the queue."


def _return_words(event, who: str, answer: dict) -> str:
    ref = (event.seen or {}).get("return", "")
    if answer.get("reminder"):
        return f"The customer was reminded to send the goods back (return {ref})."
    if answer.get("why"):
        return f"A word on the goods of return {ref} resumed nothing: {answer['why']}."
    if (event.seen or {}).get("kept") and not (event.seen or {}).get("interrupt_id"):
        return (
            f"{who}: return {ref} {answer.get('answer', '')} while the approval was applied; "
            "kept until the ticket waits for the goods."
        )
    if answer.get("answer") == "received":
        return f"{who}: the goods of return {ref} came back; what came is refunded."
    if answer.get("answer") == "flagged":
        return f"{who}: return {ref} flagged: “{event.note}”; a manager decides again."
    return f"Nothing came back for return {ref} in time."


_UNDONE = {
    "approve": "the approval",
    "reject": "the rejection",
    "ask": "the question to the customer",
}


def _undo_words(event, who: str, answer: dict) -> str:
    undone = _UNDONE.get(answer.get("answer", ""), "the rejection")
    undone = "the per-order answer" if answer.get("orders") else undone
    return f"{who} undid {undone} within its grace; the review went back to the queue."


def _fork_words(event, who: str, answer: dict) -> str:
    amount = words.dollars(answer.get("amount_cents"))
    return f"{who} forked the thread with amount {amount}" + _said(event.note)


def _note_words(event, who: str, answer: dict) -> str:
    if {"message_id", "sorted_message_id"} & set(event.seen or {}):  # a message's
        return f"{who} noted: {event.note}"
    return f"{who} added a note (while opening a second ticket for this order): “{event.note}”"


_AUDIT_WORDS = {
    "open": _open_words,
    "claim": lambda event, who, answer: f"{who} took the review (assigned to them).",
    "unclaim": lambda event, who, answer: f"{who} put the review back in the queue.",
    "escalate": _escalate_words,
    "answer": _decision_words,
    "approve": _decision_words,
    "edit": _decision_words,
    "reject": _decision_words,
    "ask": _ask_words,
    "reply": _reply_words,
    "return": _return_words,
    "undo": _undo_words,
    "fork": _fork_words,
    "retry": lambda event, who, answer: f"{who} retried the failed thread.",
    "resend": lambda event, who, answer: f"{who} sent the email again.",
    "note": _note_words,
}


def audit_words(event) -> str:
    """An audit event as a sentence for the ticket's timeline."""
    who = event.actor.username if event.actor else "The desk"
    said = _AUDIT_WORDS.get(event.action)
    return (said and said(event, who, event.answer or {})) or (
        f"{who}: {event.get_action_display()}."
    )


def audit_who(event) -> str:
    """Who an audit entry is by: a user, the customer (their reply has no user), or the desk."""
    if event.actor:
        return event.actor.username
    answer = event.answer or {}
    if answer.get("reminder") or answer.get("no_reply"):  # the wait's timer wrote it
        return "the desk (the wait's timer)"
    if event.action == "reply":
        return "the customer"
    return "the desk"


def audit_what(event) -> str:
    """What an audit entry is, named by what happened: an ask, a reminder, a reply, no reply."""
    answer = event.answer or {}
    if event.action == "ask" and answer.get("reminder"):
        return "Reminded the customer of the question"
    if event.action == "reply" and answer.get("no_reply"):
        return "No reply from the customer"
    if event.action == "reply" and not answer.get("resumed"):
        return "A reply that resumed nothing"
    return event.get_action_display()


def audit_asking(event) -> str:
    """The details of a question or a reply ("" for other entries)."""
    answer = event.answer or {}
    if event.action == "ask":
        return f"“{answer['question']}”" if answer.get("question") else ""
    if event.action != "reply":
        return ""
    if answer.get("no_reply"):
        if answer.get("outcome") == "close":
            return "the ticket is closed as no reply; replying reopens it"
        return "the review is back in the queue without a reply"
    said = f"“{event.note}”" if event.note else "(no words)"
    if not answer.get("resumed"):
        return f"{said}; it resumed nothing: {answer.get('why') or 'no wait took it'}"
    if answer.get("reopened"):
        return f"{said}; the ticket is reopened and the review is back in the queue"
    return f"{said}; the review is back in the queue"


def per_order_words(event) -> str:
    """An answer per order's entry: "approved $6.99 on 1042; rejected 1044 (…)"; of one order,
    what changed: "amount $48.00 → $25.00 “why”", or the rejection's “why”."""
    orders, seen = (event.answer or {}).get("orders") or {}, event.seen or {}
    if len(orders) != 1:
        return _per_order_words(orders, seen)
    (one,) = orders.values()
    why = f"“{one['reason']}”" if one.get("reason") else ""
    asked = (seen.get("review") or {}).get("amount_cents")
    paid = one.get("amount_cents")
    if one.get("answer") == "approve" and asked and paid is not None and paid < asked:
        return f"amount {words.dollars(asked)} → {words.dollars(paid)} {why}".strip()
    return why


def _per_order_words(orders: dict, seen: dict) -> str:
    asked = {
        str(line.get("number")): line.get("amount_cents")
        for line in (seen.get("review") or {}).get("orders") or []
    }
    parts = []
    for number, one in orders.items():
        if one.get("answer") == "approve":
            paid = one.get("amount_cents")
            lowered = (
                f" (lowered from {words.dollars(asked[number])})"
                if asked.get(number) and paid is not None and paid < asked[number]
                else ""
            )
            parts.append(f"approved {words.dollars(paid)} on {number}{lowered}")
        else:
            parts.append(f"rejected {number} (told the customer: “{one.get('reason', '')}”)")
    return "; ".join(parts)


def order_answers_words(decision) -> str:
    """A decision per order in words: "1042 approved $6.99 (1 x Vase, $6.99, stays with the
    customer); 1044 rejected (On time.)"."""
    orders = decision.orders or {}
    ids = [p["line"] for one in orders.values() for p in one.get("parts") or [] if p.get("line")]
    titles = selectors.line_titles(ids) if ids else {}
    parts = []
    for number, one in orders.items():
        if one.get("answer") == "approve":
            said = f"{number} approved {words.dollars(one.get('amount_cents') or 0)}"
            if one.get("parts") and not refund_parts.only_shipping(one["parts"]):
                back = bool(one.get("on_return"))
                said += f" ({'; '.join(refund_parts.words(one['parts'], titles, on_return=back))})"
            if one.get("reason"):  # why less than proposed
                said += f": {one['reason']}"
            parts.append(said)
        else:
            why = f" ({one['reason']})" if one.get("reason") else ""
            parts.append(f"{number} rejected{why}")
    return "; ".join(parts)


def received_words(decision) -> str:
    """What a "received" said came back: "2 x Linen shirt", or everything asked back."""
    if decision.answer != DecisionAnswer.RECEIVED:
        return ""
    if not decision.orders:
        return "everything asked back"
    units = [(int(line), n) for one in decision.orders.values() for line, n in one.items() if n]
    titles = selectors.line_titles([line for line, _ in units])
    return ", ".join(f"{n} x {titles.get(line) or f'line {line}'}" for line, n in units)


def _lower(text: str) -> str:
    return text[:1].lower() + text[1:]


QUOTED_CHARS = 280  # of a customer's reply: the ticket page has all of it


def answered_words(decision) -> str:
    """How a wait was answered, by what answered it: "approved by ana", "the customer replied"."""
    who = decision.reviewer.username if decision.reviewer else ""
    if decision.answer == DecisionAnswer.REPLY:
        return "the customer replied"
    if decision.answer == DecisionAnswer.NO_REPLY:
        return "no reply came (the wait's timer ran out)"
    if decision.answer == DecisionAnswer.ASK:
        return format_html("<strong>{}</strong> asked the customer instead", who)
    if decision.answer not in (DecisionAnswer.APPROVE, DecisionAnswer.REJECT):
        return _lower(decision.get_answer_display())  # the goods' word, the customer's choice
    verb = "approved" if decision.answer == DecisionAnswer.APPROVE else "rejected"
    if len(decision.orders or {}) > 1:  # a ticket of one order: its answer is the review's
        verb = "answered per order"
    return format_html("{} by <strong>{}</strong>", verb, who)


def cause_words(decision) -> str:
    """What a checkpoint's answer was: a reviewer's decision or question, the customer's reply,
    or the timer's "no reply" (the two last have no reviewer)."""
    who = decision.reviewer.username if decision.reviewer else ""
    if decision.answer == DecisionAnswer.ASK:
        return format_html(
            "Caused by <strong>{}</strong> asking the customer: “{}”", who, decision.reason
        )
    if decision.answer == DecisionAnswer.REPLY:
        return format_html(
            "Caused by the customer's reply: “{}”", truncatechars(decision.reason, QUOTED_CHARS)
        )
    if decision.answer == DecisionAnswer.NO_REPLY:
        return "Caused by the wait's timer: no reply came from the customer"
    if decision.answer not in (DecisionAnswer.APPROVE, DecisionAnswer.REJECT):
        said = _lower(decision.get_answer_display())
        back = received_words(decision)
        return f"Caused by this: {said}" + (f" ({back})" if back else "")
    orders = decision.orders or {}
    if len(orders) > 1:
        said = f"per order, {order_answers_words(decision)}"
    elif orders:  # a ticket of one order: "approved $6.99 (…)", "rejected (why)"
        said = order_answers_words(decision).partition(" ")[2]
    else:
        said = "approved" if decision.answer == DecisionAnswer.APPROVE else "rejected"
    return format_html("Caused by the decision of <strong>{}</strong>: {}", who, said)
