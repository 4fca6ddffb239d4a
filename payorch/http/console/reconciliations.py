"""An application's reconciliation (docs/reconciliation.md): its last runs, the totals of each
provider's newest completed run per currency, a form to start a run, and each run's page with its
discrepancies first, each with what to do about it, and its items as the API's CSV.

    GET  /console/applications/<id>/reconciliations                  the runs, the totals, the form
    POST /console/applications/<id>/reconciliations                  start a run (`provider`, `from`,
                                                                     `to`); on to the run's page
    GET  /console/applications/<id>/reconciliations/<run>            one run
    GET  /console/applications/<id>/reconciliations/<run>/items.csv  its items (`?outcome=` one kind)

Every page and form calls the operation the API's route calls (`operations/reconciliations.py`), so
ownership, the period's rules, one run per account at a time and the CSV are the API's.
"""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass, field
from datetime import UTC, date, timedelta
from decimal import Decimal
from typing import Any

from quart import Response, request, url_for
from werkzeug.datastructures import MultiDict

from payorch.http.auth import application_for
from payorch.http.console.kit import (
    Session,
    action,
    application_section,
    blueprint,
    done_notice,
    field_errors,
    listing,
    page,
    render_page,
    see_other,
    text_fields,
)
from payorch.http.operations import providers as provider_operations
from payorch.http.operations import reconciliations as operations
from payorch.http.routes.reconciliations import ReconciliationItem, item_body, items_csv
from payorch.http.services import services
from payorch.providers.settlements import ReportsSettlements
from payorch.storage.reconciliations import Run, RunSummary
from payorch.values import errors as domain
from payorch.values.money import to_major_units
from payorch.values.pagination import MAX_LIMIT, PageRequest
from payorch.values.reconciliation import ItemOutcome, RunState

application_section("Reconciliation", "reconciliations")

START_FIELDS = ("provider", "from", "to")
DONE = {"started": "Started: the run goes on in the background; refresh this page to follow it."}
ITEMS_SHOWN = 100  # of each discrepancy, on the run's page: the CSV holds them all
_DAY = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}")


@dataclass(frozen=True)
class Advice:
    """What an outcome means, and what to do about it (docs/reconciliation.md, "Outcomes")."""

    meaning: str
    action: str


ADVICE = {
    ItemOutcome.MISSING_IN_PAYORCH: Advice(
        "The provider settled it; payorch has no such payment or refund, or has the session unpaid.",
        "Repaired: payorch applied it, and the merchant got the webhook it missed. Otherwise: a "
        "payment taken outside payorch, or by another application on the same account; find its order.",
    ),
    ItemOutcome.AMOUNT_MISMATCH: Advice(
        "Settled and recorded, but the provider settled another gross (or currency) than payorch recorded.",
        "Ask the provider why it settled another amount (a partial capture, a currency conversion).",
    ),
    ItemOutcome.STATUS_MISMATCH: Advice(
        "A refund settled that payorch has PENDING or FAILED.",
        "PENDING: its outcome event is late, it completes by itself. FAILED: the provider refunded "
        "after all: correct your books.",
    ),
    ItemOutcome.MISSING_AT_PROVIDER: Advice(
        "payorch recorded it paid (or refunded); the provider settled nothing for it by its settlement day.",
        "Ask the provider: a payment it reversed or holds, a settlement delayed; check the session's events.",
    ),
    ItemOutcome.NOT_MATCHED: Advice(
        "A chargeback, a fee not tied to one payment, an adjustment: shown and totalled, never matched.",
        "Read it in the provider's dashboard.",
    ),
    ItemOutcome.EXPECTED: Advice(
        "payorch recorded it; its settlement day has not come yet.",
        "Nothing; run again after it.",
    ),
    ItemOutcome.MATCHED: Advice(
        "Settled, and payorch has the same payment or refund, same amount and currency.",
        "Nothing.",
    ),
}
# Discrepancies first, those payorch may have repaired or that lose money first; then the others.
OUTCOME_ORDER = tuple(ADVICE)
DISCREPANCIES = OUTCOME_ORDER[:5]


@dataclass(frozen=True)
class StartForm:
    """The form to start a run as sent (or as the page offers it), and its errors by field."""

    values: dict[str, str]
    errors: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class TotalShown:
    """One currency's totals of a run, in major units."""

    currency: str
    items: int
    gross: Decimal
    fee: Decimal
    net: Decimal


@dataclass(frozen=True)
class ProviderTotals:
    """A provider's newest completed run among those listed, and its totals per currency."""

    run: Run
    totals: list[TotalShown]


@dataclass(frozen=True)
class OutcomeItems:
    """A discrepancy's items on the run's page: the first `ITEMS_SHOWN`, of `count`."""

    outcome: ItemOutcome
    advice: Advice
    count: int
    items: list[ReconciliationItem]


def totals_shown(summary: RunSummary) -> list[TotalShown]:
    return [
        TotalShown(
            total.currency,
            total.items,
            to_major_units(total.gross_minor, total.currency),
            to_major_units(total.fee_minor, total.currency),
            to_major_units(total.net_minor, total.currency),
        )
        for total in summary.totals
    ]


async def _settling_providers(session: Session, application_id: str) -> list[str]:
    """The providers linked to the application, active, that report what they settled."""
    running = services()
    configs, _ = await provider_operations.list_provider_configs(
        running, session.principal, application_id, PageRequest(1, MAX_LIMIT)
    )
    return sorted(
        config.provider
        for config in configs
        if config.is_active and isinstance(running.context.providers.get(config.provider), ReportsSettlements)
    )


async def _reconciliations_page(
    session: Session, application_id: str, status: int, *, form: StartForm | None = None
) -> tuple[str, int]:
    application = await application_for(session.principal, application_id)
    running = services()
    runs = await listing(lambda page: operations.list_runs(running, session.principal, application_id, page))
    newest: dict[str, Run] = {}
    for run in runs.items:
        if run.state is RunState.COMPLETED:
            newest.setdefault(run.provider, run)
    totals = []
    for provider in sorted(newest):
        read = await operations.read_run(
            running, session.principal, application_id, str(newest[provider].id), PageRequest(1, 1), None
        )
        totals.append(ProviderTotals(read.run, totals_shown(read.summary)))
    providers = await _settling_providers(session, application_id)
    yesterday = (running.context.clock.now().astimezone(UTC).date() - timedelta(days=1)).isoformat()
    return await render_page(
        "console/reconciliations.html",
        session,
        status,
        title="Reconciliation",
        application=application,
        listing=runs,
        provider_totals=totals,
        providers=providers,
        form=form or StartForm({"provider": next(iter(providers), ""), "from": yesterday, "to": yesterday}),
        notice=done_notice(DONE, status),
    )


@blueprint.get("/applications/<application_id>/reconciliations")
@page
async def reconciliations(application_id: str, session: Session) -> tuple[str, int]:
    return await _reconciliations_page(session, application_id, 200)


def _day(values: dict[str, str], name: str) -> date:
    """The form's day `name` (`YYYY-MM-DD`); `InvalidInput` naming the field otherwise."""
    text = values[name].strip()
    try:
        if _DAY.fullmatch(text):
            return date.fromisoformat(text)
    except ValueError:
        pass
    raise domain.InvalidInput(
        "invalid reconciliation", [domain.FieldProblem(name, "is not a day (YYYY-MM-DD)")]
    )


@blueprint.post("/applications/<application_id>/reconciliations")
@action
async def start_reconciliation(application_id: str, session: Session, form: MultiDict[str, str]) -> Any:
    """Start a run with the API's operation, and go on to its page; a refused form (a day that is no
    day, a period the API refuses, a run of that account under way) shows the page again with why."""
    await application_for(session.principal, application_id)  # another merchant's: 404 before anything
    values = {name: form.get(name, "") for name in START_FIELDS}
    try:
        fields = text_fields(form, START_FIELDS)
        first, last = _day(fields, "from"), _day(fields, "to")
        run = await operations.start_run(
            services(), session.principal, application_id, fields["provider"], first, last
        )
    except domain.InvalidInput as error:
        refused = StartForm(values, field_errors(error))
        return await _reconciliations_page(session, application_id, 400, form=refused)
    except domain.ChangeInProgress as error:
        refused = StartForm(values, {"start-form": error.message})
        return await _reconciliations_page(session, application_id, 409, form=refused)
    target = url_for("console.reconciliation", application_id=application_id, run_id=str(run.id))
    return see_other(f"{target}?done=started")


@blueprint.get("/applications/<application_id>/reconciliations/<run_id>")
@page
async def reconciliation(application_id: str, run_id: str, session: Session) -> tuple[str, int]:
    """One run: its state, totals and payouts, its discrepancies first with what to do about each
    (the first `ITEMS_SHOWN` of each), then how many matched or are expected."""
    application = await application_for(session.principal, application_id)
    running = services()
    read = await operations.read_run(
        running, session.principal, application_id, run_id, PageRequest(1, 1), None
    )
    discrepancies = []
    for outcome in DISCREPANCIES:
        count = read.summary.counts.get(outcome, 0)
        if count:
            found = await operations.read_run(
                running, session.principal, application_id, run_id, PageRequest(1, ITEMS_SHOWN), outcome
            )
            items = [item_body(item) for item in found.items]
            discrepancies.append(OutcomeItems(outcome, ADVICE[outcome], count, items))
    payouts = sorted(read.summary.payouts, key=lambda p: p.amount_minor == p.items_minor)
    return await render_page(
        "console/reconciliation.html",
        session,
        200,
        title="Reconciliation run",
        application=application,
        run=read.run,
        counts=read.summary.counts,
        outcomes=OUTCOME_ORDER,
        advice=ADVICE,
        totals=totals_shown(read.summary),
        payouts=payouts,
        major=to_major_units,
        discrepancies=discrepancies,
        items_shown=ITEMS_SHOWN,
        notice=done_notice(DONE),
    )


@blueprint.get("/applications/<application_id>/reconciliations/<run_id>/items.csv")
@page
async def reconciliation_csv(application_id: str, run_id: str, session: Session) -> Response:
    """The run's items as the API's CSV (`Accept: text/csv`), all of them or those of `?outcome=`,
    downloaded as a file."""
    outcome_text = request.args.get("outcome")
    outcome = None
    if outcome_text is not None:
        if outcome_text not in ItemOutcome.__members__:
            raise domain.InvalidInput(
                "invalid outcome", [domain.FieldProblem("outcome", "is not an outcome of an item")]
            )
        outcome = ItemOutcome(outcome_text)
    items = await operations.run_items(services(), session.principal, application_id, run_id, outcome)
    name = f"reconciliation-{uuid.UUID(run_id)}{'-' + outcome.value.lower() if outcome else ''}.csv"
    return Response(
        items_csv(items),
        content_type="text/csv; charset=utf-8",
        headers={"Content-Disposition": f'attachment; filename="{name}"'},
    )
