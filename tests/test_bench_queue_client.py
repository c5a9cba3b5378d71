"""The load bench's reviewer keeps the page as the browser does (bench/queue_client.py): its
cards, their waiting-since, whether more reviews follow its first page, and which of the
doorbell's rings concern it (as static/push.js decides, tests/test_browser_push.py)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.queue_client import Screen  # noqa: E402
from tests.conftest import make_order  # noqa: E402
from tests.reviewing import awaiting_review  # noqa: E402
from tests.test_doorbell import card  # noqa: E402


def test_the_bench_reviewer_lets_pass_only_rings_that_cannot_change_its_page(client, manager):
    waiting = [awaiting_review(make_order(f"40{n:02}", fee_cents=4800)) for n in range(26)]
    client.force_login(manager)
    screen = Screen()
    screen.load(client.get("/").content.decode())
    assert len(screen.cards) == 25 and screen.more
    shown, after = waiting[0], waiting[-1]
    assert all(since is not None for _, _, since in screen.cards)

    assert not screen.concerns([card(shown)])  # the version it shows already
    assert not screen.concerns([card(after)])  # waits less than every card shown
    moved = card(shown)
    moved[1] += 1
    assert screen.concerns([moved])  # a newer version of a card it shows
    earlier = card(after)
    earlier[2] = card(shown)[2]
    assert screen.concerns([earlier])  # would be on the page
    assert screen.concerns([[after.pk, card(after)[1], None]])  # no waiting-since: poll

    screen.more = False  # the whole queue on the page: a new card joins it
    assert screen.concerns([card(after)])
