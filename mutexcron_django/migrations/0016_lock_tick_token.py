from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('mutexcron', '0015_lock_pause_note_failures'),
    ]

    operations = [
        migrations.AddField(
            model_name='lock',
            name='tick_token',
            field=models.BigIntegerField(default=0, help_text="the acquire's token while its run holds the lock"),
        ),
    ]
