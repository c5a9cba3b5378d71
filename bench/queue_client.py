"""The review queue as a browser's page keeps it (templates/reviews/queue.html, static/desk.js):
the cards it shows, in order, and the clock its foot sends back, changed by each poll's answer as
its out-of-band swaps say. Regexes over the desk's own HTML, for bench/load_users.py (Locust, a
process of its own) and bench/load.py."""

from __future__ import annotations

import re
from datetime import datetime

CLOCK = re.compile(r'data-clock="([^"]*)"')
# A card's <tr>, after the <tbody> that inserts it when it is new or moved.
CARD = re.compile(r'(?:<tbody hx-swap-oob="([^"]+)">\s*)?<tr ([^>]*\bdata-card="(\d+)"[^>]*)>')
VERSION = re.compile(r'data-version="([^"]*)"')
GONE = re.compile(r'<tr id="review-(\d+)" hx-swap-oob="delete">')
SINCE = re.compile(r'data-since="([^"]+)"')
MORE = re.compile(r'<tr class="queue-clock"[^>]*\bdata-more\b')
FAST, SLOW = 2.0, 30.0  # static/desk.js: 2 s after a change, doubling to 30 s while unchanged


class Screen:
    def __init__(self) -> None:
        self.clock = ""
        # (ticket id, version, waiting since in epoch ms), as the page shows them
        self.cards: list[tuple[str, str, int | None]] = []
        self.more = False  # a first page with more reviews after it
        self.delay = FAST

    @staticmethod
    def _cards(html: str):
        found = list(CARD.finditer(html))
        for at, card in enumerate(found):
            end = found[at + 1].start() if at + 1 < len(found) else len(html)
            version = VERSION.search(card.group(2))
            since = SINCE.search(html, card.end(), end)
            ms = int(datetime.fromisoformat(since.group(1)).timestamp() * 1000) if since else None
            yield card.group(1), card.group(3), version.group(1) if version else "", ms

    def _foot(self, html: str) -> None:
        clock = CLOCK.search(html)
        self.clock = clock.group(1) if clock else ""
        self.more = bool(MORE.search(html))

    def load(self, html: str) -> None:
        """The queue page."""
        self._foot(html)
        self.cards = [(pk, version, since) for _, pk, version, since in self._cards(html)]
        self.delay = FAST

    def params(self) -> dict[str, str]:
        """What the page's poll sends."""
        return {"clock": self.clock, "shown": ",".join(f"{pk}:{v}" for pk, v, _ in self.cards)}

    def concerns(self, rung: list[list]) -> bool:
        """Whether a push's cards may change what the page shows (static/push.js's concerns)."""
        shown = {pk: version for pk, version, _ in self.cards}
        last = max((since for _, _, since in self.cards if since is not None), default=None)
        for pk, version, since in rung:
            if str(pk) not in shown:
                if not self.more or since is None or last is None or since <= last:
                    return True
                continue
            digits = re.match(r"\d+", shown[str(pk)])  # none: a decided line
            if digits is None or int(digits.group()) < version:
                return True
        return False

    def apply(self, status: int, html: str) -> int:
        """A poll's answer; how many cards it drew. The next poll's wait, as the page's: 2 s
        after cards were drawn or taken away, else twice the last, up to 30 s."""
        if status != 200:
            self.delay = min(self.delay * 2, SLOW)
            return 0
        self._foot(html)
        gone = set(GONE.findall(html))
        self.cards = [card for card in self.cards if card[0] not in gone]
        drawn = 0
        for swap, pk, version, since in self._cards(html):
            drawn += 1
            if not swap:
                self.cards = [(pk, version, since) if c[0] == pk else c for c in self.cards]
                continue
            ids = [p for p, _, _ in self.cards]
            after = swap.rpartition("#review-")[2] if swap.startswith("afterend:") else None
            self.cards.insert(ids.index(after) + 1 if after in ids else 0, (pk, version, since))
        # Only the clock moved (other queues' cards): slower, as after a 204.
        self.delay = FAST if drawn or gone else min(self.delay * 2, SLOW)
        return drawn
