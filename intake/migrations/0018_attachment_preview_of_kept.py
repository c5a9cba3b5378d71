"""The pictures kept before `preview` existed: judged by their headers as new ones are, so a
photo that was drawn stays drawn and a decompression bomb kept earlier becomes a link. A file
that is gone from the storage stays a link (its page says so)."""

from django.db import migrations


def judge_kept(apps, schema_editor):
    from intake.attachments import previewable, storage

    attachment = apps.get_model("intake", "Attachment")
    store = storage()
    for one in attachment.objects.filter(content_type__startswith="image/").iterator():
        try:
            with store.open(one.name) as file:
                content = file.read()
        except OSError:
            continue
        if previewable(one.content_type, content):
            attachment.objects.filter(pk=one.pk).update(preview=True)


class Migration(migrations.Migration):
    dependencies = [("intake", "0017_attachment_preview")]

    operations = [migrations.RunPython(judge_kept, migrations.RunPython.noop)]
