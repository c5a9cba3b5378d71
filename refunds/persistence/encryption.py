"""Checkpoints and the store encrypted at rest: AES-GCM under REFUNDS_CHECKPOINT_KEYS, through
LangGraph's EncryptedSerializer. The first key writes; every listed key reads, so keys rotate by
adding a new one first, re-encrypting (manage.py reencrypt_checkpoints) and dropping the old.

A stored type reads "<serde type>+aesgcm-<key id>": the key id (the first 8 hex digits of the
key's SHA-256) tells which key to decrypt with. A type without "+" was written before keys were
set and is read as it is."""

from __future__ import annotations

import base64
import hashlib
import os
from collections.abc import Mapping, Sequence
from typing import Any

from langgraph.checkpoint.serde.encrypted import EncryptedSerializer

NONCE_BYTES = 12  # AES-GCM's standard nonce; random per message, so one key writes 2**32 safely


class UnknownKey(Exception):  # noqa: N818
    """Checkpoint data was encrypted under a key that REFUNDS_CHECKPOINT_KEYS no longer lists."""


def key_id(key: bytes) -> str:
    return hashlib.sha256(key).hexdigest()[:8]


class AesGcmCipher:
    """LangGraph's CipherProtocol over `cryptography`'s AESGCM, with a ring of keys."""

    def __init__(self, keys: Sequence[bytes]) -> None:
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM

        if not keys:
            raise ValueError("at least one key")
        self.ring = {f"aesgcm-{key_id(k)}": AESGCM(k) for k in keys}
        self.name = f"aesgcm-{key_id(keys[0])}"  # the writing key's

    def encrypt(self, plaintext: bytes) -> tuple[str, bytes]:
        nonce = os.urandom(NONCE_BYTES)
        return self.name, nonce + self.ring[self.name].encrypt(nonce, plaintext, None)

    def decrypt(self, ciphername: str, ciphertext: bytes) -> bytes:
        aead = self.ring.get(ciphername)
        if aead is None:
            raise UnknownKey(
                f"checkpoint data encrypted under key {ciphername.removeprefix('aesgcm-')}, "
                "which REFUNDS_CHECKPOINT_KEYS no longer lists: add that key back (after the "
                "newest) and run manage.py reencrypt_checkpoints"
            )
        return aead.decrypt(ciphertext[:NONCE_BYTES], ciphertext[NONCE_BYTES:], None)


def serializer(keys: Sequence[bytes]) -> EncryptedSerializer | None:
    """The savers' serializer: encrypting under `keys`, or None (upstream's plain one)."""
    return EncryptedSerializer(AesGcmCipher(keys)) if keys else None


def is_current(type_: str, serde: EncryptedSerializer) -> bool:
    """Whether a stored type was written under the writing key."""
    return type_.endswith(f"+{serde.cipher.name}")  # type: ignore[attr-defined]


def seal(serde: EncryptedSerializer, value: Mapping[str, Any]) -> dict[str, Any]:
    """A store value as JSON the store can keep: {"sealed": <type>, "data": <base64>}."""
    type_, data = serde.dumps_typed(value)
    return {"sealed": type_, "data": base64.b64encode(data).decode("ascii")}


def unseal(serde: EncryptedSerializer | None, value: Any) -> Any:
    """A store value as the app wrote it; a value stored before keys were set is as it was."""
    if not (isinstance(value, dict) and set(value) == {"sealed", "data"}):
        return value
    if serde is None:
        raise UnknownKey(
            "the store holds encrypted values but REFUNDS_CHECKPOINT_KEYS is empty: set the keys"
        )
    return serde.loads_typed((value["sealed"], base64.b64decode(value["data"])))
