from django.db import migrations, models


class Migration(migrations.Migration):
    """A wait per pod incarnation: (task, pod, created) instead of (task, pod), so a pod name
    that comes back (a StatefulSet's `name-0`, next month's run) no longer overwrites the
    wait of the earlier pod. Existing rows are already unique on the wider key."""

    dependencies = [
        ("metering", "0010_sharded_windows"),
    ]

    operations = [
        migrations.RemoveConstraint(model_name="podwait", name="podwait_unique"),
        migrations.AddConstraint(
            model_name="podwait",
            constraint=models.UniqueConstraint(
                fields=("task", "pod", "created"), name="podwait_unique"
            ),
        ),
    ]
