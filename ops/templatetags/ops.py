from django import template

from ops import selectors
from refunds import permissions
from refunds.flow.words import dollars
from refunds.models import AuditEvent

register = template.Library()


@register.inclusion_tag("ops/_nav.html", takes_context=True)
def ops_nav(context) -> dict:
    """Admins' links with the counts that need them (two COUNTs, admins' pages only)."""
    user = context["user"]
    if not permissions.is_admin(user):
        return {"show": False}
    return {"show": True, **selectors.counts()}


@register.filter
def kib(n: int) -> str:
    return f"{n / 1024:,.1f} KB" if n >= 1024 else f"{n} bytes"


@register.filter
def amount_change(event: AuditEvent) -> str:
    """An audited amount change in words: "amount $6.99 → $5.00", or "amount set to $5.00"
    when the entry does not say what it was. A decision keeps the amount it saw inside the review
    it answered; a fork keeps it beside."""
    after = (event.answer or {}).get("amount_cents")
    if not after:
        return ""
    seen = event.seen or {}
    before = seen.get("amount_cents") or (seen.get("review") or {}).get("amount_cents")
    if not before:
        return f"amount set to {dollars(after)}"
    return f"amount {dollars(before)} → {dollars(after)}"


def _timer(event: AuditEvent) -> bool:
    """The wait's timer wrote it: a reminder, or the end of a wait with no reply."""
    answer = event.answer or {}
    return bool(answer.get("reminder") or answer.get("no_reply"))


@register.filter
def audit_who(event: AuditEvent) -> str:
    """Who an audit entry is by: a user, the customer (their reply has no user), or the desk."""
    if event.actor:
        return event.actor.username
    if _timer(event):
        return "the desk (the wait's timer)"
    if event.action == AuditEvent.Action.REPLY:
        return "the customer"
    return "the desk"


@register.filter
def audit_what(event: AuditEvent) -> str:
    """What an audit entry is, named by what happened: an ask, a reminder, a reply, no reply."""
    answer = event.answer or {}
    if event.action == AuditEvent.Action.ASK and answer.get("reminder"):
        return "Reminded the customer of the question"
    if event.action == AuditEvent.Action.REPLY and answer.get("no_reply"):
        return "No reply from the customer"
    if event.action == AuditEvent.Action.REPLY and not answer.get("resumed"):
        return "A reply that resumed nothing"
    return event.get_action_display()


@register.filter
def audit_asking(event: AuditEvent) -> str:
    """The details of a question or a reply: what was asked, what the customer wrote, what the
    end of a wait did ("" for other entries)."""
    answer = event.answer or {}
    if event.action == AuditEvent.Action.ASK:
        return f"“{answer['question']}”" if answer.get("question") else ""
    if event.action != AuditEvent.Action.REPLY:
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
