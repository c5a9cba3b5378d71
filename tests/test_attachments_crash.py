"""A reply's photos, whatever dies: real workers killed between the photos being stored (by the
inbound webhook, before the message's row commits) and the resume the reply brings. Counted where
they land: each photo once at the S3 server, named by its row, and the reply applied once, in one
line of checkpoint history."""

from __future__ import annotations

import pytest

from intake.models import Attachment, Message
from refunds.models import CustomerQuestion, Decision
from tests.conftest import wait_for
from tests.quiescence import quiesce
from tests.test_ask_customer_crash import ask, until
from tests.test_attachments import PNG, WEBHOOK_KEY, photo, post, reply_email
from tests.test_crash import branch_points, crash_plan, open_and_wait_for_review  # noqa: F401

pytestmark = pytest.mark.slow


@pytest.fixture
def sweep_now(settings):
    settings.REFUNDS_SWEEP_GRACE_SECONDS = 0
    settings.REFUNDS_REWAKE_SECONDS = 1


@pytest.mark.parametrize("point", ["resume", "await_reply"])
def test_a_worker_killed_after_the_photos_were_stored_keeps_them_and_resumes_once(
    workers,
    sinks,
    crash_plan,  # noqa: F811
    sweep_now,
    bucket,  # noqa: F811
    client,
    settings,
    agent,
    admin_user,
    late_order,
    point,
):
    settings.ANYMAIL = {"MAILGUN_WEBHOOK_SIGNING_KEY": WEBHOOK_KEY}
    env = crash_plan({})
    doomed = workers("doomed", pool="solo", env=env)
    ticket = open_and_wait_for_review("1042", agent)
    ask(ticket, admin_user)
    until(ticket, "awaiting_customer")
    question = CustomerQuestion.objects.get(ticket=ticket)
    crash_plan({"*": {"point": point, "times": 1}})  # armed for the reply's resume
    files = [("front.jpg", "image/jpeg", photo()), ("side.png", "image/png", photo(PNG))]
    assert post(client, reply_email(question, files)).status_code == 200
    wait_for(lambda: not doomed.alive, timeout=30, what="the worker to die around the resume")
    workers("second", pool="solo", env=env)
    until(ticket, "awaiting_review")
    quiesce(workers)
    kept = list(Attachment.objects.filter(message=Message.objects.get()))
    assert bucket.keys() == sorted(f"attachments/{a.name}" for a in kept) and len(kept) == 2
    [reply] = Decision.objects.filter(ticket=ticket, answer="reply")
    assert reply.applied_at is not None and reply.refused_reason == ""
    assert branch_points(ticket) == []
    client.force_login(admin_user)
    page = client.get(f"/tickets/{ticket.pk}/").content.decode()
    assert all(f'<img src="/attachments/{a.pk}/"' in page for a in kept)
