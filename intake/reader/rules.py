"""What rules read right in a customer's message: order numbers (intake/reader/order_numbers.py),
an amount, lateness told by two days (intake/reader/dates.py), and which words are the customer's
newest and which they quote (intake/reader/text.py); the language by lingua's models. Why the
customer writes is the trained classifier's (intake/reader/trained.py); intake/reader/default.py
puts the two together.

The newest words are read first (the subject and the body above any quoted or forwarded part);
the quoted part only for an order number the newest words do not name (a forwarded shop email)."""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass, field
from functools import cache
from typing import TYPE_CHECKING

from django.conf import settings

from intake.reader import vocabulary
from intake.reader.dates import late_by_dates
from intake.reader.order_numbers import apart, orders_in_part
from intake.reader.text import Part, clean_subject, fold, split_own
from refunds import policy

if TYPE_CHECKING:
    from lingua import LanguageDetector

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


@dataclass(frozen=True)
class Facts:
    """What the rules found, each with the customer's words for it in `quotes`."""

    subject: str  # without "Re:"
    own: str  # the customer's newest words
    rest: str  # what they quote or forward
    orders: list[str] = field(default_factory=list)
    amounts: list[tuple[int, str]] = field(default_factory=list)  # (cents, the words)
    language: str = "en"
    # Two days that tell whether it came late (True) or in time (False), and their words.
    days: tuple[bool, str] | None = None
    quotes: dict[str, str] = field(default_factory=dict)
    doubts: list[str] = field(default_factory=list)  # what makes the orders unsure, in words


def facts(*, subject: str, body: str) -> Facts:
    subject = clean_subject(subject)[:500]
    own, rest = split_own(body[:MAX_CHARS])
    newest = [Part(fold(subject), subject=True), Part(fold(own))]
    quotes: dict[str, str] = {}
    doubts: list[str] = []
    found = _orders_in(newest)
    if found is None and (found := _orders_in([Part(fold(rest))])) is not None:
        doubts.append(_doubt("quoted_orders", ", ".join(found.said)))
    if found:
        quotes["orders"] = ", ".join(found.said)
        doubts += found.doubts
    return Facts(
        subject=subject,
        own=own,
        rest=rest,
        orders=found.numbers if found else [],
        # Only from the customer's own words: a forwarded receipt's total is the shop's.
        amounts=_amounts_in(newest),
        language=language(f"{subject}\n{own}" if own else f"{subject}\n{rest}"),
        days=next((hit for part in newest if (hit := late_by_dates(part.folded))), None),
        quotes=quotes,
        doubts=doubts,
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


# --- how sure of the orders -------------------------------------------------------------------
# What lowers the confidence in the orders read, by how much, and how a reviewer reads it.
DOUBTS: dict[str, tuple[float, str]] = {
    "separate": (0.35, "several order numbers in separate places ({})"),
    "far": (0.25, 'the order number stands apart from "order" or "#" ("{}")'),
    "spelled": (0.2, 'the order number was read from words or digits set apart ("{}")'),
    "quoted_orders": (0.15, "the order number is only in the quoted or forwarded part ({})"),
    "bare": (0.25, 'the order number stands alone, with no word for it ("{}")'),
}


def _doubt(kind: str, words: str) -> str:
    return DOUBTS[kind][1].format(" ".join(words.split())[:80])


def confidence(unsure: list[str]) -> float:
    """1 less what each doubt costs, never below 0."""
    by_words = {template.split("{")[0]: cost for cost, template in DOUBTS.values()}
    cost = sum(next((c for head, c in by_words.items() if u.startswith(head)), 0.0) for u in unsure)
    return round(max(0.0, 1.0 - cost), 2)


# --- the amount ---------------------------------------------------------------------------------
AMOUNTS_READ = 20


def _amounts_in(parts: list[Part]) -> list[tuple[int, str]]:
    """(cents, the customer's words) of the first amounts the first part naming any names."""
    for part in parts:
        # A person names a few amounts; the first AMOUNTS_READ bound the time a pasted
        # statement of thousands of "$5" takes.
        found = itertools.islice(_AMOUNT.finditer(part.folded.text), AMOUNTS_READ)
        amounts = [
            (cents, part.folded.words_at(*m.span()).strip())
            for m in found
            if (cents := _cents(m)) is not None
        ]
        if amounts:
            return amounts
    return []


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
@cache
def _detector() -> LanguageDetector:
    """lingua's detector for the desk's languages (settings.LANGUAGES), its trigram models
    loaded at once (60 ms; the high-accuracy models took 0.9 s to load and read no better here)."""
    from lingua import IsoCode639_1, Language, LanguageDetectorBuilder

    languages = [
        Language.from_iso_code_639_1(getattr(IsoCode639_1, code.upper()))
        for code, _ in settings.LANGUAGES
    ]
    builder = LanguageDetectorBuilder.from_languages(*languages)
    return builder.with_low_accuracy_mode().with_preloaded_language_models().build()


LANGUAGE_CHARS = 600  # a paragraph tells; more costs time and tells no better


def language(text: str) -> str:
    """ISO 639-1 code of the language `text` is written in; English when nothing tells."""
    found = _detector().detect_language_of(text[:LANGUAGE_CHARS])
    return found.iso_code_639_1.name.lower() if found else "en"


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
def summary(reason: str, orders: list[str], sentence: str, text: str, subject: str) -> str:
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
