"""What customers read: each kind of email is one template, templates/emails/<kind>.txt (its
first line the subject, then a blank line, then the body), worded from the facts a flow node
or the intake hands over, in the customer's language through Django's translation catalogues
(locale/<language>/LC_MESSAGES/django.po; a string missing there reads in English).

The flow stays free of Django: its nodes call the mailer with a kind and facts, and the mailer
the runner binds (refunds/collaborators.py) renders them here before the outbox stores and sends
the text (refunds/mail.py), so what is stored is what was sent."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.template.loader import render_to_string
from django.utils import translation

DESK_LANGUAGE = "en"


def language(code: str) -> str:
    """One of our languages (settings.LANGUAGES) for a reading's ISO 639-1 code; English else."""
    code = (code or "").lower()
    return code if code in dict(settings.LANGUAGES) else DESK_LANGUAGE


def language_name(code: str) -> str:
    """The language's name in English, for the desk ("Spanish")."""
    return translation.get_language_info(language(code))["name"]


@dataclass(frozen=True)
class Worded:
    subject: str
    body: str
    language: str
    # The same email in the desk's language, for reviewers; empty when it was sent in it.
    desk_text: str = ""


def render(kind: str, facts: dict[str, Any], in_language: str = DESK_LANGUAGE) -> tuple[str, str]:
    """(subject, body) of one kind of email in a language (English where it has no words)."""
    with translation.override(language(in_language)):
        text = render_to_string(f"emails/{kind}.txt", facts)
    subject, _, body = text.strip("\n").partition("\n")
    lines = [line.rstrip() for line in body.strip("\n").splitlines()]
    # Templates keep their tags on lines of their own; the customer sees at most one blank line.
    cleaned: list[str] = []
    for line in lines:
        if line or (cleaned and cleaned[-1]):
            cleaned.append(line)
    return " ".join(subject.split())[:200], "\n".join(cleaned).strip("\n") + "\n"


def word(kind: str, facts: dict[str, Any], in_language: str) -> Worded:
    """The email as the customer reads it, and as the desk reads it when that differs."""
    code = language(in_language)
    subject, body = render(kind, facts, code)
    desk = ""
    if code != DESK_LANGUAGE:
        desk_subject, desk_body = render(kind, facts, DESK_LANGUAGE)
        desk = f"{desk_subject}\n\n{desk_body}"
    return Worded(subject, body, code, desk)
