"""What reconciliation (docs/reconciliation.md) says of a run and of each of its items."""

from __future__ import annotations

import enum


class RunState(enum.StrEnum):
    """A reconciliation run's state: RUNNING until every item is stored, then COMPLETED, or FAILED
    when the provider or the database failed it (its `error` says which)."""

    RUNNING = "RUNNING"
    COMPLETED = "COMPLETED"
    FAILED = "FAILED"


class ItemOutcome(enum.StrEnum):
    """What the match found for one item (docs/reconciliation.md says what to do about each)."""

    MATCHED = "MATCHED"
    EXPECTED = "EXPECTED"  # payorch recorded it; the provider's settlement lag has not passed
    MISSING_AT_PROVIDER = "MISSING_AT_PROVIDER"
    MISSING_IN_PAYORCH = "MISSING_IN_PAYORCH"
    AMOUNT_MISMATCH = "AMOUNT_MISMATCH"
    STATUS_MISMATCH = "STATUS_MISMATCH"
    NOT_MATCHED = "NOT_MATCHED"  # a fee, an adjustment or a chargeback: shown and totalled, never matched
