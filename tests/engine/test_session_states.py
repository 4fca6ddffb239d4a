"""The session state machine."""

from __future__ import annotations

import pytest

from payorch.engine.payments.states import (
    SessionEvent,
    TransitionRefused,
    status_for_refunded,
    transition,
)
from payorch.values.statuses import SessionStatus


def test_pending_payment_succeeded_is_succeeded_and_emits_session_completed() -> None:
    change = transition(SessionStatus.PENDING, SessionEvent.PAYMENT_SUCCEEDED)
    assert (change.status, change.emits) == (SessionStatus.SUCCEEDED, "session.completed")


def test_declined_payment_leaves_the_session_pending_and_emits_nothing() -> None:
    change = transition(SessionStatus.PENDING, SessionEvent.PAYMENT_DECLINED)
    assert (change.status, change.emits) == (SessionStatus.PENDING, None)


def test_expiry_fails_a_pending_session_with_reason_expired() -> None:
    change = transition(SessionStatus.PENDING, SessionEvent.EXPIRED)
    assert (change.status, change.failure_reason, change.emits) == (
        SessionStatus.FAILED,
        "EXPIRED",
        "session.expired",
    )


def test_a_payment_reported_after_expiry_succeeds_the_session_and_emits_session_completed() -> None:
    change = transition(SessionStatus.FAILED, SessionEvent.PAYMENT_SUCCEEDED)
    assert (change.status, change.failure_reason, change.emits) == (
        SessionStatus.SUCCEEDED,
        None,
        "session.completed",
    )


@pytest.mark.parametrize(
    "status",
    [
        SessionStatus.SUCCEEDED,
        SessionStatus.PARTIALLY_REFUNDED,
        SessionStatus.REVERSED,
        SessionStatus.PENDING,  # the dispute proves a payment whose event is not applied yet
        SessionStatus.FAILED,
    ],
)
def test_a_lost_dispute_reverses_any_session_but_a_refunded_one_and_tells_the_merchant(
    status: SessionStatus,
) -> None:
    change = transition(status, SessionEvent.DISPUTE_LOST)
    assert (change.status, change.failure_reason, change.emits, change.dispute_lost) == (
        SessionStatus.REVERSED,
        None,
        "session.dispute_lost",
        True,
    )


def test_a_lost_dispute_of_a_refunded_session_keeps_it_refunded_and_tells_the_merchant() -> None:
    change = transition(SessionStatus.REFUNDED, SessionEvent.DISPUTE_LOST)
    assert (change.status, change.emits, change.dispute_lost) == (
        SessionStatus.REFUNDED,
        "session.dispute_lost",
        True,
    )


@pytest.mark.parametrize(
    ("status", "event"),
    [
        (SessionStatus.SUCCEEDED, SessionEvent.PAYMENT_SUCCEEDED),
        (SessionStatus.SUCCEEDED, SessionEvent.EXPIRED),
        (SessionStatus.FAILED, SessionEvent.EXPIRED),
        (SessionStatus.FAILED, SessionEvent.PAYMENT_DECLINED),
    ],
)
def test_events_that_do_not_apply_are_refused(status: SessionStatus, event: SessionEvent) -> None:
    with pytest.raises(TransitionRefused):
        transition(status, event)


@pytest.mark.parametrize(
    ("refunded", "status"),
    [
        (0, SessionStatus.SUCCEEDED),
        (1, SessionStatus.PARTIALLY_REFUNDED),
        (9999, SessionStatus.PARTIALLY_REFUNDED),
        (10000, SessionStatus.REFUNDED),
    ],
)
def test_status_follows_the_refunded_sum(refunded: int, status: SessionStatus) -> None:
    assert status_for_refunded(10000, refunded) is status


@pytest.mark.parametrize("refunded", [-1, 10001])
def test_refunded_sum_outside_the_total_is_an_error(refunded: int) -> None:
    with pytest.raises(ValueError):
        status_for_refunded(10000, refunded)
