"""The review queue as a browser's page keeps it (templates/reviews/queue.html, static/desk.js):
the cards it shows, in order, and the clock its foot sends back, changed by each poll's answer as
its out-of-band swaps say. Regexes over the desk's own HTML, for bench/load_users.py (Locust, a
process of its own) and bench/load.py."""

from __future__ import annotations

import re

CLOCK = re.compile(r'data-clock="([^"]*)"')
# A card's <tr>, after the <tbody> that inserts it when it is new or moved.
CARD = re.compile(r'(?:<tbody hx-swap-oob="([^"]+)">\s*)?<tr ([^>]*\bdata-card="(\d+)"[^>]*)>')
VERSION = re.compile(r'data-version="([^"]*)"')
GONE = re.compile(r'<tr id="review-(\d+)" hx-swap-oob="delete">')
FAST, SLOW = 2.0, 30.0  # static/desk.js: 2 s after a change, doubling to 30 s while unchanged


class Screen:
    def __init__(self) -> None:
        self.clock = ""
        self.cards: list[tuple[str, str]] = []  # (ticket id, version), as the page shows them
        self.delay = FAST

    @staticmethod
    def _cards(html: str):
        for found in CARD.finditer(html):
            version = VERSION.search(found.group(2))
            yield found.group(1), found.group(3), version.group(1) if version else ""

    def load(self, html: str) -> None:
        """The queue page."""
        clock = CLOCK.search(html)
        self.clock = clock.group(1) if clock else ""
        self.cards = [(pk, version) for _, pk, version in self._cards(html)]
        self.delay = FAST

    def params(self) -> dict[str, str]:
        """What the page's poll sends."""
        return {"clock": self.clock, "shown": ",".join(f"{pk}:{v}" for pk, v in self.cards)}

    def apply(self, status: int, html: str) -> int:
        """A poll's answer; how many cards it drew. The next poll's wait, as the page's: 2 s
        after cards were drawn or taken away, else twice the last, up to 30 s."""
        if status != 200:
            self.delay = min(self.delay * 2, SLOW)
            return 0
        self.clock = CLOCK.search(html).group(1)  # type: ignore[union-attr]
        gone = set(GONE.findall(html))
        self.cards = [card for card in self.cards if card[0] not in gone]
        drawn = 0
        for swap, pk, version in self._cards(html):
            drawn += 1
            if not swap:
                self.cards = [(p, version if p == pk else v) for p, v in self.cards]
                continue
            ids = [p for p, _ in self.cards]
            after = swap.rpartition("#review-")[2] if swap.startswith("afterend:") else None
            self.cards.insert(ids.index(after) + 1 if after in ids else 0, (pk, version))
        # Only the clock moved (other queues' cards): slower, as after a 204.
        self.delay = FAST if drawn or gone else min(self.delay * 2, SLOW)
        return drawn
