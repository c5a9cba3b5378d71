from django.urls import path

from insights import views

app_name = "insights"
urlpatterns = [
    path("metrics", views.metrics, name="metrics"),
    path("dashboard/", views.dashboard, name="dashboard"),
]
