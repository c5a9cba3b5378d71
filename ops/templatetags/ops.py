from django import template

from ops import selectors
from refunds import permissions

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
