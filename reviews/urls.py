from django.urls import path

from reviews.views import (
    account,
    attachments,
    audit,
    events,
    queue,
    returns,
    sorting,
    ticket,
    tickets,
)

app_name = "reviews"
urlpatterns = [
    path("", queue.queue, name="queue"),
    path("queue/events/", events.queue_events, name="queue_events"),
    path("reviews/<int:ticket_id>/decide/", queue.decide, name="decide"),
    path("reviews/<int:ticket_id>/claim/", queue.claim, name="claim"),
    path("reviews/bulk/", queue.bulk_approve, name="bulk_approve"),
    path("decisions/<int:decision_id>/undo/", queue.undo, name="undo"),
    path("tickets/", tickets.tickets, name="tickets"),
    path("tickets/new/", ticket.ticket_new, name="ticket_new"),
    path("tickets/<int:ticket_id>/", ticket.ticket_detail, name="ticket"),
    path("tickets/<int:ticket_id>/parts-total/", ticket.parts_total, name="parts_total"),
    path("messages/<int:message_id>/", ticket.message_detail, name="message"),
    path("attachments/<int:attachment_id>/", attachments.attachment, name="attachment"),
    path("messages/<int:message_id>/history/", ticket.message_history, name="message_history"),
    path("messages/needs-sorting/", sorting.needs_sorting, name="needs_sorting"),
    path("messages/<int:message_id>/sort/", sorting.message_sort, name="message_sort"),
    path("messages/set-aside/", sorting.set_aside, name="set_aside"),
    path(
        "messages/<int:message_id>/set-aside/undo/",
        sorting.set_aside_undo,
        name="set_aside_undo",
    ),
    path("tickets/<int:ticket_id>/send-back/", sorting.send_back, name="send_back"),
    path("returns/", returns.returns, name="returns"),
    path("audit/", audit.audit, name="audit"),
    path("audit/export.csv", audit.audit_export, name="audit_export"),
    path("account/token/", account.api_token, name="api_token"),
]
