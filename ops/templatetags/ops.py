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
def amount_change(event: AuditEvent) -> str:
    """ "amount $6.99 → $5.00", or "amount set to $5.00" when the entry does not say what it was."""
    after = (event.answer or {}).get("amount_cents")
    if not after:
        return ""
    seen = event.seen or {}
    before = seen.get("amount_cents") or (seen.get("review") or {}).get("amount_cents")
    if not before:
        return f"amount set to {dollars(after)}"
    return f"amount {dollars(before)} → {dollars(after)}"
