"""An application's routing: its routing document, read and replaced, a session's route tried out
without creating it, and a candidate document replayed over the application's last sessions
(docs/routing.md)."""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from decimal import Decimal
from fractions import Fraction
from typing import Any, TypeVar

from quart import Blueprint, request
from quart_schema import document_request, document_response, security_scheme, tag_blueprint
from werkzeug.exceptions import RequestEntityTooLarge

from payorch.engine.commands import EvaluateRouting
from payorch.engine.routing.backtest_run import Backtest, run_backtest
from payorch.engine.routing.document import (
    MAX_DOCUMENT_BYTES,
    RoutingDocument,
    document_json,
    parse_routing_document,
)
from payorch.engine.routing.sessions import Evaluation, learned_settings
from payorch.engine.routing.success_rates import Estimate, SegmentFigures, SuccessRates
from payorch.http import openapi as api
from payorch.http import representations as bodies
from payorch.http.auth import Accept, Principal, application_for, authenticated
from payorch.http.jsonio import loads_request_json
from payorch.http.models import RoutingBacktestRequest, RoutingDocumentUpdate, RoutingEvaluateRequest
from payorch.http.routes.sessions import session_draft
from payorch.http.services import services
from payorch.http.validation import limit_request_body, validate_request
from payorch.storage import routing_documents as routing_store
from payorch.storage import routing_outcomes
from payorch.storage.routing_documents import StoredRoutingDocument
from payorch.values.errors import FieldProblem, InvalidInput, NotPermitted
from payorch.values.statuses import Outcome
from payorch.values.timefmt import iso

blueprint = Blueprint("routing", __name__, url_prefix="/api/v1/applications")
tag_blueprint(blueprint, ["Routing"])

# What an application answers before it stores a document: every session routed dynamically.
DEFAULT_DOCUMENT = document_json(RoutingDocument())
# The most an evaluate body holds: a document as large as a PUT's, and the session beside it.
MAX_EVALUATE_BYTES = MAX_DOCUMENT_BYTES + 16 * 1024

R = TypeVar("R")


def routing_body(stored: StoredRoutingDocument | None) -> bodies.RoutingDocument:
    """The document in force as the API answers it: the stored one with its version and when it was
    stored, or the default (version 0, `updatedAt` null) when none was ever stored."""
    document = DEFAULT_DOCUMENT if stored is None else stored.document
    return {
        "rules": document["rules"],
        "default": document["default"],
        "fees": document["fees"],
        "objective": document["objective"],
        "version": 0 if stored is None else stored.version,
        "updatedAt": None if stored is None else iso(stored.created_at),
    }


async def _document_sent() -> Any:
    """The request's body as JSON: refused (400) past `MAX_DOCUMENT_BYTES`, before it is read."""
    limit_request_body(MAX_DOCUMENT_BYTES)
    try:
        data = await request.get_data(as_text=False)
    except RequestEntityTooLarge:
        raise InvalidInput(
            "routing document too large",
            [FieldProblem("body", f"a routing document takes at most {MAX_DOCUMENT_BYTES} bytes")],
        ) from None
    assert isinstance(data, bytes)
    return loads_request_json(data)


# The operations behind the routes below, which a console page may call too: one path to the data,
# with the same ownership checks (`application_for`) and the same effect on the routing actors.


def checked_routing_document(raw: Any, *, at: str = "") -> RoutingDocument:
    """The document `raw` (parsed JSON) describes, naming only the catalogue's providers and
    payment methods: `InvalidInput` (400) naming every problem (under `at.` when given) otherwise
    (`parse_routing_document`)."""
    providers = services().context.providers
    return parse_routing_document(
        raw,
        [provider.name for provider in providers],
        at=at,
        known_methods=providers.all_payment_methods(),
    )


async def routing_document_of(principal: Principal, application_id: str) -> StoredRoutingDocument | None:
    """The application's routing document in force; None when it never stored one."""
    application = await application_for(principal, application_id)
    return await services().context.db.autocommit(routing_store.current_routing_document, application.id)


async def replace_routing_document_of(
    principal: Principal, application_id: str, raw: Any
) -> StoredRoutingDocument:
    """Store `raw` (parsed JSON) as the application's next routing document, in force from its
    application actors' next session on; the same document as the one in force stores nothing and
    answers that one. `InvalidInput` (400), every problem listed, when it is not a sound document;
    `RateLimited` (429) when the application's changes are used up (`limits.routing_changes_*`,
    a document that changes nothing takes none); nothing is stored then."""
    application = await application_for(principal, application_id)
    context, limits = services().context, services().limits
    document = checked_routing_document(raw)
    await limits.charge_routing_change(application.id)
    stored, new = await context.db.transaction(
        routing_store.store_routing_document,
        application.id,
        document_json(document),
        now=context.clock.now(),
    )
    if new:
        services().actors.forget_application(application.id)  # the next session routes by it
    else:
        await limits.forgive_routing_change(application.id)
    return stored


@blueprint.get("/<application_id>/routing")
@security_scheme(api.JWT)
@document_response(bodies.RoutingDocument, 200)
@api.errors(401, 403, 404, 429, 500)
@authenticated(Accept.JWT)
async def get_routing(application_id: str, principal: Principal) -> bodies.RoutingDocument:
    """The application's routing document in force: the default (version 0) until one is stored."""
    return routing_body(await routing_document_of(principal, application_id))


@blueprint.put("/<application_id>/routing")
@security_scheme(api.JWT)
@document_request(RoutingDocumentUpdate)
@document_response(bodies.RoutingDocument, 200)
@api.errors(400, 401, 403, 404, 429, 500)
@authenticated(Accept.JWT)
async def put_routing(application_id: str, principal: Principal) -> bodies.RoutingDocument:
    """Replace the application's routing document: stored as its next version, every earlier one kept.

    A document that is not sound is refused (400) with one `details` entry per problem, and nothing
    is stored; so is a body over 64 KiB. The answer is the document as stored, with its `version`
    and `updatedAt`; a document the same as the one in force stores nothing and answers that one,
    its version unchanged. An application's changes are rate-limited
    (`limits.routing_changes_per_hour`, `limits.routing_changes_burst`): beyond them, 429 with
    Retry-After, nothing stored."""
    application = await application_for(principal, application_id)  # 403 and 404 before the body
    services().limits.check_routing_changes(application.id)  # known to be used up: before the body
    return routing_body(await replace_routing_document_of(principal, application_id, await _document_sent()))


def evaluation_body(evaluation: Evaluation) -> bodies.RoutingEvaluation:
    return {
        "rule": evaluation.rule,
        "routeType": evaluation.route_type,
        "version": evaluation.version,
        "selectedProvider": evaluation.selected,
        "ranking": [
            {
                "provider": place.provider,
                "score": Decimal(str(place.score)),
                "eligible": place.eligible,
                "reason": place.reason,
            }
            for place in evaluation.ranking
        ],
    }


async def charge_routing_evaluation(principal: Principal) -> None:
    """Count one routing evaluation of the caller's merchant, before its body is read: `RateLimited`
    (429) beyond `limits.routing_evaluations_per_second` and `..._burst`. Whoever calls
    `evaluate_routing_of` calls this first."""
    await services().limits.charge_routing_evaluation(principal.merchant_id)


def _evaluation_charged(view: Callable[..., Awaitable[R]]) -> Callable[..., Awaitable[R]]:
    """An evaluate route: the merchant charged (`charge_routing_evaluation`), then the application's
    403 and 404, then its body refused (400, as a PUT's) past `MAX_EVALUATE_BYTES`, all before the
    body is read. The charge comes first: it is the merchant's own bucket (a 429 tells nothing of
    the application), and an evaluation refused over it then costs no read of the application, and
    when this process knows the bucket empty, no database round trip at all besides the JWT's. Place
    it between `authenticated` and `validate_request`."""

    @functools.wraps(view)
    async def charged(*args: Any, application_id: str, principal: Principal, **kwargs: Any) -> R:
        await charge_routing_evaluation(principal)
        await application_for(principal, application_id)  # read once: the operation's check is free
        limit_request_body(MAX_EVALUATE_BYTES)
        try:
            return await view(*args, application_id=application_id, principal=principal, **kwargs)
        except RequestEntityTooLarge:
            raise InvalidInput(
                "request body too large",
                [FieldProblem("body", f"an evaluate body takes at most {MAX_EVALUATE_BYTES} bytes")],
            ) from None

    return charged


async def evaluate_routing_of(
    principal: Principal, application_id: str, data: RoutingEvaluateRequest
) -> Evaluation:
    """How the session `data` describes would be routed now, by the stored document or by the one
    `data.routing` holds: `InvalidInput` (400) for a session body the create would refuse, or a
    document with problems (each named under `routing.`). Creates nothing, calls no provider. The
    caller has charged the evaluation (`charge_routing_evaluation`)."""
    application = await application_for(principal, application_id)
    if data.applicationId is not None and data.applicationId != application.id:
        raise NotPermitted("the body names another application than the path")
    draft = session_draft(data.model_copy(update={"routing": None}), application.id)  # not copied again
    tried = None if data.routing is None else checked_routing_document(data.routing, at="routing")
    return await services().actors.ask(application.id, EvaluateRouting(draft, tried))


@blueprint.post("/<application_id>/routing/evaluate")
@security_scheme(api.JWT)
@document_response(bodies.RoutingEvaluation, 200)
@api.errors(400, 401, 403, 404, 413, 429, 500, 503)
@authenticated(Accept.JWT)
@_evaluation_charged
@validate_request(RoutingEvaluateRequest)
async def evaluate_routing(
    application_id: str, data: RoutingEvaluateRequest, principal: Principal
) -> bodies.RoutingEvaluation:
    """How a session would be routed now: a session create body, and optionally a routing document
    to try instead of the stored one in `routing`.

    The answer is the decision: the matching rule, the route's type, the version of the document,
    the provider a create would try first and every provider's place in the ranking with its score
    and reason. It creates nothing and calls no provider. A split or an exploration draws from the
    session's id, new for each call, as it is for each session. A merchant's evaluations are
    rate-limited (`limits.routing_evaluations_per_second`, `..._burst`: 429 beyond them) and a
    body over 80 KiB is 400, both before the body is read."""
    return evaluation_body(await evaluate_routing_of(principal, application_id, data))


def _ratio(value: Fraction | None) -> Decimal | None:
    """`value` with 4 decimals, as scores are written; None stays None."""
    if value is None:
        return None
    return (Decimal(value.numerator) / Decimal(value.denominator)).quantize(Decimal("0.0001"))


def backtest_body(backtest: Backtest) -> bodies.RoutingBacktest:
    replay = backtest.replay
    estimated = replay.estimated
    return {
        "from": iso(backtest.since),
        "to": iso(backtest.until),
        "limited": backtest.limited,
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
        },
        "providers": [
            {
                "provider": tally.provider,
                "actual": tally.actual,
                "candidate": tally.candidate,
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


async def backtest_routing_of(
    principal: Principal, application_id: str, data: RoutingBacktestRequest
) -> Backtest:
    """`data.routing` replayed over the application's sessions of the last `data.days` days (the
    newest `data.limit`): `InvalidInput` (400) for a document with problems (each named under
    `routing.`). A merchant has one backtest running or waiting its turn at a time (`RateLimited`,
    429), the process a few (`ServiceBusy`, 503); each is decided in a backtest worker process, in
    the order they came (`BacktestWorkerLost`, 503, should that process die). Reads only: stores
    nothing, creates nothing, calls no provider."""
    application = await application_for(principal, application_id)
    context = services().context
    document = checked_routing_document(data.routing, at="routing")
    with services().limits.backtest(application.merchant_id):
        return await run_backtest(
            context, services().backtests, application.id, document, days=data.days, limit=data.limit
        )


@blueprint.post("/<application_id>/routing/backtest")
@security_scheme(api.JWT)
@document_response(bodies.RoutingBacktest, 200)
@api.errors(400, 401, 403, 404, 413, 429, 500, 503)
@authenticated(Accept.JWT)
@validate_request(RoutingBacktestRequest)
async def backtest_routing(
    application_id: str, data: RoutingBacktestRequest, principal: Principal
) -> bodies.RoutingBacktest:
    """Replay a candidate routing document over the application's last sessions.

    The body holds the document in `routing`, how many days back to go in `days` (1 to 30, the
    default) and at most how many sessions, the newest, in `limit` (up to 100,000, the default).
    Each session is routed by the candidate as a create would route it now (the providers linked
    now, the success rates learned now, its split and exploration drawn from its id) and compared
    with the provider that actually created its checkout. The answer counts, per provider, the
    sessions that went there and those the candidate sends there first, with the approval each
    provider showed on its own sessions; per rule, the sessions it matches; and the candidate's
    estimated approval beside the one observed. It is an estimate made in hindsight:
    docs/routing.md says what a backtest cannot know. A document with problems is 400, each named
    under `routing.`. It stores nothing and calls no provider. It is decided in a worker process,
    not in the server's: backtests take their turn there in the order they came. A merchant has
    one backtest running or waiting at a time (another is 429), the process a few (one more is
    503), both with Retry-After."""
    return backtest_body(await backtest_routing_of(principal, application_id, data))


# --- The learned success rates, as routing sees them (the console's routing page) ------------------


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


async def learned_rates_of(principal: Principal, application_id: str) -> list[LearnedRate]:
    """The application's learned success rate of each provider, payment method and currency with an
    outcome, ordered so: each segment's newest `routing.window` outcomes, read now, worked out by
    the code its application actors route with (`SuccessRates.from_rows` under the `[routing]`
    settings: the recent run, the abandonment weight, the fallback). An actor routes on rates it
    read at most `routing.refresh_s` ago, so these may be that much ahead of it."""
    application = await application_for(principal, application_id)
    context = services().context
    settings = learned_settings(context.settings.routing)
    rows = await context.db.autocommit(routing_outcomes.segment_outcomes, application.id, settings.window)
    figures = [SegmentFigures(*row) for row in rows]
    estimates = SuccessRates.from_rows(figures, settings).segments()
    return [
        LearnedRate(item, estimates[(item.provider, item.payment_method, item.currency)]) for item in figures
    ]
