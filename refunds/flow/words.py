"""How the desk says amounts and durations: the one place for both, used by nodes, templates,
the admin and emails. No Django imports."""


def dollars(cents: int | None) -> str:
    # Templates hand it "" for a missing value (a payload the worker already cleared).
    if isinstance(cents, bool) or not isinstance(cents, int | float):
        return ""
    return f"${cents / 100:,.2f}"


def days(n: int) -> str:
    return f"{n} day{'' if n == 1 else 's'}"


# What each node does, for people reading a thread's history (and the diagram's labels).
NODE_WORDS = {
    "__start__": "Ticket opened",
    "__end__": "Finished",
    "lookup": "Looked up the order",
    "fraud_check": "Checked for fraud signals",
    "history_check": "Read the customer's earlier refunds",
    "check_policy": "Checked the late-delivery policy",
    "decline": "Declined by policy",
    "triage": "Chose who reviews",
    "approve": "Review by a person",
    "charge_card": "Charged the refund",
    "payment_failed": "Charge refused, back to a manager",
    "carrier_tracking": "Asked the carrier for tracking",
    "email": "Emailed the confirmation",
    "notify": "Told the customer why not",
}


def node_words(name: str) -> str:
    return NODE_WORDS.get(name, name.replace("_", " ").capitalize())


def trail_words(nodes: list[str] | None) -> list[str]:
    """A thread's steps in the desk's words. A step that ran again right after itself (triage
    after an escalation, parallel checks collected) is said once: to a reviewer it is one thing
    that happened."""
    said: list[str] = []
    for name in nodes or []:
        words = node_words(name)
        if not said or said[-1] != words:
            said.append(words)
    return said
