from django.urls import path, re_path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerSplitView

from api import views as api

app_name = "api"
urlpatterns = [
    # With or without the trailing slash: a POST to /api/tickets must not become a redirect
    # (which drops the body) or, under DEBUG, a 500.
    re_path(r"^tickets/?$", api.tickets, name="tickets"),
    re_path(r"^tickets/(?P<ticket_id>[0-9]{1,18})/?$", api.ticket_detail, name="ticket"),
    re_path(
        r"^tickets/(?P<ticket_id>[0-9]{1,18})/decision/?$",
        api.ticket_decision,
        name="ticket_decision",
    ),
    re_path(r"^orders/?$", api.orders_push, name="orders"),
    re_path(r"^messages/?$", api.messages, name="messages"),
    re_path(r"^returns/?$", api.returns, name="returns"),
    re_path(r"^returns/(?P<reference>[^/]{1,40})/?$", api.return_detail, name="return"),
    path("schema/", SpectacularAPIView.as_view(), name="schema"),
    path("docs/", SpectacularSwaggerSplitView.as_view(url_name="api:schema"), name="docs"),
]
