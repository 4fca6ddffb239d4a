"""An actor's hot state: what a forget drops, and success rates read again in batches, at most once
per refresh interval."""

from __future__ import annotations

from payorch.engine.hot_state import DEFAULT_ROUTING, HotState
from payorch.engine.routing.success_rates import RoutingSettings, SegmentFigures, SuccessRates

RATES = SuccessRates.from_rows([SegmentFigures("sandbox", "card", "PLN", "sf")], RoutingSettings())


def test_rates_are_due_when_never_read_and_again_once_the_interval_has_passed() -> None:
    hot = HotState(trusted=lambda: True)
    assert hot.rates_due(100.0, 5.0)
    hot.keep_rates(RATES, 100.0)
    assert not hot.rates_due(104.9, 5.0)
    assert hot.rates_due(105.0, 5.0)
    assert hot.rates_due(100.0, 0.0)  # 0: before every batch


def test_rates_read_earlier_never_replace_newer_ones() -> None:
    hot = HotState(trusted=lambda: True)
    newer = SuccessRates.from_rows([], RoutingSettings())
    hot.keep_rates(newer, 200.0)
    hot.keep_rates(RATES, 100.0)
    assert hot.rates() is newer


def test_a_forget_drops_the_configurations_and_the_document_but_keeps_the_rates() -> None:
    hot = HotState(trusted=lambda: True)
    hot.keep_provider_configs((), hot.generation)
    hot.keep_routing(DEFAULT_ROUTING, hot.generation)
    hot.keep_rates(RATES, 1.0)
    hot.forget()
    assert (hot.provider_configs(), hot.routing(), hot.rates()) == (None, None, RATES)


def test_without_a_listener_nothing_but_the_rates_is_kept() -> None:
    hot = HotState(trusted=lambda: False)
    hot.keep_routing(DEFAULT_ROUTING, hot.generation)
    hot.keep_rates(RATES, 1.0)
    assert (hot.routing(), hot.rates()) == (None, RATES)


def test_a_read_started_before_a_forget_does_not_put_back_what_it_read() -> None:
    hot = HotState(trusted=lambda: True)
    generation = hot.generation
    hot.forget()
    hot.keep_routing(DEFAULT_ROUTING, generation)
    assert hot.routing() is None
