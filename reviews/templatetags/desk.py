import re

from django import template
from django.utils import timezone
from django.utils.html import conditional_escape, format_html, format_html_join
from django.utils.safestring import SafeString, mark_safe

from core.clock import day_words, local_words
from refunds import policy
from refunds.flow import words

register = template.Library()

BOLD = re.compile(r"\*\*(.+?)\*\*")


register.filter("dollars", words.dollars)
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
def when(value) -> SafeString:
    """One format for every time on the desk (core/clock.py), in the reviewer's time zone,
    labelled with it: "Dec 1, 2026, 14:05 CET", in a <time> element carrying the exact instant."""
    if not value:
        return mark_safe("")
    return format_html(
        '<time datetime="{}">{}</time>', value.isoformat(timespec="seconds"), local_words(value)
    )


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
def audit_words(event) -> str:
    """An audit event as a sentence for the ticket's timeline."""
    who = event.actor.username if event.actor else "The desk"
    answer, seen = event.answer or {}, event.seen or {}
    amount = words.dollars((seen.get("review") or {}).get("amount_cents"))
    action = event.action
    if action == "open":
        return f"{who} opened the ticket" + (f": “{event.note}”" if event.note else ".")
    if action == "claim":
        return f"{who} took the review (assigned to them)."
    if action == "unclaim":
        return f"{who} put the review back in the queue."
    if action == "escalate":
        text = "sent the review to managers" if event.actor else "escalated the review to managers"
        return f"{who} {text}" + (f": “{event.note}”" if event.note else ".")
    if action == "approve":
        return f"{who} approved {amount or 'the refund'}."
    if action == "edit":
        return (
            f"{who} lowered the amount from {words.dollars(answer.get('asked_cents'))} to "
            f"{words.dollars(answer.get('amount_cents'))} and approved it."
        )
    if action == "reject":
        return f"{who} rejected the refund; told the customer: “{answer.get('reason', '')}”"
    if action == "fork":
        return (
            f"{who} forked the thread with amount {words.dollars(answer.get('amount_cents'))}"
            + (f": “{event.note}”" if event.note else ".")
        )
    if action == "retry":
        return f"{who} retried the failed thread."
    if action == "resend":
        return f"{who} sent the email again."
    if action == "note":
        return f"{who} added a note (while opening a second ticket for this order): “{event.note}”"
    return f"{who}: {event.get_action_display()}."


@register.filter
def reads_audit(user) -> bool:
    from refunds.permissions import can_read_audit

    return can_read_audit(user)
