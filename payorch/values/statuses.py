"""What a session, a payment attempt, a refund, a webhook delivery and a webhook test can be, why a
session or a refund failed, why a session was routed where it was and how its payment turned out
there: each enumeration's one definition.

They live on the lowest floor because every floor speaks them: the engine moves sessions and
refunds between them (`engine.payments.states`, `engine.payments.refund_rules`), the providers translate
their own codes into a `FailureReason`, storage writes them into its statements' text, the
database keeps its columns to them, the interface's bodies and document list them. A value is
added (or taken out) here and nowhere else: the CHECK constraints of the columns are written from
these enumerations (`storage.enumerated_columns`) by migration 0014, which `payorch migrate`
applies again whenever they change.

Every value is written as on the wire (the interface's contract): letters and underscores, so
that it is also its own SQL literal between single quotes. The statuses and failure reasons are
upper-case, as the interface writes them; the routing vocabulary is lower-case, as API.md's
"Routing" writes it.
"""

from __future__ import annotations

import enum


class SessionStatus(enum.StrEnum):
    """A checkout session's state (`engine.payments.states` moves it)."""

    PENDING = "PENDING"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    PARTIALLY_REFUNDED = "PARTIALLY_REFUNDED"
    REFUNDED = "REFUNDED"
    REVERSED = "REVERSED"


class RefundStatus(enum.StrEnum):
    """A refund's state: PENDING until its provider settles it, then COMPLETED or FAILED."""

    PENDING = "PENDING"
    COMPLETED = "COMPLETED"
    FAILED = "FAILED"


class DeliveryStatus(enum.StrEnum):
    """What became of a webhook delivery: due (again), received by the merchant, or given up."""

    PENDING = "PENDING"
    DELIVERED = "DELIVERED"
    FAILED = "FAILED"


class WebhookTestStatus(enum.StrEnum):
    """How a configuration's last test send went (`POST .../webhooks/{id}/test`)."""

    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"


class AttemptStatus(enum.StrEnum):
    """A payment attempt's state (a session has one or more, docs/api.md "Attempts"): OPEN while its
    checkout may still be paid, then how it ended. The open attempt's is its session's status
    (`engine.payments.records.current_attempt_status`); an ended attempt keeps its own."""

    OPEN = "OPEN"
    """Its checkout is the session's now: the customer may pay there."""
    SUCCEEDED = "SUCCEEDED"
    """The customer paid at its provider."""
    DECLINED = "DECLINED"
    """The provider declined the payment (its `failureReason`, and the provider's own code)."""
    CANCELED = "CANCELED"
    """The customer gave up at the provider's page and came back unpaid."""
    CLOSED = "CLOSED"
    """payorch closed its checkout at the provider, its outcome unknown: no decline nor cancel came
    back before the next attempt opened."""
    EXPIRED = "EXPIRED"
    """Its session expired while it was open, unpaid."""
    DUPLICATE_REFUNDED = "DUPLICATE_REFUNDED"
    """Paid after another attempt of its session was: payorch refunded this payment in full by
    itself (a refund with reason DUPLICATE), the session paid once."""


class FailureReason(enum.StrEnum):
    """Why a session or a refund FAILED (its `failureReason`), or why a payment attempt was
    declined. Each provider translates its own codes into these; a code it has no translation for
    is PAYMENT_FAILED."""

    EXPIRED = "EXPIRED"
    """The session expired before the customer paid."""
    PAYMENT_FAILED = "PAYMENT_FAILED"
    """The provider declined, for a reason payorch has no closer name for."""
    PROVIDER_REFUSED = "PROVIDER_REFUSED"
    """The provider refused the refund when payorch submitted it."""
    CARD_DECLINED = "CARD_DECLINED"
    INSUFFICIENT_FUNDS = "INSUFFICIENT_FUNDS"
    LOST_OR_STOLEN_CARD = "LOST_OR_STOLEN_CARD"
    EXPIRED_OR_CANCELED_CARD = "EXPIRED_OR_CANCELED_CARD"


class RoutingReason(enum.StrEnum):
    """Why a session's checkout is at its provider (its `routing.reason`, docs/routing.md)."""

    RULE = "rule"
    """A priority route put the provider first (a rule's, or the default route)."""
    SPLIT = "split"
    """A split route assigned the session to the provider by weight."""
    DYNAMIC = "dynamic"
    """A dynamic route ranked the provider first by its learned success rate."""
    EXPLORATION = "exploration"
    """A dynamic route sent the session first to a provider that does not lead, so that its
    figures stay fresh."""
    CASCADE = "cascade"
    """The provider the decision put first did not create the checkout (it failed, or its circuit
    was open): a later one in the order did."""
    RECOVERY = "recovery"
    """An earlier attempt of the session was declined, and the application's recovery policy sent
    the customer on to this provider, the next of the decision's order
    (`engine.routing.recovery`)."""


class Outcome(enum.StrEnum):
    """A payment attempt's outcome at its provider, for learned routing
    (`engine.routing.success_rates`; docs/routing.md, "One outcome"): its payment succeeding, the
    provider declining it, its checkout ending unpaid. One letter each, as a segment's outcomes
    are listed."""

    SUCCESS = "s"
    FAILURE = "f"
    ABANDONMENT = "a"
