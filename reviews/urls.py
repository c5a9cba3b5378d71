from django.urls import path

from reviews import views

app_name = "reviews"
urlpatterns = [
    path("", views.queue, name="queue"),
    path("reviews/<int:ticket_id>/decide/", views.decide, name="decide"),
    path("reviews/<int:ticket_id>/claim/", views.claim, name="claim"),
    path("reviews/bulk/", views.bulk_approve, name="bulk_approve"),
    path("tickets/", views.tickets, name="tickets"),
    path("tickets/new/", views.ticket_new, name="ticket_new"),
    path("tickets/<int:ticket_id>/", views.ticket_detail, name="ticket"),
    path(
        "tickets/<int:ticket_id>/emails/<int:email_id>/resend/",
        views.email_resend,
        name="email_resend",
    ),
    path("audit/", views.audit, name="audit"),
    path("audit/export.csv", views.audit_export, name="audit_export"),
    path("account/token/", views.api_token, name="api_token"),
]
