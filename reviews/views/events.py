"""The queue's server-sent events (reviews/doorbell.py), served by the events process (ASGI)."""

from __future__ import annotations

from asgiref.sync import sync_to_async
from django.conf import settings
from django.db import connection
from django.http import (
    HttpRequest,
    HttpResponseBase,
    HttpResponseForbidden,
    StreamingHttpResponse,
)
from django.views.decorators.http import require_GET

from reviews.doorbell import doorbell, stream_role


def _role(request: HttpRequest) -> str | None:
    """Whose queue the requester's stream follows; then the request's database connection is
    closed: a stream stays open for hours and the watcher alone reads the database meanwhile."""
    try:
        return stream_role(request.user) if request.user.is_authenticated else None
    finally:
        connection.close()


@require_GET
async def queue_events(request: HttpRequest) -> HttpResponseBase:
    role = await sync_to_async(_role)(request)
    if role is None:
        response: HttpResponseBase = HttpResponseForbidden(
            "Log in as a reviewer to hear the queue."
        )
    else:
        response = StreamingHttpResponse(doorbell.stream(role), content_type="text/event-stream")
        response["Cache-Control"] = "no-store"
        response["X-Accel-Buffering"] = "no"  # nginx passes each event on as it comes
    # The page on the web's origin, when this process has an origin of its own (the demo).
    origin = request.headers.get("Origin", "")
    if origin in settings.REFUNDS_EVENTS_ORIGINS:
        response["Access-Control-Allow-Origin"] = origin
        response["Access-Control-Allow-Credentials"] = "true"
    response["Vary"] = "Origin, Cookie"
    return response
