"""The enumerations of `values.statuses` in the database: which column holds which, the CHECK
constraint that keeps each column to its enumeration's values, and a member written into a
statement's text.

A statement that names a status takes it from its enumeration, written into a module-level constant
built once with an f-string (`f"WHERE status = '{SessionStatus.PENDING}'"`): never a literal typed
by hand, never anything a caller gave. Not a bound parameter, because the partial indexes (migrations
0002, 0005, 0006, 0011: `WHERE status = ` the PENDING literal) serve only a statement whose
condition is that same constant: a parameter of a prepared statement's generic plan proves nothing,
and the index would be skipped for a scan of the table. The enumerations' values are letters and
underscores (`values.statuses`), so they are their own SQL literals between single quotes.

The constraints are written from the enumerations too, by `check_constraints`: migration 0014 (a
Python migration, `storage.migrations`) is that SQL, and is applied again whenever it changes, so
the database takes a new value of an enumeration at the next migration, with nothing else to write.
Being repeatable, it runs after every other migration, so it may name a column a later one adds.
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass

from payorch.values.reconciliation import ItemOutcome
from payorch.values.statuses import (
    AttemptStatus,
    DeliveryStatus,
    FailureReason,
    Outcome,
    RefundStatus,
    RoutingReason,
    SessionStatus,
    WebhookTestStatus,
)

_SQL_SAFE = re.compile(r"[A-Za-z][A-Za-z_]*")


@dataclass(frozen=True)
class EnumeratedColumn:
    """A column that holds only the values of `enumeration` (or NULL, where the table allows it)."""

    table: str
    column: str
    enumeration: type[enum.StrEnum]

    @property
    def constraint(self) -> str:
        """The name of its CHECK constraint (PostgreSQL's own naming: table, column, `check`)."""
        return f"{self.table}_{self.column}_check"

    def check(self) -> str:
        """The constraint's condition: one of the enumeration's values, exactly."""
        return f"{self.column} IN ({', '.join(sql_literal(member) for member in self.enumeration)})"


# Every status, failure-reason, routing-reason and outcome column of payorch's tables (a test finds
# any that is missing).
# The sandbox's tables are the simulated provider's own, with their own vocabulary (migration 0004).
ENUMERATED_COLUMNS = (
    EnumeratedColumn("checkout_sessions", "status", SessionStatus),
    EnumeratedColumn("checkout_sessions", "failure_reason", FailureReason),
    EnumeratedColumn("checkout_sessions", "routing_reason", RoutingReason),
    EnumeratedColumn("payment_attempts", "status", AttemptStatus),
    EnumeratedColumn("payment_attempts", "failure_reason", FailureReason),
    EnumeratedColumn("payment_attempts", "routing_reason", RoutingReason),
    EnumeratedColumn("refunds", "status", RefundStatus),
    EnumeratedColumn("refunds", "failure_reason", FailureReason),
    EnumeratedColumn("webhook_deliveries", "status", DeliveryStatus),
    EnumeratedColumn("webhook_configs", "last_test_status", WebhookTestStatus),
    EnumeratedColumn("routing_outcomes", "outcome", Outcome),
    EnumeratedColumn("reconciliation_items", "outcome", ItemOutcome),
)


def sql_literal(member: enum.StrEnum) -> str:
    """`member`'s value as an SQL string literal, for a statement's text."""
    if _SQL_SAFE.fullmatch(member.value) is None:
        raise ValueError(f"{member!r} is not letters and underscores")
    return f"'{member.value}'"


def check_constraints() -> str:
    """The statements that give every enumerated column its CHECK constraint, replacing the one it
    has: the enumeration's values as they are now. Every row must already hold one of them."""
    return "\n".join(
        f"ALTER TABLE {column.table} DROP CONSTRAINT IF EXISTS {column.constraint},\n"
        f"    ADD CONSTRAINT {column.constraint} CHECK ({column.check()});"
        for column in ENUMERATED_COLUMNS
    )
