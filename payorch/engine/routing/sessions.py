"""Routing one session, in its application's actor: what the actor holds for it (the active provider
configurations, the routing document in force, the success rates learned from outcomes and the
fees reconciliation observed, `engine.hot_state`), the facts of the session, the decision
(`engine.routing.decision`) and the providers the cascade tries.

`CreateSession` (`engine.payments.checkout`) routes every session it creates here; `EvaluateRouting`
answers how a session would be routed now, and creates nothing.
"""

from __future__ import annotations

import functools
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, date, timedelta
from typing import Any

import trio

from payorch import config
from payorch.engine.actors import ApplicationActor, Reply
from payorch.engine.context import Context, account_of
from payorch.engine.hot_state import DEFAULT_ROUTING, RoutingInForce
from payorch.engine.provider_health import eligible_providers
from payorch.engine.routing.decision import (
    CreationFigures,
    Decision,
    RankedProvider,
    decide,
    plan_decided_route,
)
from payorch.engine.routing.document import RouteType, RoutingDocument, SessionFacts, stored_routing_document
from payorch.engine.routing.observed_fees import ObservedFee, ObservedFees
from payorch.engine.routing.recovery import PlannedAttempt, planned_attempts
from payorch.engine.routing.success_rates import RoutingSettings, SegmentFigures, SuccessRates
from payorch.providers.catalogue import ProviderCatalogue
from payorch.storage import observed_fees, provider_configs, routing_documents, routing_outcomes
from payorch.storage.database import Connection
from payorch.storage.database_thread import on_database_thread
from payorch.storage.provider_configs import ProviderConfig
from payorch.storage.routing_outcomes import SegmentOutcomes
from payorch.storage.sessions import SessionDraft
from payorch.values.money import Money

# Until outcomes are learned: every provider at the prior.
NO_EVIDENCE = SuccessRates({}, {}, {})


@dataclass(frozen=True)
class RoutingInputs:
    """What routing one of the application's sessions needs beside the session itself."""

    configs: Mapping[str, ProviderConfig]  # active, of providers in the catalogue, by provider name
    routing: RoutingInForce
    rates: SuccessRates
    observed_fees: ObservedFees


async def routing_inputs(actor: ApplicationActor[Context]) -> RoutingInputs:
    """The application's configurations, routing document, success rates and observed fees as its
    actor holds them. Whatever it does not hold is read and kept, all in one database unit: the
    rates and the observed fees once they are `routing.refresh_s` old, so a batch of creates costs
    at most that one read, and a create never one of its own."""
    hot, context = actor.hot, actor.context
    section = context.settings.routing
    now = trio.current_time()
    held_configs, held_routing = hot.provider_configs(), hot.routing()
    rates_due = hot.rates_due(now, section.refresh_s)
    if held_configs is None or held_routing is None or rates_due:
        generation = hot.generation
        fees_since = context.clock.now().astimezone(UTC).date() - timedelta(
            days=context.settings.reconciliation.fee_window_days - 1
        )
        configs, routing, learned = await context.db.autocommit(
            _read,
            actor.application_id,
            held_configs,
            held_routing,
            (section.window, fees_since) if rates_due else None,
        )
        hot.keep_provider_configs(configs, generation)
        hot.keep_routing(routing, generation)
        if learned is not None:
            rows, fees = learned
            figures = [SegmentFigures(*row) for row in rows]
            rates = SuccessRates.from_rows(figures, learned_settings(section), hot.rates())
            hot.keep_rates(rates, now, ObservedFees(ObservedFee(*row) for row in fees))
    else:
        configs, routing = held_configs, held_routing
    in_catalogue = {c.provider: c for c in configs if context.providers.get(c.provider) is not None}
    return RoutingInputs(in_catalogue, routing, hot.rates() or NO_EVIDENCE, hot.observed_fees())


@on_database_thread
async def _read(
    conn: Connection,
    application_id: uuid.UUID,
    configs: tuple[ProviderConfig, ...] | None,
    routing: RoutingInForce | None,
    learned: tuple[int, date] | None,
) -> tuple[
    tuple[ProviderConfig, ...],
    RoutingInForce,
    tuple[list[SegmentOutcomes], list[observed_fees.FeeSums]] | None,
]:
    """`configs` and `routing`, each read when None; when `learned` gives a window and a day,
    each segment's newest `window` outcomes and the fees observed on that day or later."""
    if configs is None:
        configs = tuple(await provider_configs.active_provider_configs(conn, application_id))
    if routing is None:
        stored = await routing_documents.current_routing_document(conn, application_id)
        routing = (
            DEFAULT_ROUTING
            if stored is None
            else RoutingInForce(stored_routing_document(stored.document), stored.version)
        )
    if learned is None:
        return configs, routing, None
    window, fees_since = learned
    rows = await routing_outcomes.segment_outcomes(conn, application_id, window)
    fees = await observed_fees.observed_fee_sums(conn, application_id, fees_since)
    return configs, routing, (rows, fees)


@functools.lru_cache(maxsize=4)
def learned_settings(section: config.RoutingSettings) -> RoutingSettings:
    """The `[routing]` settings as the success rates and the decision read them."""
    return RoutingSettings(
        window=section.window,
        exploration=section.exploration,
        elimination_threshold=section.elimination_threshold,
        abandonment_weight=section.abandonment_weight,
        min_outcomes=section.min_outcomes,
    )


def billing_country(customer: Mapping[str, Any]) -> str | None:
    """The country of the customer's billing address, as the create body gives it; None without one."""
    address = customer.get("billingAddress")
    country = address.get("country") if isinstance(address, Mapping) else None
    return country if isinstance(country, str) else None


def accepts_of(providers: ProviderCatalogue) -> Callable[[str, str, Money], bool]:
    """Whether a provider of the catalogue takes a payment method for an amount (its currency and
    limits), as `provider_health.eligible_providers` asks."""

    def accepts(name: str, method: str, amount: Money) -> bool:
        provider = providers.get(name)
        if provider is None or method not in provider.payment_methods:
            return False
        limits = provider.limits(amount.currency, method)
        return limits is not None and limits.min_minor <= amount.minor <= limits.max_minor

    return accepts


def decide_session(
    context: Context, inputs: RoutingInputs, draft: SessionDraft, session_id: str, document: RoutingDocument
) -> tuple[Decision, list[str]]:
    """The decision of routing the session of `draft` (its id `session_id`) by `document`, and the
    providers eligible for it; their checkout creations, as provider-call health has seen them on
    this process, weigh in their scores."""
    eligible = eligible_providers(
        inputs.configs.values(), accepts_of(context.providers), draft.payment_method, draft.amount
    )
    facts = SessionFacts(draft.payment_method, draft.amount, billing_country(draft.customer), session_id)
    now = trio.current_time()
    creation = {
        name: CreationFigures(*context.health.creation_figures(account_of(inputs.configs[name]), now))
        for name in eligible
    }
    settings = learned_settings(context.settings.routing)
    return decide(document, facts, eligible, inputs.rates, settings, creation, inputs.observed_fees), eligible


def plan_session(
    context: Context, inputs: RoutingInputs, draft: SessionDraft, session_id: uuid.UUID
) -> tuple[Decision, list[tuple[str, float]]]:
    """The decision for a session being created, and the providers to try in turn with their scores:
    the decision's order without open circuits (`plan_decided_route`, which hands out a due probe).
    `NoProviderAvailable` (422) or `ProviderUnavailable` (502) when there is none to try."""
    decision, eligible = decide_session(context, inputs, draft, str(session_id), inputs.routing.document)
    accounts = {name: account_of(inputs.configs[name]) for name in eligible}
    return decision, plan_decided_route(decision, accounts, context.health, trio.current_time())


@dataclass(frozen=True)
class Evaluation:
    """How a session would be routed now: the decision, the version of the document that made it
    (None: a document tried instead of the stored one), the provider a create would try first
    (None when none can be tried: not one eligible, or every one's circuit open), and the attempts
    the session would get in order under the document's recovery policy (the first at `selected`)."""

    rule: str | None
    route_type: RouteType
    version: int | None
    selected: str | None
    ranking: tuple[RankedProvider, ...]
    attempts: tuple[PlannedAttempt, ...] = ()


@dataclass(frozen=True)
class EvaluateRouting:
    """Route a session as `CreateSession` would now, by the stored document or by `document` when
    given, and answer the `Evaluation`: creates nothing, calls no provider, hands out no probe."""

    draft: SessionDraft
    document: RoutingDocument | None = None

    async def run(self, actor: ApplicationActor[Context], reply: Reply[Evaluation]) -> None:
        context = actor.context
        inputs = await routing_inputs(actor)
        document = inputs.routing.document if self.document is None else self.document
        # An id of its own, as a new session has: a split or an exploration draws from it.
        decision, _ = decide_session(context, inputs, self.draft, str(uuid.uuid4()), document)
        now = trio.current_time()
        admitted = [
            place.provider
            for place in decision.ranking
            if place.eligible and context.health.admits(account_of(inputs.configs[place.provider]), now)
        ]
        unavailable = {name for name in decision.order if name not in admitted}
        reply.send(
            Evaluation(
                rule=decision.rule,
                route_type=decision.route_type,
                version=inputs.routing.version if self.document is None else None,
                selected=admitted[0] if admitted else None,
                ranking=decision.ranking,
                attempts=planned_attempts(decision, document.recovery_policy, unavailable=unavailable),
            )
        )
