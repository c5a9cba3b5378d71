"""A customer's attachment, to whoever may read its message: streamed from the file system, or
a redirect to a short-lived signed link to S3; the storage is never served otherwise."""

from __future__ import annotations

from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.core.files.storage import FileSystemStorage
from django.http import FileResponse, HttpResponseGone, HttpResponseRedirect
from django.http.response import HttpResponseBase
from django.shortcuts import get_object_or_404
from django.utils.http import content_disposition_header
from django.views.decorators.http import require_GET

from intake import attachments, selectors
from intake.models import Attachment
from refunds import permissions
from reviews.views.common import HtmxHttpRequest

# A missing object in the bucket is S3's own answer to the signed link (404, or 403 to a role
# that may not list the bucket): the desk signs links without asking S3 first.
GONE = (
    "This file is no longer in the desk's storage: it was deleted there after its message came. "
    "The message and its ticket are kept; an admin can restore the file from a backup."
)


@require_GET
@login_required
def attachment(request: HtmxHttpRequest, attachment_id: int) -> HttpResponseBase:
    # The message page's own check: who may read the message may see what it brought.
    permissions.deny(permissions.open_refusal(request.user))
    kept = get_object_or_404(
        Attachment.objects.filter(message__in=selectors.messages_visible(request.user)),
        pk=attachment_id,
    )
    # A picture too large to draw (Attachment.preview) is a download: a tab would draw it.
    download = kept.is_image and not kept.preview
    disposition = (
        content_disposition_header(download, kept.filename or kept.name.rsplit("/")[-1]) or "inline"
    )
    files = attachments.storage()
    if not isinstance(files, FileSystemStorage):
        url = files.url(  # type: ignore[call-arg] # S3Storage's url() takes these
            kept.name,
            parameters={
                "ResponseContentType": kept.content_type,
                "ResponseContentDisposition": disposition,
            },
            expire=settings.REFUNDS_ATTACHMENTS_URL_SECONDS,
        )
        response: HttpResponseBase = HttpResponseRedirect(url)
    else:
        try:
            opened = files.open(kept.name)
        except FileNotFoundError:  # deleted from the folder behind the desk's back
            return HttpResponseGone(GONE, content_type="text/plain; charset=utf-8")
        response = FileResponse(opened, content_type=kept.content_type)
        response["Content-Disposition"] = disposition
        # Its bytes are the customer's: nothing in them runs as the desk's page.
        response["Content-Security-Policy"] = "sandbox; default-src 'none'"
    response["Cache-Control"] = "private, no-store"
    return response
