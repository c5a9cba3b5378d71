from django.urls import path

from ops import views

app_name = "ops"
urlpatterns = [
    path("tickets/<int:ticket_id>/history/", views.thread_history, name="history"),
    path("tickets/<int:ticket_id>/fork/", views.thread_fork, name="fork"),
    path("ops/failed/", views.failed, name="failed"),
    path("ops/failed/<int:ticket_id>/retry/", views.retry, name="retry"),
    path("ops/failed/messages/<int:message_id>/retry/", views.message_retry, name="message_retry"),
    path("ops/undelivered/", views.undelivered, name="undelivered"),
    path("ops/undelivered/<int:email_id>/resend/", views.resend, name="resend"),
    path("ops/reconcile/", views.reconcile, name="reconcile"),
    path("ops/erasures/", views.erasures, name="erasures"),
    path("ops/erasures/new/", views.erasure_new, name="erasure_new"),
    # path, not str: an address may hold "/", and with str its links could not be built.
    path("customers/<path:email>/", views.customer, name="customer"),
]
