from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("tenants", "0005_api_tokens"),
    ]

    operations = [
        migrations.AddField(
            model_name="tenant",
            name="decentrl_push_devices",
            field=models.BooleanField(default=True),
        ),
    ]
