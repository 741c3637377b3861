"""The Lock model's permission to re-time a job is ``retime_lock`` (it was ``change_schedule``, the codename of the
Schedule proxy's change permission too, so that ``has_perm("mutexcron.change_schedule")`` let a user who could
re-time jobs rewrite what a run-time schedule calls). The grants move with it: a user or group that could re-time
jobs still can, and gains no right over run-time schedules."""

from django.db import migrations

OLD = ("change_schedule", "Can change a job's schedule")
NEW = ("retime_lock", "Can re-time a job (override its schedule)")


def move_lock_permission(apps, schema_editor, source, target):
    """Give the Lock permission ``source`` (codename, name) to its holders as ``target``: the row renamed in place
    (its user and group grants kept), or, if ``target`` exists already, its grants added to it and the row
    deleted. Nothing to do where auth is not installed or migrated, or no permission was created yet."""
    connection = schema_editor.connection
    try:
        content_types = apps.get_model("contenttypes", "ContentType")
        permissions = apps.get_model("auth", "Permission")
    except LookupError:  # django.contrib.auth is not installed (or not migrated yet): nothing was granted
        return
    tables = set(connection.introspection.table_names())
    if not {content_types._meta.db_table, permissions._meta.db_table} <= tables:  # auth lives in another database
        return
    lock_type = content_types.objects.using(connection.alias).filter(app_label="mutexcron", model="lock").first()
    if lock_type is None:  # permissions are created after the first migrate: none was granted yet
        return
    rows = permissions.objects.using(connection.alias).filter(content_type=lock_type)
    old = rows.filter(codename=source[0]).first()
    if old is None:
        return
    new = rows.filter(codename=target[0]).first()
    if new is None:
        old.codename, old.name = target
        old.save(update_fields=["codename", "name"])
        return
    for relation in permissions._meta.related_objects:  # User.user_permissions, Group.permissions
        if not relation.many_to_many:
            continue
        through = relation.through
        holder = next(field.attname for field in through._meta.fields
                      if field.is_relation and field.related_model is not permissions)
        grants = through.objects.using(connection.alias)
        already = grants.filter(permission=new).values_list(holder, flat=True)
        grants.filter(permission=old).exclude(**{f"{holder}__in": list(already)}).update(permission=new)
    old.delete()


def forwards(apps, schema_editor):
    move_lock_permission(apps, schema_editor, OLD, NEW)


def backwards(apps, schema_editor):
    move_lock_permission(apps, schema_editor, NEW, OLD)


class Migration(migrations.Migration):

    dependencies = [
        ('mutexcron', '0016_lock_tick_token'),
    ]

    operations = [
        migrations.AlterModelOptions(
            name='lock',
            options={'ordering': ['name'], 'permissions': [('force_unlock_lock', "Can force-unlock a job's lock"), ('pause_lock', 'Can pause and resume a job'), ('retime_lock', 'Can re-time a job (override its schedule)')], 'verbose_name': 'lock'},
        ),
        migrations.RunPython(forwards, backwards),
    ]
