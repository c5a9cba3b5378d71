"""Customers' emails, rendered before the outbox stores them: what is stored is what was sent."""

from __future__ import annotations

import re
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
    # Templates keep their tags on lines of their own; the customer sees at most one blank line.
    body = re.sub(r"\n{3,}", "\n\n", "\n".join(line.rstrip() for line in body.splitlines()))
    return " ".join(subject.split())[:200], body.strip("\n") + "\n"


def word(kind: str, facts: dict[str, Any], in_language: str) -> Worded:
    """The email as the customer reads it, and as the desk reads it when that differs."""
    code = language(in_language)
    subject, body = render(kind, facts, code)
    desk = ""
    if code != DESK_LANGUAGE:
        desk_subject, desk_body = render(kind, facts, DESK_LANGUAGE)
        desk = f"{desk_subject}\n\n{desk_body}"
    return Worded(subject, body, code, desk)
