"""How the desk says a moment: one format everywhere (pages, messages), in the time zone active
for the request (the reviewer's), labelled with it: "Dec 1, 14:05 CET"."""

from __future__ import annotations

from datetime import datetime

from django.utils import timezone


def local_words(moment: datetime) -> str:
    local = timezone.localtime(moment)
    return f"{local:%b} {local.day}, {local:%H:%M} {local.tzname()}"
