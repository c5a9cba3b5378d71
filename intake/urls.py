from django.urls import path

from intake import views

app_name = "intake"
urlpatterns = [
    path("messages/needs-sorting/", views.needs_sorting, name="needs_sorting"),
    path("messages/<int:message_id>/sort/", views.message_sort, name="sort"),
    path("tickets/<int:ticket_id>/send-back/", views.send_back, name="send_back"),
]
