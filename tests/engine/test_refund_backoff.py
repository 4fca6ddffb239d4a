"""How long a refund whose submission failed waits before the supervisor submits it again."""

from __future__ import annotations

import pytest

from payorch.engine.payments.refunds import backoff_s


@pytest.mark.parametrize(("attempts", "wait"), [(0, 1.0), (1, 1.0), (2, 2.0), (3, 4.0), (9, 256.0)])
def test_each_failed_attempt_doubles_the_wait_from_one_second(attempts: int, wait: float) -> None:
    assert backoff_s(attempts, max_delay_s=300) == wait


@pytest.mark.parametrize("attempts", [10, 100, 10_000])
def test_the_wait_stops_growing_at_the_configured_maximum(attempts: int) -> None:
    assert backoff_s(attempts, max_delay_s=300) == 300
