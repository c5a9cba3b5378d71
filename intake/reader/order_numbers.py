"""The order numbers in one part of a message, for the reader's rules (intake/reader/rules.py):
after "order" or "#", in a list, spelled in words or digits set apart, a few words after "order",
bare in the subject, or the one number standing alone in the body; never a date, a time, a phone
number, an amount or a tracking number."""

from __future__ import annotations

import bisect
import itertools
import re
from collections.abc import Callable
from dataclasses import dataclass

from intake.reader import vocabulary
from intake.reader.text import MONTHS, WORD, Part

_ID = r"(?:[a-z]{1,3}-?)?\d{3,12}"
_ORDER_LED = re.compile(
    r"(?<![\w#])(?:" + "|".join(vocabulary.ORDER_WORDS) + r")\b" + vocabulary.ORDER_FILLER
    + r"(?:#\s?)?(?P<first>" + _ID + r")\b(?P<more>(?:" + vocabulary.LIST_JOINERS + r"#?\s?"
    + _ID + r"\b)*)"
)  # fmt: skip
# "my last three orders were all late: 1042, 1044 and 1047": a few words between the order word
# and a colon that opens the numbers (letters only: nothing between holds a number).
_ORDER_COLON = re.compile(
    r"(?<![\w#])(?:" + "|".join(vocabulary.ORDER_WORDS) + r")\b(?:\s+[a-z']+){1,5}\s*:\s*"
    + r"(?:#\s?)?(?P<first>" + _ID + r")\b(?P<more>(?:" + vocabulary.LIST_JOINERS + r"#?\s?"
    + _ID + r"\b)*)"
)  # fmt: skip
_DIGIT_WORD = r"(?:" + "|".join(sorted(vocabulary.DIGIT_WORDS, key=len, reverse=True)) + r")\b"
# After "order" (or "#"): three or more digits in words, or groups of digits set apart whose
# first group is too short to be an order number on its own ("10 52", "1 0 5 2").
_ORDER_SPELLED = re.compile(
    r"(?:(?<![\w#])(?:" + "|".join(vocabulary.ORDER_WORDS) + r")\b" + vocabulary.ORDER_FILLER
    + r"(?:#\s?)?|#\s?)(?P<spelled>" + _DIGIT_WORD + r"(?:(?:\s*-\s*|\s+)" + _DIGIT_WORD
    + r"){2,11}(?![\w-])|\d{1,2}(?: \d{1,4}){1,5}(?!\w|[.,:/-]\d))"
)  # fmt: skip
# "order" or "#", then up to twelve words without a number of three digits or more, then one.
# Possessive: a word is taken whole, never split into letters tried one way after another.
_ORDER_FAR = re.compile(
    r"(?:(?<![\w#])(?:" + "|".join(vocabulary.ORDER_WORDS) + r")\b|(?<![\w&])#(?!\s?\d))"
    + r"(?:[^\w\n]*+(?:[^\W\d]++|\d{1,2}+(?!\d))){1,12}?[^\w\n]*+"
    + r"(?<![\w#$€£.,:/-])(?P<far>\d{3,12})(?!\w|[.,:/-]\d|\s?(?:€|\$|£|%))"
)  # fmt: skip
_HASH = re.compile(r"(?<![\w&])#\s?(?P<first>" + _ID + r")\b")
_ANY_ID = re.compile(r"#?\s?(" + _ID + r")\b")
_NOT_ORDER_BEFORE = re.compile(
    r"(?:\b(?:" + vocabulary.NOT_ORDER_WORDS + r")\b)\W*(?:\w+\W+)?(?:number|no|nr|num|n[o°º])?\W*"
    r"(?:(?:is|was|es|est|ist|e|era)\W+)?$"
)
_SUBJECT_BARE = re.compile(r"(?<![\w#$€£.,:/-])(\d{3,12})(?![\w.,:/-]|\s?(?:€|\$|£|%))")
# Numbers that are something else: dates, times, phone numbers, amounts, decimals, long codes.
_NOT_ORDERS = re.compile(
    r"\b\d{1,4}[./-]\d{1,2}[./-]\d{2,4}\b"  # 12/03/2024, 2024-03-12, 3.12.24
    r"|\b\d{1,2}:\d{2}\b"  # 10:42
    r"|\+\d[\d\s().-]{6,20}\d"  # +1 (555) 123-4567
    r"|\(\d{2,4}\)\s?\d{3,4}[\s.-]?\d{3,4}"  # (555) 123 4567
    r"|\b\d{3}[\s.-]\d{3}[\s.-]\d{4}\b"  # 555-123-4567
    r"|\b0\d{2,4}[\s/-]\d{3,12}[\s/-]?\d{0,12}\b"  # 030 1234567, 06-12345678
    r"|(?:us\$|r\$|\$|€|£)\s?\d[\d.,]{0,15}"  # $1,042.00
    r"|\b\d(?:[\d.,]{0,15}\d)?\s?(?:€|\$|£|%|eur\b|euros?\b|usd\b|dollars?\b|bucks\b|gbp\b|pounds?\b|"
    r"reais\b|kg\b|g\b|cm\b|mm\b|km\b|ml\b|days?\b|weeks?\b|dias\b|jours\b|tage\b|giorni\b)"
    r"|\b\d{1,12}[.,]\d{1,2}\b"  # 6.99, 6,99
    r"|\b1z[0-9a-z]{8,}\b|\b\d{13,}\b|\b[a-z]{2}\d{9}[a-z]{2}\b"  # tracking numbers
)
_YEAR = re.compile(r"^(?:19[5-9]\d|20[0-4]\d)$")
_AFTER_MONTH = re.compile(r"\b(?:" + MONTHS + r")\.?\s*(?:\d{1,2}(?:st|nd|rd|th)?,?\s*)?$")


@dataclass(frozen=True)
class _Hit:
    start: int
    end: int
    number: str
    said: str
    how: str = ""  # "" plainly written; "spelled" in words or digits apart; "far" from "order"


def apart(text: str, hits: list[_Hit]) -> bool:
    """Several numbers in separate places, not one list ("1042, 1044 and 1047")."""
    return any(len(WORD.findall(text[a.end : b.start])) > 3 for a, b in itertools.pairwise(hits))


def orders_in_part(part: Part) -> list[_Hit]:
    text = part.folded.text
    # finditer's matches do not overlap: sorted by start, their ends are sorted too, so the one
    # span that may overlap a hit is found by bisection, not by a scan per hit.
    blocked = [m.span() for m in _NOT_ORDERS.finditer(text)]
    ends = [b1 for _, b1 in blocked]
    hits: list[_Hit] = []

    def keep(start: int, end: int, quoted_from: int, number: str = "", how: str = "") -> None:
        at = bisect.bisect_right(ends, start)  # the first blocked span ending after `start`
        if not (at < len(blocked) and blocked[at][0] < end):
            number = number or part.folded.words_at(start, end).upper()
            said = part.folded.words_at(quoted_from, end).strip()
            hits.append(_Hit(start, end, number, said, how))

    _order_led(text, keep)
    _hashed(text, keep)
    # The weaker readings, each only while nothing stronger was found.
    for weaker in ([_subject_bare] if part.subject else []) + [_spelled, _far, _bare]:
        if hits:
            break
        weaker(text, keep)
    hits.sort(key=lambda h: h.start)
    return hits


_Keep = Callable[..., None]


def _not_a_number(text: str, at: int, number: str) -> bool:
    """A year, a day after a month's name, or a tracking, ticket or flat number."""
    return bool(
        _YEAR.match(number)
        or _AFTER_MONTH.search(text[:at])
        or _NOT_ORDER_BEFORE.search(text[max(0, at - 40) : at])
    )


def _order_led(text: str, keep: _Keep) -> None:
    for match in (*_ORDER_LED.finditer(text), *_ORDER_COLON.finditer(text)):
        first_start, first_end = match.span("first")
        between = text[match.start() : first_start]
        if _YEAR.match(match["first"]) and re.search(
            r"\b(?:de|del|da|di|du|of|from|in)\W*$", between
        ):
            continue  # "pedido de 2024", "my order from 2023": a year
        if _AFTER_MONTH.search(between):
            continue
        keep(first_start, first_end, match.start())
        for extra in _ANY_ID.finditer(text, match.start("more"), match.end("more")):
            keep(*extra.span(1), extra.start())


def _hashed(text: str, keep: _Keep) -> None:
    for match in _HASH.finditer(text):
        if not _NOT_ORDER_BEFORE.search(text[max(0, match.start() - 40) : match.start()]):
            keep(*match.span("first"), match.start())  # not "tracking #9400...", "apt #302"


def _subject_bare(text: str, keep: _Keep) -> None:
    for match in _SUBJECT_BARE.finditer(text):
        if not _not_a_number(text, match.start(), match[1]):
            keep(*match.span(1), match.start(1))


def _bare(text: str, keep: _Keep) -> None:
    """ "refund 1042 please": the one number of three digits or more that nothing else names,
    when nothing says "order"; two such numbers say nothing of which is the order."""
    found = [m for m in _SUBJECT_BARE.finditer(text) if not _not_a_number(text, m.start(), m[1])]
    if len(found) == 1:
        keep(*found[0].span(1), found[0].start(1), "", "bare")


def _spelled(text: str, keep: _Keep) -> None:
    """ "order one oh five two", "order 10 52": the digits in words or set apart."""
    for match in _ORDER_SPELLED.finditer(text):
        digits = _digits(match["spelled"])
        if 3 <= len(digits) <= 12:
            keep(*match.span("spelled"), match.start(), digits, "spelled")


def _far(text: str, keep: _Keep) -> None:
    """ "the order I placed for my mum, 1052": a number a few words after "order" or "#"; the
    first such number only: a second is more likely something else's ("the order came late,
    the tracking number is 9400..." is not one)."""
    for match in _ORDER_FAR.finditer(text):
        if not _not_a_number(text, match.start("far"), match["far"]):
            keep(*match.span("far"), match.start(), how="far")
            return


def _digits(words: str) -> str:
    return "".join(vocabulary.DIGIT_WORDS.get(w, w) for w in re.findall(r"[a-z]+|\d+", words))
