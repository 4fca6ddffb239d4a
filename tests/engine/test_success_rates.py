"""Learned success rates: outcomes and their weights, the sliding window, the recent run after a
change, thin segments shrunk toward their parents, and the in-memory window agreeing with rows
read from storage."""

from __future__ import annotations

import math
import random

import pytest

from payorch.config import Settings
from payorch.engine.payments.states import SessionEvent, first_outcome
from payorch.engine.routing.sessions import learned_settings
from payorch.engine.routing.success_rates import (
    PRIOR,
    Outcome,
    OutcomeWindow,
    RoutingSettings,
    SegmentFigures,
    SuccessRates,
    recent_run,
)

SETTINGS = RoutingSettings()  # window 200, min_outcomes 20, abandonment weight 0.5


def steady(rate: float, count: int) -> str:
    """`count` outcome codes, newest first, with successes spread evenly at `rate` (a success
    first), the rest failures."""
    return "".join("s" if math.ceil((n + 1) * rate) > math.ceil(n * rate) else "f" for n in range(count))


def row(
    outcomes: str, provider: str = "stripe", method: str = "card", currency: str = "EUR"
) -> SegmentFigures:
    return SegmentFigures(provider, method, currency, outcomes)


def rates_of(*rows: SegmentFigures, settings: RoutingSettings = SETTINGS) -> SuccessRates:
    return SuccessRates.from_rows(rows, settings)


# Outcomes


def test_a_sessions_first_event_gives_its_outcome() -> None:
    assert first_outcome(SessionEvent.PAYMENT_SUCCEEDED) is Outcome.SUCCESS
    assert first_outcome(SessionEvent.PAYMENT_DECLINED) is Outcome.FAILURE
    assert first_outcome(SessionEvent.EXPIRED) is Outcome.ABANDONMENT
    assert first_outcome(SessionEvent.DISPUTE_LOST) is None


def test_an_abandonment_weighs_half_a_failure_by_default() -> None:
    figures = row("ssfa")
    assert figures.count == 4
    # 2 successes of 3.5 weighted attempts, on the prior's 1 success of 2 attempts.
    assert rates_of(figures).estimate("stripe", "card", "EUR").rate == pytest.approx((2 + 1) / (3.5 + 2))
    assert rates_of(row("ssff")).estimate("stripe", "card", "EUR").rate == pytest.approx((2 + 1) / (4 + 2))


def test_rate_is_the_beta_posterior_of_the_weighted_outcomes() -> None:
    outcomes = steady(0.75, 40)
    estimate = rates_of(row(outcomes)).estimate("stripe", "card", "EUR")
    rate = (30 + 1) / (40 + 2)
    assert (estimate.rate, estimate.outcomes, estimate.level) == (pytest.approx(rate), 40, "segment")
    # Its parents know nothing beyond its own outcomes: they lend it nothing.
    assert estimate.deviation == pytest.approx(math.sqrt(rate * (1 - rate) / (40 + 2 + 1)))
    assert estimate.upper == pytest.approx(rate + estimate.deviation)
    with_abandonments = outcomes.replace("f", "a")  # 30 successes, 10 abandonments weighing 5
    assert rates_of(row(with_abandonments)).estimate("stripe", "card", "EUR").rate == pytest.approx(31 / 37)


def test_abandonment_weight_is_a_setting() -> None:
    outcomes = steady(0.75, 40).replace("f", "a")
    settings = RoutingSettings(abandonment_weight=1.0)
    assert rates_of(row(outcomes), settings=settings).estimate("stripe", "card", "EUR").rate == pytest.approx(
        31 / 42
    )


def test_upper_bound_narrows_as_outcomes_accumulate() -> None:
    few = rates_of(row(steady(0.8, 20))).estimate("stripe", "card", "EUR")
    many = rates_of(row(steady(0.8, 200))).estimate("stripe", "card", "EUR")
    assert few.upper - few.rate > many.upper - many.rate > 0
    assert many.upper <= 1


# The sliding window


def test_window_keeps_the_newest_outcomes_of_each_segment() -> None:
    window = OutcomeWindow(3)
    for outcome in (Outcome.FAILURE, Outcome.SUCCESS, Outcome.ABANDONMENT, Outcome.SUCCESS):
        window.record("stripe", "card", "EUR", outcome)
    window.record("stripe", "card", "PLN", Outcome.FAILURE)
    assert window.rows() == [row("sas"), row("f", currency="PLN")]


def test_outcomes_beyond_the_window_do_not_count() -> None:
    settings = RoutingSettings(window=50, min_outcomes=10)
    kept_then_dropped = steady(0.9, 50) + steady(0.1, 150)  # newest first
    estimate = rates_of(row(kept_then_dropped), settings=settings).estimate("stripe", "card", "EUR")
    assert estimate.outcomes == 50
    assert estimate.rate == pytest.approx((45 + 1) / (50 + 2))


def test_window_rows_and_storage_rows_give_the_same_rates() -> None:
    rng = random.Random(7)
    window = OutcomeWindow(SETTINGS.window)
    recorded: dict[tuple[str, str, str], list[str]] = {}
    for _ in range(3000):
        key = (rng.choice(["stripe", "mollie"]), rng.choice(["card", "blik"]), rng.choice(["EUR", "PLN"]))
        outcome = rng.choice(list(Outcome))
        window.record(*key, outcome)
        recorded.setdefault(key, []).append(outcome)
    # What storage reads: each segment's last `window` outcomes, newest first.
    stored = [
        SegmentFigures(*key, "".join(reversed(outcomes))[: SETTINGS.window])
        for key, outcomes in sorted(recorded.items())
    ]
    assert window.rows() == stored
    from_window, from_storage = rates_of(*window.rows()), rates_of(*stored)
    assert from_window.segments() == from_storage.segments()
    assert from_window.estimate("stripe", "card", "EUR") == from_storage.estimate("stripe", "card", "EUR")


# The recent run


def test_steady_provider_is_judged_on_its_whole_window() -> None:
    successes, attempts = recent_run(steady(0.8, 200), 0.5)
    assert (successes, attempts) == (160, 200)


def test_provider_back_after_an_outage_is_judged_on_its_outcomes_since() -> None:
    # Newest first: 20 successes since it came back, 30 failures while down, a long good past.
    outcomes = "s" * 20 + "f" * 30 + steady(0.9, 150)
    assert recent_run(outcomes, 0.5) == (20, 20)
    assert rates_of(row(outcomes)).estimate("stripe", "card", "EUR").rate == pytest.approx(21 / 22)


def test_provider_going_down_is_judged_on_its_failures_since() -> None:
    outcomes = "f" * 20 + steady(0.9, 180)
    assert recent_run(outcomes, 0.5) == (0, 20)
    assert rates_of(row(outcomes)).estimate("stripe", "card", "EUR").rate == pytest.approx(1 / 22)


# Thin segments shrunk toward their parents


def shrunk(successes: float, attempts: float, count: int, centre: float) -> float:
    """The rate of `successes` in `attempts` (`count` outcomes in the window) with a prior of
    20 outcomes at `centre`, weighing less as the window (200) fills, on Beta(1, 1)."""
    weight = 20 * (1 - count / 200)
    return (successes + weight * centre + 1) / (attempts + weight + 2)


def test_a_full_window_is_its_own_rate_whatever_its_parent() -> None:
    rates = rates_of(row(steady(0.9, 200)), row(steady(0.5, 200), currency="PLN"))
    estimate = rates.estimate("stripe", "card", "EUR")
    assert (estimate.rate, estimate.level, estimate.outcomes) == (pytest.approx(181 / 202), "segment", 200)


def test_a_thin_segment_is_shrunk_toward_its_payment_methods_rate() -> None:
    rates = rates_of(row(steady(0.9, 10)), row(steady(0.5, 100), currency="PLN"))
    method = rates.estimate("stripe", "card", "PLN")
    parent = (9 + 50 + 1) / (110 + 2)  # the method's rate: the application's, the provider's, its own alike
    estimate = rates.estimate("stripe", "card", "EUR")
    assert estimate.rate == pytest.approx(shrunk(9, 10, 10, parent))
    assert parent < estimate.rate < (9 + 1) / (10 + 2)  # between the parent's and its own
    assert (estimate.level, estimate.outcomes) == ("method", 110)  # resting mostly on the method's
    assert method.level == "segment"


def test_a_segment_without_outcomes_has_its_parents_rate_less_surely() -> None:
    rates = rates_of(row(steady(0.9, 10)), row(steady(0.5, 100), currency="PLN"))
    parent = (9 + 50 + 1) / (110 + 2)
    usd = rates.estimate("stripe", "card", "USD")
    assert usd.rate == pytest.approx(shrunk(0, 0, 0, parent))
    assert usd.deviation > rates.estimate("stripe", "card", "EUR").deviation


def test_a_thin_method_is_shrunk_toward_the_providers_rate() -> None:
    rates = rates_of(row(steady(0.9, 10)), row(steady(0.5, 30), method="blik", currency="PLN"))
    provider = (9 + 15 + 1) / (40 + 2)
    method = shrunk(9, 10, 10, provider)
    estimate = rates.estimate("stripe", "card", "EUR")
    assert estimate.rate == pytest.approx(shrunk(9, 10, 10, method))
    assert (estimate.level, estimate.outcomes) == ("provider", 40)


def test_a_new_provider_starts_at_the_applications_rate() -> None:
    rates = rates_of(row(steady(0.9, 200)), row(steady(0.7, 200), provider="mollie"))
    application = (180 + 140 + 1) / (400 + 2)
    estimate = rates.estimate("sandbox", "card", "EUR")
    assert estimate.rate == pytest.approx(shrunk(0, 0, 0, application))
    assert (estimate.level, estimate.outcomes) == ("prior", 0)


def test_without_any_outcome_every_provider_is_at_one_half() -> None:
    estimate = rates_of().estimate("mollie", "card", "EUR")
    assert estimate.rate == pytest.approx(0.5)
    assert PRIOR.rate == 0.5


def test_a_provider_with_few_outcomes_anywhere_rests_on_the_prior() -> None:
    estimate = rates_of(row("sssss")).estimate("stripe", "card", "EUR")
    assert (estimate.level, estimate.outcomes) == ("prior", 5)
    assert estimate.rate == pytest.approx(6 / 7)  # its parents are its own outcomes


def test_the_parents_weight_is_a_setting() -> None:
    settings = RoutingSettings(min_outcomes=5)
    rows = (row("sssss"), row(steady(0.5, 100), currency="PLN"))
    assert rates_of(*rows, settings=settings).estimate("stripe", "card", "EUR").level == "segment"
    light = rates_of(*rows, settings=RoutingSettings(min_outcomes=1)).estimate("stripe", "card", "EUR")
    heavy = rates_of(*rows, settings=RoutingSettings(min_outcomes=100)).estimate("stripe", "card", "EUR")
    assert heavy.rate < light.rate < 6 / 7


def test_a_rate_below_its_whole_windows_says_it_fell() -> None:
    fallen = rates_of(row("f" * 20 + steady(0.9, 180))).estimate("stripe", "card", "EUR")
    assert fallen.fell and fallen.rate < 0.1
    assert not rates_of(row(steady(0.1, 200))).estimate("stripe", "card", "EUR").fell
    assert not rates_of(row("s" * 20 + steady(0.3, 180))).estimate("stripe", "card", "EUR").fell


# Settings


@pytest.mark.parametrize(
    "wrong",
    [
        {"window": 0},
        {"min_outcomes": 0},
        {"exploration": 1.5},
        {"elimination_threshold": -0.1},
        {"abandonment_weight": 2},
    ],
)
def test_inconsistent_settings_are_refused(wrong: dict[str, float]) -> None:
    with pytest.raises(ValueError):
        RoutingSettings(**wrong)  # type: ignore[arg-type]


def test_configuration_defaults_are_the_engines() -> None:
    # Every setting of [routing] but how often the rates are read again (the actor's, not theirs)
    # and the backtest worker's share of a core (the worker's).
    learned = Settings().routing.model_dump(exclude={"refresh_s", "backtest_cpu_share"})
    assert RoutingSettings(**learned) == RoutingSettings()
    assert learned_settings(Settings().routing) == RoutingSettings()


def test_the_window_keeps_outcomes_in_the_order_their_sessions_were_created() -> None:
    window = OutcomeWindow(3)
    for created, outcome in ((2, "s"), (3, "s"), (1, "a"), (4, "f"), (0, "a")):  # as they arrive
        window.record("stripe", "card", "EUR", Outcome(outcome), created=created)
    # Newest session first; the abandonments arrived last but belong to the oldest sessions, and
    # the oldest fall out of the window.
    assert window.rows() == [row("fss")]
