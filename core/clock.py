"""How the desk says a moment or a day: one format everywhere, in the reviewer's time zone,
labelled with it: "Dec 1, 2026, 22:12 JST". `day_words` needs no Django: the graph uses it too."""

from __future__ import annotations

from datetime import date, datetime


def local_words(moment: datetime, *, seconds: bool = False) -> str:
    """A moment in the active time zone: "Dec 1, 2026, 22:12 JST" (`seconds`: "22:12:05")."""
    from django.utils import timezone

    local = timezone.localtime(moment)
    clock = f"{local:%H:%M:%S}" if seconds else f"{local:%H:%M}"
    return f"{day_words(local.date())}, {clock} {local.tzname()}"


def day_words(day: date | str, *, year: bool = True) -> str:
    """A date, or an ISO date string (graph state is JSON): "Dec 1, 2026" ("Dec 1" without the
    year); anything else is shown as it is, never an error on a page."""
    try:
        read = date.fromisoformat(day) if isinstance(day, str) else day
    except ValueError:
        return str(day)
    return f"{read:%b} {read.day}, {read.year}" if year else f"{read:%b} {read.day}"
