"""Who may see and do what on the desk: the one place for these rules, four-eyes included."""

from __future__ import annotations

from django.core.exceptions import PermissionDenied
from django.db.models import Q

from refunds import policy
from refunds.models import ADMIN_GROUP, ROLE_GROUPS, Role, Ticket, TicketQuerySet, user_roles


def is_admin(user) -> bool:
    return bool(user.is_authenticated and (user.is_superuser or ADMIN_GROUP in user_roles(user)))


def is_manager(user) -> bool:
    return ROLE_GROUPS[Role.MANAGER] in user_roles(user)


def is_agent(user) -> bool:
    return ROLE_GROUPS[Role.AGENT] in user_roles(user)


def oversees(user) -> bool:
    """Managers and admins: they answer for the whole desk (audit, dashboard, every ticket)."""
    return is_admin(user) or is_manager(user)


def is_desk_user(user) -> bool:
    return oversees(user) or is_agent(user)


def deny(refusal: str) -> None:
    """PermissionDenied with the refusal's words, when there is one."""
    if refusal:
        raise PermissionDenied(refusal)


def open_refusal(user) -> str:
    """Why this user may not open a ticket ("" when they may): it writes to the customer."""
    if not is_desk_user(user):
        return "You are in no desk group, so you open no tickets."
    return ""


def sort_refusal(user) -> str:
    """Why this user may not sort the intake's messages ("" when they may)."""
    if not is_desk_user(user):
        return "You are in no desk group, so you sort no messages."
    return ""


def return_refusal(user) -> str:
    """Why this user may not say what came back of a return ("" when they may): it refunds."""
    if not is_desk_user(user):
        return "You are in no desk group, so you record no returns."
    return ""


def visible(user) -> TicketQuerySet:
    """The tickets this user may read, on any page and in the API."""
    tickets = Ticket.objects.all()
    if oversees(user):
        return tickets
    if is_agent(user):
        return tickets.filter(Q(required_role__in=["", Role.AGENT]) | Q(opened_by=user))
    return tickets.none()


def can_view(user, ticket: Ticket) -> bool:
    return visible(user).filter(pk=ticket.pk).exists()


def reviewable(user, *, cover: bool = False) -> TicketQuerySet:
    """The user's queue (`cover`: a manager's holds the agents' too), without their own tickets."""
    tickets = Ticket.objects
    if is_admin(user):
        waiting = tickets.awaiting()
    elif is_manager(user):
        waiting = tickets.awaiting() if cover or is_agent(user) else tickets.for_managers()
    elif is_agent(user):
        waiting = tickets.for_agents()
    else:
        return tickets.none()
    return waiting.exclude(opened_by=user) if user.is_authenticated else waiting


def decision_refusal(user, ticket: Ticket) -> str:
    """Why this user may not decide this ticket's review, in words for them; "" when they may."""
    if ticket.status != Ticket.Status.AWAITING_REVIEW:
        return "This ticket is not waiting on a review."
    if not is_desk_user(user):
        return "You are in no reviewer group, so you decide no refunds."
    role = ticket.review_role
    # Managers cover agent-level reviews.
    if oversees(user) or (role == Role.AGENT and is_agent(user)):
        if ticket.opened_by_id is not None and ticket.opened_by_id == user.pk:
            return "You opened this ticket, so a colleague decides it (four-eyes)."
        return ""
    if ticket.is_escalated:
        return "This refund was escalated to managers; a manager decides it."
    return policy.refusal_sentence(role, reason=ticket.reason)


def edit_refusal(user, ticket: Ticket) -> str:
    """Why this user may not lower the amount before approving; "" when they may."""
    refusal = decision_refusal(user, ticket)
    if refusal:
        return refusal
    if not oversees(user):
        return (
            "Only a manager lowers an amount or changes what is refunded; approve it as "
            "proposed, or escalate it."
        )
    return ""


def escalation_refusal(user, ticket: Ticket) -> str:
    """Why this user may not escalate this review to managers; "" when they may."""
    refusal = decision_refusal(user, ticket)
    if refusal:
        return refusal
    if ticket.review_role == Role.MANAGER:
        return "This review is already with managers."
    if is_manager(user) and not is_admin(user):
        return "You are a manager: decide it yourself, or leave it in the agents' queue."
    return ""
