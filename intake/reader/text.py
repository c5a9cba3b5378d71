"""Text helpers for the reader's rules: folding (lower case, no accents) with a map back to the
customer's own characters, the split between a message's newest words and what it quotes or
forwards (each a Part to read), and sentences around a hit."""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass
from functools import lru_cache

from intake.reader import vocabulary

# Every pattern here reads a whole message: none may try two ways over the same characters
# (bench/hostile_mail.py, tests/test_reader_bounds.py). `re` backtracks and holds the GIL meanwhile,
# so a quadratic one stalls the worker's lease renewal too.
_SUBJECT_PREFIX = re.compile(
    r"^\s*(?:(?:re|fw|fwd|aw|wg|tr|rv|enc|r|i|sv|vs)\s*(?:\[\d+\]\s*)?:\s*)+", re.I
)
# Spaces before an opener, never line breaks: "^\s*" under re.M ran from every line start over
# all the blank lines below it (20,000 blank lines: minutes).
_OPENER = re.compile(r"^[^\S\n]*(?:" + "|".join(vocabulary.QUOTE_OPENERS) + ")", re.I | re.M)
_HEADER_LINE = re.compile(
    r"^\W*(?:from|to|cc|sent|date|de|para|envoye|a|von|an|gesendet|datum|da|inviato|data|enviado)"
    r"\s*:"
)
# A sentence ends at ".", "!" or "?" before a space, or at a line break; not after "no." or
# "Nr." ("order no. 1042" is one sentence). Only from the first mark of a run: from each mark of
# "....." in turn, a line of dots was quadratic.
_SENTENCE_END = re.compile(
    r"(?<!\bno)(?<!\bnr)(?<!\bn°)(?<!\bnº)(?<!\bmr)(?<!\bms)(?<!\bdr)(?<!\bst)(?<!\bca)"
    r"(?<!\bapprox)(?<!\bref)(?<!\bnum)(?<!\bvs)(?<!\betc)(?<![.!?])[.!?]+(?=\s)|\n",
    re.I,
)


WORD = re.compile(r"[a-z']+")
MONTHS = (
    r"jan|feb|mar|apr|may|jun|jul|aug|sep|sept|oct|nov|dec|january|february|march|april|june|"
    r"july|august|september|october|november|december|enero|febrero|marzo|abril|mayo|junio|"
    r"julio|agosto|septiembre|octubre|noviembre|diciembre|janvier|fevrier|mars|avril|mai|juin|"
    r"juillet|aout|septembre|octobre|novembre|decembre|januar|februar|marz|juni|juli|oktober|"
    r"dezember|janeiro|fevereiro|marco|maio|junho|julho|setembro|outubro|novembro|dezembro|"
    r"gennaio|febbraio|aprile|maggio|giugno|luglio|settembre|ottobre|dicembre"
)


@dataclass(frozen=True)
class Folded:
    """Text folded for matching, and for each folded character the index of the original one."""

    original: str
    text: str
    where: tuple[int, ...]

    def span(self, start: int, end: int) -> tuple[int, int]:
        """The original characters behind folded[start:end]."""
        if start >= end:
            return (self.where[start] if start < len(self.where) else len(self.original),) * 2
        return self.where[start], self.where[end - 1] + 1

    def words_at(self, start: int, end: int) -> str:
        first, last = self.span(start, end)
        return self.original[first:last]


@dataclass(frozen=True)
class Part:
    """One place to read from: the subject, the customer's own words, or the quoted rest."""

    folded: Folded
    subject: bool = False


@lru_cache(maxsize=512)  # one message is folded several times; a worker reads many
def fold(text: str) -> Folded:
    """Lower case, accents and typographic quotes removed, one folded character or more per
    original one, so a hit in the folded text quotes the customer's own characters."""
    out: list[str] = []
    where: list[int] = []
    for index, char in enumerate(text):
        if char in "’‘`´":
            base = "'"
        elif char in "“”«»":
            base = '"'
        else:
            decomposed = unicodedata.normalize("NFKD", char)
            base = "".join(c for c in decomposed if not unicodedata.combining(c)).lower()
            if char in "°º":  # NFKD turns "º" into "o" and "°" into " °"
                base = char
        for piece in base:
            out.append(piece)
            where.append(index)
    return Folded(text, "".join(out), tuple(where))


def clean_subject(subject: str) -> str:
    """The subject without its "Re:", "Fwd:", "AW:" prefixes."""
    return _SUBJECT_PREFIX.sub("", subject or "").strip()


def split_own(body: str) -> tuple[str, str]:
    """(the customer's own, newest words; everything quoted or forwarded below or between).

    A reply's quoted lines ("> ...") and everything after "On ... wrote:", "---------- Forwarded
    message ---------", "-----Original Message-----" or an Outlook "From:/Sent:" block is not the
    customer's newest words. Accents and case do not matter to the markers."""
    body = (body or "").replace("\r\n", "\n").replace("\r", "\n")
    folded = fold(body)
    cut = resume = len(body)
    if found := _OPENER.search(folded.text):
        cut, resume = folded.span(found.start(), found.end())
    own_lines: list[str] = []
    rest_lines: list[str] = []
    for line in body[:cut].split("\n"):
        (rest_lines if line.lstrip().startswith(">") else own_lines).append(line)
    rest = "\n".join(line.lstrip().lstrip(">").lstrip() for line in rest_lines)
    # The opener itself ("On Tue, Refund Desk <refunds@...> wrote:") and the header lines of a
    # forwarded message name people and addresses, not what the customer asks; a forwarded
    # "Subject:" stays (it often carries the order number).
    forwarded = "\n".join(
        line for line in body[resume:].split("\n") if not _HEADER_LINE.match(fold(line).text)
    )
    rest = f"{rest}\n{forwarded}" if rest else forwarded
    return "\n".join(own_lines).strip(), rest.strip()


def sentences(text: str, limit: int = 20) -> list[str]:
    """The first `limit` sentences of `text` that hold a word."""
    found: list[str] = []
    at = 0
    for mark in _SENTENCE_END.finditer(text):
        if re.search(r"\w", piece := text[at : mark.end()]):
            found.append(" ".join(piece.split()))
            if len(found) == limit:
                return found
        at = mark.end()
    if re.search(r"\w", piece := text[at:]):
        found.append(" ".join(piece.split()))
    return found[:limit]


def sentence_around(text: str, start: int, end: int, *, limit: int = 160) -> str:
    """The sentence of `text` holding text[start:end], at most `limit` characters, centred."""
    # Looked for no further than `limit` either side: what lies beyond is cut anyway, and a
    # message of many hits (amounts) would otherwise scan the whole text for each.
    begin = max(0, start - limit)
    for mark in _SENTENCE_END.finditer(text, begin, start):
        begin = mark.end()
    stop = min(len(text), end + limit)
    if after := _SENTENCE_END.search(text, end, stop):
        stop = after.start() + (1 if text[after.start()] in ".!?" else 0)
    sentence = text[begin:stop].strip()
    if len(sentence) <= limit:
        return sentence
    offset = text.find(sentence, begin)
    middle = (start + end) // 2 - offset
    first = max(0, min(middle - limit // 2, len(sentence) - limit))
    cut = sentence[first : first + limit].strip()
    return ("…" if first else "") + cut + ("…" if first + limit < len(sentence) else "")
