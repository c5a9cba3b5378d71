import re
from collections.abc import Mapping

from django import template
from django.template.defaultfilters import truncatechars
from django.utils import timezone
from django.utils.html import conditional_escape, format_html, format_html_join
from django.utils.safestring import SafeString, mark_safe

from core.clock import day_words, local_words
from refunds import emails, policy, selectors
from refunds.flow import parts as refund_parts
from refunds.flow import words
from refunds.flow.state import LineFacts, OrderFacts
from refunds.selectors import RefundProgress
from refunds.statuses import DecisionAnswer

register = template.Library()

BOLD = re.compile(r"\*\*(.+?)\*\*")


register.filter("dollars", words.dollars)  # {{ cents|dollars }}, {{ cents|dollars:currency }}
register.filter("trail_words", words.trail_words)


@register.simple_tag
def within_limit() -> str:
    """What support agents decide, in words, for the limit in force (refunds/policy.py)."""
    return policy.within_words()


@register.simple_tag
def over_limit() -> str:
    """What goes to managers for its amount, in words, for the limit in force."""
    return policy.over_words()


@register.filter
def status_class(status: str) -> str:
    return f"status status-{status}"


@register.simple_tag
def status_pill(ticket, refunds: Mapping[int, RefundProgress] | None = None, pill_id: str = ""):
    """A ticket's status as the desk says it: escalated to managers, where a refunded ticket's
    money is (`refunds`: refund_progress by ticket id, from refunds/selectors.py, the one home of
    those words), or its status."""
    progress = (refunds or {}).get(ticket.pk)
    if ticket.status == "awaiting_review" and ticket.is_escalated:
        state, shown = "escalated", "Escalated to managers"
    elif progress:
        state, shown = progress["state"], progress["words"]
    else:
        state, shown = ticket.status, ticket.get_status_display()
    named = format_html(' id="{}"', pill_id) if pill_id else ""
    return format_html(
        '<span class="status status-{}" data-ticket="{}"{}>{}</span>',
        state,
        ticket.pk,
        named,
        shown,
    )


@register.filter
def charge_progress(charge) -> RefundProgress:
    """Where one paid refund's money is, in the desk's words (refunds/selectors.py)."""
    return selectors.charge_progress(charge)


@register.filter
def review_markdown(text: str | None) -> SafeString:
    """The review description is markdown (Agent Inbox shape); the graph only uses paragraphs and
    **bold**, so that is all this renders. Everything is escaped first: it quotes the customer."""
    paragraphs = [p.strip() for p in re.split(r"\n\s*\n", text or "") if p.strip()]
    rendered = [
        mark_safe(BOLD.sub(r"<strong>\1</strong>", conditional_escape(p)).replace("\n", "<br>"))
        for p in paragraphs
    ]
    return format_html_join("\n", "<p>{}</p>", ((p,) for p in rendered))


@register.filter
def when(value, precision: str = "") -> SafeString:
    """One format for every time on the desk (core/clock.py), in the reviewer's time zone,
    labelled with it: "Dec 1, 2026, 14:05 CET", in a <time> element carrying the exact instant.
    `when:"seconds"` for a deadline a few seconds away (an undo's grace), which a minute
    cannot tell: "Dec 1, 2026, 14:05:07 CET"."""
    if not value:
        return mark_safe("")
    words = local_words(value, seconds=precision == "seconds")
    return format_html('<time datetime="{}">{}</time>', value.isoformat(timespec="seconds"), words)


@register.filter
def day(value) -> str:
    """A plain date, as core/clock.py says it: "Nov 2, 2026"."""
    return day_words(value) if value else ""


@register.filter
def waited(since, now=None) -> str:
    """How long a review has waited, in words: "4 min", "2 h 05 min", "3 days"."""
    if not since:
        return ""
    minutes = max(int(((now or timezone.now()) - since).total_seconds() // 60), 0)
    if minutes < 60:
        return f"{minutes} min"
    if minutes < 48 * 60:
        return f"{minutes // 60} h {minutes % 60:02d} min"
    return f"{minutes // (24 * 60)} days"


@register.filter
def is_late(since, warn_after) -> bool:
    return bool(since and warn_after and timezone.now() - since > warn_after)


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
    "undo": _undo_words,
    "fork": _fork_words,
    "retry": lambda event, who, answer: f"{who} retried the failed thread.",
    "resend": lambda event, who, answer: f"{who} sent the email again.",
    "note": _note_words,
}


@register.filter
def audit_words(event) -> str:
    """An audit event as a sentence for the ticket's timeline."""
    who = event.actor.username if event.actor else "The desk"
    said = _AUDIT_WORDS.get(event.action)
    return (said and said(event, who, event.answer or {})) or (
        f"{who}: {event.get_action_display()}."
    )


def _timer(event) -> bool:
    """The wait's timer wrote it: a reminder, or the end of a wait with no reply."""
    answer = event.answer or {}
    return bool(answer.get("reminder") or answer.get("no_reply"))


@register.filter
def audit_who(event) -> str:
    """Who an audit entry is by: a user, the customer (their reply has no user), or the desk."""
    if event.actor:
        return event.actor.username
    if _timer(event):
        return "the desk (the wait's timer)"
    if event.action == "reply":
        return "the customer"
    return "the desk"


@register.filter
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


@register.filter
def audit_asking(event) -> str:
    """The details of a question or a reply: what was asked, what the customer wrote, what the
    end of a wait did ("" for other entries)."""
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


@register.filter
def per_order_words(event) -> str:
    """An answer per order's audit entry as words: "approved $6.99 on 1042; rejected 1044 (…)";
    of one order, what changed: "amount $48.00 → $25.00 “why”", or the rejection's “why”."""
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


@register.filter
def undoable(decision, user) -> bool:
    """Whether `user` may still undo the decision: theirs, and its grace still runs."""
    after = getattr(decision, "apply_after", None)
    return bool(after and decision.reviewer_id == user.pk and after > timezone.now())


@register.filter
def reads_audit(user) -> bool:
    from refunds.permissions import can_read_audit

    return can_read_audit(user)


# --- a ticket of several orders --------------------------------------------------------------
@register.filter
def order_lines(ticket) -> list:
    """The pending review's line per order of a ticket of several ([] for one order)."""
    payload = getattr(ticket, "pending_payload", None) or {}
    lines = payload.get("orders") if isinstance(payload, dict) else None
    return list(lines) if lines and len(lines) > 1 else []


@register.filter
def open_lines(lines: list) -> list:
    return [line for line in lines if line.get("status") == "open"]


@register.filter
def flagged_lines(lines: list) -> list:
    return [line for line in lines if line.get("flags")]


SEVERAL_LISTED = 4  # more orders than this: "6 orders: 1042, 1044, 1047, …"


@register.filter
def orders_words(ticket) -> str:
    """ "order 1042", "orders 1042, 1044, 1047", or "6 orders: 1042, 1044, 1047, …", from the
    ticket's links (prefetch them with their orders on a list)."""
    numbers = [link.order.number for link in ticket.links.all()] or [ticket.order.number]
    if len(numbers) == 1:
        return f"order {numbers[0]}"
    if len(numbers) > SEVERAL_LISTED:
        shown = ", ".join(numbers[: SEVERAL_LISTED - 1])
        return f"{len(numbers)} orders: {shown}, …"
    return "orders " + ", ".join(numbers)


@register.filter
def goes_in(canned, about) -> str:
    """What a canned reply's option adds for the customer of `about` (a ticket or a message, by
    the language the reader found): " (goes in English: no Spanish text)" when it has no words
    in their language (CannedReason.text_in), "" when it has, or when they are written to in
    English anyway."""
    language = str((getattr(about, "reading", None) or {}).get("language") or "")
    if canned.text_in(language) is not None:
        return ""
    return f" (goes in English: no {emails.language_name(language)} text)"


@register.filter
def placed_words(placed) -> str:
    """The orders a message was placed on a ticket for (intake.models.MessageTicket), in words:
    its own, else the ticket's (a customer's reply to a question names none of its own)."""
    numbers = list(placed.orders)
    if not numbers:
        return orders_words(placed.ticket)
    return f"order {numbers[0]}" if len(numbers) == 1 else "orders " + ", ".join(numbers)


@register.filter
def lowers_amounts(user) -> bool:
    """Managers and admins lower an amount before approving (refunds.permissions.edit_refusal
    says it for one ticket)."""
    from refunds.permissions import is_admin, is_manager

    return is_admin(user) or is_manager(user)


@register.filter
def order_answers_words(decision) -> str:
    """A decision per order in words: "1042 approved $6.99; 1044 rejected (On time.)", an
    approval with its parts: "1047 approved $24.00 (1 x Ceramic vase, $24.00, stays with the
    customer)"."""
    orders = decision.orders or {}
    ids = [p["line"] for one in orders.values() for p in one.get("parts") or [] if p.get("line")]
    titles = selectors.line_titles(ids) if ids else {}
    parts = []
    for number, one in orders.items():
        if one.get("answer") == "approve":
            said = f"{number} approved {words.dollars(one.get('amount_cents') or 0)}"
            if one.get("parts") and not refund_parts.only_shipping(one["parts"]):
                said += f" ({'; '.join(refund_parts.words(one['parts'], titles))})"
            if one.get("reason"):  # why less than proposed
                said += f": {one['reason']}"
            parts.append(said)
        else:
            why = f" ({one['reason']})" if one.get("reason") else ""
            parts.append(f"{number} rejected{why}")
    return "; ".join(parts)


QUOTED_CHARS = 280  # of a customer's reply: the ticket page has all of it


@register.filter
def answered_words(decision) -> str:
    """How a wait was answered, by what answered it: "approved by ana", "ana asked the customer
    instead", "the customer replied", "no reply came (the wait's timer)"."""
    who = decision.reviewer.username if decision.reviewer else ""
    if decision.answer == DecisionAnswer.REPLY:
        return "the customer replied"
    if decision.answer == DecisionAnswer.NO_REPLY:
        return "no reply came (the wait's timer ran out)"
    if decision.answer == DecisionAnswer.ASK:
        return format_html("<strong>{}</strong> asked the customer instead", who)
    verb = "approved" if decision.answer == DecisionAnswer.APPROVE else "rejected"
    if decision.orders:
        verb = "answered per order"
    return format_html("{} by <strong>{}</strong>", verb, who)


@register.filter
def cause_words(decision) -> str:
    """What a checkpoint's answer was, said by what it is: a reviewer's decision or question,
    the customer's reply, or the timer's "no reply" (the two last have no reviewer)."""
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
    orders = decision.orders or {}
    if len(orders) > 1:
        said = f"per order, {order_answers_words(decision)}"
    elif orders:  # a ticket of one order: "approved $6.99 (…)", "rejected (why)"
        said = order_answers_words(decision).partition(" ")[2]
    else:
        said = "approved" if decision.answer == DecisionAnswer.APPROVE else "rejected"
    return format_html("Caused by the decision of <strong>{}</strong>: {}", who, said)


@register.filter
def late_words(late_by_days) -> str:
    """ "4 days late", "on time", "1 day early"."""
    n = int(late_by_days or 0)
    if n > 0:
        return f"{words.days(n)} late"
    return "on time" if n == 0 else f"{words.days(-n)} early"


@register.simple_tag(takes_context=True)
def review_row(context, ticket, may_decide: bool = True) -> SafeString:
    """A queue card ("reviews/queue.html#review-row") for `ticket`, kept while nothing it shows
    changes (reviews/rows.py)."""
    from reviews import rows

    extra = (may_decide, context.get("error"), context.get("follow"))
    now = timezone.now()
    key = rows.row_key(
        ticket,
        user=context["user"],
        canned=context.get("canned") or [],
        warn_after=context.get("warn_after"),
        now=now,
        waited=waited(ticket.review_since, now),
        extra=extra,
    )
    html = rows.kept(context, key)
    if html is None:
        row = context.template.engine.get_template("reviews/queue.html#review-row")
        with context.push(ticket=ticket, may_decide=may_decide, csrf_token=rows.CSRF_MARK):
            html = row.render(context)
        rows.keep(context, key, html)
    token = str(context.get("csrf_token", ""))
    return mark_safe(html.replace(rows.CSRF_MARK, conditional_escape(token)))  # noqa: S308


@register.filter
def proposed_units(order: dict, line_id: int) -> int:
    """How many of a line the review's proposal refunds (0: not ticked)."""
    for part in order.get("parts") or []:
        if part.get("line") == line_id:
            return int(part.get("quantity") or 0)
    return 0


@register.filter
def proposed_pay(order: dict, line_id: int) -> str:
    """What the review's proposal pays for a line's units, as an empty Pay input pays it
    ("full price" for a line it does not propose: reviews.forms.parts_answers)."""
    for part in order.get("parts") or []:
        if part.get("line") == line_id:
            return words.dollars(part["amount_cents"])
    return "full price"


@register.filter
def units_left(line: LineFacts) -> int:
    """How many units of one of the review's lines are left to refund (policy.units_left)."""
    return policy.units_left(line)


@register.filter
def shipping_left(order: OrderFacts) -> int:
    """How much of an order's shipping fee is left to refund (policy.shipping_left)."""
    return policy.shipping_left(order)


@register.filter
def proposal_sums(order: dict) -> dict:
    """What the review's proposal for one order comes to, for reviews/_parts_total.html."""
    facts, parts = order["order"], order.get("parts") or []
    total = refund_parts.total(parts)
    return {
        "total": total,
        "left": policy.parts_left(facts, parts),
        "paid": facts.get("paid_cents"),
    }


@register.filter
def proposes_shipping(order: dict) -> bool:
    return any(part.get("shipping") for part in order.get("parts") or [])


@register.filter
def after_status(reason: str, ticket) -> str:
    """The outcome's words after the status pill, without saying its word twice: a refunded
    ticket reads "Refunded $12.50.", not "Refunded Refunded $12.50."."""
    label = str(ticket.get_status_display())
    if reason.lower().startswith(label.lower() + " "):
        return reason[len(label) + 1 :]
    return reason


@register.filter
def lateness(order) -> str:
    """ "3 days late", "on time", "2 days early": how the delivery kept its promise."""
    days = (order.delivered_on - order.promised_on).days
    if days == 0:
        return "on time"
    word = "late" if days > 0 else "early"
    return f"{abs(days)} day{'s' if abs(days) != 1 else ''} {word}"


@register.filter
def reply_files(ticket) -> list:
    """The files the customer sent with their replies to the ticket's questions."""
    from intake import selectors as intake_selectors

    return list(intake_selectors.reply_files(ticket.pk))


@register.filter
def refused_files(about: list) -> list[dict]:
    """The parts of a message that were refused, with why (older messages kept none: each
    of theirs says "not kept")."""
    return [
        a | {"refused": a.get("refused", "not kept")}
        for a in about or []
        if isinstance(a, dict) and a.get("refused", "not kept")
    ]
