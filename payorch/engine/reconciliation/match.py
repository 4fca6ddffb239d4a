"""The match: one item's outcome from what the provider settled and what payorch recorded of it.

Pure: no I/O, no clock (today is given). `runs.py` feeds it in batches.

| the provider settled | payorch recorded | outcome |
|---|---|---|
| a payment | nothing under its reference, or the session unpaid (PENDING, FAILED) | MISSING_IN_PAYORCH |
| a payment | a paid session, another amount or currency | AMOUNT_MISMATCH |
| a payment | a paid session, the same amount | MATCHED |
| a refund | nothing under its reference | MISSING_IN_PAYORCH |
| a refund | a refund not COMPLETED (PENDING, FAILED) | STATUS_MISMATCH |
| a refund | a COMPLETED refund of another amount or currency | AMOUNT_MISMATCH |
| a refund | a COMPLETED refund of the same amount | MATCHED |
| a chargeback, a fee, anything else | (not looked for) | NOT_MATCHED |
| nothing | a paid session or COMPLETED refund expected to settle after today | EXPECTED |
| nothing | a paid session or COMPLETED refund expected to settle by today | MISSING_AT_PROVIDER |
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta

from payorch.providers.settlements import SettledItem, SettledKind
from payorch.storage.reconciliation_sources import RecordedPayment, RecordedRefund
from payorch.values.reconciliation import ItemOutcome


@dataclass(frozen=True)
class Finding:
    """One item of a run: what the provider settled (if it did), what payorch recorded (if it did)."""

    outcome: ItemOutcome
    settled: SettledItem | None
    session_id: uuid.UUID | None
    refund_id: uuid.UUID | None
    recorded_minor: int | None  # signed as a settled gross: a refund negative
    currency: str

    @property
    def repairable(self) -> bool:
        """A payment payorch has unpaid in one of its sessions: `repair` applies it."""
        return (
            self.outcome is ItemOutcome.MISSING_IN_PAYORCH
            and self.session_id is not None
            and self.settled is not None
            and self.settled.kind is SettledKind.PAYMENT
        )


def match_settled(
    item: SettledItem, payment: RecordedPayment | None, refund: RecordedRefund | None
) -> Finding:
    """The outcome of a settled item, given the payment (for a payment) or the refund (for a refund)
    payorch recorded under its reference."""
    if item.kind is SettledKind.PAYMENT:
        if payment is None:
            return Finding(ItemOutcome.MISSING_IN_PAYORCH, item, None, None, None, item.currency)
        if not payment.paid:
            outcome = ItemOutcome.MISSING_IN_PAYORCH
        elif (payment.amount_minor, payment.currency) != (item.gross_minor, item.currency):
            outcome = ItemOutcome.AMOUNT_MISMATCH
        else:
            outcome = ItemOutcome.MATCHED
        return Finding(outcome, item, payment.session_id, None, payment.amount_minor, payment.currency)
    if item.kind is SettledKind.REFUND:
        if refund is None:
            return Finding(ItemOutcome.MISSING_IN_PAYORCH, item, None, None, None, item.currency)
        if not refund.completed:
            outcome = ItemOutcome.STATUS_MISMATCH
        elif (-refund.amount_minor, refund.currency) != (item.gross_minor, item.currency):
            outcome = ItemOutcome.AMOUNT_MISMATCH
        else:
            outcome = ItemOutcome.MATCHED
        return Finding(
            outcome, item, refund.session_id, refund.refund_id, -refund.amount_minor, refund.currency
        )
    return Finding(ItemOutcome.NOT_MATCHED, item, None, None, None, item.currency)


def unsettled_outcome(created_at: datetime, lag_days: int, today: date) -> ItemOutcome:
    """A payment or refund payorch recorded at `created_at` that the provider did not settle in the
    period: EXPECTED while its settlement day (`lag_days` later) is still to come, else
    MISSING_AT_PROVIDER."""
    expected_on = created_at.astimezone(UTC).date() + timedelta(days=lag_days)
    return ItemOutcome.EXPECTED if expected_on > today else ItemOutcome.MISSING_AT_PROVIDER


def unsettled_payment(payment: RecordedPayment, lag_days: int, today: date) -> Finding:
    outcome = unsettled_outcome(payment.created_at, lag_days, today)
    return Finding(outcome, None, payment.session_id, None, payment.amount_minor, payment.currency)


def unsettled_refund(refund: RecordedRefund, lag_days: int, today: date) -> Finding:
    outcome = unsettled_outcome(refund.created_at, lag_days, today)
    return Finding(outcome, None, refund.session_id, refund.refund_id, -refund.amount_minor, refund.currency)
