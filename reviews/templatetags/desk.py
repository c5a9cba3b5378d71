import re
from collections.abc import Mapping

from django import template
from django.conf import settings
from django.utils import timezone
from django.utils.html import conditional_escape, format_html, format_html_join
from django.utils.safestring import SafeString, mark_safe

from core.clock import day_words, local_words
from refunds import emails, permissions, policy, selectors
from refunds.flow import parts as refund_parts
from refunds.flow import words
from refunds.selectors import RefundProgress
from reviews import trail

register = template.Library()
for name in (
    "audit_words",
    "audit_who",
    "audit_what",
    "audit_asking",
    "per_order_words",
    "order_answers_words",
    "received_words",
    "answered_words",
    "cause_words",
):
    register.filter(name, getattr(trail, name))
register.filter("dollars", words.dollars)  # {{ cents|dollars }}, {{ cents|dollars:currency }}
register.filter("trail_words", words.trail_words)
register.filter("charge_progress", selectors.charge_progress)
register.filter("units_left", policy.units_left)
register.filter("shipping_left", policy.shipping_left)
register.filter("reads_audit", permissions.oversees)


@register.filter
def records_returns(user) -> bool:
    return not permissions.return_refusal(user)


BOLD = re.compile(r"\*\*(.+?)\*\*")


@register.simple_tag
def status_pill(ticket, refunds: Mapping[int, RefundProgress] | None = None, pill_id: str = ""):
    """A ticket's status as the desk says it: escalated, where a refunded ticket's money is
    (`refunds`: refund_progress by ticket id), or its status."""
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
def review_markdown(text: str | None) -> SafeString:
    """The review's paragraphs and **bold** (all the graph writes), escaped: it quotes the
    customer."""
    paragraphs = [p.strip() for p in re.split(r"\n\s*\n", text or "") if p.strip()]
    rendered = [
        mark_safe(BOLD.sub(r"<strong>\1</strong>", conditional_escape(p)).replace("\n", "<br>"))
        for p in paragraphs
    ]
    return format_html_join("\n", "<p>{}</p>", ((p,) for p in rendered))


@register.filter
def when(value, precision: str = "") -> SafeString:
    """Every time on the desk, in the reviewer's zone: "Dec 1, 2026, 14:05 CET"; `when:"seconds"`
    for a deadline a minute cannot tell (an undo's grace)."""
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


@register.filter
def undoable(decision, user) -> bool:
    """Whether `user` may still undo the decision: theirs, and its grace still runs."""
    after = getattr(decision, "apply_after", None)
    return bool(after and decision.reviewer_id == user.pk and after > timezone.now())


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
    """ "order 1042", "orders 1042, 1044, 1047", or "6 orders: 1042, 1044, 1047, …"."""
    numbers = [link.order.number for link in ticket.links.all()] or [ticket.order.number]
    if len(numbers) > SEVERAL_LISTED:
        shown = ", ".join(numbers[: SEVERAL_LISTED - 1])
        return f"{len(numbers)} orders: {shown}, …"
    return words.numbers_words(numbers)


@register.filter
def goes_in(canned, about) -> str:
    """ " (goes in English: no Spanish text)" when a canned reply has no words in the language
    of `about` (a ticket or a message), else ""."""
    language = str((getattr(about, "reading", None) or {}).get("language") or "")
    if canned.text_in(language) is not None:
        return ""
    return f" (goes in English: no {emails.language_name(language)} text)"


@register.filter
def placed_words(placed) -> str:
    """The orders a message was placed on a ticket for: its own, else the ticket's (a reply to a
    question names none of its own)."""
    numbers = list(placed.orders)
    return words.numbers_words(numbers) if numbers else orders_words(placed.ticket)


@register.filter
def lowers_amounts(user) -> bool:
    """Managers and admins lower an amount before approving (edit_refusal says it per ticket)."""
    return permissions.oversees(user)


@register.filter
def late_words(late_by_days) -> str:
    """ "4 days late", "on time", "1 day early"."""
    n = int(late_by_days or 0)
    if n > 0:
        return f"{words.days(n)} late"
    return "on time" if n == 0 else f"{words.days(-n)} early"


@register.simple_tag(takes_context=True)
def review_row(context, ticket, may_decide: bool = True, oob: bool = False) -> SafeString:
    """A queue card for `ticket`, kept while nothing it shows changes (reviews/rows.py); `oob`:
    swapped by id, out of band (a poll's changed card)."""
    from reviews import rows

    now = timezone.now()
    if not getattr(ticket, "card_key", ""):
        ticket.card_key = rows.card_key(
            ticket.card_version,
            claimed_by_id=ticket.claimed_by_id,
            claim_expires_at=ticket.claim_expires_at,
            review_since=ticket.review_since,
            now=now,
            warn_after=context["warn_after"],
        )
    extra = (may_decide, context.get("error"), context.get("follow"), ticket.card_key)
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
    if oob:
        html = html.replace("<tr ", '<tr hx-swap-oob="true" ', 1)
    token = str(context.get("csrf_token", ""))
    return mark_safe(html.replace(rows.CSRF_MARK, conditional_escape(token)))  # noqa: S308


def _proposed(order: dict, line_id: int) -> dict:
    return next((p for p in order.get("parts") or [] if p.get("line") == line_id), {})


@register.filter
def proposed_units(order: dict, line_id: int) -> int:
    """How many of a line the review's proposal refunds (0: not ticked)."""
    return int(_proposed(order, line_id).get("quantity") or 0)


@register.filter
def proposed_pay(order: dict, line_id: int) -> str:
    """What an empty Pay input pays for a line's units (reviews.forms.parts_answers)."""
    part = _proposed(order, line_id)
    return words.dollars(part["amount_cents"]) if part else "full price"


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
    """The outcome's words after the status pill, without saying its word twice."""
    label = str(ticket.get_status_display())
    if reason.lower().startswith(label.lower() + " "):
        return reason[len(label) + 1 :]
    return reason


@register.filter
def lateness(order) -> str:
    """How the delivery kept its promise, by its two dates: "3 days late"."""
    return late_words((order.delivered_on - order.promised_on).days)


@register.filter
def reply_files(ticket) -> list:
    """The files the customer sent with their replies to the ticket's questions."""
    from intake import selectors as intake_selectors

    return list(intake_selectors.reply_files(ticket.pk))


@register.filter
def refused_files(about: list) -> list[dict]:
    """The parts of a message that were refused, with why (older messages say "not kept")."""
    return [
        a | {"refused": a.get("refused", "not kept")}
        for a in about or []
        if isinstance(a, dict) and a.get("refused", "not kept")
    ]


@register.simple_tag
def events_url() -> str:
    """Where the queue page hears of changes (static/push.js): REFUNDS_EVENTS_URL."""
    return settings.REFUNDS_EVENTS_URL
