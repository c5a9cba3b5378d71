"""The JSON API for integrations (a helpdesk), on Django REST framework: open a ticket, list and
read tickets. Who may read what is refunds.permissions.visible(), as on the pages."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from django.core.exceptions import PermissionDenied
from django.db.models import Prefetch
from django.utils import timezone
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from pydantic import ValidationError as BodyRefused
from rest_framework import serializers
from rest_framework.decorators import api_view
from rest_framework.exceptions import NotFound, ParseError
from rest_framework.exceptions import PermissionDenied as Forbidden
from rest_framework.pagination import PageNumberPagination
from rest_framework.request import Request
from rest_framework.response import Response

from api import idempotency
from api.answers import (
    DecisionMade,
    Error,
    MessageOut,
    OrdersPushed,
    ReturnArrived,
    ReturnLineOut,
    ReturnOut,
    TicketOut,
    TicketPage,
    TicketRef,
    ticket_out,
    ticket_ref,
)
from api.bodies import DecisionIn, MessageIn, OrdersPush, ReturnIn, TicketFilter, TicketOpen
from api.errors import ShopUnavailable, Unprocessable, body
from core.clock import local_words
from intake import services as intake
from intake.models import Message
from refunds import order_source, permissions, selectors, services
from refunds.models import Decision, TicketOrder
from refunds.services import orders

IDEMPOTENCY_KEY_MAX = 255
RECEIVED_SINCE = datetime(2000, 1, 1, tzinfo=UTC)


class TicketPages(PageNumberPagination):
    page_size = 50
    page_size_query_param = "page_size"
    max_page_size = 200


def error_responses(*codes: int) -> dict:
    return {code: OpenApiResponse(Error) for code in codes}


def _with_details(tickets):
    return tickets.select_related("order").prefetch_related(
        Prefetch("links", queryset=TicketOrder.objects.select_related("order")),
        "charges",
        "emails",
        Prefetch("decisions", queryset=Decision.objects.select_related("reviewer")),
    )


LIST_PARAMETERS: list[Any] = [
    TicketFilter,
    OpenApiParameter("page", OpenApiTypes.INT, description="From 1; past the last page, 404."),
    OpenApiParameter(
        "page_size", OpenApiTypes.INT, description="Tickets per page: 50 unless given, at most 200."
    ),
]
IDEMPOTENCY_HEADER = OpenApiParameter(
    "Idempotency-Key",
    {"type": "string", "maxLength": IDEMPOTENCY_KEY_MAX},
    location=OpenApiParameter.HEADER,
    description="Any string up to 255 characters, unique per request: the same key and body "
    "within 24 hours answer the first response again; the same key with another body, 422. "
    "A key is the caller's, for this endpoint only; after 24 hours it is new again.",
)


@extend_schema(
    methods=["GET"],
    operation_id="tickets_list",
    summary="List the tickets you may read, newest first",
    parameters=LIST_PARAMETERS,
    responses={200: TicketPage, **error_responses(400, 401, 404, 429)},
)
@extend_schema(
    methods=["POST"],
    operation_id="tickets_open",
    summary="Open a refund ticket for an order, or one for several orders of one customer",
    request=TicketOpen,
    parameters=[IDEMPOTENCY_HEADER],
    responses={201: TicketRef, **error_responses(400, 401, 403, 409, 413, 415, 422, 429, 503)},
)
@api_view(["GET", "POST"])
def tickets(request: Request) -> Response:
    if request.method == "GET":
        return _list(request)
    if request.headers.get("Idempotency-Key", "").strip():
        _order_from_the_shop(request)  # before the idempotent transaction: no network wait in one
    return with_idempotency_key(request, lambda: _open(request))


def with_idempotency_key(request: Request, respond: Callable[[], Response]) -> Response:
    """`respond()`, or with an Idempotency-Key header the response its first use got."""
    key = request.headers.get("Idempotency-Key", "").strip()
    if len(key) > IDEMPOTENCY_KEY_MAX:
        raise serializers.ValidationError(
            f"The Idempotency-Key header is longer than {IDEMPOTENCY_KEY_MAX} characters."
        )
    if not request.body:
        raise ParseError("The body is not valid JSON: it is empty.")
    if not key:
        return respond()
    raw = request.body  # hashed as sent; read before DRF parses it

    def kept() -> tuple[int, dict]:
        response = respond()
        return response.status_code, response.data

    match = request.resolver_match
    endpoint = f"{request.method} {match.view_name}" if match else request.path
    try:
        status, data = idempotency.idempotent(
            user=request.user, endpoint=endpoint, key=key, request_body=raw, respond=kept
        )
    except idempotency.IdempotencyConflict as exc:
        raise Unprocessable(str(exc)) from None
    return Response(data, status=status, headers={"Idempotency-Key": key})


def _order_from_the_shop(request: Request) -> None:
    """An order the desk lacks, asked of the shop (REFUNDS_ORDER_SOURCE) and stored."""
    if not order_source.configured():
        return  # nothing to ask: the desk's own orders are read inside the transaction
    try:
        given = TicketOpen.model_validate(request.data)
    except BodyRefused:
        return  # _open says what is wrong with the body
    for number in given.order_numbers or [given.order_number]:
        try:
            found = services.order_find(order_number=number)
        except services.ShopUnavailable as exc:
            raise ShopUnavailable(str(exc)) from None
        if found is None:  # said here: inside the transaction the shop is not asked again
            raise Unprocessable(f"There is no order {number}.")


def _open(request: Request) -> Response:
    given = TicketOpen.model_validate(request.data)
    try:
        ticket = services.ticket_open(
            opened_by=request.user, **given.model_dump(exclude_unset=True, exclude_none=True)
        )
    except services.TicketAlreadyOpen as exc:  # answered, not raised: an Idempotency-Key keeps it
        ref = ticket_ref(exc.ticket, request)
        return Response(body(409, str(exc), ticket=ref, order_number=exc.number), status=409)
    except services.ShopUnavailable as exc:
        raise ShopUnavailable(str(exc)) from None
    except PermissionDenied as exc:
        raise Forbidden(str(exc)) from None
    except services.OrdersRefused as exc:  # well-formed, but the desk's orders say no
        raise Unprocessable(str(exc)) from None
    except services.RefundError as exc:
        raise serializers.ValidationError(str(exc)) from None
    return Response(ticket_ref(ticket, request), status=201)


LOOKUPS = {
    "status": "status",
    "order_number": "links__order__number",
    "required_role": "required_role",
    "created_after": "created_at__gte",
    "created_before": "created_at__lt",
}


def _list(request: Request) -> Response:
    # A plain dict: a QueryDict reads "?required_role=" as not given; the schema refuses it.
    query = TicketFilter.model_validate(request.query_params.dict())
    wanted = query.model_dump(include=query.model_fields_set)
    found = permissions.visible(request.user).order_by("-id")
    found = found.filter(**{LOOKUPS[name]: value for name, value in wanted.items()})
    if "order_number" in wanted:
        found = found.distinct()  # any order the ticket covers, not only its first
    pages = TicketPages()
    page = pages.paginate_queryset(_with_details(found), request)
    return pages.get_paginated_response([ticket_out(ticket) for ticket in page or []])


@extend_schema(
    operation_id="tickets_read",
    summary="Read one ticket: status, pending review, decision, charges, emails",
    responses={200: TicketOut, **error_responses(401, 404, 429)},
)
@api_view(["GET"])
def ticket_detail(request: Request, ticket_id: int) -> Response:
    # A ticket outside the caller's scope is as absent as one that does not exist.
    ticket = _with_details(permissions.visible(request.user)).filter(pk=ticket_id).first()
    if ticket is None:
        raise NotFound(f"There is no ticket {ticket_id}.")
    return Response(ticket_out(ticket))


@extend_schema(
    operation_id="tickets_decide",
    summary="Answer a ticket's pending review: per order, approve with the parts refunded or "
    "reject with a reason (or ask the customer)",
    request=DecisionIn,
    responses={201: DecisionMade, **error_responses(400, 401, 403, 404, 409, 413, 415, 422, 429)},
)
@api_view(["POST"])
def ticket_decision(request: Request, ticket_id: int) -> Response:
    """The same rules as the desk's pages (refunds.services.ticket_decide): role, cover,
    four-eyes, a colleague's live claim, one answer per review."""
    ticket = permissions.visible(request.user).select_related("order").filter(pk=ticket_id).first()
    if ticket is None:
        raise NotFound(f"There is no ticket {ticket_id}.")
    given = DecisionIn.model_validate(request.data)
    said = {"ticket": ticket, "interrupt_id": given.interrupt_id, "reviewer": request.user}
    try:
        if given.answer == "ask":
            decision = services.ticket_ask(**said, question=given.reason, note=given.note)
        else:
            orders = services.review_answers(
                ticket,
                answer=given.answer,
                reason=given.reason,
                amount_cents=given.amount_cents,
                # Each order's answer as given: its parts' fields left out stay out.
                orders=given.model_dump(exclude_unset=True, exclude_none=True).get("orders"),
            )
            decision = services.ticket_decide(**said, orders=orders, note=given.note)
    except PermissionDenied as exc:
        raise Forbidden(str(exc)) from None
    except (services.AlreadyDecided, services.ClaimTaken) as exc:
        return Response(body(409, str(exc)), status=409)
    except services.RefundError as exc:  # well-formed, but the ticket's review says no
        raise Unprocessable(str(exc)) from None
    made = {**vars(decision), "reviewer": request.user.username}
    return Response(DecisionMade.model_validate(made).model_dump(mode="json"), status=201)


PUSH_ORDERS = "refunds.push_orders"


@extend_schema(
    operation_id="orders_push",
    summary="Create or update up to 1,000 orders by order number (the shop pushes them as they "
    "ship)",
    description="The same checks and the same upsert as `manage.py import_orders`. Each order "
    "is answered on its own: created, updated, unchanged, or refused with the reason (a bad "
    "date, a negative amount, an unknown currency, a NUL character, a number twice in one "
    "request, an order the desk has refunded money for or that has an open ticket; with its "
    "lines: a line without a price or quantity, a quantity below 1, a line id twice, a total "
    "that does not add up, a paid amount above the total). A refused order changes nothing. "
    "Needs "
    "the permission refunds.push_orders (the group "
    "Shop integrations).",
    request=OrdersPush,
    parameters=[IDEMPOTENCY_HEADER],
    responses={200: OrdersPushed, **error_responses(400, 401, 403, 413, 415, 422, 429)},
)
@api_view(["POST"])
def orders_push(request: Request) -> Response:
    if not request.user.has_perm(PUSH_ORDERS):
        raise Forbidden(
            "Pushing orders needs the permission refunds.push_orders (the group Shop "
            "integrations); this token's user does not have it."
        )
    return with_idempotency_key(request, lambda: _push(request))


def _push(request: Request) -> Response:
    sent = enumerate(OrdersPush.model_validate(request.data).orders, start=1)
    outcomes = orders.orders_upsert(orders.order_read(line, raw) for line, raw in sent)
    results = [dataclasses.asdict(o) for o in outcomes]
    return Response({**orders.counts(outcomes), "results": results}, status=200)


@extend_schema(
    operation_id="messages_receive",
    summary="Hand in a customer's message: the intake reads it and opens the ticket",
    description="One message per Idempotency-Key (required): the same key and body again "
    "within 24 hours answer the first response, so a message delivered twice is one message; "
    "the key used again later answers 422 naming its message. The answer is "
    "202 while the intake reads it (status received); the message's status and ticket follow "
    "as it is placed. The sender must be an email address and the body some text of at most "
    "INTAKE_MAX_CHARS characters; anything else is a 400 and nothing is stored; a "
    "received_at before 2000 or more than a day ahead, a 422. Anyone who "
    "may open tickets (POST /api/tickets/) may hand in messages; the caller is the opener of "
    "the ticket a message opens, and four-eyes keeps them from deciding it.",
    request=MessageIn,
    parameters=[
        OpenApiParameter(
            "Idempotency-Key",
            # Spaces around the key are not part of it: a blank key is no key.
            {"type": "string", "maxLength": IDEMPOTENCY_KEY_MAX, "pattern": r"\S"},
            location=OpenApiParameter.HEADER,
            required=True,
            description=IDEMPOTENCY_HEADER.description,
        )
    ],
    responses={202: MessageOut, **error_responses(400, 401, 403, 413, 415, 422, 429)},
)
@api_view(["POST"])
def messages(request: Request) -> Response:
    refusal = permissions.open_refusal(request.user)
    if refusal:
        raise Forbidden(refusal)
    key = request.headers.get("Idempotency-Key", "").strip()
    if not key:
        raise serializers.ValidationError(
            "POST /api/messages/ needs an Idempotency-Key header (any string up to "
            f"{IDEMPOTENCY_KEY_MAX} characters, one per message): it is what makes a message "
            "delivered twice one message."
        )
    return with_idempotency_key(request, lambda: _receive(request, key))


def _receive(request: Request, key: str) -> Response:
    data = MessageIn.model_validate(request.data)
    received_at = data.received_at or timezone.now()
    # Year 1 or next month is a client's default or a wrong zone, not when anyone wrote: no
    # order a helpdesk brings is older than 2000, and a day ahead covers every zone's offset.
    if not RECEIVED_SINCE <= received_at <= timezone.now() + timedelta(days=1):
        raise Unprocessable(
            f"received_at {received_at.isoformat()} is not when a customer wrote: it must be from "
            "2000-01-01 to a day from now."
        )
    try:
        message, created = intake.message_receive(
            channel=Message.Channel.API,
            key=f"{request.user.pk}:{key}",
            sender=data.sender.strip(),
            sender_name=data.sender_name,
            subject=data.subject,
            body=data.body,
            received_at=received_at,
            raw=request.body.decode("utf-8", errors="replace"),
            brought_by=request.user,
            recipients=data.to,
            references=data.in_reply_to,
        )
    except intake.MessageRefused as exc:
        raise serializers.ValidationError(str(exc)) from None
    if not created:
        # Within 24 hours the kept answer replays before this point; an older use of the key
        # brought in this message, and answering as if this body were it would drop the new one.
        raise Unprocessable(
            f"Message {message.pk} was handed in with this Idempotency-Key on "
            f"{local_words(message.created_at)}, longer ago than the 24 hours a key's answer is "
            "kept; a new message needs a new key."
        )
    out = MessageOut(
        id=message.pk,
        status=Message.Status(message.status),
        received_at=message.received_at,
        ticket=message.ticket_id,
    )
    return Response(out.model_dump(mode="json"), status=202)


@extend_schema(
    operation_id="returns_arrived",
    summary="Say what came back of a return (the warehouse's word): received or flagged",
    description="The goods of an approval on return, named by the reference on the parcel. "
    "`received` alone: everything asked back came back; with `lines`, what did, by line id or "
    "SKU (the rest did not): the ticket refunds exactly that, restocked. `flagged` with a "
    "`reason` sends the ticket back to a manager. 201 when the word is taken; the same word "
    "again answers 200 with outcome `already` and changes nothing. An unknown reference, a "
    "line never asked back, more units than asked, or another word on a return already "
    "settled is a 422 and changes nothing. Desk users only (any desk group).",
    request=ReturnIn,
    responses={
        201: ReturnArrived,
        200: ReturnArrived,
        **error_responses(400, 401, 403, 413, 415, 422, 429),
    },
)
@api_view(["POST"])
def returns(request: Request) -> Response:
    refusal = permissions.return_refusal(request.user)
    if refusal:
        raise Forbidden(refusal)
    given = ReturnIn.model_validate(request.data)
    try:
        arrival = services.return_arrived(**given.word(), by=request.user, source="api")
    except services.RefundError as exc:  # well-formed, but the return says no
        raise Unprocessable(str(exc)) from None
    out = ReturnArrived(
        ticket=arrival.ticket_id, reference=arrival.reference, outcome=arrival.outcome
    )
    return Response(out.model_dump(mode="json"), status=200 if out.outcome == "already" else 201)


@extend_schema(
    operation_id="returns_read",
    summary="Read a return: the lines asked back and what the warehouse said",
    responses={200: ReturnOut, **error_responses(401, 403, 404, 429)},
)
@api_view(["GET"])
def return_detail(request: Request, reference: str) -> Response:
    refusal = permissions.return_refusal(request.user)
    if refusal:
        raise Forbidden(refusal)
    try:
        found = services.return_find(reference)
    except services.RefundError as exc:
        raise NotFound(str(exc)) from None
    out = ReturnOut(
        reference=found.reference,
        ticket=found.ticket_id,
        status=selectors.return_state(found),
        asked_at=found.asked_at,
        arrived_at=found.arrived_at,
        reason=str((found.arrived or {}).get("reason") or ""),
        lines=[ReturnLineOut.model_validate(line) for line in selectors.return_lines(found)],
    )
    return Response(out.model_dump(mode="json"))
