"""The wait before a delivery's next attempt: the schedule's, or a receiver's longer `Retry-After`
up to the schedule's longest wait."""

from __future__ import annotations

from payorch.supervisors.webhook_attempts import retry_wait_s

SCHEDULE = [0.0, 5.0, 300.0, 1800.0]


def test_the_schedule_gives_the_wait_before_each_attempt() -> None:
    assert [retry_wait_s(SCHEDULE, made, None) for made in (1, 2, 3)] == [5.0, 300.0, 1800.0]


def test_no_attempt_is_left_after_the_schedule() -> None:
    assert retry_wait_s(SCHEDULE, 4, None) is None
    assert retry_wait_s(SCHEDULE, 4, 10.0) is None


def test_a_longer_retry_after_is_honoured() -> None:
    assert retry_wait_s(SCHEDULE, 1, 60.0) == 60.0


def test_a_shorter_retry_after_does_not_hurry_the_schedule() -> None:
    assert retry_wait_s(SCHEDULE, 2, 1.0) == 300.0


def test_retry_after_is_bounded_by_the_longest_wait_of_the_schedule() -> None:
    assert retry_wait_s(SCHEDULE, 1, 1e12) == 1800.0
