from django import template

register = template.Library()


@register.filter
def dollars(cents: int | None) -> str:
    return "" if cents is None else f"${cents / 100:,.2f}"


@register.filter
def status_class(status: str) -> str:
    return f"status status-{status}"
