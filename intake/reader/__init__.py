"""read(): the one place with judgment. A model through LangChain's init_chat_model when
REFUNDS_MODEL is set (intake/reader/model.py), the rules otherwise and whenever the model fails
(intake/reader/rules.py). Either way the answer is a Reading: what was read, the customer's words
it came from, who read it (`read_by`: "rules" or the model's spec) and, when a configured model
was not used, why (`fallback`). A reading only informs: policy and a person decide."""

from __future__ import annotations

from django.conf import settings

from intake.reader import rules
from intake.reading import Reading


def read(*, sender: str, subject: str, body: str) -> Reading:
    """Read one message. Never raises for what the message says; the rules always answer."""
    if settings.REFUNDS_MODEL:
        from intake.reader import model  # LangChain is imported only where a model is set

        return model.read(sender=sender, subject=subject, body=body)
    return rules.read(sender=sender, subject=subject, body=body)
