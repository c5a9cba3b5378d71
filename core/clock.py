"""How the desk says a moment or a day: one format everywhere (pages, the history, the customer
page, review text, messages and emails), in the time zone active for the request (the
reviewer's), labelled with it: "Dec 1, 2026, 22:12 JST"; a plain date as "Dec 1, 2026". The
audit CSV keeps ISO 8601 in UTC on purpose: it is read by programs.

`day_words` needs no Django, so the graph (refunds/flow/, Django-free) uses it too; Django is
imported only where a moment is put in the reviewer's zone.
"""

from __future__ import annotations

from datetime import date, datetime


def local_words(moment: datetime, *, seconds: bool = False) -> str:
    """A moment in the active time zone: "Dec 1, 2026, 22:12 JST"; with `seconds` for a
    deadline seconds away (an undo's grace): "Dec 1, 2026, 22:12:05 JST"."""
    from django.utils import timezone

    local = timezone.localtime(moment)
    clock = f"{local:%H:%M:%S}" if seconds else f"{local:%H:%M}"
    return f"{day_words(local.date())}, {clock} {local.tzname()}"


def day_words(day: date | str, *, year: bool = True) -> str:
    """A date: "Dec 1, 2026" ("Dec 1" where the year goes without saying: a plot's axis). An ISO
    date string (graph state is JSON) is read first; anything else is shown as it is, never an
    error on a page."""
    if isinstance(day, str):
        try:
            read = date.fromisoformat(day)
        except ValueError:
            return day
    else:
        read = day
    return f"{read:%b} {read.day}, {read.year}" if year else f"{read:%b} {read.day}"
