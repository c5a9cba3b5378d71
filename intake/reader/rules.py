"""The rules reader: deterministic, fast, no network. The embedded default, and what takes over
whenever a configured model fails or answers out of shape.

It reads the customer's own newest words first (the subject and the body above any quoted or
forwarded part) and looks into the quoted part only for what the newest words do not say: an
order number that only a forwarded shop email carries, a reason in a forwarded complaint."""

from __future__ import annotations

import bisect
import itertools
import re
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache

from intake.reader import vocabulary
from intake.reader.text import Folded, clean_subject, fold, sentence_around, split_own
from intake.reading import RULES, Reading
from refunds import policy

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
_MONTHS = (
    r"jan|feb|mar|apr|may|jun|jul|aug|sep|sept|oct|nov|dec|january|february|march|april|june|"
    r"july|august|september|october|november|december|enero|febrero|marzo|abril|mayo|junio|"
    r"julio|agosto|septiembre|octubre|noviembre|diciembre|janvier|fevrier|mars|avril|mai|juin|"
    r"juillet|aout|septembre|octobre|novembre|decembre|januar|februar|marz|juni|juli|oktober|"
    r"dezember|janeiro|fevereiro|marco|maio|junho|julho|setembro|outubro|novembro|dezembro|"
    r"gennaio|febbraio|aprile|maggio|giugno|luglio|settembre|ottobre|dicembre"
)
_AFTER_MONTH = re.compile(r"\b(?:" + _MONTHS + r")\.?\s*(?:\d{1,2}(?:st|nd|rd|th)?,?\s*)?$")
_AMOUNT = re.compile(
    r"(?P<before>us\$|r\$|\$|€|£|\beur\b|\busd\b|\bgbp\b)\s?(?P<n1>\d[\d.,\s]{0,15}\d|\d)"
    r"|(?<![\w.,])(?P<n2>\d[\d.,]{0,15}\d|\d)\s?(?P<after>€|\$|£|eur\b|euros?\b|usd\b|dollars?\b|"
    r"bucks\b|gbp\b|pounds?\b|reais\b|quid\b)"
    r"|\b(?P<word>one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|fifteen|"
    r"twenty|thirty|fifty)\s+(?:us\s+)?(?:dollars|bucks|euros|pounds|quid)\b"
)
_NUMBER_WORDS = {
    "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8,
    "nine": 9, "ten": 10, "eleven": 11, "twelve": 12, "fifteen": 15, "twenty": 20,
    "thirty": 30, "fifty": 50,
}  # fmt: skip
_WORD = re.compile(r"[a-z']+")
_NEGATION_BEFORE = re.compile(r"\b(?:" + vocabulary.NEGATIONS + r")\W+(?:\w+\W+)?$")
_GREETING = re.compile(r"^\s*" + vocabulary.GREETINGS + r"[,!:.]*\s*$", re.I)
_REFUND = re.compile(r"\b(?:" + "|".join(vocabulary.REFUND_PHRASES) + r")")
# "Where is my refund": a way of asking after it ("any update on", "still waiting for", "when
# will I get") a few words before the money's name, or the money's name before words that say it
# has not come ("the refund for order 1042 still hasn't arrived").
_MONEY = r"(?:" + vocabulary.REFUND_NOUNS + r")(?!\w)"
_NOUN = re.compile(r"(?<![\w'])" + _MONEY)
_STATUS_SEP = r"[^\w.,;:!?\n$€£]++"  # between words of one clause
_STATUS_GAP = r"(?:" + _STATUS_SEP + r"[\w']++){0,3}?" + _STATUS_SEP
_OF_ORDER = (
    r"(?:\s+(?:for|of|on|from|de|del|da|do|du|des|fur|zu|per|dell'|della|pour|para|der|von)\s+"
    r"(?:[\w']+\s+){0,2}?#?\d{3,12})?\s*,?\s*"
)  # "the refund for order 1042", "el reembolso del pedido 1042"
_REFUND_STATUS = re.compile(
    r"(?<![\w'])(?:" + vocabulary.REFUND_STATUS_PHRASES + r")"
    r"|(?<![\w'])(?:" + vocabulary.REFUND_PROGRESS + "|" + vocabulary.REFUND_WAITING + "|"
    + vocabulary.REFUND_WHEN + r")" + _STATUS_GAP + _MONEY
    + r"|(?<![\w'])" + _MONEY + _OF_ORDER + r"(?:(?:ist|sind|wurde|hat|e|est|ha|foi)\s+)?"
    + r"(?:" + vocabulary.REFUND_NOT_COME + r")(?!\w)"
)  # fmt: skip
_REFUND_AGREED = re.compile(r"(?<![\w'])(?:" + vocabulary.REFUND_AGREED + r")(?!\w)")
_REFUND_PENDING = re.compile(r"(?<![\w'])(?:" + vocabulary.REFUND_PENDING + r")(?!\w)")
_NOT_ON_ACCOUNT = re.compile(r"(?<![\w'])(?:" + vocabulary.REFUND_NOT_ON_ACCOUNT + r")(?!\w)")
_CLAUSE = re.compile(r"(?:[^.!?\n]|[.!?](?!\s))+")  # a sentence: up to a mark before a space
_REFUND_DONE = re.compile(
    r"\b(?:" + vocabulary.REFUND_DONE_PHRASES + r")"
    r"|(?<![\w'])(?:" + vocabulary.REFUND_GOT + r")(?:" + _STATUS_SEP + r"[\w']++){0,2}?"
    + _STATUS_SEP + r"(?:refund\w*|reimburs\w*|money\s+back|reembols\w*|rembours\w*|"
    r"(?:ruck)?erstattung|gutschrift|rimbors\w*)(?!\w)"
    r"|(?<![\w'])(?:refund|reimbursement|reembolso|remboursement|(?:ruck)?erstattung|gutschrift|"
    r"rimborso)" + _OF_ORDER + r"(?:(?:has|have|is|was|already|just|finally|now|ya|bien|e|ist|"
    r"hat|ja|me|se)\s+){0,3}(?:" + vocabulary.REFUND_CAME + r")(?!\w)"
)  # fmt: skip
_NOT_ASKING = re.compile(r"(?<![\w'])(?:" + vocabulary.NOT_ASKING_PHRASES + r")(?!\w)")
_FUZZY = {
    "refund": None, "reimburse": None, "reembolso": None, "remboursement": None,
    "rimborso": None, "erstattung": None, "ruckerstattung": None,
    "damaged": policy.DAMAGED, "broken": policy.DAMAGED, "defective": policy.DAMAGED,
    "cracked": policy.DAMAGED, "smashed": policy.DAMAGED, "beschadigt": policy.DAMAGED,
    "endommage": policy.DAMAGED, "danneggiato": policy.DAMAGED, "danificado": policy.DAMAGED,
    "delayed": policy.LATE_DELIVERY, "verspatet": policy.LATE_DELIVERY,
    "retrasado": policy.LATE_DELIVERY, "atrasado": policy.LATE_DELIVERY,
}  # fmt: skip  # word -> reason (None: asks for money back), for typos one edit away


@cache
def _reason_patterns() -> list[tuple[str, re.Pattern[str]]]:
    return [
        (reason, re.compile(r"(?<![\w'])(?:" + "|".join(phrases) + r")(?![\w])"))
        for reason, phrases in vocabulary.REASON_PHRASES
    ]


@dataclass(frozen=True)
class _Part:
    """One place to read from: the subject, the customer's own words, or the quoted rest."""

    folded: Folded
    subject: bool = False


# What the rules read of a long message: its top, where the newest words are. It bounds the
# time one message may take whatever it holds.
MAX_CHARS = 20_000


def read(*, sender: str, subject: str, body: str) -> Reading:
    subject = clean_subject(subject)[:500]
    own, rest = split_own(body[:MAX_CHARS])
    newest = [_Part(fold(subject), subject=True), _Part(fold(own))]
    older = [_Part(fold(rest))]
    quotes: dict[str, str] = {}

    unsure: list[str] = []
    found = _orders_in(newest)
    if found is None and (found := _orders_in(older)) is not None:
        unsure.append(_doubt("quoted_orders", ", ".join(found.said)))
    orders, said = (found.numbers, found.said) if found else ([], [])
    if found:
        quotes["orders"] = ", ".join(said)
        unsure += found.doubts
    # A reason the newest words name beats one in the quoted part; a named reason anywhere
    # beats a bare "refund please" ("any news? I asked for the fee back" above "it was late").
    # "Where is my refund?" in the body; in the subject only when the words below it say no
    # reason ("Where is my refund?" over "it came late, I'd like the fee back" is a request).
    named = _status_in(newest[1:]) or _agreed_status(newest) or _reason_in(newest)
    if named is None and (named := _reason_in(older)) is not None:
        unsure.append(_doubt("quoted_reason", named[1]))
    named = named or _status_in(newest[:1])
    reason, reason_words, reason_sentence = (
        named or _asked_in(newest) or _asked_in(older) or _none()
    )
    if reason_words:
        quotes["reason"] = reason_sentence
    unsure += _reason_doubts(newest, reason, reason_words, bool(orders))
    # An amount only from the customer's own words: a forwarded receipt's total is the shop's.
    amount, amount_words = _amount_in(newest) or (None, "")
    if amount_words:
        quotes["amount"] = amount_words
    language, language_words = _language(" ".join((subject, own)) if own else f"{subject} {rest}")
    if language_words:
        quotes["language"] = language_words
    return Reading(
        reason=reason,
        orders=orders,
        amount_cents=amount,
        language=language,
        summary=_summary(reason, orders, reason_sentence, f"{own}\n{rest}", subject),
        quotes=quotes,
        read_by=RULES,
        confidence=confidence(unsure),
        unsure=unsure,
    )


# --- order numbers ------------------------------------------------------------------------------
@dataclass(frozen=True)
class _Found:
    numbers: list[str]
    said: list[str]  # the customer's words for each number
    doubts: list[str]  # what makes the reader unsure of them, in words


@dataclass(frozen=True)
class _Hit:
    start: int
    end: int
    number: str
    said: str
    how: str = ""  # "" plainly written; "spelled" in words or digits apart; "far" from "order"


def _orders_in(parts: list[_Part]) -> _Found | None:
    found: list[str] = []
    said: list[str] = []
    seen: set[str] = set()
    doubts: list[str] = []
    for part in parts:
        hits = _orders_in_part(part)
        for hit in hits:
            if hit.number.lower() not in seen:
                seen.add(hit.number.lower())
                found.append(hit.number)
                said.append(hit.said)
                if hit.how:
                    doubts.append(_doubt(hit.how, hit.said))
        if len({h.number.lower() for h in hits}) > 1 and _apart(part.folded.text, hits):
            doubts.append(_doubt("separate", ", ".join(h.number for h in hits)))
    return _Found(found, said, doubts) if found else None


def _apart(text: str, hits: list[_Hit]) -> bool:
    """Several numbers in separate places, not one list ("1042, 1044 and 1047")."""
    return any(len(_WORD.findall(text[a.end : b.start])) > 3 for a, b in itertools.pairwise(hits))


def _orders_in_part(part: _Part) -> list[_Hit]:
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
    for weaker in ([_subject_bare] if part.subject else []) + [_spelled, _far]:
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


# --- the reason ---------------------------------------------------------------------------------
def _none() -> tuple[str, str, str]:
    return policy.NOT_REFUND, "", ""


def _reason_in(parts: list[_Part]) -> tuple[str, str, str] | None:
    """(reason, the words that said it, the sentence they are in), or None when nothing in
    these parts says why the customer writes."""
    for reason, pattern in _reason_patterns():
        for part in parts:
            for match in pattern.finditer(part.folded.text):
                if reason in vocabulary.NEGATABLE and _negated(part.folded.text, match.start()):
                    continue
                return reason, *_said(part.folded, match.start(), match.end())
    for part in parts:
        if hit := _late_by_dates(part.folded):
            return hit
    for part in parts:
        if hit := _fuzzy(part.folded):
            return hit
    return None


# --- lateness said by two dates or days ---------------------------------------------------------
_EXPECTED = re.compile(r"(?<![\w'])(?:" + vocabulary.EXPECTED + r")(?!\w)")
_ARRIVED = re.compile(r"(?<![\w'])(?:" + vocabulary.ARRIVED + r")(?!\w)")
_WEEKDAY_INDEX = {name: i for i, names in enumerate(vocabulary.WEEKDAYS) for name in names}
_DAY = re.compile(
    r"(?<![\w'])(?P<weekday>" + "|".join(_WEEKDAY_INDEX) + r")(?:-feira)?(?!\w)"
    r"|(?<![\w.,/:-])(?P<ordinal>\d{1,2})(?:st|nd|rd|th|er|eme|o|º)(?!\w)"
    r"|(?:(?<![\w'])(?:the|on|by|el|le|il|l'|am|dia|al|den|du)\s*)(?P<after>\d{1,2})(?!\d|[,/:-]\d)"
    r"(?!\s?(?:€|\$|£|%|days?|dias|jours|tage|giorni|weeks?))"
    r"|(?<![\w.,/:-])(?P<dated>\d{1,2})\.?\s+(?:de\s+)?(?:" + _MONTHS + r")\b"
    r"|\b(?:" + _MONTHS + r")\s+(?P<month_first>\d{1,2})(?:st|nd|rd|th)?(?!\d)"
)
_NEXT_WEEK = re.compile(r"\b(?:" + vocabulary.NEXT_WEEK + r")\b")


def _day(match: re.Match[str]) -> tuple[str, int]:
    """("weekday", 0-6) or ("date", 1-31)."""
    if match["weekday"]:
        return "weekday", _WEEKDAY_INDEX[match["weekday"]]
    number = match["ordinal"] or match["after"] or match["dated"] or match["month_first"]
    return "date", int(number)


def _late_by_dates(folded: Folded) -> tuple[str, str, str] | None:
    """Lateness told by what was expected and when it came ("due on the 3rd, got here on the
    11th", "meant to arrive Monday, turned up Friday"), with no word like "late": the day it
    came is later than the day expected. Dates that say it came in time are no lateness."""
    text = folded.text
    for expected in _EXPECTED.finditer(text):
        # The day promised: the nearest after the promise, or just before it ("Montag
        # angekündigt"); then the arrival after both, and its day close behind.
        window = text[max(0, expected.start() - 40) : expected.end() + 120]
        offset = max(0, expected.start() - 40)
        days = [d for d in _DAY.finditer(window) if not _negated(window, d.start())]
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
            if _negated(text, arrived.start()):
                continue
            came = _DAY.search(text, arrived.end(), arrived.end() + 40)
            if came is None:
                continue
            kind, was = _day(promised)
            came_kind, on = _day(came)
            later_week = bool(_NEXT_WEEK.search(text, arrived.end(), came.end() + 25))
            if came_kind == kind and on <= was and not later_week:
                return None  # it came by the day promised
            return (
                policy.LATE_DELIVERY,
                *_said(folded, expected.start(), came.end()),
            )
    return None


def _status_in(parts: list[_Part]) -> tuple[str, str, str] | None:
    """Asks where a refund already asked for is ("where is my refund?", "I haven't received
    my refund yet"): read before the reasons, whose "haven't received" it would be."""
    for part in parts:
        if found := _REFUND_STATUS.search(part.folded.text):
            return policy.REFUND_STATUS, *_said(part.folded, found.start(), found.end())
    return None


def _agreed_status(newest: list[_Part]) -> tuple[str, str, str] | None:
    """Asks after a refund in other words: the money named (here or in the subject) and not
    seen where it would land ("Re: your refund" over "it still isn't on my card"), or a sentence
    that says it was agreed ("you said the money would be back in 5 days") with words that say
    it has not come ("it's been two weeks", "todavía no", "toujours rien"). A reason named
    outside those sentences ("you promised Tuesday; it's still not here; refund please") is a
    new request, not this."""
    body = newest[-1].folded
    if not any(_NOUN.search(part.folded.text) for part in newest):
        return None
    if found := _NOT_ON_ACCOUNT.search(body.text):
        return policy.REFUND_STATUS, *_said(body, found.start(), found.end())
    if not _REFUND_PENDING.search(body.text):
        return None
    agreed = [
        (clause, said)
        for clause in _CLAUSE.finditer(body.text)
        if (said := _REFUND_AGREED.search(clause.group())) and _NOUN.search(clause.group())
    ]
    if not agreed:
        return None
    pieces, at = [], 0
    for clause, _ in agreed:
        pieces += [body.text[at : clause.start()], " "]
        at = clause.end()
    if _reason_in([_Part(fold("".join(pieces) + body.text[at:]))]):
        return None
    clause, said = agreed[0]
    return policy.REFUND_STATUS, *_said(body, clause.start() + said.start(), clause.end())


def _asked_in(parts: list[_Part]) -> tuple[str, str, str] | None:
    """Money asked back without a reason ("another request"), a thanks for a refund already
    made ("not about a refund"), or a typo of "refund"."""
    for part in parts:
        text = part.folded.text
        if (done := _REFUND_DONE.search(text)) and not _asking(text, done.end()):
            return policy.NOT_REFUND, *_said(part.folded, done.start(), done.end())
        if asked := _asking(text):
            return policy.OTHER_REQUEST, *_said(part.folded, asked.start(), asked.end())
        if not_asked := _NOT_ASKING.search(text):
            return policy.NOT_REFUND, *_said(part.folded, not_asked.start(), not_asked.end())
        if typo := _fuzzy(part.folded, asked=True):
            return typo
    return None


# "refund" that names us, not a request: "Dear Refund Desk", "refunds@shop.example". An address's
# local part is at most 64 characters (RFC 5321): unbounded, "refund-refund-...@" read the rest
# of the message once for each "refund" in it.
_OUR_NAME = re.compile(r"\s*(?:desk|team|department|dept)\b|[\w.+-]{0,64}@")


def _asking(text: str, start: int = 0) -> re.Match[str] | None:
    """The first words from `start` that ask for money back; not those that say none is
    needed or ask how refunds work ("no refund needed after all", "your refund policy")."""
    not_asked = [m.span() for m in _NOT_ASKING.finditer(text)]
    return next(
        (
            m for m in _REFUND.finditer(text, start)
            if not _names_us(text, m) and not any(a <= m.start() < b for a, b in not_asked)
        ),
        None,
    )  # fmt: skip


def _names_us(text: str, match: re.Match[str]) -> bool:
    before = text[max(0, match.start() - 1) : match.start()]
    return before in ("@", ".") or bool(_OUR_NAME.match(text, match.end()))


def _negated(text: str, start: int) -> bool:
    return bool(_NEGATION_BEFORE.search(text[max(0, start - 30) : start]))


def _fuzzy(folded: Folded, *, asked: bool = False) -> tuple[str, str, str] | None:
    """A typo one edit away from a reason's word ("damged", "brokem"), or with `asked` from a
    word that asks for money back ("refudn": another request)."""
    for token in _WORD.finditer(folded.text):
        word = token.group()
        if len(word) < 6:
            continue
        for target, reason in _FUZZY.items():
            if (reason is None) != asked or word == target or not _one_edit(word, target):
                continue
            if reason is None:
                if _names_us(folded.text, token):
                    continue
                return policy.OTHER_REQUEST, *_said(folded, token.start(), token.end())
            if not _negated(folded.text, token.start()):
                return reason, *_said(folded, token.start(), token.end())
    return None


def _one_edit(a: str, b: str) -> bool:
    """Damerau-Levenshtein distance 1 (a letter added, dropped, changed, or two swapped)."""
    if abs(len(a) - len(b)) > 1:
        return False
    if len(a) == len(b):
        diff = [i for i in range(len(a)) if a[i] != b[i]]
        return len(diff) == 1 or (
            len(diff) == 2 and diff[1] == diff[0] + 1 and a[diff[0]] == b[diff[1]]
            and a[diff[1]] == b[diff[0]]
        )  # fmt: skip
    short, long = (a, b) if len(a) < len(b) else (b, a)
    return any(long[:i] + long[i + 1 :] == short for i in range(len(long)))


def _said(folded: Folded, start: int, end: int) -> tuple[str, str]:
    first, last = folded.span(start, end)
    return folded.original[first:last], sentence_around(folded.original, first, last)


# --- how sure --------------------------------------------------------------------------------
# What lowers the reader's confidence, by how much, and how a reviewer reads it.
DOUBTS: dict[str, tuple[float, str]] = {
    "separate": (0.35, "several order numbers in separate places ({})"),
    "far": (0.25, 'the order number stands apart from "order" or "#" ("{}")'),
    "spelled": (0.2, 'the order number was read from words or digits set apart ("{}")'),
    "quoted_orders": (0.15, "the order number is only in the quoted or forwarded part ({})"),
    "quoted_reason": (0.2, 'the reason is only in the quoted or forwarded part ("{}")'),
    "typo": (0.2, 'the reason was read from a misspelt word ("{}")'),
    "dates": (0.15, 'lateness was read from two dates, not from words saying it ("{}")'),
    "conflict": (0.15, "the message also reads as {}"),
    "no_reason": (0.3, "an order number is named but no words say why the customer writes"),
}


def _doubt(kind: str, words: str) -> str:
    return DOUBTS[kind][1].format(" ".join(words.split())[:80])


def confidence(unsure: list[str]) -> float:
    """1 less what each doubt costs, never below 0."""
    by_words = {template.split("{")[0]: cost for cost, template in DOUBTS.values()}
    cost = sum(next((c for head, c in by_words.items() if u.startswith(head)), 0.0) for u in unsure)
    return round(max(0.0, 1.0 - cost), 2)


def _reason_doubts(newest: list[_Part], reason: str, words: str, has_orders: bool) -> list[str]:
    """What makes the reason unsure: none named, a typo, two dates, another reason named too."""
    if reason == policy.NOT_REFUND and not words:
        return [_doubt("no_reason", "")] if has_orders else []
    named = {
        r for r, p in _reason_patterns() for x in newest
        if any(
            r not in vocabulary.NEGATABLE or not _negated(x.folded.text, m.start())
            for m in p.finditer(x.folded.text)
        )
    }  # fmt: skip
    doubts: list[str] = []
    if reason in policy.TICKET_REASONS and reason not in named and words:
        dated = reason == policy.LATE_DELIVERY and any(_late_by_dates(x.folded) for x in newest)
        if dated:
            doubts.append(_doubt("dates", words))
        elif reason != policy.OTHER_REQUEST and any(_fuzzy(x.folded) for x in newest):
            doubts.append(_doubt("typo", words))
    # A wrong item or a parcel that never came, named beside another reason: which is it?
    others = named & {policy.WRONG_ITEM, policy.NOT_RECEIVED} - {reason}
    if reason in policy.TICKET_REASONS and others:
        said = " and ".join(policy.REASONS[r].lower() for r in sorted(others))
        doubts.append(_doubt("conflict", said))
    return doubts


# --- the amount ---------------------------------------------------------------------------------
AMOUNTS_READ = 20


def _amount_in(parts: list[_Part]) -> tuple[int, str] | None:
    for part in parts:
        text = part.folded.text
        # A person names a few amounts; the first AMOUNTS_READ bound the sentences looked at
        # (a pasted statement of thousands of "$5" took a second per 700 of them).
        amounts = (m for m in _AMOUNT.finditer(text) if _cents(m) is not None)
        found = list(itertools.islice(amounts, AMOUNTS_READ))
        if not found:
            continue
        # Of several amounts ("I paid $49.99 ... the $6.99 delivery back"), the first in a
        # sentence that asks for money back.
        asked = (m for m in found if _asking(_sentence_of(text, m.start(), m.end())))
        chosen = next(asked, found[0])
        cents = _cents(chosen)
        assert cents is not None
        return cents, part.folded.words_at(*chosen.span()).strip()
    return None


def _sentence_of(text: str, start: int, end: int) -> str:
    return sentence_around(text, start, end, limit=400)


def _cents(match: re.Match[str]) -> int | None:
    if match["word"]:
        return _NUMBER_WORDS[match["word"]] * 100
    raw = re.sub(r"\s", "", match["n1"] or match["n2"] or "")
    decimal = re.search(r"[.,](\d{1,2})$", raw)
    whole = raw[: decimal.start()] if decimal else raw
    if re.search(r"[.,]", whole) and not re.fullmatch(r"\d{1,3}(?:[.,]\d{3})+", whole):
        return None  # "1.2.3 €" is no amount
    digits = re.sub(r"[.,]", "", whole)
    if not digits or len(digits) > 7:
        return None
    fraction = (decimal.group(1) + "0")[:2] if decimal else "00"
    return int(digits) * 100 + int(fraction)


# --- the language -------------------------------------------------------------------------------
def _language(text: str) -> tuple[str, str]:
    """ISO 639-1 code by the commonest small words; English when nothing tells."""
    tokens = re.findall(r"[a-z]+(?:'[a-z]+)?", fold(text).text)
    best, best_hits = "en", 0
    said: dict[str, list[str]] = {}
    for language, stopwords in vocabulary.STOPWORDS.items():
        hits = [t for t in tokens if t in stopwords]
        said[language] = hits
        distinct = len(set(hits))
        if distinct > best_hits or (distinct == best_hits and language == "en"):
            best, best_hits = language, distinct
    picked = list(dict.fromkeys(said.get(best, [])))[:5]
    return best, ", ".join(picked)


def _says_something(line: str) -> bool:
    """Not a greeting, a separator ("-----"), or a mail header ("From: ...")."""
    if _GREETING.match(line) or _HEADER.match(line):
        return False
    return len(re.findall(r"\w+", line)) >= 2 and not _OPENERS_LINE.match(fold(line).text)


_HEADER = re.compile(
    r"^(?:from|to|cc|sent|date|subject|de|para|objet|von|an|betreff|da|a|"
    r"oggetto|asunto|assunto|envoye|gesendet|enviado|inviato)\s*:",
    re.I,
)
_OPENERS_LINE = re.compile(r"^\W*(?:" + "|".join(vocabulary.QUOTE_OPENERS) + ")", re.I)


# --- the summary --------------------------------------------------------------------------------
def _summary(reason: str, orders: list[str], sentence: str, text: str, subject: str) -> str:
    """One line: the reason, the orders, and the customer's own sentence that says why."""
    if not sentence:
        lines = [line.strip() for line in text.splitlines() if line.strip()]
        body = next((line for line in lines if _says_something(line)), "")
        sentence = body or subject
    head = policy.REASONS[reason]
    if orders:
        head += f", order{'s' if len(orders) > 1 else ''} {', '.join(orders)}"
    line = f"{head}: {sentence}" if sentence else head
    line = " ".join(line.split())
    return line if len(line) <= 200 else line[:199].rstrip() + "…"
