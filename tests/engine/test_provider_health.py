"""Provider-call health: eligibility, scores in [0, 1] (shown in the metrics), the circuit breaker and the
accounts each failure counts against. The routing decision itself is `test_routing_decision`."""

from __future__ import annotations

import random
from dataclasses import dataclass

import pytest

from payorch.engine.provider_health import (
    Circuit,
    ProviderAccount,
    ProviderFigures,
    ProviderHealth,
    RoutingPolicy,
    eligible_providers,
)
from payorch.values.money import Money
from tests.helpers import account_figures

POLICY = RoutingPolicy()  # threshold 3, cool-down 30 s doubling up to 600 s, probe timeout 30 s
EUR_10 = Money(1000, "EUR")


def accepts_eur_up_to_100(provider: str, method: str, amount: Money) -> bool:
    return amount.currency == "EUR" and amount.minor <= 10_000


@dataclass(frozen=True)
class ConfigView:
    """A provider configuration as routing sees it (`provider_health.RoutableConfig`)."""

    provider: str
    is_active: bool
    payment_methods: frozenset[str]


def card(provider: str, *, active: bool = True, methods: frozenset[str] = frozenset({"card"})) -> ConfigView:
    return ConfigView(provider, active, methods)


def at(provider: str, account: str = "shop") -> ProviderAccount:
    """`provider` as the account `account` has it (one merchant's linked key)."""
    return ProviderAccount(provider, account)


def at_each(*providers: str) -> list[ProviderAccount]:
    return [at(provider) for provider in providers]


def figures(health: ProviderHealth, provider: str, now: float, account: str = "shop") -> ProviderFigures:
    found = account_figures(health, at(provider, account), now)
    assert found is not None
    return found


def trip(health: ProviderHealth, provider: str, now: float) -> None:
    for _ in range(health.policy.failure_threshold):
        health.record_failure(at(provider), 0.1, now, provider_wide=False)


def by_score(health: ProviderHealth, now: float, *providers: str) -> list[str]:
    """`providers` by their health score, best first, equal scores by name."""
    return sorted(providers, key=lambda name: (-health.score(at(name), now), name))


def available(health: ProviderHealth, now: float, *providers: str) -> list[str]:
    """Those of `providers` a call may go to now (a due probe is handed out)."""
    return [name for name in providers if health.is_available(at(name), now)]


# Eligibility


def test_inactive_configuration_is_not_eligible() -> None:
    configs = [card("alpha", active=False), card("beta")]
    assert eligible_providers(configs, accepts_eur_up_to_100, "card", EUR_10) == ["beta"]


def test_configuration_not_enabling_the_method_is_not_eligible() -> None:
    configs = [card("alpha", methods=frozenset({"blik"})), card("beta", methods=frozenset({"card", "blik"}))]
    assert eligible_providers(configs, accepts_eur_up_to_100, "card", EUR_10) == ["beta"]


def test_provider_refusing_the_currency_or_amount_is_not_eligible() -> None:
    configs = [card("alpha")]
    assert eligible_providers(configs, accepts_eur_up_to_100, "card", Money(1000, "USD")) == []
    assert eligible_providers(configs, accepts_eur_up_to_100, "card", Money(10_001, "EUR")) == []
    assert eligible_providers(configs, accepts_eur_up_to_100, "card", Money(10_000, "EUR")) == ["alpha"]


def test_acceptance_is_asked_with_the_provider_method_and_amount() -> None:
    asked: list[tuple[str, str, Money]] = []

    def accepts(provider: str, method: str, amount: Money) -> bool:
        asked.append((provider, method, amount))
        return provider != "beta"

    configs = [card("beta"), card("alpha")]
    assert eligible_providers(configs, accepts, "card", EUR_10) == ["alpha"]
    assert asked == [("alpha", "card", EUR_10), ("beta", "card", EUR_10)]


def test_eligible_providers_are_sorted_by_name_and_listed_once() -> None:
    configs = [card("gamma"), card("alpha"), card("beta"), card("alpha")]
    assert eligible_providers(configs, accepts_eur_up_to_100, "card", EUR_10) == ["alpha", "beta", "gamma"]


def test_storage_records_with_a_list_of_methods_are_read_as_they_are() -> None:
    @dataclass(frozen=True)
    class StoredConfig:
        provider: str
        is_active: bool
        payment_methods: list[str]

    configs = [StoredConfig("alpha", True, ["card"]), StoredConfig("beta", True, ["blik"])]
    assert eligible_providers(configs, accepts_eur_up_to_100, "card", EUR_10) == ["alpha"]


# Scores


def test_score_stays_within_zero_and_one_whatever_the_history() -> None:
    rng = random.Random(20240601)
    for _ in range(200):
        success_weight = rng.random()
        latency_weight = rng.random() * (1 - success_weight)
        policy = RoutingPolicy(
            success_weight=success_weight,
            latency_weight=latency_weight,
            health_weight=1 - success_weight - latency_weight,
            latency_reference_s=rng.choice([0.001, 0.5, 1.0, 30.0]),
            smoothing=rng.choice([0.01, 0.2, 1.0]),
            memory_half_life_s=rng.choice([0.5, 600.0, 1e9]),
            failure_threshold=rng.randint(1, 6),
        )
        health = ProviderHealth(policy)
        now = 0.0
        for _ in range(60):
            now += rng.choice([0.0, 0.001, 1.0, 45.0, 5000.0])
            latency = rng.choice([0.0, 1e-6, 0.2, 3.0, 1e6, -1.0])
            if rng.random() < 0.5:
                health.record_success(at("alpha"), latency, now)
            else:
                health.record_failure(at("alpha"), latency, now, provider_wide=False)
            health.is_available(at("alpha"), now)
            score = health.score(at("alpha"), now)
            assert 0.0 <= score <= 1.0
            assert 0.0 <= health.score(at("fresh"), now) <= 1.0


def test_never_seen_provider_scores_one_so_it_gets_traffic() -> None:
    health = ProviderHealth(POLICY)
    for _ in range(20):
        health.record_success(at("established"), 0.3, 0.0)
    assert health.score(at("newcomer"), 0.0) == 1.0
    assert by_score(health, 0.0, "established", "newcomer") == ["newcomer", "established"]


def test_newcomer_keeps_traffic_only_while_its_record_is_as_good() -> None:
    health = ProviderHealth(POLICY)
    for _ in range(20):
        health.record_success(at("established"), 0.3, 0.0)
    health.record_success(at("newcomer"), 2.0, 1.0)  # slow: its first result puts it behind
    assert by_score(health, 1.0, "established", "newcomer") == ["established", "newcomer"]


def test_faster_provider_outranks_slower_one_with_equal_success() -> None:
    health = ProviderHealth(POLICY)
    for _ in range(10):
        health.record_success(at("slow"), 2.0, 0.0)
        health.record_success(at("fast"), 0.2, 0.0)
    assert by_score(health, 0.0, "slow", "fast") == ["fast", "slow"]


def test_latency_score_is_one_half_at_the_reference_latency() -> None:
    policy = RoutingPolicy(success_weight=0.0, latency_weight=1.0, health_weight=0.0, latency_reference_s=1.5)
    health = ProviderHealth(policy)
    health.record_success(at("alpha"), 1.5, 0.0)
    assert health.score(at("alpha"), 0.0) == pytest.approx(0.5)


def test_provider_with_failures_ranks_below_a_healthy_one() -> None:
    health = ProviderHealth(POLICY)
    for _ in range(10):
        health.record_success(at("healthy"), 0.5, 0.0)
        health.record_success(at("flaky"), 0.5, 0.0)
    health.record_failure(at("flaky"), 0.5, 1.0, provider_wide=False)
    assert by_score(health, 1.0, "flaky", "healthy") == ["healthy", "flaky"]


def test_fast_failure_does_not_make_a_provider_look_fast() -> None:
    health = ProviderHealth(POLICY)
    health.record_success(at("alpha"), 2.0, 0.0)
    health.record_failure(at("alpha"), 0.001, 0.0, provider_wide=False)
    assert figures(health, "alpha", 0.0).latency_s == 2.0


def test_slow_failure_raises_the_latency_estimate() -> None:
    health = ProviderHealth(POLICY)
    health.record_success(at("alpha"), 1.0, 0.0)
    health.record_failure(at("alpha"), 11.0, 0.0, provider_wide=False)  # a timeout
    assert figures(health, "alpha", 0.0).latency_s == pytest.approx(3.0)


def test_old_evidence_fades_so_a_passed_over_provider_is_tried_again() -> None:
    health = ProviderHealth(POLICY)
    for _ in range(10):
        health.record_success(at("slow"), 3.0, 0.0)
    for minute in range(60):  # the fast one takes all traffic and stays fresh
        health.record_success(at("fast"), 0.3, minute * 60.0)
    assert by_score(health, 60.0, "slow", "fast") == ["fast", "slow"]
    assert by_score(health, 3600.0, "slow", "fast") == ["slow", "fast"]


def test_equal_records_score_equal() -> None:
    health = ProviderHealth(POLICY)
    for name in ("gamma", "alpha", "beta"):
        health.record_success(at(name), 0.4, 0.0)
    assert len({health.score(at(name), 0.0) for name in ("gamma", "alpha", "beta")}) == 1


# Circuit breaker


def test_failures_below_the_threshold_leave_the_provider_routable() -> None:
    health = ProviderHealth(POLICY)
    health.record_failure(at("alpha"), 0.1, 0.0, provider_wide=False)
    health.record_failure(at("alpha"), 0.1, 0.0, provider_wide=False)
    health.record_success(at("alpha"), 0.1, 0.0)  # breaks the streak
    health.record_failure(at("alpha"), 0.1, 0.0, provider_wide=False)
    health.record_failure(at("alpha"), 0.1, 0.0, provider_wide=False)
    assert health.is_available(at("alpha"), 0.0)


def test_provider_failing_threshold_times_is_skipped_until_cooldown_then_probed_once() -> None:
    health = ProviderHealth(POLICY)
    trip(health, "alpha", 100.0)
    assert not health.is_available(at("alpha"), 100.0)
    assert not health.is_available(at("alpha"), 129.9)
    assert health.is_available(at("alpha"), 130.0)  # the probe
    assert not health.is_available(at("alpha"), 130.0)
    assert not health.is_available(at("alpha"), 140.0)


def test_exactly_one_probe_is_handed_out_among_many_callers() -> None:
    health = ProviderHealth(POLICY)
    trip(health, "alpha", 0.0)
    granted = [health.is_available(at("alpha"), 30.0 + i * 0.01) for i in range(100)]
    assert granted.count(True) == 1


def test_successful_probe_closes_the_circuit() -> None:
    health = ProviderHealth(POLICY)
    trip(health, "alpha", 0.0)
    assert health.is_available(at("alpha"), 30.0)
    health.record_success(at("alpha"), 0.2, 31.0)
    assert figures(health, "alpha", 31.0).circuit is Circuit.CLOSED
    assert all(health.is_available(at("alpha"), 31.0) for _ in range(3))


def test_failed_probe_reopens_the_circuit_for_twice_the_cooldown() -> None:
    health = ProviderHealth(POLICY)
    trip(health, "alpha", 0.0)
    assert health.is_available(at("alpha"), 30.0)
    health.record_failure(at("alpha"), 0.2, 31.0, provider_wide=False)
    assert not health.is_available(at("alpha"), 31.0)
    assert not health.is_available(at("alpha"), 90.9)
    assert health.is_available(at("alpha"), 91.0)


def test_cooldown_growth_is_capped() -> None:
    health = ProviderHealth(POLICY)
    trip(health, "alpha", 0.0)
    now = 0.0
    for _ in range(12):  # 30, 60, ... would pass 600 s on the sixth failed probe
        now = figures(health, "alpha", now).reopens_at or now
        assert health.is_available(at("alpha"), now)
        health.record_failure(at("alpha"), 0.2, now, provider_wide=False)
    assert figures(health, "alpha", now).reopens_at == now + POLICY.max_cooldown_s


def test_successful_probe_resets_the_cooldown() -> None:
    health = ProviderHealth(POLICY)
    trip(health, "alpha", 0.0)
    assert health.is_available(at("alpha"), 30.0)
    health.record_failure(at("alpha"), 0.2, 30.0, provider_wide=False)  # reopened for 60 s
    assert health.is_available(at("alpha"), 90.0)
    health.record_success(at("alpha"), 0.2, 90.0)
    trip(health, "alpha", 100.0)
    assert figures(health, "alpha", 100.0).reopens_at == 130.0


def test_unreported_probe_is_handed_out_again_after_the_probe_timeout() -> None:
    health = ProviderHealth(POLICY)
    trip(health, "alpha", 0.0)
    assert health.is_available(at("alpha"), 30.0)
    assert not health.is_available(at("alpha"), 59.9)
    assert health.is_available(at("alpha"), 60.0)


def test_late_success_while_cooling_down_does_not_close_the_circuit() -> None:
    health = ProviderHealth(POLICY)
    trip(health, "alpha", 0.0)
    health.record_success(at("alpha"), 0.2, 5.0)  # a call started before the circuit opened
    assert not health.is_available(at("alpha"), 5.0)
    assert figures(health, "alpha", 5.0).circuit is Circuit.OPEN


def test_an_open_circuit_is_left_out_until_its_probe_is_due_and_the_probe_goes_out_once() -> None:
    health = ProviderHealth(POLICY)
    trip(health, "alpha", 0.0)
    assert available(health, 10.0, "alpha", "beta") == ["beta"]
    assert available(health, 30.0, "alpha", "beta") == ["alpha", "beta"]
    assert available(health, 31.0, "alpha", "beta") == ["beta"]  # the probe is out


def test_figures_report_each_seen_account_and_provider() -> None:
    health = ProviderHealth(POLICY)
    health.record_success(at("beta"), 0.5, 0.0)
    trip(health, "alpha", 0.0)
    alpha, beta = figures(health, "alpha", 1.0), figures(health, "beta", 1.0)
    assert (alpha.circuit, alpha.consecutive_failures, alpha.reopens_at) == (Circuit.OPEN, 3, 30.0)
    assert (beta.circuit, beta.latency_s) == (Circuit.CLOSED, 0.5)
    assert beta.success_rate == pytest.approx(1.0)
    assert account_figures(health, at("alpha", "another shop"), 1.0) is None
    providers = health.snapshot(1.0)
    assert list(providers) == ["alpha", "beta"]
    # The account's failures were not provider-wide: the provider as a whole saw none.
    assert (providers["alpha"].circuit, providers["alpha"].consecutive_failures) == (Circuit.CLOSED, 0)
    assert health.accounts_not_closed(1.0) == {"alpha": 1}
    assert health.is_available(at("alpha"), 30.0)  # figures handed out no probe


# Accounts: one merchant's failures are its own


def fail_from(
    health: ProviderHealth, provider: str, accounts: str, now: float, *, provider_wide: bool
) -> None:
    for account in accounts.split():
        health.record_failure(at(provider, account), 0.1, now, provider_wide=provider_wide)


def test_one_accounts_failures_take_the_provider_away_from_that_account_only() -> None:
    health = ProviderHealth(POLICY)
    for now in range(20):  # a merchant whose key the provider stopped accepting keeps trying
        fail_from(health, "stripe", "rejected", float(now), provider_wide=False)
    assert not health.is_available(at("stripe", "rejected"), 20.0)
    assert health.is_available(at("stripe", "valid"), 20.0)
    assert health.score(at("stripe", "valid"), 20.0) == 1.0
    assert health.snapshot(20.0)["stripe"].circuit is Circuit.CLOSED


def test_one_accounts_failures_do_not_lower_the_score_others_see() -> None:
    health = ProviderHealth(POLICY)
    fail_from(health, "stripe", "rejected rejected", 0.0, provider_wide=True)
    assert health.score(at("stripe", "valid"), 0.0) == 1.0
    assert health.score(at("stripe", "rejected"), 0.0) < 0.7


def test_provider_wide_failures_of_one_account_do_not_open_the_provider() -> None:
    health = ProviderHealth(POLICY)
    for now in range(20):  # timeouts or 5xx, but only ever for this one account
        fail_from(health, "stripe", "slow", float(now), provider_wide=True)
    assert not health.is_available(at("stripe", "slow"), 20.0)
    assert health.is_available(at("stripe", "other"), 20.0)
    assert health.snapshot(20.0)["stripe"].consecutive_failures == 20


def test_provider_wide_failures_from_several_accounts_open_the_provider_for_every_account() -> None:
    health = ProviderHealth(POLICY)  # 3 accounts
    fail_from(health, "stripe", "a b", 0.0, provider_wide=True)
    assert health.is_available(at("stripe", "never-failed"), 0.0)
    fail_from(health, "stripe", "c", 1.0, provider_wide=True)
    assert health.snapshot(1.0)["stripe"].circuit is Circuit.OPEN
    assert not health.is_available(at("stripe", "never-failed"), 1.0)
    # Cooled down: one probe, from any account whose own circuit is closed; its success closes it.
    assert health.is_available(at("stripe", "never-failed"), 31.0)
    assert not health.is_available(at("stripe", "another"), 31.0)
    health.record_success(at("stripe", "never-failed"), 0.2, 32.0)
    assert health.is_available(at("stripe", "another"), 32.0)
    assert health.snapshot(32.0)["stripe"].circuit is Circuit.CLOSED


def test_account_failures_from_many_accounts_never_open_the_provider() -> None:
    health = ProviderHealth(POLICY)
    fail_from(health, "stripe", " ".join(f"shop-{n}" for n in range(50)), 0.0, provider_wide=False)
    assert health.is_available(at("stripe", "valid"), 0.0)


def test_a_success_of_any_account_ends_the_run_of_failing_accounts() -> None:
    health = ProviderHealth(POLICY)
    fail_from(health, "stripe", "a b", 0.0, provider_wide=True)
    health.record_success(at("stripe", "healthy"), 0.2, 1.0)
    fail_from(health, "stripe", "c", 2.0, provider_wide=True)
    assert health.is_available(at("stripe", "d"), 2.0)


def test_failing_accounts_count_only_within_the_window() -> None:
    health = ProviderHealth(POLICY)  # 60 s
    fail_from(health, "stripe", "a", 0.0, provider_wide=True)
    fail_from(health, "stripe", "b", 30.0, provider_wide=True)
    fail_from(health, "stripe", "c", 61.0, provider_wide=True)  # a's is older than 60 s
    assert health.is_available(at("stripe", "d"), 61.0)
    fail_from(health, "stripe", "d", 62.0, provider_wide=True)  # b, c, d within 60 s
    assert not health.is_available(at("stripe", "e"), 62.0)


def test_an_account_failure_of_the_probe_hands_the_provider_probe_to_another_account() -> None:
    health = ProviderHealth(POLICY)
    fail_from(health, "stripe", "a b c", 0.0, provider_wide=True)
    assert health.is_available(at("stripe", "rejected"), 30.0)  # the probe
    fail_from(health, "stripe", "rejected", 30.5, provider_wide=False)  # says nothing of Stripe
    assert health.is_available(at("stripe", "valid"), 31.0)
    fail_from(health, "stripe", "valid", 31.5, provider_wide=True)  # Stripe still down: reopens
    assert health.snapshot(31.5)["stripe"].reopens_at == 31.5 + 60.0


def test_the_accounts_kept_are_bounded_the_least_recently_used_forgotten_first() -> None:
    health = ProviderHealth(RoutingPolicy(max_accounts=2))
    trip(health, "stripe", 0.0)  # the account "shop"
    health.record_success(at("stripe", "b"), 0.2, 1.0)
    assert not health.is_available(at("stripe"), 2.0)  # used: now the most recent
    health.record_success(at("stripe", "c"), 0.2, 3.0)
    assert account_figures(health, at("stripe", "b"), 3.0) is None
    assert figures(health, "stripe", 3.0).circuit is Circuit.OPEN
    for n in range(1000):  # a stranger's many accounts
        health.record_failure(at("stripe", f"stranger-{n}"), 0.1, 4.0, provider_wide=False)
    assert len([n for n in range(1000) if account_figures(health, at("stripe", f"stranger-{n}"), 4.0)]) == 2


def test_policy_refuses_no_accounts() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        RoutingPolicy(provider_wide_accounts=0)
    with pytest.raises(ValueError, match="at least 1"):
        RoutingPolicy(max_accounts=0)


def test_policy_refuses_weights_not_summing_to_one() -> None:
    with pytest.raises(ValueError, match="sum to 1"):
        RoutingPolicy(success_weight=0.5, latency_weight=0.2, health_weight=0.2)
