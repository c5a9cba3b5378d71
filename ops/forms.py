from __future__ import annotations

from django import forms

from refunds import currencies
from refunds.services import REASON_MAX


def parse_dollars(text: str) -> int:
    """'$25', '25', '25.5', '$1,020.50' -> cents. Anything else (words, a third decimal, a
    negative, full-width digits, "1e3") is refused with the reason, never guessed."""
    try:
        return currencies.read_typed(text or "", currencies.DESK)
    except currencies.BadAmount as exc:
        raise forms.ValidationError(str(exc)) from None


class DollarsField(forms.Field):
    """Dollars as typed, in cents; the amount's range is fork_checked's to say."""

    def to_python(self, value):
        text = str(value or "").strip()[:40]
        return parse_dollars(text) if text else None


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
