"""What the refunds admin's pages share: amounts as money, never cents."""

from operator import attrgetter

from django.contrib import admin

from refunds.flow.words import DESK, dollars


def money(field: str, label: str, currency: str = "", empty: str = ""):
    """A minor-units field as money in the row's `currency` path (else dollars), sortable;
    `empty` where it is None."""

    @admin.display(description=label, ordering=field)
    def show(self, obj) -> str:
        if getattr(obj, field) is None:
            return empty
        return dollars(getattr(obj, field), attrgetter(currency)(obj) if currency else DESK)

    show.__name__ = f"{field}_dollars"
    return show


class Dollars:
    """Amounts in dollars everywhere in the admin, as on the desk ($6.99, never 699)."""

    amount = money("amount_cents", "Amount")
    previous_amount = money("previous_amount_cents", "Previous amount")
