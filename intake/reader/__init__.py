"""read(): the one place with judgment: a model where REFUNDS_MODEL is set (intake/reader/
model.py), the trained reader otherwise and whenever the model fails (intake/reader/default.py).
A reading only informs: policy and a person decide."""

from __future__ import annotations

from django.conf import settings

from intake.reader import default
from intake.reading import Reading


def read(*, sender: str, subject: str, body: str) -> Reading:
    """Read one message. Never raises for what the message says; the trained reader always
    answers."""
    if settings.REFUNDS_MODEL:
        from intake.reader import model  # LangChain is imported only where a model is set

        return model.read(sender=sender, subject=subject, body=body)
    return default.read(sender=sender, subject=subject, body=body)
