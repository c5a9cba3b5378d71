"""POST bodies of the "Needs sorting" page and of sending a message back, parsed by forms."""

from __future__ import annotations

from django import forms

from intake.sorting import REPLY_MAX
from refunds import policy
from refunds.models import CannedReason
from refunds.services import NOTE_MAX


class SortForm(forms.Form):
    """Open the ticket (the orders ticked or typed, the reason) or mark it not a refund."""

    # Any of the boxes, the message's orders of the moment: the service checks them.
    order = forms.Field(required=False, widget=forms.SelectMultiple)
    more_orders = forms.CharField(required=False, max_length=400, strip=True)
    reason = forms.ChoiceField(
        choices=[("", "Choose…")] + [(r, policy.REASONS[r]) for r in policy.TICKET_REASONS],
        required=False,
    )
    other_customer_ok = forms.BooleanField(required=False)
    reply_canned = forms.ModelChoiceField(
        CannedReason.objects.setting_aside(),
        required=False,
        error_messages={"invalid_choice": "That reply is not one of the replies on offer."},
    )
    reply_words = forms.CharField(required=False, max_length=REPLY_MAX, strip=True)
    no_reply_why = forms.CharField(required=False, max_length=NOTE_MAX, strip=True)


class SendBackForm(forms.Form):
    why = forms.CharField(max_length=NOTE_MAX, strip=True, required=False)
