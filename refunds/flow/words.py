"""How the desk says amounts and durations: the one place for both, used by nodes, templates,
the admin and emails. No Django imports."""


def dollars(cents: int | None) -> str:
    return "" if cents is None else f"${cents / 100:,.2f}"


def days(n: int) -> str:
    return f"{n} day{'' if n == 1 else 's'}"
