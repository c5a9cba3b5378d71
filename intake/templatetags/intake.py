"""How a reading reads on the desk: the reason in words, who read it."""

from __future__ import annotations

from django import template

from refunds import policy

register = template.Library()

# The reading's fields a reviewer checks against the customer's words, in the card's order.
QUOTED = (
    ("reason", "Reason"),
    ("orders", "Orders"),
    ("amount", "Amount"),
    ("language", "Language"),
)


@register.filter
def reason_words(reason: str | None) -> str:
    """ "damaged" -> "Damaged"; an unknown value is shown as it is, never hidden."""
    return policy.REASONS.get(reason or "", reason or "—")


@register.filter
def read_by_words(reading: dict | None) -> str:
    """ "Read by rules" or "Read by anthropic:claude-…": who read the message."""
    who = (reading or {}).get("read_by") or "rules"
    return f"Read by {who}"


@register.filter
def quoted(reading: dict | None) -> list[tuple[str, str]]:
    """(label, the customer's words) for each field the reader quoted."""
    quotes = (reading or {}).get("quotes") or {}
    known = [(label, quotes[key]) for key, label in QUOTED if quotes.get(key)]
    others = [(k.capitalize(), v) for k, v in quotes.items() if k not in dict(QUOTED) and v]
    return known + others


# How each way in reads after "Opened by agent2 from …" on the ticket's page.
SOURCES = {
    "desk": "a pasted message",
    "api": "a message sent to the API",
    "email": "a customer's email",
}


@register.filter
def message_source(message) -> str:
    """ "a pasted message": the way a customer's message came in, in words."""
    return SOURCES.get(message.channel, "a customer's message")
