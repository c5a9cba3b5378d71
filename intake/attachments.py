"""Customers' attachments, judged by their bytes. The bytes are written before the message's row
commits, outside any transaction, under the message's key and the bytes' digest: a retry writes
the same object again, so nothing a row names can be missing."""

from __future__ import annotations

import hashlib
import io
from dataclasses import dataclass

from django.conf import settings
from django.core.files.base import ContentFile
from django.core.files.storage import Storage, storages
from PIL import Image

from core.network import outside_transaction
from intake.models import Attachment, Message

STORAGE = "attachments"
# The kinds kept (content_type reads each by its magic number).
EXTENSIONS = {
    "image/jpeg": ".jpg",
    "image/png": ".png",
    "image/gif": ".gif",
    "image/webp": ".webp",
    "image/heic": ".heic",
    "application/pdf": ".pdf",
}
# The kinds a browser shows as a picture, by Pillow's name (HEIC is a link).
PREVIEWED = {"image/jpeg": "JPEG", "image/png": "PNG", "image/gif": "GIF", "image/webp": "WEBP"}
# ISO base media files whose major brand says HEIF/HEIC (a photo from a phone).
HEIF_BRANDS = {b"heic", b"heix", b"heim", b"heis", b"hevc", b"hevx", b"mif1", b"msf1"}


@dataclass(frozen=True)
class Part:
    filename: str
    declared_type: str
    content: bytes


def storage() -> Storage:
    return storages[STORAGE]


def content_type(content: bytes) -> str:
    """The kind the bytes say they are ("" for none the desk keeps)."""
    head = content[:16]
    if head.startswith(b"\xff\xd8\xff"):
        return "image/jpeg"
    if head.startswith(b"\x89PNG\r\n\x1a\n"):
        return "image/png"
    if head[:6] in (b"GIF87a", b"GIF89a"):
        return "image/gif"
    if head[:4] == b"RIFF" and head[8:12] == b"WEBP":
        return "image/webp"
    if head[4:8] == b"ftyp" and head[8:12] in HEIF_BRANDS:
        return "image/heic"
    if content[:1024].lstrip(b"\r\n\t ").startswith(b"%PDF-"):
        return "application/pdf"
    return ""


def previewable(kind: str, content: bytes) -> bool:
    """A kind browsers draw, of at most the setting's pixels by its header (nothing decoded)."""
    if kind not in PREVIEWED:
        return False
    try:
        with Image.open(io.BytesIO(content), formats=[PREVIEWED[kind]]) as image:
            width, height = image.size
    except (OSError, Image.DecompressionBombError):
        return False
    return width * height <= settings.REFUNDS_ATTACHMENT_PREVIEW_PIXELS


Kept = list[tuple[Attachment, bytes]]  # each part to keep: its row, not saved yet, and its bytes


def attachments_judge(parts: list[Part], *, key: str) -> tuple[list[dict], Kept]:
    """Each part described (with why it was refused, "" when kept), and the parts to keep."""
    folder = hashlib.sha256(key.encode()).hexdigest()[:32]
    limit = settings.REFUNDS_ATTACHMENT_MAX_BYTES
    most = settings.REFUNDS_ATTACHMENTS_PER_MESSAGE
    about: list[dict] = []
    kept: Kept = []
    for part in parts:
        digest = hashlib.sha256(part.content).hexdigest()
        kind = content_type(part.content)
        refused = ""
        if len(part.content) > limit:
            refused = f"over the limit of {limit:,} bytes"
        elif not kind:
            refused = "not an image (JPEG, PNG, GIF, WebP, HEIC) or a PDF by its content"
        elif any(row.sha256 == digest for row, _ in kept):
            refused = "the same file as one kept above"
        elif len(kept) >= most:
            refused = f"more than {most} files on one message: the first {most} are kept"
        about.append(
            {
                "name": part.filename,
                "type": part.declared_type,
                "size": len(part.content),
                "sha256": digest,
                "refused": refused,
            }
        )
        if not refused:
            row = Attachment(
                name=f"{folder}/{digest}{EXTENSIONS[kind]}",
                filename=part.filename[:255],
                content_type=kind,
                size=len(part.content),
                sha256=digest,
                preview=previewable(kind, part.content),
            )
            kept.append((row, part.content))
    return about, kept


def attachments_store(kept: Kept) -> None:
    """Write each kept part's bytes under its name (again, on a retry)."""
    outside_transaction("the attachments' storage")
    files = storage()
    for row, content in kept:
        files.save(row.name, ContentFile(content))


def attachments_record(message: Message, kept: Kept) -> None:
    """The rows of the kept parts on a message just created, in its transaction."""
    for row, _ in kept:
        row.message = message
    Attachment.objects.bulk_create([row for row, _ in kept])
