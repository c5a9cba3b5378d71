from django.conf import settings
from django.core.checks import Warning, register


@register()
def reader_model(app_configs, **kwargs) -> list[Warning]:
    """A configured model that cannot be built is said at deploy, not only on each reading."""
    if not settings.REFUNDS_MODEL:
        return []
    from intake.reader.model import ModelFailed, build

    try:
        build(settings.REFUNDS_MODEL)
    except ModelFailed as failed:
        return [
            Warning(
                f"REFUNDS_MODEL: {failed}; every message will be read by the rules",
                id="intake.W001",
            )
        ]
    return []
