"""Admins' pages: a thread's history (time travel, fork), the failed and undelivered queues,
reconcile's report, a customer's memory and their erasure. Managers read (not reconcile's nor
the erasures); only admins act."""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied, ValidationError
from django.http import HttpRequest, HttpResponse, HttpResponseBadRequest
from django.shortcuts import get_object_or_404, redirect, render
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from intake.models import Message
from intake.services import message_retry as hand_back
from ops import diagram, forms, history, selectors
from ops.erasure import erasure_request
from ops.models import PrunedThread
from refunds import forks, permissions, policy, services
from refunds.flow.nodes import charge_key
from refunds.flow.words import dollars, node_words
from refunds.models import AuditEvent, Email, Order, Ticket, of_customer
from refunds.money import money_moved

EMAIL_MAX = 254  # RFC 5321's longest path


def _only(allowed: Callable, refusal: str) -> Callable[[Callable], Callable]:
    """Signed in, and `allowed(user)`; anyone else gets a 403 saying `refusal`."""

    def decorate(view: Callable) -> Callable:
        @wraps(view)
        def wrapper(request: HttpRequest, *args, **kwargs) -> HttpResponse:
            if not allowed(request.user):
                raise PermissionDenied(refusal)
            return view(request, *args, **kwargs)

        return login_required(wrapper)

    return decorate


readers_only = _only(
    permissions.oversees, "Only admins and managers see thread histories and queues."
)
admins_only = _only(permissions.is_admin, "Only admins do this.")


@require_GET
@readers_only
def thread_history(request: HttpRequest, ticket_id: int) -> HttpResponse:
    ticket = get_object_or_404(
        Ticket.objects.select_related("order").prefetch_related("links__order"), pk=ticket_id
    )
    before = request.GET.get("before") or None
    data = history.page(ticket, before=before)
    trail, current = history.path(ticket)
    context = {
        "ticket": ticket,
        "page": data,
        "before": before,
        "diagram": diagram.svg(trail, current),
        "current_words": [node_words(n) for n in current],
        "order_lanes": history.order_lanes(ticket),
        "audit": ticket.audit_events.select_related("actor"),
        "pruned": PrunedThread.objects.filter(ticket=ticket).first(),
        "erased": ticket.audit_events.filter(action=AuditEvent.Action.ERASE).first(),
        "is_admin": permissions.is_admin(request.user),
        "may_fork": permissions.is_admin(request.user)
        and ticket.status in services.FORKABLE
        and money_moved(ticket) is None
        and len(ticket.order_numbers()) < 2,  # ticket_fork refuses a ticket of several orders
    }
    return render(request, "ops/history.html", context)


def _preview(ticket: Ticket, base, cents: int) -> dict:
    values = base.values or {}
    role = policy.review_role(
        cents, flagged=bool(values.get("flags")), limit_cents=policy.agent_limit_cents()
    )
    who = "a manager" if role == "manager" else "a support agent"
    return {
        "from_step": (base.metadata or {}).get("step"),
        "from_amount": values.get("amount_cents"),
        "amount": cents,
        "steps": [
            f"{node_words('triage')}: {dollars(cents)} goes to {who}.",
            f"{node_words('approve')}: a new review; the review now pending is withdrawn and an "
            "answer to it is refused.",
            f"On approval, the refund of {dollars(cents)} is charged, then the customer gets "
            "the confirmation email. On rejection, the customer is told why.",
        ],
        "key": charge_key(ticket.thread_id, ticket.order.number, cents),
        "old_key": charge_key(
            ticket.thread_id, ticket.order.number, values.get("amount_cents") or 0
        ),
    }


@require_http_methods(["GET", "POST"])
@admins_only
def thread_fork(request: HttpRequest, ticket_id: int) -> HttpResponse:
    """Preview first (the "preview" button), then apply (the "apply" button): one form."""
    ticket = get_object_or_404(Ticket.objects.select_related("order"), pk=ticket_id)
    data = request.POST if request.method == "POST" else None
    initial = {"checkpoint": request.GET.get("checkpoint", "")}
    form = forms.ForkForm(data, initial=initial)
    preview, error = None, ""
    if form.is_valid():
        checkpoint = form.cleaned_data["checkpoint"]
        base = forks.fork_base(ticket.thread_id, checkpoint) if checkpoint else None
        cents = form.cleaned_data["amount"]
        try:
            if base is None:
                raise services.RefundError(
                    "A fork starts from a checkpoint before the charge: pick one in the history."
                )
            if cents == (base.values or {}).get("amount_cents"):
                raise services.RefundError(
                    f"The amount is already {dollars(cents)} there; a fork must change it."
                )
            services.fork_checked(ticket, cents, form.cleaned_data["reason"])
            if "apply" not in request.POST:
                preview = _preview(ticket, base, cents)
            else:
                services.ticket_fork(
                    ticket=ticket,
                    amount_cents=cents,
                    reason=form.cleaned_data["reason"],
                    by=request.user,
                    from_checkpoint_id=checkpoint,
                )
                messages.success(
                    request,
                    f"Forked ticket {ticket.pk} at step {(base.metadata or {}).get('step')} "
                    f"with {dollars(cents)}; a worker applies it and the refund is reviewed again.",
                )
                return redirect("ops:history", ticket_id=ticket.pk)
        except services.RefundError as exc:
            error = str(exc)
    status = 400 if error or (data is not None and not form.is_valid()) else 200
    context = {"ticket": ticket, "form": form, "preview": preview, "error": error}
    return render(request, "ops/fork.html", context, status=status)


@require_GET
@readers_only
def failed(request: HttpRequest) -> HttpResponse:
    return render(
        request,
        "ops/failed.html",
        {
            "tickets": selectors.failed_threads(),
            "messages_given_up": selectors.failed_messages(),
            "is_admin": permissions.is_admin(request.user),
        },
    )


@require_POST
@admins_only
def retry(request: HttpRequest, ticket_id: int) -> HttpResponse:
    ticket = get_object_or_404(Ticket, pk=ticket_id)
    if services.ticket_retry(ticket=ticket, by=request.user):
        messages.success(request, f"Ticket {ticket.pk} is back in line; a worker takes it up.")
    else:
        messages.error(request, f"Ticket {ticket.pk} is not failed any more; nothing done.")
    return redirect("ops:failed")


@require_POST
@admins_only
def message_retry(request: HttpRequest, message_id: int) -> HttpResponse:
    message = get_object_or_404(Message, pk=message_id)
    if hand_back(message=message, by=request.user):
        messages.success(
            request, f"Message {message.pk} from {message.sender} is back with the intake."
        )
    else:
        messages.error(request, f"Message {message.pk} was handed back already; nothing done.")
    return redirect("ops:failed")


@require_GET
@readers_only
def undelivered(request: HttpRequest) -> HttpResponse:
    return render(
        request,
        "ops/undelivered.html",
        {"emails": selectors.undelivered(), "is_admin": permissions.is_admin(request.user)},
    )


@require_POST
@admins_only
def resend(request: HttpRequest, email_id: int) -> HttpResponse:
    email = get_object_or_404(Email, pk=email_id)
    try:
        services.email_resend(email_id=email.pk, by=request.user)
    except services.RefundError as exc:
        messages.error(request, str(exc))
    else:
        messages.success(request, f"Sending “{email.subject}” to {email.to} again.")
    # The ticket page's Resend comes back to the ticket; the queue's to the queue.
    back = request.POST.get("next", "")
    safe = url_has_allowed_host_and_scheme(back, {request.get_host()}, request.is_secure())
    return redirect(back if safe else "ops:undelivered")


@require_GET
@admins_only
def reconcile(request: HttpRequest) -> HttpResponse:
    """The last report of `reconcile` (the command's or beat's), with the runs before it."""
    runs = selectors.reconcile_runs()
    context = {"last": runs[0] if runs else None, "earlier": runs[1:]}
    return render(request, "ops/reconcile.html", context)


def _not_an_address(email: str) -> HttpResponse | None:
    # PostgreSQL answers a NUL with an error (a 500): what cannot be an address is refused.
    if 0 < len(email) <= EMAIL_MAX and email.isprintable() and "@" in email:
        return None
    return HttpResponseBadRequest(
        "That is not a customer's email address (printable characters with an @, at most "
        f"{EMAIL_MAX}).",
        content_type="text/plain; charset=utf-8",
    )


def _order_numbers(email: str) -> list[str]:
    return list(
        of_customer(Order.objects.all(), email).order_by("number").values_list("number", flat=True)
    )


def _customer_page(
    request: HttpRequest, email: str, form: forms.EraseForm | None = None, status: int = 200
) -> HttpResponse:
    is_admin = permissions.is_admin(request.user)
    if form is None and is_admin:
        form = forms.EraseForm(initial={"email": email}, numbers=_order_numbers(email))
    context = {
        "email": email,
        "memory": selectors.customer_memory(email),
        "tickets": of_customer(Ticket.objects.all(), email, field="order__customer_email")
        .select_related("order")
        .order_by("-id")[:50],
        "audit_actions": AuditEvent.Action,
        "is_admin": is_admin,
        "erase_form": form,
    }
    return render(request, "ops/customer.html", context, status=status)


@require_GET
@readers_only
def customer(request: HttpRequest, email: str) -> HttpResponse:
    return _not_an_address(email) or _customer_page(request, email)


@require_POST
@admins_only
def erasure_new(request: HttpRequest) -> HttpResponse:
    """The customer page's "Erase this customer"; a refusal is shown there and changes nothing."""
    email = request.POST.get("email", "")
    if refused := _not_an_address(email):
        return refused
    form = forms.EraseForm(request.POST, numbers=_order_numbers(email))
    if form.is_valid():
        try:
            erasure = erasure_request(
                email=form.cleaned_data["email"],
                orders=form.cleaned_data["orders"],
                by=f"admin {request.user.get_username()}",
            )
        except ValidationError as exc:
            form.add_error(None, exc)
        else:
            messages.success(
                request,
                f"Erasure {erasure.pk} forgets {email} ({erasure.get_status_display().lower()}): "
                "a worker runs it; follow it here.",
            )
            return redirect("ops:erasures")
    return _customer_page(request, email, form, status=400)


@require_GET
@admins_only
def erasures(request: HttpRequest) -> HttpResponse:
    return render(request, "ops/erasures.html", {"erasures": selectors.erasures()})
