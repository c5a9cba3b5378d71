"""Lateness told by two days, the one promised and the one it came ("due on the 3rd, got here
on the 11th", "meant to arrive Monday, turned up Friday"): a comparison of numbers, which a rule
makes right and a classifier of words cannot."""

from __future__ import annotations

import re

from intake.reader import vocabulary
from intake.reader.text import MONTHS, Folded, sentence_around

_NEGATION_BEFORE = re.compile(r"\b(?:" + vocabulary.NEGATIONS + r")\W+(?:\w+\W+)?$")
_EXPECTED = re.compile(r"(?<![\w'])(?:" + vocabulary.EXPECTED + r")(?!\w)")
_ARRIVED = re.compile(r"(?<![\w'])(?:" + vocabulary.ARRIVED + r")(?!\w)")
_WEEKDAY_INDEX = {name: i for i, names in enumerate(vocabulary.WEEKDAYS) for name in names}
_DAY = re.compile(
    r"(?<![\w'])(?P<weekday>" + "|".join(_WEEKDAY_INDEX) + r")(?:-feira)?(?!\w)"
    r"|(?<![\w.,/:-])(?P<ordinal>\d{1,2})(?:st|nd|rd|th|er|eme|o|º)(?!\w)"
    r"|(?:(?<![\w'])(?:the|on|by|el|le|il|l'|am|dia|al|den|du)\s*)(?P<after>\d{1,2})(?!\d|[,/:-]\d)"
    r"(?!\s?(?:€|\$|£|%|days?|dias|jours|tage|giorni|weeks?))"
    r"|(?<![\w.,/:-])(?P<dated>\d{1,2})\.?\s+(?:de\s+)?(?:" + MONTHS + r")\b"
    r"|\b(?:" + MONTHS + r")\s+(?P<month_first>\d{1,2})(?:st|nd|rd|th)?(?!\d)"
)
_NEXT_WEEK = re.compile(r"\b(?:" + vocabulary.NEXT_WEEK + r")\b")


def _day(match: re.Match[str]) -> tuple[str, int]:
    """("weekday", 0-6) or ("date", 1-31)."""
    if match["weekday"]:
        return "weekday", _WEEKDAY_INDEX[match["weekday"]]
    number = match["ordinal"] or match["after"] or match["dated"] or match["month_first"]
    return "date", int(number)


def late_by_dates(folded: Folded) -> tuple[bool, str] | None:
    """Lateness told by what was expected and when it came ("due on the 3rd, got here on the
    11th", "meant to arrive Monday, turned up Friday"), with no word like "late": (True, the
    words) when the day it came is later than the day expected, (False, the words) when it came
    by the day promised, None when no two days say."""
    text = folded.text
    for expected in _EXPECTED.finditer(text):
        # The day promised: the nearest after the promise, or just before it ("Montag
        # angekündigt"); then the arrival after both, and its day close behind.
        window = text[max(0, expected.start() - 40) : expected.end() + 120]
        offset = max(0, expected.start() - 40)
        days = [d for d in _DAY.finditer(window) if not negated(window, d.start())]
        if not days:
            continue
        first_arrival = _ARRIVED.search(text, expected.end(), expected.end() + 120)
        until = first_arrival.start() if first_arrival else len(text)
        before = [d for d in days if d.end() + offset <= expected.start()]
        after = [d for d in days if expected.end() <= d.start() + offset < until]
        if not before and not after:
            continue
        promised = after[0] if after else before[-1]
        since = max(expected.end(), promised.end() + offset)
        for arrived in _ARRIVED.finditer(text, since, since + 120):
            if negated(text, arrived.start()):
                continue
            came = _DAY.search(text, arrived.end(), arrived.end() + 40)
            if came is None:
                continue
            kind, was = _day(promised)
            came_kind, on = _day(came)
            later_week = bool(_NEXT_WEEK.search(text, arrived.end(), came.end() + 25))
            in_time = came_kind == kind and on <= was and not later_week
            return not in_time, said(folded, expected.start(), came.end())[0]
    return None


def negated(text: str, start: int) -> bool:
    return bool(_NEGATION_BEFORE.search(text[max(0, start - 30) : start]))


def said(folded: Folded, start: int, end: int) -> tuple[str, str]:
    """(the customer's words behind folded[start:end], the sentence they are in)."""
    first, last = folded.span(start, end)
    return folded.original[first:last], sentence_around(folded.original, first, last)
