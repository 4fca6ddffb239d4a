"""The session state machine."""

from __future__ import annotations

import pytest

from payorch.engine.session_states import (
    SessionEvent,
    SessionStatus,
    TransitionRefused,
    status_for_refunded,
    transition,
)


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


@pytest.mark.parametrize("status", [SessionStatus.SUCCEEDED, SessionStatus.PARTIALLY_REFUNDED])
def test_lost_dispute_reverses_a_paid_session(status: SessionStatus) -> None:
    assert transition(status, SessionEvent.DISPUTE_LOST).status is SessionStatus.REVERSED


@pytest.mark.parametrize(
    ("status", "event"),
    [
        (SessionStatus.SUCCEEDED, SessionEvent.PAYMENT_SUCCEEDED),
        (SessionStatus.SUCCEEDED, SessionEvent.EXPIRED),
        (SessionStatus.FAILED, SessionEvent.EXPIRED),
        (SessionStatus.FAILED, SessionEvent.PAYMENT_DECLINED),
        (SessionStatus.FAILED, SessionEvent.DISPUTE_LOST),
        (SessionStatus.REFUNDED, SessionEvent.DISPUTE_LOST),
        (SessionStatus.REVERSED, SessionEvent.DISPUTE_LOST),
        (SessionStatus.PENDING, SessionEvent.DISPUTE_LOST),
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
