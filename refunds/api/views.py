"""A small JSON API for integrations (a helpdesk): open a ticket, read where it is."""

from __future__ import annotations

import json
from functools import wraps

from django.contrib.auth.models import AnonymousUser
from django.db import connection
from django.http import HttpRequest, JsonResponse
from django.middleware.csrf import CsrfViewMiddleware
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_GET, require_http_methods

from refunds import permissions, persistence, services
from refunds.models import ApiToken, Ticket


def error(status: int, message: str) -> JsonResponse:
    return JsonResponse({"error": message}, status=status)


def api_auth(view):
    """A per-user token (`Authorization: Token <key>`) or the browser session with its CSRF."""

    @csrf_exempt
    @wraps(view)
    def wrapper(request: HttpRequest, *args, **kwargs):
        header = request.headers.get("Authorization", "")
        if header:
            scheme, _, key = header.partition(" ")
            token = ApiToken.objects.select_related("user").filter(key=key.strip()).first()
            if scheme.lower() != "token" or token is None or not token.user.is_active:
                return error(401, "Invalid API token.")
            request.user = token.user
        elif not request.user.is_authenticated:
            request.user = AnonymousUser()
            return error(401, "Authentication required: send 'Authorization: Token <key>'.")
        elif request.method not in ("GET", "HEAD", "OPTIONS"):
            rejected = CsrfViewMiddleware(lambda r: None).process_view(request, None, (), {})
            if rejected is not None:
                return error(403, "CSRF check failed; send the X-CSRFToken header.")
        return view(request, *args, **kwargs)

    return wrapper


def ticket_json(ticket: Ticket) -> dict:
    decision = ticket.decisions.select_related("reviewer").order_by("-decided_at").first()
    return {
        "id": ticket.pk,
        "thread_id": ticket.thread_id,
        "order_number": ticket.order.number,
        "note": ticket.note,
        "status": ticket.status,
        "required_role": ticket.required_role or None,
        "amount_cents": ticket.amount_cents,
        "nodes_run": ticket.nodes_run,
        "outcome_reason": ticket.outcome_reason,
        "last_error": ticket.last_error,
        "pending_review": (
            {"interrupt_id": ticket.pending_interrupt_id, "payload": ticket.pending_payload}
            if ticket.status == Ticket.Status.AWAITING_REVIEW
            else None
        ),
        "decision": (
            {
                "interrupt_id": decision.interrupt_id,
                "answer": decision.answer,
                "reason": decision.reason,
                "reviewer": decision.reviewer.username,
                "decided_at": decision.decided_at.isoformat(),
                "applied": decision.applied_at is not None,
            }
            if decision
            else None
        ),
        "charges": [
            {
                "receipt": c.receipt,
                "amount_cents": c.amount_cents,
                "created_at": c.created_at.isoformat(),
            }
            for c in ticket.charges.all()
        ],
        "emails": [
            {"to": e.to, "subject": e.subject, "sent_at": e.sent_at and e.sent_at.isoformat()}
            for e in ticket.emails.all()
        ],
        "created_at": ticket.created_at.isoformat(),
        "updated_at": ticket.updated_at.isoformat(),
    }


@api_auth
@require_http_methods(["POST"])
def tickets(request: HttpRequest) -> JsonResponse:
    """Open a ticket. With an `Idempotency-Key` header, a retry of the same request within 24
    hours gets the first response back (and opens nothing); the same key with a different body
    is refused with 422."""
    key = request.headers.get("Idempotency-Key", "").strip()
    if not key:
        status, body = _open_ticket(request)
        return JsonResponse(body, status=status)
    if len(key) > 255:
        return error(400, "The Idempotency-Key header is longer than 255 characters.")
    try:
        status, body = services.idempotent(
            user=request.user,
            key=key,
            request_body=request.body,
            respond=lambda: _open_ticket(request),
        )
    except services.IdempotencyConflict as exc:
        return error(422, str(exc))
    response = JsonResponse(body, status=status)
    response["Idempotency-Key"] = key
    return response


def _open_ticket(request: HttpRequest) -> tuple[int, dict]:
    try:
        body = json.loads(request.body or b"")
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        return 400, {"error": f"The body is not valid JSON: {exc}."}
    if not isinstance(body, dict):
        return 400, {"error": "The body must be a JSON object."}
    unknown = set(body) - {"order_number", "note"}
    if unknown:
        return 400, {"error": f"Unknown field(s): {', '.join(sorted(unknown))}."}
    order_number, note = body.get("order_number"), body.get("note", "")
    if order_number is None:
        return 400, {"error": "Missing field: order_number."}
    if not isinstance(order_number, str | int) or isinstance(order_number, bool):
        return 400, {"error": "order_number must be a string."}
    if not isinstance(note, str):
        return 400, {"error": "note must be a string."}
    try:
        ticket = services.ticket_open(
            order_number=str(order_number), note=note, opened_by=request.user
        )
    except services.TicketAlreadyOpen as exc:
        return 409, {"error": str(exc), "ticket": _ticket_ref(request, exc.ticket)}
    except services.RefundError as exc:
        return 400, {"error": str(exc)}
    return 201, _ticket_ref(request, ticket)


def _ticket_ref(request: HttpRequest, ticket: Ticket) -> dict:
    return {
        "id": ticket.pk,
        "thread_id": ticket.thread_id,
        "status": ticket.status,
        "url": request.build_absolute_uri(f"/api/tickets/{ticket.pk}/"),
    }


@api_auth
@require_GET
def ticket_detail(request: HttpRequest, ticket_id: int) -> JsonResponse:
    # A ticket outside the caller's scope is as absent as one that does not exist.
    ticket = permissions.visible(request.user).select_related("order").filter(pk=ticket_id).first()
    if ticket is None:
        return error(404, f"There is no ticket {ticket_id}.")
    return JsonResponse(ticket_json(ticket))


@require_GET
def healthz(request: HttpRequest) -> JsonResponse:
    checks = {}
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
        checks["database"] = "ok"
    except Exception as exc:  # noqa: BLE001 - a health check reports, it does not raise
        checks["database"] = f"error: {exc}"
    try:
        persistence.checkpointer().get_tuple({"configurable": {"thread_id": "healthz"}})
        checks["checkpoints"] = "ok"
    except Exception as exc:  # noqa: BLE001
        checks["checkpoints"] = f"error: {exc}"
    healthy = all(v == "ok" for v in checks.values())
    return JsonResponse(
        {"status": "ok" if healthy else "error", **checks}, status=200 if healthy else 503
    )
