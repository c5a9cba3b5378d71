from django.urls import path

from refunds.api import views as api

app_name = "api"
urlpatterns = [
    path("tickets/", api.tickets, name="tickets"),
    path("tickets/<int:ticket_id>/", api.ticket_detail, name="ticket"),
]
