from django.conf import settings
from django.core.checks import Error, Warning, register


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
                f"REFUNDS_MODEL: {failed}; every message will be read by the trained reader",
                id="intake.W001",
            )
        ]
    return []


@register()
def reader_file(app_configs, **kwargs) -> list[Error]:
    """The trained reader's file is checked at start (loaded once, then kept by the process): a
    missing, foreign or untrusted file stops a worker before it takes a message."""
    from intake.reader import default, trained

    try:
        default.classifier()
    except trained.ModelUnusable as unusable:
        return [Error(f"REFUNDS_READER_FILE: {unusable}", id="intake.E001")]
    return []
