"""Inbound emails are keyed by their Message-ID with the sender's address since 0006 (another
sender's email reusing the ID is another message). The emails kept before get the same key, so
a provider redelivering one after the upgrade finds it instead of making a second message. A
key of a long Message-ID was kept as its digest, which cannot be rebuilt: those stay as they are
(a redelivery of one becomes a second message, added to the first's ticket)."""

import hashlib

from django.db import migrations

KEY_MAX = 300


def _with_sender(apps, schema_editor):
    Message = apps.get_model("intake", "Message")
    old = Message.objects.filter(channel="email").exclude(key__startswith="email:sha256:")
    for message in old.exclude(key__contains=" from ").only("pk", "key", "sender").iterator():
        key = f"{message.key.removeprefix('email:')} from {message.sender.lower()}"
        full = f"email:{key}"
        if len(full) > KEY_MAX:
            full = f"email:sha256:{hashlib.sha256(key.encode()).hexdigest()}"
        Message.objects.filter(pk=message.pk).update(key=full)


class Migration(migrations.Migration):
    dependencies = [("intake", "0006_inbound_attachments_and_signature_tokens")]

    operations = [migrations.RunPython(_with_sender, migrations.RunPython.noop)]
