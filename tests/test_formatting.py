"""Money and time each have one way to be said: dollars() (refunds/flow/words.py) and
core/clock.py, with one template filter each, used by every page, message and email."""

from __future__ import annotations

import re
from datetime import UTC, date, datetime
from pathlib import Path

import pytest
from django.template import Context, Template
from django.utils import timezone

from core.clock import day_words, local_words
from refunds.flow.words import dollars

ROOT = Path(__file__).resolve().parent.parent
SKIP = {".venv", "var", "tests", "migrations", "static", "node_modules", ".git", "bench"}
MOMENT = datetime(2026, 12, 1, 13, 12, 43, tzinfo=UTC)


def sources(*suffixes: str):
    for path in sorted(ROOT.rglob("*")):
        if SKIP & set(path.relative_to(ROOT).parts) or path.suffix not in suffixes:
            continue
        if path.is_file():
            yield path, path.read_text()


def offending(pattern: str, suffixes: tuple[str, ...], allowed: set[str]) -> list[str]:
    found = []
    for path, text in sources(*suffixes):
        name = str(path.relative_to(ROOT))
        if name in allowed:
            continue
        for n, line in enumerate(text.splitlines(), start=1):
            if re.search(pattern, line):
                found.append(f"{name}:{n}: {line.strip()}")
    return found


@pytest.mark.parametrize(
    ("cents", "words"), [(699, "$6.99"), (2000, "$20.00"), (100050, "$1,000.50"), (0, "$0.00")]
)
def test_dollars_says_cents_as_dollars(cents, words):
    assert dollars(cents) == words


@pytest.mark.parametrize(
    ("minor", "currency", "words"),
    [(899, "JPY", "899 JPY"), (102050, "EUR", "1,020.50 EUR"), (1234, "KWD", "1.234 KWD")],
)
def test_dollars_says_another_currency_with_its_code_and_its_own_minor_units(
    minor, currency, words
):
    assert dollars(minor, currency) == words


def test_dollars_says_nothing_for_a_missing_amount():
    assert dollars(None) == "" and dollars("") == "" and dollars(True) == ""


def test_the_dollars_filter_is_the_helper():
    html = Template("{% load desk %}{{ c|dollars }}").render(Context({"c": 100050}))
    assert html == "$1,000.50"


def test_no_other_code_formats_money():
    pattern = r"%\.2f|:[,]?\.2f|/ ?100\b|floatformat"
    assert offending(pattern, (".py", ".html", ".txt"), {"refunds/flow/words.py"}) == []


def test_a_moment_is_said_in_the_reviewers_zone_with_its_label():
    with timezone.override("Asia/Tokyo"):
        assert local_words(MOMENT) == "Dec 1, 2026, 22:12 JST"
    with timezone.override("UTC"):
        assert local_words(MOMENT) == "Dec 1, 2026, 13:12 UTC"


@pytest.mark.parametrize(
    ("day", "words"),
    [(date(2026, 11, 2), "Nov 2, 2026"), ("2026-11-02", "Nov 2, 2026"), ("soon", "soon")],
)
def test_a_plain_date_is_said_the_same_way(day, words):
    assert day_words(day) == words


def test_the_template_filters_call_the_clock():
    template = Template("{% load desk %}{{ m|when }} · {{ d|day }}")
    with timezone.override("Asia/Tokyo"):
        html = template.render(Context({"m": MOMENT, "d": date(2026, 11, 2)}))
    assert html == (
        '<time datetime="2026-12-01T13:12:43+00:00">Dec 1, 2026, 22:12 JST</time> · Nov 2, 2026'
    )


def test_no_template_or_module_formats_a_date_its_own_way():
    # The audit CSV (ISO UTC for programs), the JSON log lines and SQLite's clock are on purpose.
    allowed = {"core/clock.py", "core/logs.py", "core/sql.py", "reviews/views/audit.py"}
    pattern = r"\|date:|\|time:|strftime\(|:%[YbdHm]|%Y-%m-%d"
    assert offending(pattern, (".py", ".html", ".txt"), allowed) == []


def test_a_reviewers_zone_lasts_for_their_request_and_no_longer(client, agent, settings):
    """The zone the browser names is the request's: the thread's next work (another request,
    a command, a test) reads times in the desk's own zone again."""
    client.force_login(agent)
    client.cookies["tz"] = "Asia/Tokyo"
    assert client.get("/").status_code == 200
    assert timezone.get_current_timezone_name() == settings.TIME_ZONE
