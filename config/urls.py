from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path

from refunds import health
from refunds.payments import stripe_webhook

urlpatterns = [
    path("", include("reviews.urls")),
    path("api/", include("api.urls")),
    # The mail provider's webhooks (/mail/mailgun/tracking/, /mail/mailgun/inbound_mime/)
    path("mail/", include("intake.urls")),
    # Stripe's events (refunds/payments/stripe_webhook.py): register this URL at Stripe
    path("payments/stripe/webhook/", stripe_webhook.webhook, name="stripe_webhook"),
    path("healthz", health.healthz, name="healthz"),
    path("readyz", health.readyz, name="readyz"),
    path("", include("insights.urls")),
    path("", include("ops.urls")),
    path("login/", auth_views.LoginView.as_view(), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("admin/", admin.site.urls),
]

handler404 = "reviews.views.errors.not_found"
