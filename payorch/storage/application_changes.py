"""Changes of an application that processes keep state about: its API keys, its status, its
provider configurations. Each change notifies `APPLICATIONS_CHANNEL` (payload: the application id)
on commit; the node's connection listens (`storage.nodes`, `storage.notifications`), and
`keep_fresh` tells every cache of this process what to forget.

API-key and status changes notify from their storage functions; every write of `provider_configs`
notifies from a trigger (migration 0008), so no way of changing a configuration can forget to.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Protocol

import trio

from payorch.storage.database import Connection
from payorch.storage.database_thread import on_database_thread
from payorch.storage.notifications import MISSED, Missed, Notifications

APPLICATIONS_CHANNEL = "payorch_applications"
# Changes heard and not yet applied to the caches; more at once make the caches forget everything.
CHANGES_BUFFER = 1000


class ForgetsApplications(Protocol):
    """Something that keeps state about applications and must hear of every change to use it."""

    listening: bool  # True while `keep_fresh` hears every change: only then may state be kept

    def forget_application(self, application_id: uuid.UUID) -> None: ...

    def forget_all(self) -> None: ...


@on_database_thread
async def notify_application_changed(conn: Connection, application_id: uuid.UUID) -> None:
    """Tell every process, when this transaction commits, that the application changed."""
    await conn.execute("SELECT pg_notify($1, $2)", APPLICATIONS_CHANNEL, str(application_id))


async def keep_fresh(
    notes: Notifications,
    caches: Sequence[ForgetsApplications],
    *,
    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Make `caches` forget what each change of an application heard on `notes` (the node's
    `APPLICATIONS_CHANNEL`) touches; the caches keep state only while the channel is listened to.
    Started at once; runs until cancelled. While the listening connection is lost (it is reopened
    by itself), the caches keep nothing; once it is back they forget everything, since changes were
    missed meanwhile."""
    try:
        for cache in caches:
            cache.forget_all()  # whatever happened while nobody read
            cache.listening = notes.listening
        task_status.started()
        async for note in notes:
            application_id = _changed_application(note)
            for cache in caches:
                if application_id is None:
                    cache.listening = notes.listening
                    cache.forget_all()
                else:
                    cache.forget_application(application_id)
    finally:
        for cache in caches:
            cache.listening = False
            cache.forget_all()


def _changed_application(note: str | Missed) -> uuid.UUID | None:
    """The application a notification names; None when it may be any (`MISSED`, or a payload that
    is no application id)."""
    if note is MISSED:
        return None
    try:
        return uuid.UUID(note)
    except ValueError:
        return None
