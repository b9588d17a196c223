"""Writing the audit log. Called by the admin mixin (audit.admin) and by the services that
create, publish, revoke and close (one line each in metering, billing and access)."""

from __future__ import annotations

import json
from collections.abc import Mapping

from django.core.serializers.json import DjangoJSONEncoder
from django.db import models

from audit import context
from audit.models import AuditEntry

# Never copied into the log: a reader of the log must not learn a Prometheus credential or a
# token hash. A change to one shows as "(changed)".
SECRET_FIELDS = frozenset({"bearer_token", "basic_auth_password", "token_hash", "password"})
HIDDEN = "(secret)"
CHANGED = "(changed)"


def _plain(value: object) -> object:
    """JSON-ready: Decimals and dates as strings, exactly as DjangoJSONEncoder writes them."""
    return json.loads(json.dumps(value, cls=DjangoJSONEncoder))


def object_snapshot(obj: models.Model, *, reveal_secrets: bool = False) -> dict[str, object]:
    """The concrete fields of `obj` (foreign keys as ids), JSON-ready. Secrets are hidden
    unless `reveal_secrets`, which is only for comparing in memory (see snapshot_diff)."""
    values: dict[str, object] = {}
    for field in obj._meta.concrete_fields:
        value = getattr(obj, field.attname)
        if field.name in SECRET_FIELDS and not reveal_secrets:
            value = HIDDEN if value else ""
        values[field.attname] = value
    if obj.pk is not None:
        for field in obj._meta.many_to_many:
            values[field.name] = sorted(getattr(obj, field.name).values_list("pk", flat=True))
    return _plain(values)


def snapshot_diff(
    before: Mapping[str, object], after: Mapping[str, object]
) -> dict[str, list[object]]:
    """{field: [before, after]} for the fields that differ; a secret only says it changed."""
    changed = {}
    for name in sorted(set(before) | set(after)):
        old, new = before.get(name), after.get(name)
        if old != new:
            changed[name] = [CHANGED, CHANGED] if name in SECRET_FIELDS else [old, new]
    return changed


def audit_record(
    *,
    action: str,
    obj: models.Model,
    changes: Mapping[str, object] | None = None,
    actor: object | None = None,
    force: bool = False,
) -> AuditEntry | None:
    """Append one entry: `actor` (default: the request's user, else "system") did `action`
    to `obj`. `changes` defaults to the object's fields. Returns None when the admin is
    recording this change itself (see audit.context.recorded_by_caller) unless `force`."""
    if not force and not context.services_should_record():
        return None
    if action not in AuditEntry.Action.values:
        raise ValueError(f"unknown audit action {action!r}; one of {AuditEntry.Action.values}")
    actor = actor if actor is not None else context.current_user()
    return AuditEntry.objects.create(
        actor_id=getattr(actor, "pk", None),
        actor=actor.get_username() if actor is not None else "system",
        action=action,
        object_type=obj._meta.label_lower,
        object_id=str(obj.pk),
        object_repr=str(obj)[:200],
        changes=_plain(dict(changes)) if changes is not None else object_snapshot(obj),
    )
