from django.apps import AppConfig


class ApiConfig(AppConfig):
    """The JSON API (Django REST framework) and its own tables."""

    name = "api"
    default_auto_field = "django.db.models.BigAutoField"
