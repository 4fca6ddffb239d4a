"""A candidate routing document replayed over an application's past sessions beside the document
in force, replayed the same way: the backtest (docs/routing.md, "Backtest").

Pure code. A `Replayer` is given the application's sessions in batches (`storage.routing_history`:
each with its payment method, amount, billing country, the provider of its first attempt, that
attempt's outcome, what decided it, and its later attempts), decides each one by the candidate and
by the document in force as a create would now (`routing_decision.decide`: today's links, today's
learned rates, the split and exploration drawn from the session's id as they were when it was
created), and counts:

- per provider, the sessions that went there (`actual`), those the candidate sends there first
  (`candidate`) and those the document in force sends there first when replayed (`baseline`), and
  what the provider's own sessions showed: how many reached an outcome and how many of those were
  paid (its observed approval);
- per rule of the candidate (and its default route), the sessions it matches;
- the sessions whose first provider the candidate changes from the document in force's, and those
  it could route nowhere (no provider it names is linked and takes the payment: a create would
  answer 422);
- what the candidate's recovery policy would have changed, as far as the history tells
  (`engine.routing.backtest_recovery`).

`result` then estimates the approval of the candidate's first choices and of the document in
force's, over the sessions with an outcome, by a doubly robust estimate from the chances each
session had of going where it went (`engine.routing.backtest_estimate`), beside the approval
observed. Both documents are replayed the same way, so what routing on today's rates with
hindsight flatters, it flatters in both: the change between them is the candidate's own.

Counting is all that is kept between batches, so memory follows a batch, not the window.

A `Replayer` runs in a backtest worker process (`engine.routing.backtest_worker`), so everything it is
given is a plain value that crosses a pipe: the configurations as `LinkedProvider`s, and what the
catalogue's providers take as `AmountLimits` (the server asks its catalogue, batch by batch, for the
kinds of session the worker meets: `accepts_within` answers from them as
`session_routing.accepts_of` answers from the catalogue).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction

from payorch.engine.provider_health import RoutableConfig, eligible_providers
from payorch.engine.routing.backtest_estimate import (
    DoublyRobust,
    EstimatedApproval,
    ObservedApprovals,
    Seen,
    first_chances,
    logged_chance,
)
from payorch.engine.routing.backtest_recovery import RecoveryCounter, RecoveryTally
from payorch.engine.routing.decision import Decision, decide
from payorch.engine.routing.document import RoutingDocument, SessionFacts
from payorch.engine.routing.recovery import planned_attempts
from payorch.engine.routing.success_rates import RoutingSettings, SuccessRates
from payorch.storage.routing_history import PastSession
from payorch.values.money import Money
from payorch.values.statuses import Outcome, RoutingReason

MAX_DAYS = 30  # how far back a backtest may reach
MAX_SESSIONS = 100_000  # the most sessions one backtest replays


# By provider, payment method and currency: the amounts the provider takes (minor units, both
# bounds inclusive), None when it takes none.
AmountLimits = dict[tuple[str, str, str], tuple[int, int] | None]


@dataclass(frozen=True)
class LinkedProvider:
    """What routing reads of one of the application's provider configurations
    (`provider_health.RoutableConfig`), as plain values."""

    provider: str
    is_active: bool
    payment_methods: frozenset[str]


def accepts_within(limits: AmountLimits) -> Callable[[str, str, Money], bool]:
    """Whether a provider takes a payment method for an amount, by `limits` (read at each call, so
    limits added later count): False for a kind of session `limits` does not hold."""

    def accepts(name: str, method: str, amount: Money) -> bool:
        found = limits.get((name, method, amount.currency))
        return found is not None and found[0] <= amount.minor <= found[1]

    return accepts


@dataclass(frozen=True)
class ProviderTally:
    """One provider in a backtest: the sessions that went there (`actual`), those the candidate
    sends there first (`candidate`), those the document in force sends there first when replayed
    (`baseline`), and of its actual sessions those with an outcome and those paid."""

    provider: str
    actual: int
    candidate: int
    outcomes: int
    succeeded: int
    baseline: int = 0

    @property
    def approval(self) -> Fraction | None:
        """The share of its sessions with an outcome that were paid; None without any."""
        return Fraction(self.succeeded, self.outcomes) if self.outcomes else None


@dataclass(frozen=True)
class RuleTally:
    """One rule of the candidate (`rule` None: its default route): the sessions it matches, those
    among them whose first provider it changes from the document in force's, and those it can
    route nowhere."""

    rule: str | None
    sessions: int
    changed: int
    unroutable: int


@dataclass(frozen=True)
class Replay:
    """What a backtest found over the `sessions` it replayed."""

    sessions: int
    changed: int  # routed, to another first provider than the document in force's replayed
    unroutable: int  # the candidate routes it nowhere: a create would answer 422
    without_outcome: int  # still open: not paid, declined nor expired yet
    without_country: int  # no billing country: a `countries` condition cannot match it
    estimated: EstimatedApproval
    providers: tuple[ProviderTally, ...]  # by name
    rules: tuple[RuleTally, ...]  # in the document's order, its default route last
    recovery: RecoveryTally  # what the candidate's recovery policy would have changed


def _tally(table: dict[str, list[int]], name: str) -> list[int]:
    found = table.get(name)
    if found is None:
        found = table[name] = [0, 0, 0]  # actual, candidate, baseline
    return found


def _first(decision: Decision) -> str | None:
    ranking = decision.ranking
    return ranking[0].provider if ranking and ranking[0].eligible else None


class Replayer:
    """The backtest of `document` beside `in_force` (the document in force) over sessions given in
    batches (`replay`), then its `result`. `configs` are the application's active provider
    configurations, `accepts` whether a provider of the catalogue takes a payment method for an
    amount (`session_routing.accepts_of`), `rates` the learned rates a dynamic route ranks by;
    `decided_by` holds the stored documents that decided the sessions, by version (read at each
    session, so versions added later count; a version missing there, and the default document's 0,
    are taken as they can be: see `backtest_estimate.logged_chance`). Not for two threads at once."""

    def __init__(
        self,
        document: RoutingDocument,
        configs: Sequence[RoutableConfig],
        accepts: Callable[[str, str, Money], bool],
        rates: SuccessRates,
        settings: RoutingSettings,
        *,
        in_force: RoutingDocument,
        decided_by: Mapping[int, RoutingDocument] | None = None,
    ) -> None:
        self._document = document
        self._in_force = in_force
        self._decided_by = {} if decided_by is None else decided_by
        self._configs = configs
        self._accepts = accepts
        self._rates = rates
        self._settings = settings
        self._sessions = self._changed = self._unroutable = 0
        self._without_outcome = self._without_country = 0
        self._sent: dict[str, list[int]] = {}  # by provider: [actual, candidate, baseline]
        self._segments: dict[tuple[str, str, str], Seen] = {}  # what each provider's sessions showed
        self._rules: dict[str | None, list[int]] = {rule.name: [0, 0, 0] for rule in document.rules}
        self._rules[None] = [0, 0, 0]  # sessions, changed, unroutable
        self._estimate = DoublyRobust()
        # By version of the documents that decided sessions: whether it is the candidate or the
        # document in force (their decisions are then reused), or neither ("").
        self._same_as: dict[int, str] = {}
        self._recovery = RecoveryCounter()

    def replay(self, sessions: Iterable[PastSession]) -> None:
        """Decide and count each of `sessions`."""
        document, in_force, configs, accepts = self._document, self._in_force, self._configs, self._accepts
        rates, settings = self._rates, self._settings
        same = document == in_force
        policy = document.recovery_policy
        for past in sessions:
            amount = Money(past.amount_minor, past.currency)
            eligible = eligible_providers(configs, accepts, past.payment_method, amount)
            facts = SessionFacts(past.payment_method, amount, past.billing_country, past.session_id)
            decision = decide(document, facts, eligible, rates, settings)
            baseline = decision if same else decide(in_force, facts, eligible, rates, settings)
            first, first_in_force = _first(decision), _first(baseline)
            self._count(past, decision.rule, first, first_in_force)
            if past.outcome is not None:
                chances = first_chances(decision, document)
                self._estimate.add(
                    past.payment_method,
                    past.currency,
                    past.provider,
                    past.outcome is Outcome.SUCCESS,
                    self._logged_chance(past, facts, eligible, decision, baseline),
                    chances,
                    chances if same else first_chances(baseline, in_force),
                )
            # Recovery follows a first attempt declined where the candidate goes first: only then
            # are its attempts planned (most sessions were paid at their first).
            if first == past.provider and (past.attempts or past.outcome is Outcome.FAILURE):
                planned = [attempt.provider for attempt in planned_attempts(decision, policy)]
                self._recovery.count(past, planned, policy)

    def _logged_chance(
        self,
        past: PastSession,
        facts: SessionFacts,
        eligible: Sequence[str],
        decision: Decision,
        baseline: Decision,
    ) -> float:
        """The chance `past`'s first provider had when it was created (`backtest_estimate.logged_chance`),
        its document's decision replayed now: the candidate's `decision` or the document in force's
        `baseline` when it is one of them, else decided here."""
        if past.reason not in _RANDOM_REASONS or past.version is None:
            return 1.0
        version = past.version
        decided_by = _DEFAULT_DOCUMENT if version == 0 else self._decided_by.get(version)
        if decided_by is None:
            return 1.0
        same = self._same_as.get(version)
        if same is None:
            same = self._same_as[version] = (
                "candidate"
                if decided_by == self._document
                else "in force"
                if decided_by == self._in_force
                else ""
            )
        if same == "candidate":
            replayed = decision
        elif same == "in force":
            replayed = baseline
        else:
            replayed = decide(decided_by, facts, eligible, self._rates, self._settings)
        return logged_chance(past.provider, past.reason, replayed, decided_by, self._settings.exploration)

    def _count(
        self, past: PastSession, rule: str | None, first: str | None, first_in_force: str | None
    ) -> None:
        self._sessions += 1
        _tally(self._sent, past.provider)[0] += 1
        if first_in_force is not None:
            _tally(self._sent, first_in_force)[2] += 1
        by_rule = self._rules[rule]
        by_rule[0] += 1
        if first is None:
            self._unroutable += 1
            by_rule[2] += 1
        else:
            _tally(self._sent, first)[1] += 1
            if first != first_in_force:
                self._changed += 1
                by_rule[1] += 1
        if past.billing_country is None:
            self._without_country += 1
        if past.outcome is None:
            self._without_outcome += 1
            return
        segment = (past.provider, past.payment_method, past.currency)
        seen = self._segments.get(segment)
        if seen is None:
            seen = self._segments[segment] = Seen()
        seen.add(1, 1 if past.outcome is Outcome.SUCCESS else 0)

    def result(self) -> Replay:
        """What the sessions replayed so far show (see the module's docstring)."""
        estimated = self._estimate.result(ObservedApprovals(self._segments, self._settings.min_outcomes))
        by_provider: dict[str, Seen] = {}
        for (provider, _, _), seen in self._segments.items():
            by_provider.setdefault(provider, Seen()).add(seen.outcomes, seen.succeeded)
        providers = tuple(
            ProviderTally(
                name,
                actual,
                candidate,
                by_provider[name].outcomes if name in by_provider else 0,
                by_provider[name].succeeded if name in by_provider else 0,
                baseline,
            )
            for name, (actual, candidate, baseline) in sorted(self._sent.items())
        )
        return Replay(
            sessions=self._sessions,
            changed=self._changed,
            unroutable=self._unroutable,
            without_outcome=self._without_outcome,
            without_country=self._without_country,
            estimated=estimated,
            providers=providers,
            rules=tuple(RuleTally(rule, *counts) for rule, counts in self._rules.items()),
            recovery=self._recovery.result(),
        )


_DEFAULT_DOCUMENT = RoutingDocument()  # what decides the sessions of an application that stored none
# The reasons a session's first provider may have been drawn for (by a split or by exploration).
_RANDOM_REASONS = frozenset({RoutingReason.SPLIT, RoutingReason.DYNAMIC, RoutingReason.EXPLORATION})
