"""The "attachments" storage: a private folder, or an S3 bucket with short-lived signed links.
A function, so the tests build the very storage production does."""

from __future__ import annotations

from typing import Any


def attachments_storage(
    *,
    folder: str,
    bucket: str = "",
    endpoint_url: str = "",
    region: str = "",
    url_seconds: int,
    sse: str = "",
    kms_key_id: str = "",
) -> dict[str, Any]:
    if bucket:
        # The store encrypts each object it keeps (S3's server-side encryption), asked per upload.
        encryption = {"ServerSideEncryption": sse} if sse else {}
        if sse == "aws:kms" and kms_key_id:
            encryption["SSEKMSKeyId"] = kms_key_id
        return {
            "BACKEND": "storages.backends.s3.S3Storage",
            "OPTIONS": {
                "bucket_name": bucket,
                "endpoint_url": endpoint_url or None,
                "region_name": region or None,
                "location": "attachments",
                "default_acl": None,  # the bucket's own: private
                "querystring_auth": True,
                "querystring_expire": url_seconds,
                "signature_version": "s3v4",  # the links AWS and its lookalikes all check
                "file_overwrite": True,  # a name is its message and its bytes: the same again
                "object_parameters": encryption,
            },
        }
    return {
        "BACKEND": "django.core.files.storage.FileSystemStorage",
        "OPTIONS": {
            "location": folder,
            "base_url": None,  # no URL of its own: reviews' attachment view serves it
            "allow_overwrite": True,  # a name is its message and its bytes: the same again
            "file_permissions_mode": 0o600,
            "directory_permissions_mode": 0o700,
        },
    }
