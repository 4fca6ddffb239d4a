"""Background work held to a share of one core rests in proportion to the CPU each step took."""

from __future__ import annotations

import pytest

from payorch.values.cpu_share import CpuShare


class CpuClock:
    def __init__(self) -> None:
        self.now = 10.0

    def __call__(self) -> float:
        return self.now


def test_work_held_to_a_quarter_of_a_core_rests_three_times_what_each_step_took() -> None:
    clock = CpuClock()
    pacing = CpuShare(0.25, clock)
    clock.now += 0.04
    assert pacing.rest_s() == pytest.approx(0.12)
    clock.now += 0.01
    assert pacing.rest_s() == pytest.approx(0.03)
    assert pacing.rest_s() == 0.0  # no CPU taken since


def test_work_given_a_whole_core_never_rests() -> None:
    clock = CpuClock()
    pacing = CpuShare(1.0, clock)
    clock.now += 5.0
    assert pacing.rest_s() == 0.0


@pytest.mark.parametrize("share", [0.0, -0.5, 1.5])
def test_a_share_outside_nothing_to_one_core_is_refused(share: float) -> None:
    with pytest.raises(ValueError, match="share of one core"):
        CpuShare(share, CpuClock())


def test_work_timed_on_a_wall_clock_does_not_take_its_rest_for_work_once_restarted() -> None:
    clock = CpuClock()
    pacing = CpuShare(0.5, clock)
    clock.now += 0.1  # a step of work
    rest = pacing.rest_s()
    clock.now += rest  # the rest, on the same wall clock
    pacing.restart()
    clock.now += 0.1  # the next step
    assert pacing.rest_s() == pytest.approx(0.1)  # not 0.2: the rest was not work
