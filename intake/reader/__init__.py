"""read(): the one place with judgment. A model through LangChain's init_chat_model when
REFUNDS_MODEL is set (intake/reader/model.py), the rules otherwise and whenever the model fails
(intake/reader/rules.py)."""

from __future__ import annotations

from intake.reader import rules
from intake.reading import Reading


def read(*, sender: str, subject: str, body: str) -> Reading:
    """Read one message. Never raises for what the message says; the rules always answer."""
    return rules.read(sender=sender, subject=subject, body=body)
