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


class EraseForm(forms.Form):
    """Erase a customer: the orders to name, and their address typed again to say it is meant
    (as GitHub asks for a repository's name before deleting it)."""

    email = forms.CharField(max_length=254, widget=forms.HiddenInput)
    orders = forms.MultipleChoiceField(
        label="Their orders to name",
        required=False,
        widget=forms.CheckboxSelectMultiple,
        error_messages={
            "invalid_choice": "Order %(value)s is not this customer's: nothing was erased."
        },
    )
    confirm = forms.CharField(
        label="Type the customer's email address to confirm",
        max_length=254,
        error_messages={"required": "Type the customer's email address to confirm."},
    )

    def __init__(self, *args, numbers: list[str], **kwargs) -> None:
        super().__init__(*args, **kwargs)
        orders = self.fields["orders"]
        assert isinstance(orders, forms.MultipleChoiceField)
        orders.choices = [(n, f"Order {n}") for n in numbers]

    def clean(self) -> dict:
        data = super().clean() or {}
        email, typed = data.get("email", ""), data.get("confirm", "")
        if typed and typed.strip().casefold() != email.strip().casefold():
            self.add_error(
                "confirm",
                f"That is not {email}: type the address exactly as above; nothing was erased.",
            )
        return data
