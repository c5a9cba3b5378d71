"""Erasures in the JSON API: an admin asks for one (POST /api/erasures/) and reads it
(GET /api/erasures/<id>/). Here rather than in api/, which ops already depends on; routed in
config/urls.py under /api/, so the API's guard, error shape and schema cover them."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from django.core.exceptions import ValidationError
from django.db import models
from drf_spectacular.utils import extend_schema
from pydantic import Field, WithJsonSchema
from rest_framework.decorators import api_view
from rest_framework.exceptions import NotFound
from rest_framework.exceptions import PermissionDenied as Forbidden
from rest_framework.request import Request
from rest_framework.response import Response

from api.answers import Out
from api.bodies import ErasureIn
from api.errors import Unprocessable
from api.views import IDEMPOTENCY_HEADER, error_responses, with_idempotency_key
from ops.erasure import erasure_request
from ops.models import Erasure
from refunds import permissions


def _inline(choices: type[models.TextChoices]) -> WithJsonSchema:
    """The choices drawn in place: as a component, "Status" would be the message's too."""
    return WithJsonSchema({"type": "string", "enum": list(choices.values)})


class ErasureOut(Out):
    """An erasure as the workflow records it."""

    id: int
    kind: Annotated[Erasure.Kind, _inline(Erasure.Kind)] = Field(
        description="customer: asked for; retention: the daily job's."
    )
    status: Annotated[Erasure.Status, _inline(Erasure.Status)] = Field(
        description="running; waiting (for `waiting_for`, the customer's tickets still open, to "
        "end: nothing is erased under a running thread); done."
    )
    email: str | None = Field(
        description="The address being forgotten, until it is done; null after (the desk keeps "
        "it no longer) and for the retention job's."
    )
    orders: list[str] = Field(description="The order numbers the request named.")
    pseudonym: str = Field(description="What stands for the customer in what is kept.")
    requested_by: str
    requested_at: datetime
    finished_at: datetime | None
    waiting_for: list[int] = Field(description="Ids of the open tickets it waits for.")
    report: dict[str, dict[str, int]] = Field(
        description="Once done: per store, what was erased, counted "
        '({"messages": {"messages": 3}, "orders": {"orders": 2}, ...}).'
    )
    last_error: str


def erasure_out(erasure: Erasure) -> dict[str, Any]:
    done = erasure.status == Erasure.Status.DONE
    email = None if done or not erasure.email else erasure.email
    return ErasureOut.model_validate({**vars(erasure), "email": email}).model_dump(mode="json")


ADMINS_ONLY = "Only admins ask for and read erasures; this token's user is not an admin."


@extend_schema(
    operation_id="erasures_request",
    summary="Forget a customer: erase what the desk keeps of them (an admin's request)",
    description="Records the request and answers 202 at once; a worker runs the erasure, one "
    "store after another, and it waits (status waiting) while a ticket of theirs is still open. "
    "A request for a customer whose erasure has not ended answers that erasure. An email that "
    "is not an address is a 400; an order the desk lacks or that is not this customer's, a 422; "
    "either way nothing is recorded. Admins only (403).",
    request=ErasureIn,
    parameters=[IDEMPOTENCY_HEADER],
    responses={202: ErasureOut, **error_responses(400, 401, 403, 413, 415, 422, 429)},
)
@api_view(["POST"])
def erasures(request: Request) -> Response:
    if not permissions.is_admin(request.user):
        raise Forbidden(ADMINS_ONLY)
    return with_idempotency_key(request, lambda: _erase(request))


def _erase(request: Request) -> Response:
    given = ErasureIn.model_validate(request.data)
    try:
        erasure = erasure_request(
            email=given.email, orders=given.orders, by=f"admin {request.user.get_username()}"
        )
    except ValidationError as exc:
        raise Unprocessable(" ".join(exc.messages)) from None
    return Response(erasure_out(erasure), status=202)


@extend_schema(
    operation_id="erasures_read",
    summary="Read one erasure: its status, what it waits for, its report",
    responses={200: ErasureOut, **error_responses(401, 403, 404, 429)},
)
@api_view(["GET"])
def erasure_detail(request: Request, erasure_id: int) -> Response:
    if not permissions.is_admin(request.user):
        raise Forbidden(ADMINS_ONLY)
    erasure = Erasure.objects.filter(pk=erasure_id).first()
    if erasure is None:
        raise NotFound(f"There is no erasure {erasure_id}.")
    return Response(erasure_out(erasure))
