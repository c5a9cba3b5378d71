from django import template

from refunds import permissions

register = template.Library()


@register.filter
def reads_insights(user) -> bool:
    return permissions.can_read_insights(user)
