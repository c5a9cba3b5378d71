"""GET /healthz: 200 when the database and the checkpoint store answer, 503 with a reason if not."""

from __future__ import annotations

import pytest

from refunds import persistence


class BrokenCheckpointer:
    def get_tuple(self, config):
        raise OSError("unable to open database file")


class BrokenGraph:
    checkpointer = BrokenCheckpointer()


def test_it_answers_200_when_the_database_and_checkpoints_answer(client, db):
    response = client.get("/healthz")

    assert response.status_code == 200
    assert response["Content-Type"] == "application/json"
    assert response.json() == {"status": "ok", "database": "ok", "checkpoints": "ok"}


def test_it_needs_no_login(client, db):
    assert client.get("/healthz").status_code == 200  # load balancers have no session


def test_it_answers_503_when_the_checkpoint_store_is_broken(client, db, monkeypatch):
    monkeypatch.setattr(persistence, "checkpointer", lambda: BrokenGraph().checkpointer)

    response = client.get("/healthz")

    assert response.status_code == 503
    assert response.json() == {
        "status": "error",
        "database": "ok",
        "checkpoints": "error: unable to open database file",
    }


def test_it_answers_503_when_the_checkpoint_store_cannot_even_open(client, db, monkeypatch):
    def cannot_open():
        raise RuntimeError("connection refused")

    monkeypatch.setattr(persistence, "checkpointer", cannot_open)

    response = client.get("/healthz")

    assert response.status_code == 503
    assert response.json()["checkpoints"] == "error: connection refused"


def test_it_answers_503_when_the_database_is_broken(client, db, monkeypatch):
    from refunds.api import views as api

    class BrokenConnection:
        def cursor(self):
            raise OSError("database is locked")

    monkeypatch.setattr(api, "connection", BrokenConnection())

    response = client.get("/healthz")

    assert response.status_code == 503
    assert response.json()["database"] == "error: database is locked"
    assert response.json()["checkpoints"] == "ok"


@pytest.mark.parametrize("method", ["post", "put", "delete"])
def test_it_rejects_other_methods(client, db, method):
    assert getattr(client, method)("/healthz").status_code == 405
