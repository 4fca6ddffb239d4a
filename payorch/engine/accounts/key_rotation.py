"""Re-encrypting every stored secret under the first of `security.encryption_keys`: what
`payorch rotate-credentials` runs (docs/operations.md, "Replacing the encryption key").

Safe while payorch serves: each column is read in batches without locks, and a value is replaced
only if the row still holds what was read (`storage.sealed_secrets.replace_sealed`), so a merchant's
change made meanwhile is never overwritten: that row is read again and re-encrypted from what it
holds now. Resumable: a value already under the first key is left alone (and counted), so running
again after an interruption re-encrypts only what is left. Only counts are reported, never a value.
"""

from __future__ import annotations

from dataclasses import dataclass

from payorch.storage.database import Database
from payorch.storage.sealed_secrets import (
    SEALED_COLUMNS,
    Key,
    Sealed,
    SealedColumn,
    replace_sealed,
    sealed_after,
    sealed_of,
)
from payorch.values.secretbox import SecretBox, UnreadableSecret

BATCH_SIZE = 100
# Rounds a batch's rows changed meanwhile are read again and retried before the run gives up on them
# (they are then counted `changed`, and the next run takes them).
_RETRIES = 5


@dataclass
class ColumnCounts:
    """What one run did to one column. Each value ends up in one of `reencrypted`, `current` and
    `unreadable` (or in none, when its row was deleted meanwhile); `changed` counts the values a
    concurrent writer replaced between our read and our write, which were then read again."""

    column: str
    reencrypted: int = 0
    current: int = 0  # under the first key already
    unreadable: int = 0  # under none of the keys: left as they are
    changed: int = 0
    left: int = 0  # still changing after every retry: left for the next run

    @property
    def done(self) -> bool:
        """Whether every readable value of the column is now under the first key."""
        return self.left == 0


async def rotate_sealed_secrets(
    db: Database, secrets: SecretBox, *, batch_size: int = BATCH_SIZE
) -> list[ColumnCounts]:
    """Re-encrypt every sealed value not yet under `secrets`' first key; the counts per column."""
    return [await _rotate_column(db, secrets, column, batch_size) for column in SEALED_COLUMNS]


async def _rotate_column(
    db: Database, secrets: SecretBox, column: SealedColumn, batch_size: int
) -> ColumnCounts:
    counts = ColumnCounts(column.name)
    after: Key | None = None
    while batch := await db.autocommit(sealed_after, column, after, batch_size):
        after = batch[-1].key
        pending: list[Sealed] = batch
        for _ in range(_RETRIES):
            replacements = _resealed(secrets, pending, counts)
            if not replacements:
                break
            replaced = set(await db.transaction(replace_sealed, column, replacements))
            counts.reencrypted += len(replaced)
            missed = [key for key, _, _ in replacements if key not in replaced]
            if not missed:
                break
            counts.changed += len(missed)
            pending = await db.autocommit(sealed_of, column, missed)
        else:
            counts.left += len(pending)
    return counts


def _resealed(
    secrets: SecretBox, values: list[Sealed], counts: ColumnCounts
) -> list[tuple[Key, bytes, bytes]]:
    replacements = []
    for sealed in values:
        try:
            new = secrets.reseal(sealed.value)
        except UnreadableSecret:
            counts.unreadable += 1
            continue
        if new is None:
            counts.current += 1
        else:
            replacements.append((sealed.key, sealed.value, new))
    return replacements
