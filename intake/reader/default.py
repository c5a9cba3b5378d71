"""The default reader, with no model provider configured: the trained classifier says why the
customer writes (intake/reader/trained.py, with its calibrated probability as the confidence);
rules read what rules read right (intake/reader/rules.py: order numbers, amounts, lateness by two
days, the language, the customer's newest words)."""

from __future__ import annotations

from functools import cache

from django.conf import settings

from intake.reader import rules, trained
from intake.reader.text import sentences
from intake.reading import TRAINED, Reading, sureness
from refunds import policy

# Two days compared say late or in time, which the classifier's words cannot: lateness is read
# over any reading less sure than this but "where is my refund", and at least this sure.
DATES_SURE = 0.85


@cache
def classifier() -> trained.Classifier:
    """The classifier at REFUNDS_READER_FILE, loaded once per process (checked at start:
    intake/checks.py)."""
    return trained.load(settings.REFUNDS_READER_FILE)


def read(*, sender: str, subject: str, body: str) -> Reading:
    found = rules.facts(subject=subject, body=body)
    ranked = classifier().ranked(trained.joined(found.subject, found.own, found.rest))
    unsure = list(found.doubts)
    said = sentences(found.own or found.rest)
    quotes = dict(found.quotes)
    if found.days and found.days[0]:
        late = dict(ranked)[policy.LATE_DELIVERY]
        if ranked[0][0] == policy.LATE_DELIVERY or (
            ranked[0][0] != policy.REFUND_STATUS and ranked[0][1] < DATES_SURE
        ):
            others = [r for r in ranked if r[0] != policy.LATE_DELIVERY]
            ranked = [(policy.LATE_DELIVERY, max(late, DATES_SURE)), *others]
            quotes["reason"] = found.days[1]
    elif found.days:  # it came in time: not late, whatever the words say
        ranked = [r for r in ranked if r[0] != policy.LATE_DELIVERY]
    (reason, sure), (second, second_sure) = ranked[0], ranked[1]
    if said and reason != policy.NOT_REFUND and "reason" not in quotes:
        quotes["reason"] = said[classifier().telling(said, reason)]
    # Of several amounts ("I paid $49.99 ... the $6.99 delivery back"), the first in the sentence
    # that says why.
    amount = next(
        (a for a in found.amounts if a[1] in quotes.get("reason", "")),
        found.amounts[0] if found.amounts else None,
    )
    if amount:
        quotes["amount"] = amount[1]
    if sure < settings.REFUNDS_READER_MIN_CONFIDENCE:
        unsure.insert(
            0,
            f"read as {policy.REASONS[reason].lower()} ({sureness(sure)}) or as "
            f"{policy.REASONS[second].lower()} ({sureness(second_sure)})",
        )
    return Reading(
        reason=reason,
        orders=found.orders,
        amount_cents=amount[0] if amount else None,
        language=found.language,
        summary=rules.summary(
            reason,
            found.orders,
            quotes.get("reason", ""),
            f"{found.own}\n{found.rest}",
            found.subject,
        ),
        quotes=quotes,
        read_by=TRAINED,
        confidence=round(min(sure, rules.confidence(found.doubts)), 2),
        unsure=unsure,
    )
