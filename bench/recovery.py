"""Recovery: how many more sessions payorch gets approved when a declined attempt is followed by
another at the next provider, against an oracle that knows which provider would approve each
customer.

A simulation driving payorch's real code: each session is routed by `engine.routing.decision.decide`
(a dynamic default route, learned success rates, exploration at its default), its recovery policy
is parsed from a routing document (`{"recovery": {"maxAttempts": k}}`) as a merchant's would be,
its attempts come from `engine.routing.recovery.planned_attempts`, and after each decline
`retry_verdict` decides whether the next attempt is made. The same sessions run with 1, 2 and 3
attempts: the first attempt of a session is the same in every run, and a customer is approved or
declined at a provider the same way in every run.

The world: the routing scenario's three providers and four segments (`bench.routing.SEGMENTS`: a
segment's share of sessions and each provider's mean approval in it, without drift or outage), and
a customer declined at a provider for one of three causes, each drawn once per session:
- a decline that repeats at every provider (the issuer refuses the card), with a hard decline code
  (Stripe's `lost_card`, `stolen_card`, `fraudulent`, ...): payorch never retries it;
- a soft decline that repeats at every provider (the issuer is unavailable or refuses for now),
  with a soft code: retried, and declined again;
- a soft decline at this provider alone (the acquirer's or the provider's own refusal), drawn per
  provider, independent of the others: another provider may approve the customer.
The shares come from published figures, not from the result: Primer's network data
(https://primer.io/blog/why-merchants-should-build-a-fallback-strategy) has about 25% of declines
soft (`SOFT_SHARE`; the other 75% repeat everywhere, `HARD_SHARE`) and about 20% of soft declines
approved when retried at another processor (`FALLBACK_RECOVERY`). Per segment, these hold at the
provider with the best approval: of its decline rate d, 75% is the repeating hard decline, and of
the 25% soft, 20% is its own (independent) and 80% repeats everywhere; a provider approving less
than the best adds its own independent soft declines to reach its approval. The world's measured
shares are printed beside Primer's.

The oracle with k attempts knows which providers would approve each customer and tries at most k
of them: it approves every customer some provider approves. A session payorch recovers with k
attempts is one its first attempt lost and a later one won; one the oracle recovers with 2 is one
payorch's first attempt lost and some provider approves. The seed is fixed, so every run prints the
same figures.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass

from bench.routing import PROVIDERS, SEGMENTS
from payorch.engine.routing.decision import Decision, decide
from payorch.engine.routing.document import RoutingDocument, SessionFacts, parse_routing_document
from payorch.engine.routing.recovery import (
    DECLINE_CODES,
    RetryVerdict,
    planned_attempts,
    retry_verdict,
)
from payorch.engine.routing.success_rates import OutcomeWindow, RoutingSettings, SuccessRates
from payorch.values.money import Money
from payorch.values.statuses import Outcome

SESSIONS = 20_000
SEED = 43  # fixed: every run prints the same figures
ATTEMPTS = (1, 2, 3)
# Primer's published figures (the module's docstring).
SOURCE = "Primer, https://primer.io/blog/why-merchants-should-build-a-fallback-strategy"
SOFT_SHARE = 0.25  # of declines, those soft
HARD_SHARE = 1 - SOFT_SHARE  # of declines, those that repeat at every provider
FALLBACK_RECOVERY = 0.20  # of soft declines, those approved at another processor
# The decline codes each cause carries (Stripe's, `engine.routing.recovery.DECLINE_CODES`).
HARD_CODES = ("lost_card", "stolen_card", "fraudulent", "pickup_card", "invalid_account")
SOFT_CODES = (
    "generic_decline",
    "do_not_honor",
    "insufficient_funds",
    "try_again_later",
    "issuer_not_available",
)

# Goals.
ORACLE_RECOVERY_GOAL = 0.80  # with 2 attempts, payorch recovers this share of the oracle's recoveries


@dataclass(frozen=True)
class Customer:
    """One session's customer: their segment, why a provider declines them (a hard decline anywhere,
    a soft decline anywhere, or per provider a soft decline of its own), and the code each carries."""

    segment: int
    hard: bool
    soft_everywhere: bool
    soft_at: tuple[bool, ...]  # per provider, in PROVIDERS' order
    hard_code: str
    soft_code: str

    def approved_at(self, provider: int) -> bool:
        return not (self.hard or self.soft_everywhere or self.soft_at[provider])

    def decline_code(self) -> str:
        return self.hard_code if self.hard else self.soft_code


def decline_causes(segment: int) -> tuple[float, float, tuple[float, ...]]:
    """For `segment`: the probability of the hard decline that repeats everywhere, of the soft one
    that repeats everywhere, and per provider of its own soft decline (the module's docstring)."""
    approvals = [SEGMENTS[segment][3][name][0] for name in PROVIDERS]
    declined = 1 - max(approvals)
    hard = HARD_SHARE * declined
    soft = SOFT_SHARE * declined / (1 - hard)  # among the customers without the hard decline
    soft_everywhere = (1 - FALLBACK_RECOVERY) * soft
    own = tuple(1 - approval / ((1 - hard) * (1 - soft_everywhere)) for approval in approvals)
    return hard, soft_everywhere, own


def build_customers(seed: int = SEED, sessions: int = SESSIONS) -> list[Customer]:
    rng = random.Random(seed)  # noqa: S311 - a simulated world, not a secret
    shares = [share for _, _, share, _ in SEGMENTS]
    causes = [decline_causes(index) for index in range(len(SEGMENTS))]
    customers = []
    for segment in rng.choices(range(len(SEGMENTS)), weights=shares, k=sessions):
        hard, soft_everywhere, own = causes[segment]
        customers.append(
            Customer(
                segment=segment,
                hard=rng.random() < hard,
                soft_everywhere=rng.random() < soft_everywhere,
                soft_at=tuple(rng.random() < share for share in own),
                hard_code=rng.choice(HARD_CODES),
                soft_code=rng.choice(SOFT_CODES),
            )
        )
    return customers


def learned_rates(settings: RoutingSettings, seed: int = SEED) -> SuccessRates:
    """Success rates as payorch learns them from first attempts: a full window of outcomes per
    provider and segment, drawn at each provider's true approval."""
    rng = random.Random(seed + 1)  # noqa: S311 - simulated outcomes, not a secret
    window = OutcomeWindow(settings.window)
    for method, currency, _, models in SEGMENTS:
        for name in PROVIDERS:
            approval = models[name][0]
            for _ in range(settings.window):
                outcome = Outcome.SUCCESS if rng.random() < approval else Outcome.FAILURE
                window.record(name, method, currency, outcome)
    return SuccessRates.from_rows(window.rows(), settings)


@dataclass(frozen=True)
class AttemptsRun:
    """The sessions of one run with at most `attempts` attempts each."""

    attempts: int
    approvals: int
    second_attempts: int  # sessions that got a second attempt
    recovered: int  # sessions approved at a later attempt than the first
    hard_not_retried: int  # declined first attempts that were hard: never retried


def run_attempts(customers: list[Customer], decisions: list[Decision], attempts: int) -> AttemptsRun:
    """Every session with the recovery policy of a document allowing `attempts` attempts."""
    policy = parse_routing_document({"recovery": {"maxAttempts": attempts}}, PROVIDERS).recovery_policy
    index_of = {name: index for index, name in enumerate(PROVIDERS)}
    approvals = second = recovered = hard_not_retried = 0
    for customer, decision in zip(customers, decisions, strict=True):
        plan = planned_attempts(decision, policy)
        for number, planned in enumerate(plan, start=1):
            if number == 2:
                second += 1
            if customer.approved_at(index_of[planned.provider]):
                approvals += 1
                recovered += number > 1
                break
            code = customer.decline_code()
            reason = DECLINE_CODES["stripe"][code].reason
            verdict = retry_verdict(policy, number, reason, planned.provider, code)
            if verdict is RetryVerdict.HARD_DECLINE:
                hard_not_retried += 1
            if verdict is not RetryVerdict.RETRY:
                break
    return AttemptsRun(attempts, approvals, second, recovered, hard_not_retried)


@dataclass(frozen=True)
class RecoveryQuality:
    sessions: int
    runs: list[AttemptsRun]
    oracle: int  # sessions some provider approves: the oracle's approvals with any number of attempts
    oracle_recovered: int  # of those, the sessions payorch's first attempt lost
    soft_share: float  # of first attempts declined, the share declined soft
    fallback_recovery: float  # of soft-declined first attempts, the share the next provider approves
    seconds: float

    def run(self, attempts: int) -> AttemptsRun:
        return next(run for run in self.runs if run.attempts == attempts)

    @property
    def oracle_share_recovered(self) -> float:
        """With 2 attempts, payorch's recovered sessions against the oracle's."""
        return self.run(2).recovered / self.oracle_recovered if self.oracle_recovered else 1.0


def measure_recovery(seed: int = SEED, sessions: int = SESSIONS) -> RecoveryQuality:
    """The simulation of the module's docstring."""
    started = time.perf_counter()
    settings = RoutingSettings()
    customers = build_customers(seed, sessions)
    rates = learned_rates(settings, seed)
    document = RoutingDocument()
    decisions = []
    for number, customer in enumerate(customers):
        method, currency = SEGMENTS[customer.segment][0], SEGMENTS[customer.segment][1]
        facts = SessionFacts(method, Money(5000, currency), None, f"recovery-{seed}-{number}")
        decisions.append(decide(document, facts, PROVIDERS, rates, settings))
    runs = [run_attempts(customers, decisions, attempts) for attempts in ATTEMPTS]
    index_of = {name: index for index, name in enumerate(PROVIDERS)}
    approvable = [any(c.approved_at(p) for p in range(len(PROVIDERS))) for c in customers]
    first = [
        customer.approved_at(index_of[decision.order[0]])
        for customer, decision in zip(customers, decisions, strict=True)
    ]
    declined = [
        (customer, decision)
        for customer, decision, won in zip(customers, decisions, first, strict=True)
        if not won
    ]
    soft = [(c, d) for c, d in declined if not c.hard]
    next_approves = sum(c.approved_at(index_of[d.order[1]]) for c, d in soft)
    return RecoveryQuality(
        sessions=len(customers),
        runs=runs,
        oracle=sum(approvable),
        oracle_recovered=sum(can and not won for can, won in zip(approvable, first, strict=True)),
        soft_share=len(soft) / len(declined) if declined else 0.0,
        fallback_recovery=next_approves / len(soft) if soft else 0.0,
        seconds=time.perf_counter() - started,
    )
