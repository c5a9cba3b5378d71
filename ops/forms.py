from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation

from django import forms

from refunds.flow.words import dollars
from refunds.services import FORK_MAX_CENTS, REASON_MAX

# ASCII digits only (re's \d and Decimal() also take full-width digits such as "１２").
DOLLARS = re.compile(r"^\$?\s*(\d{1,3}(,\d{3})+|\d+)(\.\d{1,2})?$", re.ASCII)


def parse_dollars(text: str) -> int:
    """'$25', '25', '25.5', '$1,020.50' -> cents. Anything else (words, a third decimal, a
    negative) is refused with the reason, never guessed."""
    text = (text or "").strip()
    if not DOLLARS.match(text):
        raise forms.ValidationError(
            f"“{text}” is not an amount in dollars; write it like 25 or $25.00 or 12.50."
        )
    try:
        value = Decimal(text.removeprefix("$").strip().replace(",", ""))
    except InvalidOperation:  # pragma: no cover - the pattern admits only numbers
        raise forms.ValidationError("Write the amount like 12.50.") from None
    return int(value * 100)


class DollarsField(forms.Field):
    def to_python(self, value):
        text = str(value or "").strip()[:40]
        if not text:
            return None
        cents = parse_dollars(text)
        if not 0 < cents <= FORK_MAX_CENTS:
            raise forms.ValidationError(
                f"The amount must be between {dollars(1)} and {dollars(FORK_MAX_CENTS)}."
            )
        return cents


class ForkForm(forms.Form):
    checkpoint = forms.CharField(max_length=64, widget=forms.HiddenInput)
    amount = DollarsField(
        label="Corrected refund amount (the fee to refund)",
        help_text="In dollars, like 5.50 or $25.",
        error_messages={"required": "Write the corrected amount, like 5.50 or $25."},
    )
    reason = forms.CharField(
        label="Why",
        max_length=REASON_MAX,
        widget=forms.Textarea,
        error_messages={"required": "Say why you fork the ticket; it is kept with the audit."},
    )
