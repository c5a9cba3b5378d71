"""The events process (`python -m config.events`): uvicorn serving the app over ASGI for the
queue's server-sent events (reviews/views/events.py), beside gunicorn's web. Bound to
EVENTS_BIND:EVENTS_PORT, 127.0.0.1:8001 by default: the proxy routes /queue/events/ here."""

from __future__ import annotations

import os

import uvicorn

if __name__ == "__main__":
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    uvicorn.run(
        "config.asgi:application",
        host=os.environ.get("EVENTS_BIND", "127.0.0.1"),
        port=int(os.environ.get("EVENTS_PORT", "8001")),
        lifespan="off",  # Django has no startup or shutdown hooks to run
        timeout_graceful_shutdown=5,  # a stream never ends by itself: its page reconnects
        access_log=False,
        log_level=os.environ.get("EVENTS_LOG_LEVEL", "info"),
    )
