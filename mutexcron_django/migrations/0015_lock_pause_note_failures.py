from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('mutexcron', '0014_lock_overlap'),
    ]

    operations = [
        migrations.AddField(
            model_name='lock',
            name='pause_note',
            field=models.TextField(blank=True, help_text="the operator's note given with the pause", null=True),
        ),
        migrations.AddField(
            model_name='lock',
            name='failures',
            field=models.IntegerField(default=0, help_text='failed (or timed-out) runs in a row'),
        ),
    ]
