"""Who may see and do what on the desk: the one place for these rules, used by the pages, the
JSON API, the admin and the services.

Roles are Django groups: Support agents, Managers, Admins (superusers count as admins). A user in
no desk group sees nothing and decides nothing.

- Seeing a ticket: admins and managers see every ticket; a support agent sees the tickets in an
  agent's scope (not escalated to managers: required role empty or "agent") and those they
  opened.
- Deciding a review: `reviewable()` and `decision_refusal()`; the $20.00 limit is
  refunds.flow.state.AGENT_LIMIT_CENTS, applied by the graph's triage.
"""

from __future__ import annotations

from django.db.models import Q

from refunds.models import ADMIN_GROUP, ROLE_GROUPS, Role, Ticket, TicketQuerySet, user_roles


def is_admin(user) -> bool:
    return bool(user.is_authenticated and (user.is_superuser or ADMIN_GROUP in user_roles(user)))


def is_manager(user) -> bool:
    return ROLE_GROUPS[Role.MANAGER] in user_roles(user)


def is_agent(user) -> bool:
    return ROLE_GROUPS[Role.AGENT] in user_roles(user)


def is_desk_user(user) -> bool:
    return is_admin(user) or is_manager(user) or is_agent(user)


def visible(user) -> TicketQuerySet:
    """The tickets this user may read, on any page and in the API."""
    tickets = Ticket.objects.all()
    if is_admin(user) or is_manager(user):
        return tickets
    if is_agent(user):
        return tickets.filter(Q(required_role__in=["", Role.AGENT]) | Q(opened_by=user))
    return tickets.none()


def can_view(user, ticket: Ticket) -> bool:
    return visible(user).filter(pk=ticket.pk).exists()


def reviewable(user) -> TicketQuerySet:
    """Pending reviews this user may decide."""
    waiting = Ticket.objects.awaiting()
    if is_admin(user):
        return waiting
    roles = [role for role in Role if ROLE_GROUPS[role] in user_roles(user)]
    return waiting.filter(required_role__in=roles)


def decision_refusal(user, ticket: Ticket) -> str:
    """Why this user may not decide this ticket's review, in words for them; "" when they may."""
    if is_admin(user):
        return ""
    role = ticket.required_role
    if role and ROLE_GROUPS.get(role, "-") in user_roles(user):
        return ""
    if role == Role.MANAGER:
        return "This refund is decided by a manager (it is over $20.00 or flagged by policy)."
    if role == Role.AGENT:
        return "This refund is decided by a support agent ($20.00 or less)."
    return "This ticket is not waiting on a review."


def can_read_insights(user) -> bool:
    """The dashboard and its plots: managers and admins (they answer for the whole desk)."""
    return is_admin(user) or is_manager(user)
