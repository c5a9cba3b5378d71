"""anymail's webhook URLs behind intake/webhook.py's door, under anymail's own names."""

from anymail.urls import urlpatterns as anymail_urls
from django.db import transaction
from django.urls import URLPattern

from intake.webhook import MailgunInbound, door

OURS = {"mailgun_inbound_webhook": MailgunInbound.as_view()}

app_name = "anymail"
urlpatterns = [
    URLPattern(
        url.pattern,
        door(OURS.get(url.name or "", url.callback), max_bytes="INBOUND_MAX_BODY_BYTES")
        if "inbound" in (url.name or "")
        # A tracking post's receivers (its signature's token, what it reports) commit together.
        else door(transaction.atomic(url.callback)),
        url.default_args,
        url.name,
    )
    for url in anymail_urls
    if isinstance(url, URLPattern)
]
