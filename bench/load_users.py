"""The people and the helpdesk that bench/load.py sets on the desk: a locustfile, read by
`locust -f` in its own process (Locust patches the standard library with gevent at import, so
nothing of the app's imports it). bench/load.py writes the run's logins and orders to the JSON
file BENCH_LOAD_CONFIG names.

- Reviewer: logged in (a session the driver made, as a browser's cookie), polls its queue as the
  page does (bench/queue_client.py: the clock and the cards it shows; a 204 when nothing changed,
  else only the changed cards; 2 s after a change, doubling to 30 s while nothing changes) and
  the recent tickets after a changed poll; every 20-60 s it loads the queue page and approves
  one of the reviews it may decide there, as the row's form posts it. A decision another
  reviewer made first (409) is the desk's answer to a race, counted as "decide lost to a
  colleague", not an error.
- With push (`--push`), each reviewer also holds the events stream open (reviews/doorbell.py),
  polls on each ring that concerns the cards its page shows or could show (at most every 2 s, as
  static/push.js) and otherwise every 30 s, as the page does while the stream is live.
- Helpdesk: one, hands in a customer's message through POST /api/messages/ at the set rate,
  each about a late order of its own, with its API token and an Idempotency-Key.
"""

from __future__ import annotations

import json
import os
import random
import re
import time
import uuid
from pathlib import Path

import gevent
import requests
from gevent.lock import Semaphore
from locust import HttpUser, constant_throughput, task

from bench.queue_client import SLOW, Screen

CONFIG = json.loads(Path(os.environ["BENCH_LOAD_CONFIG"]).read_text())
_logins = iter(CONFIG["reviewers"])
_orders = iter(CONFIG["orders"])

CSRF = re.compile(r'"X-CSRFToken": "([^"]+)"')
DECIDE = re.compile(
    r'id="decide-(\d+)"[^>]*>\s*<input type="hidden" name="csrfmiddlewaretoken" value="[^"]*">'
    r'\s*<input type="hidden" name="interrupt_id" value="([^"]*)"'
)
DECIDE_EVERY = tuple(CONFIG["decide_every"])  # 20-60 s; shorter in the test's tiny run
RING_EVERY, RING_SPREAD = 2.0, 0.4  # static/push.js: a poll every 2 s at most, spread by 0.4 s


class Reviewer(HttpUser):
    def pace(self) -> float:
        return SLOW if self.live else self.screen.delay  # static/desk.js's

    def wait_time(self) -> float:
        due = min(self.polled + self.pace(), self.decide_at)
        return max(due - time.monotonic(), 0.05)

    def on_start(self) -> None:
        login = next(_logins)
        self.client.cookies.set(CONFIG["session_cookie"], login["session"])
        self.screen = Screen()
        self.polling = Semaphore()  # the stream's rings and the task's polls, one at a time
        self.live = False
        self.rung, self.due = -RING_EVERY, False  # the last ring's poll; one on its way
        self.polled = 0.0  # when the last poll went
        self.recent_at = 0.0  # when the recent tickets may refresh on a moved clock
        self.csrf = ""
        if CONFIG["events_url"]:
            gevent.spawn(self.listen, login["session"])
        self.reviews: list[tuple[str, str]] = []
        self.load_queue()
        self.decide_at = time.monotonic() + random.uniform(*DECIDE_EVERY)

    def listen(self, session: str) -> None:
        """The events stream, as push.js holds it: a ring that concerns the page polls (ring),
        at most every 2 s (one coming sooner polls when those are up)."""
        cookies = {CONFIG["session_cookie"]: session}
        while True:
            try:
                with requests.get(
                    CONFIG["events_url"], cookies=cookies, stream=True, timeout=(5, 60)
                ) as stream:
                    self.live = stream.status_code == 200
                    for line in stream.iter_lines():
                        if not line.startswith(b"data:"):
                            continue
                        cards = json.loads(line[5:]).get("cards")
                        if cards is None or self.screen.concerns(cards):
                            self.ring()
            except requests.RequestException:
                pass
            self.live = False
            gevent.sleep(2)

    def ring(self) -> None:
        """static/push.js's ring: one poll at a time, 2 s after the last at the soonest, and up
        to RING_SPREAD later at random."""
        if self.due:
            return
        self.due = True
        wait = max(self.rung + RING_EVERY - time.monotonic(), 0) + random.uniform(0, RING_SPREAD)
        gevent.spawn_later(wait, self._rang)

    def _rang(self) -> None:
        self.due, self.rung = False, time.monotonic()
        self.poll_rows()

    def read_rows(self, html: str) -> None:
        self.screen.load(html)
        self.reviews = DECIDE.findall(html)

    def load_queue(self) -> None:
        with self.client.get("/", name="queue page", catch_response=True) as response:
            html = response.text or ""
            token = CSRF.search(html)
            if response.status_code != 200 or not token or 'id="queue-foot"' not in html:
                response.failure(f"queue page: {response.status_code}, no rows or no token")
                return
            self.csrf = token.group(1)
            self.read_rows(html)

    def htmx(self, target: str) -> dict[str, str]:
        return {
            "HX-Request": "true",
            "HX-Target": target,
            "HX-Trigger": target,
            "HX-Current-URL": self.host.rstrip("/") + "/",
        }

    def poll_rows(self) -> None:
        with self.polling:
            self._poll_rows()

    def _poll_rows(self) -> None:
        self.polled = time.monotonic()
        with self.client.get(
            "/",
            params=self.screen.params(),
            headers=self.htmx("queue-foot"),
            name="poll rows",
            catch_response=True,
        ) as response:
            if response.status_code not in (200, 204):
                response.failure(f"rows poll: {response.status_code}")
            self.screen.apply(response.status_code, response.text or "")
        if "ticketsChanged" in response.headers.get("HX-Trigger", ""):
            # Cards drawn or gone: the recent tickets refresh at once.
            self.client.get("/", headers=self.htmx("recent-tickets"), name="poll recent")
        elif response.status_code == 200 and time.monotonic() >= self.recent_at:
            self.recent_at = time.monotonic() + 30  # clockMoved, throttled to 30 s
            self.client.get("/", headers=self.htmx("recent-tickets"), name="poll recent")

    @task
    def poll(self) -> None:
        if time.monotonic() >= self.polled + self.pace():
            self.poll_rows()
        if time.monotonic() >= self.decide_at:
            self.decide_at = time.monotonic() + random.uniform(*DECIDE_EVERY)
            self.decide()

    def decide(self) -> None:
        self.load_queue()
        if not self.reviews:
            return  # nothing this reviewer may decide is waiting
        ticket_id, interrupt_id = random.choice(self.reviews)
        with self.client.post(
            f"/reviews/{ticket_id}/decide/",
            data={"interrupt_id": interrupt_id, "approve": "1"},
            headers={**self.htmx(f"review-{ticket_id}"), "X-CSRFToken": self.csrf},
            name="decide",
            catch_response=True,
        ) as response:
            if response.status_code == 409:
                response.success()
                self.environment.events.request.fire(
                    request_type="POST",
                    name="decide lost to a colleague",
                    response_time=0,
                    response_length=0,
                    exception=None,
                    context={},
                )
            elif response.status_code != 200:
                response.failure(f"decide: {response.status_code} {response.text[:200]}")
        self.poll_rows()  # queueChanged: the rows are fetched again at once


class Helpdesk(HttpUser):
    fixed_count = 1
    wait_time = constant_throughput(CONFIG["message_rate"])

    @task
    def hand_in(self) -> None:
        try:
            order = next(_orders)
        except StopIteration:
            return
        body = {
            "sender": order["email"],
            "sender_name": order["name"],
            "subject": "Late parcel",
            "body": f"Hi, my order #{order['number']} came a week late, can I have the "
            "delivery charge back?",
        }
        with self.client.post(
            "/api/messages/",
            data=json.dumps(body),
            headers={
                "Authorization": f"Bearer {CONFIG['token']}",
                "Idempotency-Key": uuid.uuid4().hex,
                "Content-Type": "application/json",
            },
            name="POST /api/messages/",
            catch_response=True,
        ) as response:
            if response.status_code != 202:
                response.failure(f"message: {response.status_code} {response.text[:200]}")
