"""How a reading reads on the desk."""

from __future__ import annotations

from django import template
from django.conf.locale import LANG_INFO

from intake.reading import sureness
from refunds import policy

register = template.Library()
register.filter("sureness", sureness)  # 0.75 -> "75%": how sure the reader was

# The card names the language instead of quoting its evidence words ("hi, my, the").
QUOTED = ("reason", "orders", "amount")  # first, in the card's order


@register.filter
def reason_words(reason: str | None) -> str:
    """ "damaged" -> "Damaged"; an unknown value is shown as it is, never hidden."""
    return policy.REASONS.get(reason or "", reason or "—")


@register.filter
def read_by_words(reading: dict | None) -> str:
    """ "Read by classifier" or "Read by anthropic:claude-…": who read the message (readings
    made before issue 47 say "rules")."""
    who = (reading or {}).get("read_by") or "rules"
    return f"Read by {who}"


@register.filter
def language_name(code: str | None) -> str:
    """ "es" -> "Spanish": the language by its name; an unknown code is shown as it is."""
    info = LANG_INFO.get((code or "").lower().split("-")[0])
    return info["name"] if info and "name" in info else (code or "—")


def _plain(words: str) -> str:
    return " ".join(words.lower().split()).strip(" .,:;!?")


@register.filter
def summary_said(reading: dict | None) -> str:
    """The summary without the "Late delivery, order 1044:" that the card's line gives."""
    reading = reading or {}
    summary = reading.get("summary") or ""
    head, sep, rest = summary.partition(":")
    if sep and _plain(head).startswith(_plain(reason_words(reading.get("reason")))):
        return "" if _plain(rest) in ("", _plain(head)) else rest.strip()
    return summary


@register.filter
def quoted(reading: dict | None) -> list[tuple[str, str]]:
    """(label, the customer's words) for each quote the summary does not already hold."""
    reading = reading or {}
    quotes = reading.get("quotes") or {}
    shown = _plain(reading.get("summary") or "")
    keys = [*QUOTED, *(k for k in quotes if k not in QUOTED and k != "language")]
    said = [(k.capitalize(), quotes[k]) for k in keys if quotes.get(k)]
    return [(label, words) for label, words in said if _plain(words) not in shown]


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
