"""An application's routing: its routing document read and replaced (on the condition of the
version in force, when the caller names one), its versions listed and each read back, a session's
route tried out without creating it, a candidate document replayed over the application's last
sessions, and the success rates routing learned (docs/routing.md); with the bodies the API answers
them with, which the console's routing page shows too."""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal
from fractions import Fraction
from typing import Any

from payorch.engine.commands import EvaluateRouting
from payorch.engine.routing.backtest_run import Backtest, run_backtest
from payorch.engine.routing.decision import RankedProvider
from payorch.engine.routing.document import RoutingDocument, document_json, parse_routing_document
from payorch.engine.routing.sessions import Evaluation, learned_settings
from payorch.engine.routing.success_rates import Estimate, SegmentFigures, SuccessRates
from payorch.http import representations as bodies
from payorch.http.auth import Principal, application_for
from payorch.http.models import RoutingBacktestRequest, RoutingEvaluateRequest
from payorch.http.operations.pages import application_page
from payorch.http.operations.sessions import session_draft
from payorch.http.services import Services
from payorch.providers.catalogue import ProviderCatalogue
from payorch.storage import routing_documents as routing_store
from payorch.storage import routing_outcomes
from payorch.storage.routing_documents import MAX_VERSION, RoutingVersion, StoredRoutingDocument
from payorch.values.errors import NotFound, NotPermitted, PreconditionFailed
from payorch.values.pagination import PageRequest
from payorch.values.statuses import Outcome
from payorch.values.timefmt import iso

# What an application answers before it stores a document: every session routed dynamically.
DEFAULT_DOCUMENT = document_json(RoutingDocument())


def checked_routing_document(providers: ProviderCatalogue, raw: Any, *, at: str = "") -> RoutingDocument:
    """The document `raw` (parsed JSON) describes, naming only the catalogue's providers and
    payment methods: `InvalidInput` (400) naming every problem (under `at.` when given) otherwise
    (`parse_routing_document`)."""
    return parse_routing_document(
        raw,
        [provider.name for provider in providers],
        at=at,
        known_methods=providers.all_payment_methods(),
    )


async def read_routing_document(
    services: Services, principal: Principal, application_id: str
) -> StoredRoutingDocument | None:
    """The application's routing document in force; None when it never stored one."""
    application = await application_for(principal, application_id)
    return await services.context.db.autocommit(routing_store.current_routing_document, application.id)


async def replace_routing_document(
    services: Services,
    principal: Principal,
    application_id: str,
    raw: Any,
    *,
    if_version: frozenset[int] | None = None,
) -> StoredRoutingDocument:
    """Store `raw` (parsed JSON) as the application's next routing document, in force from its
    application actors' next session on; the same document as the one in force stores nothing and
    answers that one. `InvalidInput` (400), every problem listed, when it is not a sound document;
    `RateLimited` (429) when the application's changes are used up (`limits.routing_changes_*`,
    a document that changes nothing takes none); `PreconditionFailed` (412) when `if_version` (the
    versions `If-Match` names; 0 for none stored yet) does not hold the version in force; nothing
    is stored then. The version records the caller's user as its author."""
    application = await application_for(principal, application_id)
    context, limits = services.context, services.limits
    document = checked_routing_document(context.providers, raw)
    await limits.charge_routing_change(application.id)
    try:
        stored, new = await context.db.transaction(
            routing_store.store_routing_document,
            application.id,
            document_json(document),
            now=context.clock.now(),
            stored_by=principal.user_id,
            if_version=if_version,
        )
    except PreconditionFailed:
        await limits.forgive_routing_change(application.id)
        raise
    if new:
        services.actors.forget_application(application.id)  # the next session routes by it
    else:
        await limits.forgive_routing_change(application.id)
    return stored


async def list_routing_versions(
    services: Services, principal: Principal, application_id: str, page: PageRequest
) -> tuple[list[RoutingVersion], int]:
    """A page of the application's routing document versions, newest first, and how many it has."""
    return await application_page(
        services, principal, application_id, routing_store.list_routing_versions, page
    )


async def read_routing_version(
    services: Services, principal: Principal, application_id: str, version: str
) -> StoredRoutingDocument:
    """Version `version` (as the path writes it) of the application's routing document: `NotFound`
    (404) for a version it does not keep (0, the default, is not stored) or text that is no version."""
    application = await application_for(principal, application_id)
    number = int(version) if version.isascii() and version.isdigit() and len(version) <= 10 else 0
    found = None
    if 1 <= number <= MAX_VERSION:
        found = await services.context.db.autocommit(
            routing_store.routing_document_version, application.id, number
        )
    if found is None:
        raise NotFound("routing document version not found", missing="routing document version")
    return found


async def charge_routing_evaluation(services: Services, principal: Principal) -> None:
    """Count one routing evaluation of the caller's merchant, before its body is read: `RateLimited`
    (429) beyond `limits.routing_evaluations_per_second` and `..._burst`. Whoever calls
    `evaluate_routing` calls this first."""
    await services.limits.charge_routing_evaluation(principal.merchant_id)


async def evaluate_routing(
    services: Services, principal: Principal, application_id: str, data: RoutingEvaluateRequest
) -> Evaluation:
    """How the session `data` describes would be routed now, by the stored document or by the one
    `data.routing` holds: `InvalidInput` (400) for a session body the create would refuse, or a
    document with problems (each named under `routing.`). Creates nothing, calls no provider. The
    caller has charged the evaluation (`charge_routing_evaluation`)."""
    application = await application_for(principal, application_id)
    if data.applicationId is not None and data.applicationId != application.id:
        raise NotPermitted("the body names another application than the path")
    providers = services.context.providers
    draft = session_draft(
        providers, data.model_copy(update={"routing": None}), application.id
    )  # not copied again
    tried = None if data.routing is None else checked_routing_document(providers, data.routing, at="routing")
    return await services.actors.ask(application.id, EvaluateRouting(draft, tried))


async def backtest_routing(
    services: Services, principal: Principal, application_id: str, data: RoutingBacktestRequest
) -> Backtest:
    """`data.routing` replayed over the application's sessions of the last `data.days` days (the
    newest `data.limit`): `InvalidInput` (400) for a document with problems (each named under
    `routing.`). A merchant has one backtest running or waiting its turn at a time (`RateLimited`,
    429), the process a few (`ServiceBusy`, 503); each is decided in a backtest worker process, in
    the order they came (`BacktestWorkerLost`, 503, should that process die). Reads only: stores
    nothing, creates nothing, calls no provider."""
    application = await application_for(principal, application_id)
    context = services.context
    document = checked_routing_document(context.providers, data.routing, at="routing")
    with services.limits.backtest(application.merchant_id):
        return await run_backtest(
            context, services.backtests, application.id, document, days=data.days, limit=data.limit
        )


@dataclass(frozen=True)
class LearnedRate:
    """One segment's learned success rate: `figures`, the newest outcomes of the provider for the
    payment method and currency (at most `routing.window`, newest first), and `estimate`, the rate
    routing works out of them (from the provider's wider evidence while the segment holds fewer
    than `routing.min_outcomes`: its `level` says which)."""

    figures: SegmentFigures
    estimate: Estimate

    @property
    def successes(self) -> int:
        return self.figures.outcomes.count(Outcome.SUCCESS)

    @property
    def failures(self) -> int:
        return self.figures.outcomes.count(Outcome.FAILURE)

    @property
    def abandonments(self) -> int:
        return self.figures.outcomes.count(Outcome.ABANDONMENT)


async def list_learned_rates(
    services: Services, principal: Principal, application_id: str
) -> list[LearnedRate]:
    """The application's learned success rate of each provider, payment method and currency with an
    outcome, ordered so: each segment's newest `routing.window` outcomes, read now, worked out by
    the code its application actors route with (`SuccessRates.from_rows` under the `[routing]`
    settings: the recent run, the abandonment weight, the fallback). An actor routes on rates it
    read at most `routing.refresh_s` ago, so these may be that much ahead of it."""
    application = await application_for(principal, application_id)
    context = services.context
    settings = learned_settings(context.settings.routing)
    rows = await context.db.autocommit(routing_outcomes.segment_outcomes, application.id, settings.window)
    figures = [SegmentFigures(*row) for row in rows]
    estimates = SuccessRates.from_rows(figures, settings).segments()
    return [
        LearnedRate(item, estimates[(item.provider, item.payment_method, item.currency)]) for item in figures
    ]


# --- The answers, as the API writes them -----------------------------------------------------------


def routing_body(stored: StoredRoutingDocument | None) -> bodies.RoutingDocument:
    """The document in force as the API answers it: the stored one with its version and when it was
    stored, or the default (version 0, `updatedAt` null) when none was ever stored."""
    document = DEFAULT_DOCUMENT if stored is None else stored.document
    body: bodies.RoutingDocument = {
        "rules": document["rules"],
        "default": document["default"],
        "fees": document["fees"],
        "objective": document["objective"],
        "version": 0 if stored is None else stored.version,
        "updatedAt": None if stored is None else iso(stored.created_at),
    }
    if "recovery" in document:  # left out: one attempt
        body["recovery"] = document["recovery"]
    return body


def routing_version_body(version: RoutingVersion) -> bodies.RoutingVersion:
    return {
        "version": version.version,
        "updatedAt": iso(version.created_at),
        "updatedBy": None if version.stored_by is None else str(version.stored_by),
    }


def entity_tag(version: int) -> str:
    """The strong entity tag (RFC 9110) of the routing document at `version`: `"3"`."""
    return f'"{version}"'


def evaluation_body(evaluation: Evaluation) -> bodies.RoutingEvaluation:
    return {
        "rule": evaluation.rule,
        "routeType": evaluation.route_type,
        "version": evaluation.version,
        "selectedProvider": evaluation.selected,
        "ranking": [ranked_body(place) for place in evaluation.ranking],
        "attempts": [
            {"provider": planned.provider, "reason": planned.reason} for planned in evaluation.attempts
        ],
    }


def ranked_body(place: RankedProvider) -> bodies.RankedProvider:
    """A provider's place in a decision, with the fee its score weighed (objective net) and whose."""
    body: bodies.RankedProvider = {
        "provider": place.provider,
        "score": Decimal(str(place.score)),
        "eligible": place.eligible,
        "reason": place.reason,
    }
    if place.fee is not None:
        fee = place.fee.fee
        body["fee"] = {
            "source": place.fee.source,
            "percent": format(fee.percent, "f"),
            "fixed": {currency: format(amount, "f") for currency, amount in fee.fixed.items()},
        }
    return body


def _ratio(value: Fraction | float | None) -> Decimal | None:
    """`value` with 4 decimals, as scores are written; None stays None."""
    if value is None:
        return None
    if isinstance(value, float):
        return Decimal(value).quantize(Decimal("0.0001")) + 0  # + 0: never -0.0000
    return (Decimal(value.numerator) / Decimal(value.denominator)).quantize(Decimal("0.0001"))


def backtest_body(backtest: Backtest) -> bodies.RoutingBacktest:
    replay = backtest.replay
    estimated, recovery = replay.estimated, replay.recovery
    return {
        "from": iso(backtest.since),
        "to": iso(backtest.until),
        "limited": backtest.limited,
        "inForceVersion": backtest.in_force_version,
        "sessions": replay.sessions,
        "changed": replay.changed,
        "unroutable": replay.unroutable,
        "withoutOutcome": replay.without_outcome,
        "withoutCountry": replay.without_country,
        "estimatedApproval": {
            "sessions": estimated.sessions,
            "actual": _ratio(estimated.actual),
            "candidate": _ratio(estimated.candidate),
            "unestimated": estimated.unestimated,
            "baseline": _ratio(estimated.baseline),
            "change": _ratio(estimated.change),
            "changeLow": _ratio(estimated.low),
            "changeHigh": _ratio(estimated.high),
            "effectiveSessions": estimated.effective_sessions,
        },
        "recovery": {
            "retried": recovery.retried,
            "recovered": recovery.recovered,
            "notRecovered": recovery.not_recovered,
            "unknown": recovery.unknown,
            "noLongerRetried": recovery.no_longer_retried,
            "noLongerRecovered": recovery.no_longer_recovered,
            "declinedWithoutCode": recovery.declined_without_code,
        },
        "providers": [
            {
                "provider": tally.provider,
                "actual": tally.actual,
                "candidate": tally.candidate,
                "baseline": tally.baseline,
                "outcomes": tally.outcomes,
                "succeeded": tally.succeeded,
                "approval": _ratio(tally.approval),
            }
            for tally in replay.providers
        ],
        "rules": [
            {
                "rule": tally.rule,
                "sessions": tally.sessions,
                "changed": tally.changed,
                "unroutable": tally.unroutable,
            }
            for tally in replay.rules
        ],
    }
