"""Several web nodes behind Debian's nginx with the shipped deploy/nginx.conf, as real processes
on PostgreSQL and Redis: two gunicorn nodes taken in turn with nothing sticky, and the events
process for /queue/events/, so a decision taken on one node rings a reviewer within a second."""

from __future__ import annotations

import os
import re
import shutil
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests
from django.conf import settings

from devtools.processes import ROOT, wait_for
from devtools.smtp_sink import free_port
from refunds.models import Decision
from tests.conftest import database_url, make_order, purge_broker
from tests.reviewing import awaiting_review
from tests.test_doorbell import card
from tests.test_events import Listener, Server, events_process
from tests.test_gunicorn import instance_env

NGINX = Path("/usr/sbin/nginx")
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        not settings.DATABASES["default"]["ENGINE"].endswith("postgresql")
        or not settings.CELERY_BROKER_URL.startswith("redis://"),
        reason="several nodes share PostgreSQL and Redis (the embedded defaults are one box's)",
    ),
]


def web_node(data: Path) -> Server:
    port = free_port()
    env = instance_env(
        data,
        DATABASE_URL=database_url(),
        CELERY_BROKER_URL=settings.CELERY_BROKER_URL,
        SECRET_KEY=settings.SECRET_KEY,
        PORT=str(port),
        WEB_CONCURRENCY="1",
    )
    command = [sys.executable, "-m", "gunicorn", "config.wsgi", "-c", "python:config.gunicorn"]
    data.mkdir(parents=True, exist_ok=True)
    return Server(command, data / "web.log", env, port)


def nginx_conf(ports: dict[str, int]) -> str:
    """deploy/nginx.conf with the ports of this test's processes in place of its own."""
    text = (ROOT / "deploy" / "nginx.conf").read_text()
    for shipped, port in ports.items():
        assert text.count(f"127.0.0.1:{shipped};") == 1, shipped
        text = text.replace(f"127.0.0.1:{shipped};", f"127.0.0.1:{port};")
    return text


@pytest.fixture
def desk(transactional_db, broker, tmp_path) -> Iterator[dict]:
    if not NGINX.exists():
        pytest.skip("Debian's nginx is not installed (apt-get install nginx)")
    one, two = web_node(tmp_path / "web1"), web_node(tmp_path / "web2")
    events = events_process(tmp_path, CELERY_BROKER_URL=settings.CELERY_BROKER_URL)
    port = free_port()
    prefix = tmp_path / "nginx"
    prefix.mkdir()
    conf = prefix / "nginx.conf"
    conf.write_text(
        nginx_conf({"8000": one.port, "8002": two.port, "8001": events.port, "8080": port})
    )
    # As root, nginx's workers would be nobody, who may not enter pytest's temporary folders.
    user = " user root;" if os.geteuid() == 0 else ""
    proxy = Server(
        [str(NGINX), "-p", str(prefix), "-c", str(conf), "-g", f"daemon off;{user}"],
        prefix / "nginx.out",
        dict(os.environ),
        port,
    )
    try:
        yield {"url": f"http://127.0.0.1:{port}", "one": one, "two": two, "log": prefix}
    finally:
        for server in (proxy, events, one, two):
            server.stop()
        purge_broker()
        shutil.rmtree(prefix / "proxy", ignore_errors=True)


def logged_in(base: str, username: str) -> requests.Session:
    """A browser's session: the login form, its CSRF cookie and its password."""
    session = requests.Session()
    session.get(f"{base}/login/", timeout=30)
    answer = session.post(
        f"{base}/login/",
        data={
            "username": username,
            "password": "pw",
            "csrfmiddlewaretoken": session.cookies["csrftoken"],
        },
        headers={"Referer": f"{base}/login/"},
        allow_redirects=False,
        timeout=30,
    )
    assert answer.status_code == 302, answer.text[:500]
    return session


def test_two_nodes_share_the_session_and_a_decision_on_one_rings_within_a_second(
    desk, agent, colleague, settings
):
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.PBKDF2PasswordHasher"]  # the nodes'
    for user in (agent, colleague):
        user.set_password("pw")
        user.save()
    base = desk["url"]
    reviewer = logged_in(base, "agent")  # through nginx: whichever node takes the login
    pages = [reviewer.get(f"{base}/", allow_redirects=False, timeout=30) for _ in range(6)]
    assert [p.status_code for p in pages] == [200] * 6  # the session holds on either node
    assert 'data-events-url="/queue/events/"' in pages[0].text
    wait_for(lambda: (desk["log"] / "access.log").exists(), what="nginx's access log")
    answered = re.findall(r"upstream=127\.0\.0\.1:(\d+)", (desk["log"] / "access.log").read_text())
    assert {str(desk["one"].port), str(desk["two"].port)} <= set(answered), answered

    ticket = awaiting_review(make_order("1042"))
    stream = Listener(f"{base}/queue/events/", dict(reviewer.cookies))
    assert stream.next()[0] == "clock"

    node_one = f"http://127.0.0.1:{desk['one'].port}"
    deciding = logged_in(node_one, "bea")
    deciding.get(f"{node_one}/", timeout=30)
    decided = deciding.post(
        f"{node_one}/reviews/{ticket.pk}/decide/",
        data={"interrupt_id": ticket.pending_interrupt_id, "approve": "1"},
        headers={"X-CSRFToken": deciding.cookies["csrftoken"], "Referer": node_one},
        allow_redirects=False,
        timeout=30,
    )
    posted = time.monotonic()
    assert decided.status_code == 302 and Decision.objects.filter(ticket=ticket).exists()
    name, data, _ = stream.next(timeout=1.0)
    assert time.monotonic() - posted < 1.0
    assert (name, data["cards"]) == ("cards", [card(ticket)])
    stream.close()
