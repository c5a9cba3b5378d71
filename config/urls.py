from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path, re_path

from ops import api as erasures_api
from ops import returns_webhook, shop_webhook
from refunds import health
from refunds.payments import stripe_webhook
from reviews.views.credit import credit_choose

urlpatterns = [
    path("", include("reviews.urls")),
    path("api/", include("api.urls")),
    # The erasures' API lives with the erasures (ops/api.py): api/ must not import ops.
    re_path(r"^api/erasures/?$", erasures_api.erasures, name="api_erasures"),
    re_path(
        r"^api/erasures/(?P<erasure_id>[0-9]{1,18})/?$",
        erasures_api.erasure_detail,
        name="api_erasure",
    ),
    # The mail provider's webhooks (/mail/mailgun/tracking/, /mail/mailgun/inbound_mime/)
    path("mail/", include("intake.urls")),
    # Stripe's events (refunds/payments/stripe_webhook.py): register this URL at Stripe
    path("payments/stripe/webhook/", stripe_webhook.webhook, name="stripe_webhook"),
    # Shopify's compliance webhooks (ops/shop_webhook.py): register these URLs in the app's setup
    path(
        "webhooks/shop/customers-redact/",
        shop_webhook.customers_redact,
        name="shop_customers_redact",
    ),
    path("webhooks/shop/shop-redact/", shop_webhook.shop_redact, name="shop_redact"),
    # The customer's choice of store credit or money: the signed link in the offer's email.
    path("credit/<str:signed>/", credit_choose, name="credit_choose"),
    # A warehouse's or carrier's word on a return's goods (ops/returns_webhook.py)
    path("webhooks/returns/", returns_webhook.returns, name="returns_webhook"),
    path("healthz", health.healthz, name="healthz"),
    path("readyz", health.readyz, name="readyz"),
    path("", include("insights.urls")),
    path("", include("ops.urls")),
    path("login/", auth_views.LoginView.as_view(), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("admin/", admin.site.urls),
]

handler404 = "reviews.views.errors.not_found"
