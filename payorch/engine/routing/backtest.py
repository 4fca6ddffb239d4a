"""A candidate routing document replayed over an application's past sessions: the backtest
(docs/routing.md, "Backtest").

Pure code. A `Replayer` is given the application's sessions in batches (`storage.routing_history`:
each with its payment method, amount, billing country, the provider that created its checkout and
its first outcome there), decides each one by the candidate document as a create would now
(`routing_decision.decide`: today's links, today's learned rates, the split and exploration drawn
from the session's id as they were when it was created), and counts:

- per provider, the sessions that went there (`actual`) and those the candidate sends there first
  (`candidate`), and what the provider's own sessions showed: how many reached an outcome and how
  many of those were paid (its observed approval);
- per rule of the candidate (and its default route), the sessions it matches;
- the sessions whose first provider the candidate changes, and those it could route nowhere (no
  provider it names is linked and takes the payment: a create would answer 422).

`result` then estimates the approval the candidate would have had, beside the one observed, over
the same sessions: those with an outcome. A session the candidate leaves where it went keeps its
own outcome; one it moves counts at the approval its new provider showed on its segment (payment
method and currency) in the same sessions, falling back as learned rates do (the provider's
sessions of that method in every currency, then all of them) while the segment has fewer than
`min_outcomes`; one it could route nowhere counts as not paid. A session moved to a provider that
showed fewer than `min_outcomes` outcomes even over all its sessions has no estimate: it is left
out of both figures, and counted (`unestimated`).

Counting is all that is kept between batches, so memory follows a batch, not the window.

A `Replayer` runs in a backtest worker process (`engine.routing.backtest_worker`), so everything it is
given is a plain value that crosses a pipe: the configurations as `LinkedProvider`s, and what the
catalogue's providers take as `AmountLimits` (the server asks its catalogue, batch by batch, for the
kinds of session the worker meets: `accepts_within` answers from them as
`session_routing.accepts_of` answers from the catalogue).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from fractions import Fraction

from payorch.engine.provider_health import RoutableConfig, eligible_providers
from payorch.engine.routing.decision import decide
from payorch.engine.routing.document import RoutingDocument, SessionFacts
from payorch.engine.routing.success_rates import RoutingSettings, SuccessRates
from payorch.storage.routing_history import PastSession
from payorch.values.money import Money
from payorch.values.statuses import Outcome

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
    sends there first (`candidate`), and of its actual sessions those with an outcome and those
    paid."""

    provider: str
    actual: int
    candidate: int
    outcomes: int
    succeeded: int

    @property
    def approval(self) -> Fraction | None:
        """The share of its sessions with an outcome that were paid; None without any."""
        return Fraction(self.succeeded, self.outcomes) if self.outcomes else None


@dataclass(frozen=True)
class RuleTally:
    """One rule of the candidate (`rule` None: its default route): the sessions it matches, those
    among them whose first provider it changes, and those it can route nowhere."""

    rule: str | None
    sessions: int
    changed: int
    unroutable: int


@dataclass(frozen=True)
class EstimatedApproval:
    """The approval observed and the candidate's estimate over the same `sessions` (see the
    module's docstring); None when there are none. `unestimated`: sessions with an outcome left out,
    moved to a provider without enough outcomes to estimate."""

    sessions: int
    actual: Fraction | None
    candidate: Fraction | None
    unestimated: int


@dataclass(frozen=True)
class Replay:
    """What a backtest found over the `sessions` it replayed."""

    sessions: int
    changed: int  # routed, to another first provider than the one that created its checkout
    unroutable: int  # the candidate routes it nowhere: a create would answer 422
    without_outcome: int  # still open: not paid, declined nor expired yet
    without_country: int  # no billing country: a `countries` condition cannot match it
    estimated: EstimatedApproval
    providers: tuple[ProviderTally, ...]  # by name
    rules: tuple[RuleTally, ...]  # in the document's order, its default route last


class _Seen:
    """Outcomes and successes of one group of sessions."""

    __slots__ = ("outcomes", "succeeded")

    def __init__(self) -> None:
        self.outcomes = 0
        self.succeeded = 0

    def add(self, outcomes: int, succeeded: int) -> None:
        self.outcomes += outcomes
        self.succeeded += succeeded


def _tally(table: dict[str, list[int]], name: str) -> list[int]:
    found = table.get(name)
    if found is None:
        found = table[name] = [0, 0]  # actual, candidate
    return found


class Replayer:
    """The backtest of `document` over sessions given in batches (`replay`), then its `result`.
    `configs` are the application's active provider configurations, `accepts` whether a provider of
    the catalogue takes a payment method for an amount (`session_routing.accepts_of`), `rates` the
    learned rates a dynamic route ranks by. Not for two threads at once."""

    def __init__(
        self,
        document: RoutingDocument,
        configs: Sequence[RoutableConfig],
        accepts: Callable[[str, str, Money], bool],
        rates: SuccessRates,
        settings: RoutingSettings,
    ) -> None:
        self._document = document
        self._configs = configs
        self._accepts = accepts
        self._rates = rates
        self._settings = settings
        self._sessions = self._changed = self._unroutable = 0
        self._without_outcome = self._without_country = 0
        self._sent: dict[str, list[int]] = {}  # by provider: [actual, candidate]
        self._segments: dict[tuple[str, str, str], _Seen] = {}  # what each provider's sessions showed
        self._rules: dict[str | None, list[int]] = {rule.name: [0, 0, 0] for rule in document.rules}
        self._rules[None] = [0, 0, 0]  # sessions, changed, unroutable
        # The estimate's parts, over the sessions with an outcome (see the module's docstring).
        self._known = self._known_succeeded = self._kept_succeeded = 0
        self._moved: dict[
            tuple[str, str, str], list[int]
        ] = {}  # by new segment: [sessions, paid where they went]

    def replay(self, sessions: Iterable[PastSession]) -> None:
        """Decide and count each of `sessions`."""
        document, configs, accepts = self._document, self._configs, self._accepts
        rates, settings = self._rates, self._settings
        for past in sessions:
            amount = Money(past.amount_minor, past.currency)
            eligible = eligible_providers(configs, accepts, past.payment_method, amount)
            facts = SessionFacts(past.payment_method, amount, past.billing_country, past.session_id)
            decision = decide(document, facts, eligible, rates, settings)
            first = (
                decision.ranking[0].provider if decision.ranking and decision.ranking[0].eligible else None
            )
            self._count(past, decision.rule, first)

    def _count(self, past: PastSession, rule: str | None, first: str | None) -> None:
        self._sessions += 1
        _tally(self._sent, past.provider)[0] += 1
        by_rule = self._rules[rule]
        by_rule[0] += 1
        if first is None:
            self._unroutable += 1
            by_rule[2] += 1
        else:
            _tally(self._sent, first)[1] += 1
            if first != past.provider:
                self._changed += 1
                by_rule[1] += 1
        if past.billing_country is None:
            self._without_country += 1
        if past.outcome is None:
            self._without_outcome += 1
            return
        paid = 1 if past.outcome is Outcome.SUCCESS else 0
        segment = (past.provider, past.payment_method, past.currency)
        seen = self._segments.get(segment)
        if seen is None:
            seen = self._segments[segment] = _Seen()
        seen.add(1, paid)
        self._known += 1
        self._known_succeeded += paid
        if first == past.provider:
            self._kept_succeeded += paid
        elif first is not None:
            moved = self._moved.setdefault((first, past.payment_method, past.currency), [0, 0])
            moved[0] += 1
            moved[1] += paid

    def result(self) -> Replay:
        """What the sessions replayed so far show (see the module's docstring)."""
        approval = _ObservedApprovals(self._segments, self._settings.min_outcomes)
        sessions, actual_paid, candidate_paid = (
            self._known,
            self._known_succeeded,
            Fraction(self._kept_succeeded),
        )
        unestimated = 0
        for (provider, method, currency), (moved, paid) in self._moved.items():
            found = approval.of(provider, method, currency)
            if found is None:
                unestimated += moved
                sessions -= moved
                actual_paid -= paid
            else:
                candidate_paid += moved * found
        by_provider: dict[str, _Seen] = {}
        for (provider, _, _), seen in self._segments.items():
            by_provider.setdefault(provider, _Seen()).add(seen.outcomes, seen.succeeded)
        providers = tuple(
            ProviderTally(
                name,
                actual,
                candidate,
                by_provider[name].outcomes if name in by_provider else 0,
                by_provider[name].succeeded if name in by_provider else 0,
            )
            for name, (actual, candidate) in sorted(self._sent.items())
        )
        return Replay(
            sessions=self._sessions,
            changed=self._changed,
            unroutable=self._unroutable,
            without_outcome=self._without_outcome,
            without_country=self._without_country,
            estimated=EstimatedApproval(
                sessions=sessions,
                actual=Fraction(actual_paid, sessions) if sessions else None,
                candidate=candidate_paid / sessions if sessions else None,
                unestimated=unestimated,
            ),
            providers=providers,
            rules=tuple(RuleTally(rule, *counts) for rule, counts in self._rules.items()),
        )


class _ObservedApprovals:
    """The approval each provider showed on the replayed sessions, by segment, falling back to its
    payment method, then to the provider, while a level has fewer than `min_outcomes` outcomes."""

    def __init__(self, segments: dict[tuple[str, str, str], _Seen], min_outcomes: int) -> None:
        self._min = min_outcomes
        self._segments = segments
        self._methods: dict[tuple[str, str], _Seen] = {}
        self._providers: dict[str, _Seen] = {}
        for (provider, method, _), seen in segments.items():
            self._methods.setdefault((provider, method), _Seen()).add(seen.outcomes, seen.succeeded)
            self._providers.setdefault(provider, _Seen()).add(seen.outcomes, seen.succeeded)

    def of(self, provider: str, method: str, currency: str) -> Fraction | None:
        """The approval to count a session of this segment at `provider`; None without enough outcomes."""
        for seen in (
            self._segments.get((provider, method, currency)),
            self._methods.get((provider, method)),
            self._providers.get(provider),
        ):
            if seen is not None and seen.outcomes >= self._min:
                return Fraction(seen.succeeded, seen.outcomes)
        return None
