"""Why the customer writes, for the rules reader (intake/reader/rules.py): a reason's words, a
refund asked after or asked for without a reason, lateness said by two dates or days, a typo one
edit away from a reason's word; each with the customer's words and the sentence they are in."""

from __future__ import annotations

import re
from functools import cache

from intake.reader import vocabulary
from intake.reader.text import MONTHS, WORD, Folded, Part, fold, sentence_around
from refunds import policy

_NEGATION_BEFORE = re.compile(r"\b(?:" + vocabulary.NEGATIONS + r")\W+(?:\w+\W+)?$")
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
def reason_patterns() -> list[tuple[str, re.Pattern[str]]]:
    return [
        (reason, re.compile(r"(?<![\w'])(?:" + "|".join(phrases) + r")(?![\w])"))
        for reason, phrases in vocabulary.REASON_PHRASES
    ]


# --- the reason ---------------------------------------------------------------------------------
def no_reason() -> tuple[str, str, str]:
    return policy.NOT_REFUND, "", ""


def reason_in(parts: list[Part]) -> tuple[str, str, str] | None:
    """(reason, the words that said it, the sentence they are in), or None when nothing in
    these parts says why the customer writes."""
    for reason, pattern in reason_patterns():
        for part in parts:
            for match in pattern.finditer(part.folded.text):
                if reason in vocabulary.NEGATABLE and negated(part.folded.text, match.start()):
                    continue
                return reason, *_said(part.folded, match.start(), match.end())
    for part in parts:
        if hit := late_by_dates(part.folded):
            return hit
    for part in parts:
        if hit := fuzzy(part.folded):
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


def late_by_dates(folded: Folded) -> tuple[str, str, str] | None:
    """Lateness told by what was expected and when it came ("due on the 3rd, got here on the
    11th", "meant to arrive Monday, turned up Friday"), with no word like "late": the day it
    came is later than the day expected. Dates that say it came in time are no lateness."""
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
            if came_kind == kind and on <= was and not later_week:
                return None  # it came by the day promised
            return (
                policy.LATE_DELIVERY,
                *_said(folded, expected.start(), came.end()),
            )
    return None


def status_in(parts: list[Part]) -> tuple[str, str, str] | None:
    """Asks where a refund already asked for is ("where is my refund?", "I haven't received
    my refund yet"): read before the reasons, whose "haven't received" it would be."""
    for part in parts:
        if found := _REFUND_STATUS.search(part.folded.text):
            return policy.REFUND_STATUS, *_said(part.folded, found.start(), found.end())
    return None


def agreed_status(newest: list[Part]) -> tuple[str, str, str] | None:
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
    if reason_in([Part(fold("".join(pieces) + body.text[at:]))]):
        return None
    clause, said = agreed[0]
    return policy.REFUND_STATUS, *_said(body, clause.start() + said.start(), clause.end())


def asked_in(parts: list[Part]) -> tuple[str, str, str] | None:
    """Money asked back without a reason ("another request"), a thanks for a refund already
    made ("not about a refund"), or a typo of "refund"."""
    for part in parts:
        text = part.folded.text
        if (done := _REFUND_DONE.search(text)) and not asking(text, done.end()):
            return policy.NOT_REFUND, *_said(part.folded, done.start(), done.end())
        if asked := asking(text):
            return policy.OTHER_REQUEST, *_said(part.folded, asked.start(), asked.end())
        if not_asked := _NOT_ASKING.search(text):
            return policy.NOT_REFUND, *_said(part.folded, not_asked.start(), not_asked.end())
        if typo := fuzzy(part.folded, asked=True):
            return typo
    return None


# "refund" that names us, not a request: "Dear Refund Desk", "refunds@shop.example". An address's
# local part is at most 64 characters (RFC 5321): unbounded, "refund-refund-...@" read the rest
# of the message once for each "refund" in it.
_OUR_NAME = re.compile(r"\s*(?:desk|team|department|dept)\b|[\w.+-]{0,64}@")


def asking(text: str, start: int = 0) -> re.Match[str] | None:
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


def negated(text: str, start: int) -> bool:
    return bool(_NEGATION_BEFORE.search(text[max(0, start - 30) : start]))


def fuzzy(folded: Folded, *, asked: bool = False) -> tuple[str, str, str] | None:
    """A typo one edit away from a reason's word ("damged", "brokem"), or with `asked` from a
    word that asks for money back ("refudn": another request)."""
    for token in WORD.finditer(folded.text):
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
            if not negated(folded.text, token.start()):
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
