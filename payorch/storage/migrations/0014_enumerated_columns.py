"""Every status and failure-reason column accepts only the values of its enumeration
(`values.statuses`): one CHECK constraint per column (`storage.enumerated_columns.ENUMERATED_COLUMNS`),
written from the enumerations themselves rather than typed here.

Repeatable: when an enumeration gains (or loses) a value, this migration's SQL changes with it, and
the next `payorch migrate` (or service start) applies it again, replacing each constraint. Each
constraint checks the rows it finds, holding its table's lock meanwhile (docs/operations.md): a
value taken out of an enumeration must first be gone from every row, or the migration fails and
changes nothing.
"""

from __future__ import annotations

from payorch.storage.enumerated_columns import check_constraints

REPEATABLE = True


def sql() -> str:
    return check_constraints()
