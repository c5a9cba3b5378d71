"""Filters for customer emails: amounts and lists as the desk says them."""

from __future__ import annotations

from django import template
from django.utils.text import get_text_list
from django.utils.translation import gettext, pgettext_lazy

from refunds import emails, policy
from refunds.flow.words import dollars

register = template.Library()
register.filter("dollars", dollars)
register.filter("language_name", emails.language_name)  # "Spanish" for "es", for the desk


@register.filter
def and_list(items: list[str]) -> str:
    """ "1042, 1044 and 1047", with "and" in the language being written."""
    return str(get_text_list([str(i) for i in items], gettext("and")))


@register.filter
def first_name(name: str) -> str:
    """ "Chloe" for "Chloe Martin": every email greets the customer the same way."""
    return (str(name or "").split() or [""])[0]


# What the customer reported, in their words (policy.REASONS are the desk's labels).
REASON_WORDS = {
    policy.DAMAGED: pgettext_lazy("what the customer reported", "damaged"),
    policy.NOT_RECEIVED: pgettext_lazy("what the customer reported", "not received"),
    policy.WRONG_ITEM: pgettext_lazy("what the customer reported", "wrong item"),
    policy.OTHER_REQUEST: pgettext_lazy("what the customer reported", "another request"),
    policy.LATE_DELIVERY: pgettext_lazy("what the customer reported", "late delivery"),
}


@register.filter
def reason_words(reason: str) -> str:
    """ "damaged" for policy.DAMAGED, in the language being written."""
    return str(REASON_WORDS.get(reason, reason))
