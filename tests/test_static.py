"""Static files in production come compressed from what `release` collected (WhiteNoise), not
from the source folders."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from devtools.processes import ROOT

FETCH = """
import json, django
django.setup()
from django.test import Client
client = Client(HTTP_HOST="localhost")
answer = client.get("/static/desk.css", HTTP_ACCEPT_ENCODING="gzip, br")
print(json.dumps({"status": answer.status_code, "encoding": answer.get("Content-Encoding", ""),
                  "cache": answer.get("Cache-Control", "")}))
"""


def production(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("REFUNDS_", "DEBUG", "DATABASE_URL", "CHECKPOINT_URL"))
    }
    env |= {"SECRET_KEY": "static-test", "REFUNDS_DATA_DIR": str(tmp_path), "LOG_LEVEL": "ERROR"}
    env["REFUNDS_ALLOW_FAKES"] = "true"  # a staging box: its console mail is not what is tested
    return subprocess.run(
        [sys.executable, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )


def test_production_serves_static_files_compressed_from_the_collected_folder(tmp_path):
    collected = production(tmp_path, "manage.py", "collectstatic", "--noinput", "-v0")
    assert collected.returncode == 0, collected.stderr[-2000:]
    assert (tmp_path / "static" / "desk.css.gz").exists()
    run = production(tmp_path, "-c", FETCH)
    assert run.returncode == 0, run.stderr[-2000:]
    answer = json.loads(run.stdout.strip().splitlines()[-1])
    assert answer["status"] == 200
    assert answer["encoding"] in ("gzip", "br"), answer


def test_every_kind_of_page_names_an_icon_that_is_served(client, agent):
    """A page without <link rel="icon"> makes browsers ask for /favicon.ico, a 404 on every
    page; the desk, Django admin's pages and the API docs each name the desk's icon."""
    from django.contrib.staticfiles import finders
    from django.template.loader import render_to_string

    client.force_login(agent)
    answers = [client.get(path) for path in ("/", "/admin/login/", "/api/docs/")]
    assert [a.status_code for a in answers] == [200, 200, 200]
    pages = [a.content.decode() for a in answers] + [render_to_string("503.html")]
    for html in pages:
        assert '<link rel="icon" href="/static/favicon.svg" type="image/svg+xml">' in html
    assert finders.find("favicon.svg")
