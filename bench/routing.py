"""Routing: how many payments payorch's learned routing gets approved, and what a decision costs.

Quality is a simulation driving payorch's real code: `engine.routing.decision.decide` over a
dynamic default route, `engine.routing.success_rates.OutcomeWindow` recording each session's outcome when
a provider event would tell it, in its place by the session's creation (as the service's window is
ordered), and `SuccessRates` rebuilt from the window's rows every `REFRESH_EVERY` sessions, as the
service refreshes its figures in batches. The world:
- three providers, four segments (payment method x currency), each provider's approval per segment
  drifting slowly (a sine, its own phase) so the best provider of a segment changes over time;
- customers who are not approved either are declined (the failure is known within a few sessions)
  or leave (the abandonment is known when the checkout expires, `EXPIRY_SESSIONS` later);
- one provider down for `OUTAGE_SESSIONS` sessions (it declines every payment), then back.
Every strategy meets the same customers (the same random numbers decide each session's outcome at
each provider), so their approvals compare without noise between them:
- payorch's dynamic routing, at the default settings and with exploration 0;
- the oracle: per segment and per `ORACLE_WINDOW` sessions, the provider with the best true
  approval over that window, known in hindsight;
- the best static priority: per segment, the one provider that approved most over the whole run;
- uniform random.
Figures: dynamic's approvals against the oracle's; after the outage, in each segment where the
recovered provider is the oracle's choice, the segment's sessions until dynamic routing leads with
it again (and keeps leading in 90% of the next 200); exploration's cost, as the approvals lost
against the run without exploration, and directly, as the true approval of the leader minus that
of the explored provider, summed over the explored sessions. The world's seed is fixed (26), so
every run prints the same figures; how they spread over other seeds is in
`payorch/engine/routing/success_rates.py`'s docstring.

A second world (`STEADY_SEGMENTS`): three steady providers far apart, approving 0.90, 0.50 and
0.15, one segment, no outage: what exploration costs where nothing changes. A fixed 5% spread
evenly over the others, the worst included, got 0.871 there (`STEADY_BEFORE`, the goal to beat).

Decision cost: microseconds per `decide` with a document of 20 rules (all of them looked at: each
admits the session's method, currency and country, none its amount) and 3 providers, objective
`net` with fees: the median of several runs, each of new sessions (their ids hashed afresh).
"""

from __future__ import annotations

import math
import random
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass

from payorch.engine.routing.decision import Decision, decide
from payorch.engine.routing.document import RoutingDocument, SessionFacts, parse_routing_document
from payorch.engine.routing.success_rates import OutcomeWindow, RoutingSettings, SuccessRates
from payorch.values.money import Money
from payorch.values.statuses import Outcome

PROVIDERS = ("alpha", "bravo", "charlie")
SESSIONS = 40_000
OUTAGE_START, OUTAGE_SESSIONS = 16_000, 2_000
DOWN = "alpha"
REFRESH_EVERY = 50  # sessions between two rebuilds of the success rates
EXPIRY_SESSIONS = 300  # an unpaid checkout expires this many sessions after its creation
PAID_WITHIN = 30  # a payment's (or decline's) event arrives within this many sessions
ABANDON_SHARE = 0.5  # of the customers not approved, those who leave rather than being declined
ORACLE_WINDOW = 1_000
DRIFT_PERIOD, DRIFT_AMPLITUDE = 30_000, 0.04
LEAD_CHECK, LEAD_SHARE = 200, 0.9
SEED = 26

Segment = tuple[str, str, float, dict[str, tuple[float, float]]]

# Per segment: its share of sessions, and per provider its mean approval and the phase of its drift.
SEGMENTS: tuple[Segment, ...] = (
    ("card", "EUR", 0.40, {"alpha": (0.88, 3.0), "bravo": (0.83, 2.0), "charlie": (0.80, 1.0)}),
    ("card", "PLN", 0.20, {"alpha": (0.80, 1.0), "bravo": (0.84, 3.0), "charlie": (0.76, 5.0)}),
    ("blik", "PLN", 0.25, {"alpha": (0.72, 2.5), "bravo": (0.74, 0.5), "charlie": (0.82, 4.5)}),
    ("card", "USD", 0.15, {"alpha": (0.89, 3.5), "bravo": (0.80, 1.5), "charlie": (0.84, 0.0)}),
)

# The second world: three steady providers far apart, one segment, no outage. Before exploration
# scaled with uncertainty, a fixed 5% spread evenly (the worst provider included) got 0.871.
STEADY_SEGMENTS: tuple[Segment, ...] = (
    ("card", "EUR", 1.0, {"alpha": (0.90, 0.0), "bravo": (0.50, 0.0), "charlie": (0.15, 0.0)}),
)
STEADY_SESSIONS = 20_000
STEADY_BEFORE = 0.871  # the approval of the routing this one replaced, against 0.90 at best


# Goals.
ORACLE_SHARE_GOAL = 0.97
STEADY_APPROVAL_GOAL = STEADY_BEFORE  # the steady world's approval must beat it
RECOVERY_SESSIONS_GOAL = 500
EXPLORATION_COST_GOAL = 0.015
DECISION_US_GOAL = 100.0


@dataclass(frozen=True)
class World:
    """The sessions of one simulated run, decided in advance: each one's segment, every provider's
    true approval for it, and the random numbers that settle its outcome."""

    seed: int
    segments: tuple[Segment, ...]
    segment: list[int]
    approval: list[tuple[float, ...]]  # per session, per provider (in PROVIDERS' order)
    approve_draw: list[float]  # approved at a provider when below its approval
    leave_draw: list[float]  # not approved: leaves when below ABANDON_SHARE, else declined
    delay: list[int]  # sessions until a payment's or a decline's event arrives


def build_world(
    seed: int = SEED,
    sessions: int = SESSIONS,
    segments: tuple[Segment, ...] = SEGMENTS,
    drift: float = DRIFT_AMPLITUDE,
    outage: bool = True,
) -> World:
    rng = random.Random(seed)  # noqa: S311 - a simulated world, not a secret
    shares = [share for _, _, share, _ in segments]
    segment = rng.choices(range(len(segments)), weights=shares, k=sessions)
    approval = []
    for t, index in enumerate(segment):
        models = segments[index][3]
        row = []
        for provider in PROVIDERS:
            mean, phase = models[provider]
            value = mean + drift * math.sin(2 * math.pi * t / DRIFT_PERIOD + phase)
            down = outage and provider == DOWN and OUTAGE_START <= t < OUTAGE_START + OUTAGE_SESSIONS
            row.append(0.0 if down else min(0.99, max(0.01, value)))
        approval.append(tuple(row))
    return World(
        seed=seed,
        segments=segments,
        segment=segment,
        approval=approval,
        approve_draw=[rng.random() for _ in range(sessions)],
        leave_draw=[rng.random() for _ in range(sessions)],
        delay=[rng.randint(1, PAID_WITHIN) for _ in range(sessions)],
    )


def _approved(world: World, t: int, provider: int) -> bool:
    return world.approve_draw[t] < world.approval[t][provider]


@dataclass(frozen=True)
class DynamicRun:
    approvals: int
    explored: int  # sessions sent first to a provider that did not lead
    exploration_cost: float  # expected approvals the explored sessions lost against their leader
    leaders: list[int]  # per session: the provider (index) that led, exploration aside


def run_dynamic(world: World, settings: RoutingSettings) -> DynamicRun:
    """payorch's dynamic routing over `world`, learning as the service does."""
    document = RoutingDocument()
    window = OutcomeWindow(settings.window)
    rates = SuccessRates.from_rows([], settings)
    # Outcomes by the session they become known at, each with its session's (creation) number.
    arriving: dict[int, list[tuple[str, str, str, Outcome, int]]] = {}
    index_of = {name: index for index, name in enumerate(PROVIDERS)}
    approvals = explored = 0
    cost = 0.0
    leaders = []
    for t, segment in enumerate(world.segment):
        for found in arriving.pop(t, ()):
            window.record(*found)
        if t % REFRESH_EVERY == 0:
            rates = SuccessRates.from_rows(window.rows(), settings, previous=rates)
        method, currency = world.segments[segment][0], world.segments[segment][1]
        facts = SessionFacts(method, Money(5000, currency), None, f"simulated-{world.seed}-{t}")
        decision = decide(document, facts, PROVIDERS, rates, settings)
        chosen = index_of[decision.ranking[0].provider]
        leader = index_of[_leader(decision)]
        leaders.append(leader)
        if decision.reason == "exploration":
            explored += 1
            cost += world.approval[t][leader] - world.approval[t][chosen]
        if _approved(world, t, chosen):
            approvals += 1
            outcome, known_at = Outcome.SUCCESS, t + world.delay[t]
        elif world.approval[t][chosen] > 0 and world.leave_draw[t] < ABANDON_SHARE:
            outcome, known_at = Outcome.ABANDONMENT, t + EXPIRY_SESSIONS
        else:  # declined (a provider that is down declines every payment)
            outcome, known_at = Outcome.FAILURE, t + world.delay[t]
        arriving.setdefault(known_at, []).append((PROVIDERS[chosen], method, currency, outcome, t))
    return DynamicRun(approvals, explored, cost, leaders)


def _leader(decision: Decision) -> str:
    for place in decision.ranking:
        if place.reason != "exploration":
            return place.provider
    return decision.ranking[0].provider


def oracle_choices(world: World) -> list[int]:
    """Per session, the provider with the best mean true approval over its segment's sessions of
    the same `ORACLE_WINDOW`."""
    best: dict[tuple[int, int], int] = {}
    sums: dict[tuple[int, int], list[float]] = {}
    for t, segment in enumerate(world.segment):
        found = sums.setdefault((t // ORACLE_WINDOW, segment), [0.0] * len(PROVIDERS))
        for provider, value in enumerate(world.approval[t]):
            found[provider] += value
    for key, found in sums.items():
        best[key] = max(range(len(PROVIDERS)), key=found.__getitem__)
    return [best[(t // ORACLE_WINDOW, segment)] for t, segment in enumerate(world.segment)]


def best_static(world: World) -> int:
    """Approvals of the best fixed provider per segment, known in hindsight."""
    counts = [[0] * len(PROVIDERS) for _ in world.segments]
    for t, segment in enumerate(world.segment):
        for provider in range(len(PROVIDERS)):
            counts[segment][provider] += _approved(world, t, provider)
    return sum(max(found) for found in counts)


def uniform_random(world: World) -> int:
    rng = random.Random(world.seed + 1)  # noqa: S311 - a simulated choice, not a secret
    return sum(_approved(world, t, rng.randrange(len(PROVIDERS))) for t in range(len(world.segment)))


@dataclass(frozen=True)
class Recovery:
    """After the outage, in one segment the recovered provider is best in: the segment's sessions
    until dynamic routing led with it again (None: never, within the run)."""

    segment: str
    sessions: int | None


def recoveries(world: World, oracle: Sequence[int], leaders: Sequence[int]) -> list[Recovery]:
    end = OUTAGE_START + OUTAGE_SESSIONS
    down = PROVIDERS.index(DOWN)
    found = []
    for index, (method, currency, _, _) in enumerate(world.segments):
        times = [t for t in range(end, len(world.segment)) if world.segment[t] == index]
        if not times or oracle[times[0]] != down:
            continue
        leads = [leaders[t] == down for t in times]
        sessions = None
        for k, leading in enumerate(leads):
            following = leads[k : k + LEAD_CHECK]
            if leading and sum(following) >= LEAD_SHARE * len(following):
                sessions = k
                break
        found.append(Recovery(f"{method} {currency}", sessions))
    return found


@dataclass(frozen=True)
class RoutingQuality:
    sessions: int
    dynamic: DynamicRun
    without_exploration: DynamicRun
    oracle: int
    static: int
    random: int
    recoveries: list[Recovery]
    settings: RoutingSettings
    seconds: float
    steady: DynamicRun  # the second world: three steady providers, 0.90, 0.50 and 0.15
    steady_sessions: int
    steady_best: int  # its approvals at the best provider, always

    @property
    def steady_approval(self) -> float:
        return self.steady.approvals / self.steady_sessions

    @property
    def oracle_share(self) -> float:
        return self.dynamic.approvals / self.oracle

    @property
    def exploration_cost(self) -> float:
        """Approvals lost to exploration against the run without it, as a share of the latter's
        (negative: exploration gained approvals)."""
        base = self.without_exploration.approvals
        return (base - self.dynamic.approvals) / base

    @property
    def explored_cost(self) -> float:
        """Expected approvals the explored sessions lost against their leader, as a share."""
        return self.dynamic.exploration_cost / self.dynamic.approvals

    @property
    def slowest_recovery(self) -> int | None:
        found = [r.sessions for r in self.recoveries]
        return None if not found or None in found else max(s for s in found if s is not None)


def measure_quality(settings: RoutingSettings | None = None, seed: int = SEED) -> RoutingQuality:
    """The simulation of the module's docstring, at `settings` (default: payorch's defaults)."""
    settings = settings or RoutingSettings()
    started = time.perf_counter()
    world = build_world(seed)
    oracle = oracle_choices(world)
    dynamic = run_dynamic(world, settings)
    without = run_dynamic(world, RoutingSettings(**{**settings.__dict__, "exploration": 0.0}))
    steady = build_world(seed, STEADY_SESSIONS, STEADY_SEGMENTS, drift=0.0, outage=False)
    best = max(range(len(PROVIDERS)), key=lambda provider: STEADY_SEGMENTS[0][3][PROVIDERS[provider]][0])
    return RoutingQuality(
        sessions=len(world.segment),
        dynamic=dynamic,
        without_exploration=without,
        oracle=sum(_approved(world, t, choice) for t, choice in enumerate(oracle)),
        static=best_static(world),
        random=uniform_random(world),
        recoveries=recoveries(world, oracle, dynamic.leaders),
        settings=settings,
        seconds=time.perf_counter() - started,
        steady=run_dynamic(steady, settings),
        steady_sessions=STEADY_SESSIONS,
        steady_best=sum(_approved(steady, t, best) for t in range(STEADY_SESSIONS)),
    )


# Decision cost

KNOWN = frozenset(PROVIDERS)


def cost_document() -> RoutingDocument:
    """20 rules that all admit card payments in EUR from Germany, each for another amount range, so
    a session of 1,000 EUR from Germany is checked against every one and routed by the default."""
    rules = [
        {
            "name": f"rule-{number}",
            "when": {
                "paymentMethods": ["card", "blik"],
                "currencies": ["EUR", "PLN"],
                "amount": {"min": 10 * number, "max": 10 * number + 5},
                "countries": ["DE", "PL", "CZ"],
            },
            "route": {"type": "priority", "providers": ["bravo", "alpha"]},
        }
        for number in range(20)
    ]
    raw = {
        "rules": rules,
        "default": {"type": "dynamic"},
        "fees": {
            "alpha": {"percent": "1.4", "fixed": {"EUR": "0.25"}},
            "bravo": {"percent": "1.2", "fixed": {"EUR": "0.30"}},
            "charlie": {"percent": "2.9"},
        },
        "objective": "net",
    }
    return parse_routing_document(raw, KNOWN)


@dataclass(frozen=True)
class DecisionCost:
    microseconds: float  # median per decision
    runs: list[float]


def measure_decision_cost(runs: int = 7, decisions: int = 3_000) -> DecisionCost:
    """The median over `runs` of the mean time of `decisions` decisions, each a new session (its id
    hashed afresh), with learned rates for every provider."""
    settings = RoutingSettings()
    document = cost_document()
    window = OutcomeWindow(settings.window)
    rng = random.Random(SEED)  # noqa: S311 - simulated outcomes, not a secret
    for provider, approval in zip(PROVIDERS, (0.85, 0.82, 0.8), strict=True):
        for _ in range(settings.window):
            outcome = Outcome.SUCCESS if rng.random() < approval else Outcome.FAILURE
            window.record(provider, "card", "EUR", outcome)
    rates = SuccessRates.from_rows(window.rows(), settings)
    amount = Money(100_000, "EUR")
    per_decision = []
    for run in range(runs):
        sessions = [SessionFacts("card", amount, "DE", f"cost-{run}-{n}") for n in range(decisions)]
        started = time.perf_counter()
        for facts in sessions:
            decide(document, facts, PROVIDERS, rates, settings)
        per_decision.append((time.perf_counter() - started) / decisions * 1e6)
    return DecisionCost(statistics.median(per_decision), per_decision)
