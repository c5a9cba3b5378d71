"""How the desk says amounts and durations: the one place for both, used by nodes, templates,
the admin and emails. No Django imports."""


def dollars(cents: int | None) -> str:
    # Templates hand it "" for a missing value (a payload the worker already cleared).
    if isinstance(cents, bool) or not isinstance(cents, int | float):
        return ""
    return f"${cents / 100:,.2f}"


def days(n: int) -> str:
    return f"{n} day{'' if n == 1 else 's'}"
