from django.conf import settings
from django.core.checks import Error, register
from django.utils.module_loading import import_string


@register()
def gateway_setting(app_configs, **kwargs) -> list[Error]:
    setting = f"REFUNDS_GATEWAY={settings.REFUNDS_GATEWAY!r}"
    try:
        gateway = import_string(settings.REFUNDS_GATEWAY)
    except ImportError as exc:
        return [Error(f"{setting} cannot be imported: {exc}", id="refunds.E001")]
    if not callable(getattr(gateway, "charge", None)):
        return [Error(f"{setting} has no charge() method", id="refunds.E002")]
    return []


@register()
def stripe_settings(app_configs, **kwargs) -> list[Error]:
    from refunds.payments import StripeGateway

    # Under a crash plan the configured gateway is wrapped; the one inside is what needs a key.
    path = getattr(settings, "REFUNDS_CRASH_INNER", {}).get("gateway", settings.REFUNDS_GATEWAY)
    try:
        gateway = import_string(path)
    except ImportError:
        return []  # gateway_setting says so
    if not (isinstance(gateway, type) and issubclass(gateway, StripeGateway)):
        return []
    key = settings.STRIPE_SECRET_KEY
    if not key:
        return [Error(f"REFUNDS_GATEWAY={path!r} needs STRIPE_SECRET_KEY", id="refunds.E003")]
    if not key.startswith(("sk_", "rk_")):
        # Never the key itself: a publishable key is not secret, but a mistyped secret one is.
        return [
            Error(
                "STRIPE_SECRET_KEY must be a secret key (sk_test_..., sk_live_...) or a "
                "restricted one (rk_...), not a publishable key (pk_...)",
                id="refunds.E004",
            )
        ]
    return []
