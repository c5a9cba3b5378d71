from django.conf import settings
from django.core.checks import Error, register
from django.utils.module_loading import import_string


@register()
def gateway_setting(app_configs, **kwargs) -> list[Error]:
    try:
        gateway = import_string(settings.REFUNDS_GATEWAY)
    except ImportError as exc:
        return [
            Error(
                f"REFUNDS_GATEWAY={settings.REFUNDS_GATEWAY!r} cannot be imported: {exc}",
                id="refunds.E001",
            )
        ]
    if not callable(getattr(gateway, "charge", None)):
        return [
            Error(
                f"REFUNDS_GATEWAY={settings.REFUNDS_GATEWAY!r} has no charge() method",
                id="refunds.E002",
            )
        ]
    return []
