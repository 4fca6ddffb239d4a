"""Reconciliation runs of an application (docs/reconciliation.md, docs/api.md "Reconciliation"):
`POST` starts one (202), `GET` lists them, `GET /<runId>` reads one with a page of its items, or
every item as CSV with `Accept: text/csv`. JWT only."""

from __future__ import annotations

import csv
import io
from collections.abc import AsyncIterator
from datetime import date
from decimal import Decimal
from typing import Annotated

from pydantic import Field, WithJsonSchema, with_config
from quart import Blueprint, Response, request
from quart_schema import document_response, security_scheme, tag_blueprint
from typing_extensions import TypedDict  # pydantic needs this one on Python < 3.12

from payorch.engine.body_types import CLOSED, MajorUnits, Timestamp, Uuid, listed
from payorch.http import openapi as api
from payorch.http.auth import Accept, Principal, authenticated
from payorch.http.models import Body, PageQuery
from payorch.http.operations import reconciliations
from payorch.http.services import services
from payorch.http.validation import validate_querystring, validate_request
from payorch.storage.reconciliations import Run, RunSummary, StoredItem
from payorch.values.errors import FieldProblem, InvalidInput
from payorch.values.money import to_major_units
from payorch.values.pagination import Page, envelope
from payorch.values.reconciliation import ItemOutcome, RunState
from payorch.values.timefmt import iso

blueprint = Blueprint(
    "reconciliations", __name__, url_prefix="/api/v1/applications/<application_id>/reconciliations"
)
tag_blueprint(blueprint, ["Reconciliation"])

_Day = Annotated[str, Field(pattern=r"^[0-9]{4}-[0-9]{2}-[0-9]{2}$")]


class ReconciliationRequest(Body):
    provider: Annotated[str, Field(min_length=1, max_length=64)]
    from_: Annotated[_Day, Field(alias="from")]
    to: _Day


class ItemQuery(PageQuery):
    outcome: ItemOutcome | None = None


Day = Annotated[str, WithJsonSchema({"type": "string", "format": "date"})]
"""A UTC day, `YYYY-MM-DD`."""


@with_config(CLOSED)
class Totals(TypedDict):
    """What the run's items add up to in one currency."""

    currency: str
    items: Annotated[int, Field(ge=0)]
    gross: MajorUnits
    fee: MajorUnits
    net: MajorUnits


@with_config(CLOSED)
class PayoutCheck(TypedDict):
    """A payout arriving in the period, beside the nets of the run's items it carried."""

    id: str
    currency: str
    amount: MajorUnits
    itemsNet: MajorUnits
    arrivesOn: Day
    providerStatus: str
    matches: bool


# `from` is a Python keyword: the period's two keys are declared in TypedDict's functional form.
_Period = TypedDict("_Period", {"from": Day, "to": Day})


@with_config(CLOSED)
class ReconciliationRun(_Period):
    """A reconciliation run of the application's account at `provider` over the UTC days `from` to
    `to`: RUNNING, then COMPLETED or FAILED (`error` says why)."""

    id: Uuid
    provider: str
    status: Annotated[RunState, listed(RunState)]
    error: str | None
    repaired: Annotated[int, Field(ge=0)]
    createdAt: Timestamp
    finishedAt: Timestamp | None


@with_config(CLOSED)
class ReconciliationItem(TypedDict):
    """One item of a run (docs/reconciliation.md says what each outcome means)."""

    outcome: Annotated[ItemOutcome, listed(ItemOutcome)]
    kind: str
    itemId: str | None
    currency: str
    gross: MajorUnits | None
    fee: MajorUnits | None
    net: MajorUnits | None
    recorded: MajorUnits | None
    settledOn: Day | None
    paymentReference: str | None
    refundReference: str | None
    payoutId: str | None
    paymentMethod: str | None
    sessionId: Uuid | None
    refundId: Uuid | None
    repaired: bool


@with_config(CLOSED)
class ReconciliationRead(ReconciliationRun):
    """A run with its counts per outcome, totals per currency, payouts, and a page of its items."""

    counts: dict[str, int]
    totals: list[Totals]
    payouts: list[PayoutCheck]
    items: Page[ReconciliationItem]


def run_body(run: Run) -> ReconciliationRun:
    return {
        "id": str(run.id),
        "provider": run.provider,
        "from": run.first_day.isoformat(),
        "to": run.last_day.isoformat(),
        "status": run.state,
        "error": run.error,
        "repaired": run.repaired,
        "createdAt": iso(run.created_at),
        "finishedAt": iso(run.finished_at),
    }


def _major(minor: int | None, currency: str) -> Decimal | None:
    return None if minor is None else to_major_units(minor, currency)


def item_body(item: StoredItem) -> ReconciliationItem:
    currency = item.currency
    return {
        "outcome": item.outcome,
        "kind": item.kind,
        "itemId": item.item_id,
        "currency": currency,
        "gross": _major(item.gross_minor, currency),
        "fee": _major(item.fee_minor, currency),
        "net": _major(item.net_minor, currency),
        "recorded": _major(item.recorded_minor, currency),
        "settledOn": item.settled_on.isoformat() if item.settled_on else None,
        "paymentReference": item.payment_reference,
        "refundReference": item.refund_reference,
        "payoutId": item.payout_id,
        "paymentMethod": item.method,
        "sessionId": str(item.session_id) if item.session_id else None,
        "refundId": str(item.refund_id) if item.refund_id else None,
        "repaired": item.repaired,
    }


def _summary_body(summary: RunSummary) -> tuple[dict[str, int], list[Totals], list[PayoutCheck]]:
    counts = {outcome.value: summary.counts.get(outcome, 0) for outcome in ItemOutcome}
    totals: list[Totals] = [
        {
            "currency": t.currency,
            "items": t.items,
            "gross": to_major_units(t.gross_minor, t.currency),
            "fee": to_major_units(t.fee_minor, t.currency),
            "net": to_major_units(t.net_minor, t.currency),
        }
        for t in summary.totals
    ]
    payouts: list[PayoutCheck] = [
        {
            "id": p.payout_id,
            "currency": p.currency,
            "amount": to_major_units(p.amount_minor, p.currency),
            "itemsNet": to_major_units(p.items_minor, p.currency),
            "arrivesOn": p.arrives_on.isoformat(),
            "providerStatus": p.reported_as,
            "matches": p.amount_minor == p.items_minor,
        }
        for p in summary.payouts
    ]
    return counts, totals, payouts


# The CSV's columns, in order: an item's fields as the JSON names them.
CSV_COLUMNS: tuple[str, ...] = tuple(ReconciliationItem.__annotations__)


def _day(field: str, text: str) -> date:
    try:
        return date.fromisoformat(text)
    except ValueError:
        raise InvalidInput(
            "invalid reconciliation", [FieldProblem(field, "is not a day (YYYY-MM-DD)")]
        ) from None


@blueprint.post("")
@security_scheme(api.JWT)
@document_response(ReconciliationRun, 202)
@api.errors(400, 401, 403, 404, 409, 413, 429, 500)
@authenticated(Accept.JWT)
@validate_request(ReconciliationRequest)
async def start_reconciliation(
    application_id: str, data: ReconciliationRequest, principal: Principal
) -> tuple[ReconciliationRun, int]:
    """Reconcile the application's account at `provider` over the UTC days `from` to `to`: the run
    goes on in the background (409 while the account has one under way)."""
    period = _day("from", data.from_), _day("to", data.to)
    run = await reconciliations.start_run(services(), principal, application_id, data.provider, *period)
    return run_body(run), 202


@blueprint.get("")
@security_scheme(api.JWT)
@document_response(Page[ReconciliationRun], 200)
@api.errors(400, 401, 403, 404, 429, 500)
@authenticated(Accept.JWT)
@validate_querystring(PageQuery)
async def list_reconciliations(
    application_id: str, query_args: PageQuery, principal: Principal
) -> Page[ReconciliationRun]:
    """The application's reconciliation runs, newest first."""
    page = query_args.page_request
    found, total = await reconciliations.list_runs(services(), principal, application_id, page)
    return envelope([run_body(run) for run in found], page, total)


@blueprint.get("/<run_id>")
@security_scheme(api.JWT)
@document_response(ReconciliationRead, 200)
@api.errors(400, 401, 403, 404, 429, 500)
@authenticated(Accept.JWT)
@validate_querystring(ItemQuery)
async def read_reconciliation(
    application_id: str, run_id: str, query_args: ItemQuery, principal: Principal
) -> ReconciliationRead | Response:
    """The run: its status, counts per outcome, totals per currency, payouts checked against the
    items they carried, and a page of its items (`outcome` filters them). With `Accept: text/csv`:
    every item (of `outcome`, if given) as CSV, one header line then one line per item."""
    if request.accept_mimetypes.best_match(["application/json", "text/csv"]) == "text/csv":
        items = await reconciliations.run_items(
            services(), principal, application_id, run_id, query_args.outcome
        )
        return Response(items_csv(items), content_type="text/csv; charset=utf-8")
    page = query_args.page_request
    read = await reconciliations.read_run(
        services(), principal, application_id, run_id, page, query_args.outcome
    )
    counts, totals, payouts = _summary_body(read.summary)
    return {
        **run_body(read.run),
        "counts": counts,
        "totals": totals,
        "payouts": payouts,
        "items": envelope([item_body(item) for item in read.items], page, read.total_items),
    }


async def items_csv(items: AsyncIterator[StoredItem]) -> AsyncIterator[bytes]:
    """`items` as the CSV the API answers (the console's download too): a header line of
    `CSV_COLUMNS`, then one line per item."""
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=CSV_COLUMNS, lineterminator="\r\n")
    writer.writeheader()
    count = 0
    async for item in items:
        writer.writerow({key: "" if value is None else value for key, value in item_body(item).items()})
        count += 1
        if count % 500 == 0:
            yield out.getvalue().encode()
            out.seek(0)
            out.truncate()
    yield out.getvalue().encode()
