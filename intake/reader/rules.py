"""The rules reader: deterministic, fast, no network. The embedded default, and what takes over
whenever a configured model fails or answers out of shape.

It reads the customer's own newest words first (the subject and the body above any quoted or
forwarded part) and looks into the quoted part only for what the newest words do not say: an
order number that only a forwarded shop email carries, a reason in a forwarded complaint."""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass

from intake.reader import vocabulary
from intake.reader.order_numbers import apart, orders_in_part
from intake.reader.reasons import (
    agreed_status,
    asked_in,
    asking,
    fuzzy,
    late_by_dates,
    negated,
    no_reason,
    reason_in,
    reason_patterns,
    status_in,
)
from intake.reader.text import Part, clean_subject, fold, sentence_around, split_own
from intake.reading import RULES, Reading
from refunds import policy

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
_GREETING = re.compile(r"^\s*" + vocabulary.GREETINGS + r"[,!:.]*\s*$", re.I)


# What the rules read of a long message: its top, where the newest words are. It bounds the
# time one message may take whatever it holds.
MAX_CHARS = 20_000


def read(*, sender: str, subject: str, body: str) -> Reading:
    subject = clean_subject(subject)[:500]
    own, rest = split_own(body[:MAX_CHARS])
    newest = [Part(fold(subject), subject=True), Part(fold(own))]
    older = [Part(fold(rest))]
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
    named = status_in(newest[1:]) or agreed_status(newest) or reason_in(newest)
    if named is None and (named := reason_in(older)) is not None:
        unsure.append(_doubt("quoted_reason", named[1]))
    named = named or status_in(newest[:1])
    reason, reason_words, reason_sentence = (
        named or asked_in(newest) or asked_in(older) or no_reason()
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


def _orders_in(parts: list[Part]) -> _Found | None:
    found: list[str] = []
    said: list[str] = []
    seen: set[str] = set()
    doubts: list[str] = []
    for part in parts:
        hits = orders_in_part(part)
        for hit in hits:
            if hit.number.lower() not in seen:
                seen.add(hit.number.lower())
                found.append(hit.number)
                said.append(hit.said)
                if hit.how:
                    doubts.append(_doubt(hit.how, hit.said))
        if len({h.number.lower() for h in hits}) > 1 and apart(part.folded.text, hits):
            doubts.append(_doubt("separate", ", ".join(h.number for h in hits)))
    return _Found(found, said, doubts) if found else None


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


def _reason_doubts(newest: list[Part], reason: str, words: str, has_orders: bool) -> list[str]:
    """What makes the reason unsure: none named, a typo, two dates, another reason named too."""
    if reason == policy.NOT_REFUND and not words:
        return [_doubt("no_reason", "")] if has_orders else []
    named = {
        r for r, p in reason_patterns() for x in newest
        if any(
            r not in vocabulary.NEGATABLE or not negated(x.folded.text, m.start())
            for m in p.finditer(x.folded.text)
        )
    }  # fmt: skip
    doubts: list[str] = []
    if reason in policy.TICKET_REASONS and reason not in named and words:
        dated = reason == policy.LATE_DELIVERY and any(late_by_dates(x.folded) for x in newest)
        if dated:
            doubts.append(_doubt("dates", words))
        elif reason != policy.OTHER_REQUEST and any(fuzzy(x.folded) for x in newest):
            doubts.append(_doubt("typo", words))
    # A wrong item or a parcel that never came, named beside another reason: which is it?
    others = named & {policy.WRONG_ITEM, policy.NOT_RECEIVED} - {reason}
    if reason in policy.TICKET_REASONS and others:
        said = " and ".join(policy.REASONS[r].lower() for r in sorted(others))
        doubts.append(_doubt("conflict", said))
    return doubts


# --- the amount ---------------------------------------------------------------------------------
AMOUNTS_READ = 20


def _amount_in(parts: list[Part]) -> tuple[int, str] | None:
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
        asked = (m for m in found if asking(_sentence_of(text, m.start(), m.end())))
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
