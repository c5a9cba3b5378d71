import hashlib

from django.db import migrations, models


def hash_existing_keys(apps, schema_editor):
    # Keys issued before this migration keep working: their hash is stored, the key dropped.
    ApiToken = apps.get_model("refunds", "ApiToken")
    for token in ApiToken.objects.all():
        token.key_hash = hashlib.sha256(token.key.encode()).hexdigest()
        token.hint = token.key[:10]
        token.save(update_fields=["key_hash", "hint"])


class Migration(migrations.Migration):

    dependencies = [
        ("refunds", "0008_audit_events"),
    ]

    operations = [
        migrations.AddField(
            model_name="apitoken",
            name="key_hash",
            field=models.CharField(max_length=64, null=True),
        ),
        migrations.AddField(
            model_name="apitoken",
            name="hint",
            field=models.CharField(blank=True, max_length=16),
        ),
        migrations.RunPython(hash_existing_keys, migrations.RunPython.noop),
        migrations.RemoveField(model_name="apitoken", name="key"),
        migrations.AlterField(
            model_name="apitoken",
            name="key_hash",
            field=models.CharField(max_length=64, unique=True),
        ),
        migrations.CreateModel(
            name="RateCounter",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("key", models.CharField(max_length=200)),
                ("window_start", models.BigIntegerField()),
                ("count", models.PositiveIntegerField(default=0)),
                ("expires", models.BigIntegerField(db_index=True)),
            ],
            options={
                "constraints": [
                    models.UniqueConstraint(fields=("key", "window_start"), name="one_counter_per_window")
                ],
            },
        ),
    ]
