"""What the refunds admin's pages share: amounts in dollars."""

from django.contrib import admin

from refunds.flow.words import dollars


def _money(field: str, label: str):
    """A cents field shown in dollars, sortable by the field."""

    @admin.display(description=label, ordering=field)
    def show(self, obj) -> str:
        return dollars(getattr(obj, field))

    show.__name__ = f"{field}_dollars"
    return show


class Dollars:
    """Amounts in dollars everywhere in the admin, as on the desk ($6.99, never 699)."""

    amount = _money("amount_cents", "Amount")
    previous_amount = _money("previous_amount_cents", "Previous amount")
