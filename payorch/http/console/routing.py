"""An application's routing: the document in force (its rules, default route, fees, objective and
recovery policy, its version and when it was stored), a form to replace it or to backtest it, per
provider the document's fee beside the fees reconciliation observed, the success rates routing
learned per provider and segment, and a form trying how a session would be routed now.

    GET  /console/applications/<id>/routing            the page
    POST /console/applications/<id>/routing            replace the document (`document`, its JSON)
    POST /console/applications/<id>/routing/backtest   the text area's document replayed over the
                                                       last sessions, stored nowhere (`document`,
                                                       `days`: the document form's second button)
    POST /console/applications/<id>/routing/evaluate   how a session would be routed now
                                                       (`paymentMethod`, `amount`, `currency`,
                                                       `billingCountry`)

Every form calls the operation the API's route calls (`operations/routing.py`: `read_routing_document`,
`replace_routing_document`, `backtest_routing`, `evaluate_routing`, `list_learned_rates`),
so ownership, the document's validation (every problem named by its place, as the API's 400 names
it), the actors' switch to a new version, the backtest's bounds and the decision are the API's.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from pydantic import ValidationError
from quart import url_for
from werkzeug.datastructures import MultiDict

from payorch.engine.reconciliation.fees import observed_fees_now
from payorch.engine.routing.backtest import MAX_DAYS
from payorch.engine.routing.document import MAX_DOCUMENT_BYTES
from payorch.engine.routing.observed_fees import ObservedFee, ObservedFees
from payorch.engine.routing.recovery import MAX_ATTEMPTS, RETRYABLE_REASONS
from payorch.http import representations as bodies
from payorch.http.auth import application_for, open_to_read_only
from payorch.http.console.display import label
from payorch.http.console.kit import (
    Session,
    action,
    action_up_to,
    api_status,
    application_section,
    blueprint,
    done_notice,
    field_errors,
    page,
    render_page,
    see_other,
    text_fields,
)
from payorch.http.jsonio import loads_request_json
from payorch.http.models import RoutingBacktestRequest, RoutingEvaluateRequest
from payorch.http.operations import providers as provider_operations
from payorch.http.operations import routing as operations
from payorch.http.operations.routing import LearnedRate, backtest_body, evaluation_body, routing_body
from payorch.http.services import services
from payorch.jsonexact import dumps_exact
from payorch.values import errors as domain
from payorch.values.pagination import MAX_LIMIT, PageRequest

application_section("Routing", "routing")

DOCUMENT_FIELD = "document"
DAYS_FIELD = "days"
# A document of MAX_DOCUMENT_BYTES, URL-encoded (at most 3 characters a byte), and the CSRF token.
DOCUMENT_FORM_MAX_BYTES = 3 * MAX_DOCUMENT_BYTES + 4 * 1024
EVALUATE_FIELDS = ("paymentMethod", "amount", "currency", "billingCountry")
# The evaluate form's field of each field the API names; the session's other fields are the form's own.
EVALUATE_FIELD = {"paymentMethod": "paymentMethod", "amount": "amount", "currency": "currency"}
# What routing reads of a session is its payment method, amount, currency and billing country: the
# rest of the create body the evaluation takes is filled with these (never stored: nothing is created).
EVALUATED_ORDER = "console evaluation"
EVALUATED_EMAIL = "customer@example.com"
EVALUATED_ADDRESS = {"line1": "-", "city": "-", "postalCode": "-"}
_AMOUNT = re.compile(r"[0-9]{1,16}(\.[0-9]{1,16})?")
_DAYS = re.compile(r"[0-9]{1,3}")
# The policy the page shows as an example (docs/routing.md "Recovery"): valid as it is.
RECOVERY_EXAMPLE = {
    "maxAttempts": 2,
    "retryOn": ["CARD_DECLINED", "INSUFFICIENT_FUNDS"],
    "neverRetry": ["do_not_honor"],
}
DONE = {"saved": "Saved: the document below is in force from the application's next session on."}
RATE_LEVELS = {
    "segment": "these outcomes",
    "method": "its {method} outcomes in every currency ({outcomes})",
    "provider": "all its outcomes ({outcomes})",
    "prior": "its few outcomes ({outcomes}), from 50%",
}


@dataclass(frozen=True)
class RuleShown:
    """A rule of the document in words: its name, when it matches, where it routes."""

    name: str
    when: str
    route: str


@dataclass(frozen=True)
class ProviderFees:
    """A provider's fees: the document's in words (None: it gives none), what reconciliation
    observed per payment method and currency, and which one objective net weighs."""

    provider: str
    document: str | None
    observed: list[ObservedFee]

    @property
    def weighed(self) -> str:
        if self.document is not None:
            return "the document's"
        return "the observed, per payment method and currency" if self.observed else "none: no fee"


def provider_fees(
    fees: Mapping[str, bodies.RoutingFee], linked: set[str], observed: ObservedFees
) -> list[ProviderFees]:
    """Each provider that is linked, given a fee by the document or observed, by name."""
    seen = list(observed)
    names = sorted(linked | set(fees) | {fee.provider for fee in seen})
    return [
        ProviderFees(
            name,
            fee_text(fees[name]) if name in fees else None,
            [fee for fee in seen if fee.provider == name],
        )
        for name in names
    ]


@dataclass(frozen=True)
class DocumentForm:
    """The document's form as sent, and why it was refused: the problems by their place."""

    text: str
    message: str
    problems: list[domain.FieldProblem]


@dataclass(frozen=True)
class EvaluateForm:
    """The evaluate form as sent, its errors by field, and the answer when there is one."""

    values: dict[str, str]
    errors: dict[str, str] = field(default_factory=dict)
    answer: bodies.RoutingEvaluation | None = None


@dataclass(frozen=True)
class BacktestForm:
    """The backtest asked for: the days back as sent, why it did not run (the days' problem under
    `backtest-days`, a busy service's message under `backtest-form`; a document's problems are the
    `DocumentForm`'s), and the answer when it ran."""

    days: str
    errors: dict[str, str] = field(default_factory=dict)
    answer: bodies.RoutingBacktest | None = None

    @property
    def selected_days(self) -> int:
        """The days the form's choice shows: those sent when they are one of its options, else
        `MAX_DAYS` (the default)."""
        days = self.days.strip()
        return int(days) if _DAYS.fullmatch(days) and 1 <= int(days) <= MAX_DAYS else MAX_DAYS


# --- The document in words ---------------------------------------------------------------------


def _listed(values: list[str]) -> str:
    return " or ".join(values)


def conditions_text(when: bodies.RoutingConditions | None) -> str:
    """A rule's `when` in words: each condition, all of which must hold."""
    if not when:
        return "every session"
    parts = []
    if "paymentMethods" in when:
        parts.append(f"payment method {_listed(when['paymentMethods'])}")
    if "currencies" in when:
        parts.append(f"currency {_listed(when['currencies'])}")
    if "amount" in when:
        low, high = when["amount"].get("min"), when["amount"].get("max")
        if low is not None and high is not None:
            parts.append(f"amount from {Decimal(low):f} to {Decimal(high):f}")
        elif low is not None:
            parts.append(f"amount from {Decimal(low):f}")
        elif high is not None:
            parts.append(f"amount up to {Decimal(high):f}")
    if "countries" in when:
        parts.append(f"billing country {_listed(when['countries'])}")
    return "; ".join(parts)


def route_text(route: bodies.RoutingRoute) -> str:
    """A route in words: its type and the providers it names."""
    kind = route["type"]
    if kind == "split":
        return "split: " + ", ".join(f"{name} {weight}%" for name, weight in route["weights"].items())
    providers = route.get("providers")
    if kind == "dynamic":
        over = ", ".join(providers) if providers else "every eligible provider"
        return f"dynamic: by learned success rate, over {over}"
    return f"priority: {', '.join(providers or ())}, in this order"


def _fee_amounts(fee: bodies.RoutingMethodFee | bodies.RoutingFee) -> str:
    fixed = [f"{amount} {currency}" for currency, amount in fee["fixed"].items()]
    return f"{fee['percent']}%" + (f" + {' or '.join(fixed)}" if fixed else "")


def fee_text(fee: bodies.RoutingFee) -> str:
    """A provider's fee in words, then each payment method's own."""
    methods = [f"{label(method)} {_fee_amounts(own)}" for method, own in fee.get("methods", {}).items()]
    return _fee_amounts(fee) + (f"; {', '.join(methods)}" if methods else "")


def recovery_text(policy: bodies.RoutingRecovery | None) -> str:
    """The recovery policy in words: how many attempts a session gets, and which declines are retried."""
    if policy is None or policy["maxAttempts"] == 1:
        return "one attempt per session: a declined payment is not retried at another provider"
    text = (
        f"up to {policy['maxAttempts']} attempts per session: a decline for "
        f"{_listed([label(reason) for reason in policy['retryOn']]).lower()} goes on to the next provider"
    )
    if policy["neverRetry"]:
        text += f", except the provider codes {_listed(policy['neverRetry'])}"
    return f"{text}; hard declines never"


def points(change: Decimal | None) -> str:
    """A change of ratios (4 decimals) in percentage points, signed, with one decimal."""
    if change is None:
        return "none"
    shown = (change * 100).quantize(Decimal("0.1"))
    return f"{'+' if shown > 0 else ''}{shown} points"


def percent(ratio: Decimal | None) -> str:
    """A ratio of the API's (4 decimals) as a percentage with one decimal; "none" for null."""
    return "none" if ratio is None else f"{(ratio * 100).quantize(Decimal('0.1'))}%"


def rate_source(rate: LearnedRate) -> str:
    """Whose outcomes a segment's rate comes from (`Estimate.level`), in words."""
    return RATE_LEVELS[rate.estimate.level].format(
        method=rate.figures.payment_method, outcomes=rate.estimate.outcomes
    )


# --- The page ----------------------------------------------------------------------------------


async def _routing_page(
    session: Session,
    application_id: str,
    status: int,
    *,
    document: DocumentForm | None = None,
    text: str | None = None,
    evaluate: EvaluateForm | None = None,
    backtest: BacktestForm | None = None,
) -> tuple[str, int]:
    """The page, answered with `status`: the text area holds the refused `document`'s text, else
    `text`, else the document in force; `evaluate` and `backtest` are the forms' answers."""
    application = await application_for(session.principal, application_id)
    running = services()
    in_force = routing_body(
        await operations.read_routing_document(running, session.principal, application_id)
    )
    rates = await operations.list_learned_rates(running, session.principal, application_id)
    context = running.context
    # The form starts at the first payment method the application's active providers enable.
    configs, _ = await provider_operations.list_provider_configs(
        running, session.principal, application_id, PageRequest(1, MAX_LIMIT)
    )
    enabled = sorted({method for config in configs if config.is_active for method in config.payment_methods})
    observed = await observed_fees_now(context, application.id)
    linked = {config.provider for config in configs if config.is_active}
    # What the text area holds: the document without the `version` and `updatedAt` the API adds.
    shown = {key: value for key, value in in_force.items() if key not in ("version", "updatedAt")}
    return await render_page(
        "console/routing.html",
        session,
        status,
        title="Routing",
        application=application,
        in_force=in_force,
        rules=[
            RuleShown(rule["name"], conditions_text(rule.get("when")), route_text(rule["route"]))
            for rule in in_force["rules"]
        ],
        default_route=route_text(in_force["default"]),
        fees={name: fee_text(fee) for name, fee in in_force["fees"].items()},
        provider_fees=provider_fees(in_force["fees"], linked, observed),
        fee_window_days=context.settings.reconciliation.fee_window_days,
        recovery=recovery_text(in_force.get("recovery")),
        recovery_example=dumps_exact(RECOVERY_EXAMPLE),
        max_attempts=MAX_ATTEMPTS,
        retryable=RETRYABLE_REASONS,
        document_text=document.text if document else dumps_exact(shown, indent=2) if text is None else text,
        document=document,
        backtest=backtest or BacktestForm(str(MAX_DAYS)),
        backtested=backtest is not None,
        max_days=MAX_DAYS,
        percent=percent,
        points=points,
        rates=rates,
        rate_source=rate_source,
        settings=context.settings.routing,
        payment_methods=sorted(context.providers.all_payment_methods()),
        evaluate=evaluate
        or EvaluateForm({name: "" for name in EVALUATE_FIELDS} | {"paymentMethod": next(iter(enabled), "")}),
        notice=done_notice(DONE, status) if evaluate is None and backtest is None else None,
    )


@blueprint.get("/applications/<application_id>/routing")
@page
async def routing(application_id: str, session: Session) -> tuple[str, int]:
    return await _routing_page(session, application_id, 200)


# --- Replacing the document --------------------------------------------------------------------


def document_of(text: str) -> Any:
    """The text area's JSON, parsed as the API parses the body of `PUT .../routing`: refused past
    `MAX_DOCUMENT_BYTES`, then as malformed JSON, each with the API's problem."""
    if len(text.encode()) > MAX_DOCUMENT_BYTES:
        raise domain.InvalidInput(
            "routing document too large",
            [domain.FieldProblem("body", f"a routing document takes at most {MAX_DOCUMENT_BYTES} bytes")],
        )
    return loads_request_json(text)


@blueprint.post("/applications/<application_id>/routing")
@action_up_to(DOCUMENT_FORM_MAX_BYTES)
async def replace_routing(application_id: str, session: Session, form: MultiDict[str, str]) -> Any:
    """Store the document of the text area as the application's next version, with the API's
    validation; a refusal shows the page again (400) with every problem by its place, and stores
    nothing."""
    await application_for(session.principal, application_id)  # another merchant's: 404 before anything
    sent = form.get(DOCUMENT_FIELD, "")
    try:
        raw = document_of(sent)  # the API's parser refuses text PostgreSQL cannot store, as for the API
        await operations.replace_routing_document(services(), session.principal, application_id, raw)
    except domain.InvalidInput as error:
        refused = DocumentForm(sent, error.message, list(error.details))
        return await _routing_page(session, application_id, 400, document=refused)
    return see_other(url_for("console.routing", application_id=application_id, done="saved"))


# --- Backtesting the document ------------------------------------------------------------------


def backtest_request(raw: Any, days: str) -> RoutingBacktestRequest:
    """The backtest body the form asks for, validated as the API validates it: the document `raw`
    (the text area's JSON) over the sessions of the last `days` days (`MAX_DAYS` when left empty),
    the newest `limit` of them (the API's default). `InvalidInput` naming the days' problem under
    `days` and the document's by their place in it, as the save names them (`body` for the whole).

    The document is checked first as the save checks it (`checked_routing_document`, which the
    backtest runs again), so that its problems read the same: the API's backtest names them under
    `routing.`, in their places and in their messages alike."""
    days = days.strip()
    if days and not _DAYS.fullmatch(days):
        raise domain.InvalidInput(
            "validation failed",
            [domain.FieldProblem("days", f"must be a whole number of days from 1 to {MAX_DAYS}")],
        )
    operations.checked_routing_document(services().context.providers, raw)
    try:
        return RoutingBacktestRequest.model_validate({"routing": raw} | ({"days": int(days)} if days else {}))
    except ValidationError as error:
        raise domain.InvalidInput(
            "validation failed",
            [
                domain.FieldProblem("days" if item["loc"][:1] == ("days",) else "body", item["msg"])
                for item in error.errors(include_url=False)
            ],
        ) from None


@blueprint.post("/applications/<application_id>/routing/backtest")
@action_up_to(DOCUMENT_FORM_MAX_BYTES)
@open_to_read_only  # it stores nothing
async def backtest_routing(application_id: str, session: Session, form: MultiDict[str, str]) -> Any:
    """The document of the text area replayed over the application's sessions of the last `days`
    days by the API's backtest, shown on the page under the text area, which keeps the text. Stores
    nothing: a document with problems shows them as the save does (400); a backtest already running
    for the merchant (429) or too many in the process (503) show the API's message, to retry."""
    await application_for(session.principal, application_id)  # another merchant's: 404 before anything
    sent, days = form.get(DOCUMENT_FIELD, ""), form.get(DAYS_FIELD, "")
    try:
        raw = document_of(sent)
    except domain.InvalidInput as error:  # not JSON the API would take: its problems, as the save's
        refused = DocumentForm(sent, error.message, list(error.details))
        return await _routing_page(
            session, application_id, 400, document=refused, backtest=BacktestForm(days)
        )
    try:
        data = backtest_request(raw, days)
        backtest = await operations.backtest_routing(services(), session.principal, application_id, data)
    except domain.InvalidInput as error:
        problems = [problem for problem in error.details if problem.field != "days"]
        days_problems = [problem.message for problem in error.details if problem.field == "days"]
        return await _routing_page(
            session,
            application_id,
            400,
            document=DocumentForm(sent, error.message, problems) if problems else None,
            text=sent,
            backtest=BacktestForm(days, {"backtest-days": days_problems[0]} if days_problems else {}),
        )
    except (domain.RateLimited, domain.ServiceBusy) as error:
        busy = BacktestForm(days, {"backtest-form": error.message})
        html, status = await _routing_page(
            session, application_id, api_status(error) or 503, text=sent, backtest=busy
        )
        return html, status, {"Retry-After": str(error.retry_after)}
    answered = BacktestForm(days, answer=backtest_body(backtest))
    return await _routing_page(session, application_id, 200, text=sent, backtest=answered)


# --- Trying a session --------------------------------------------------------------------------


def evaluate_request(fields: Mapping[str, str]) -> RoutingEvaluateRequest:
    """The evaluate body the form asks for, validated as the API validates it: a session of the
    payment method, amount, currency and (optional) billing country typed, the rest filled in.
    Currency and country are taken in capitals. `InvalidInput` with a problem per field."""
    amount = fields["amount"].strip()
    if not amount:
        raise domain.InvalidInput("validation failed", [domain.FieldProblem("amount", "enter the amount")])
    if not _AMOUNT.fullmatch(amount):
        raise domain.InvalidInput(
            "validation failed",
            [domain.FieldProblem("amount", "must be digits, with a point before any decimals")],
        )
    customer: dict[str, Any] = {"email": EVALUATED_EMAIL}
    country = fields["billingCountry"].strip().upper()
    if country:
        customer["billingAddress"] = {**EVALUATED_ADDRESS, "country": country}
    body = {
        "orderReference": EVALUATED_ORDER,
        "paymentMethod": fields["paymentMethod"],
        "currency": fields["currency"].strip().upper(),
        "amount": {"total": Decimal(amount)},
        "customer": customer,
    }
    try:
        return RoutingEvaluateRequest.model_validate(body)
    except ValidationError as error:
        raise domain.InvalidInput(
            "validation failed",
            [
                domain.FieldProblem(".".join(str(part) for part in item["loc"]), item["msg"])
                for item in error.errors(include_url=False)
            ],
        ) from None


def _evaluate_errors(error: domain.InvalidInput) -> dict[str, str]:
    """The problems by the evaluate form's field: the billing address's are the country's."""
    errors: dict[str, str] = {}
    for name, message in field_errors(error).items():
        where = "billingCountry" if name == "customer" else EVALUATE_FIELD.get(name, "form")
        errors.setdefault(f"evaluate-{where}", message)
    return errors or {"evaluate-form": error.message}


@blueprint.post("/applications/<application_id>/routing/evaluate")
@action
@open_to_read_only  # it creates nothing
async def evaluate_routing(application_id: str, session: Session, form: MultiDict[str, str]) -> Any:
    """How a session of the form's payment method, amount, currency and billing country would be
    routed now by the document in force: the API's evaluation, shown on the page. Creates nothing."""
    await application_for(session.principal, application_id)  # another merchant's: 404 before anything
    await operations.charge_routing_evaluation(services(), session.principal)  # the API's rate: 429 beyond it
    values = {name: form.get(name, "") for name in EVALUATE_FIELDS}
    try:
        data = evaluate_request(text_fields(form, EVALUATE_FIELDS))
        evaluation = await operations.evaluate_routing(services(), session.principal, application_id, data)
    except domain.InvalidInput as error:
        refused = EvaluateForm(values, _evaluate_errors(error))
        return await _routing_page(session, application_id, 400, evaluate=refused)
    answered = EvaluateForm(values, answer=evaluation_body(evaluation))
    return await _routing_page(session, application_id, 200, evaluate=answered)
