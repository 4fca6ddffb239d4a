"""An application's checkout sessions, a session's page with its payment attempts, refunds and events,
and its refund form.

    GET  /console/applications/<id>/sessions     the sessions, newest first (filters: status, from, to)
    GET  /console/sessions/<session_id>          one session: its record, its customer, addresses and
                                                 items as given at create, one timeline of its
                                                 attempts, refunds, events and their deliveries, its
                                                 payment attempts oldest first, its refunds and events
    POST /console/sessions/<session_id>/refunds  a refund's review (its amount typed, never
                                                 prefilled), then with `confirmed` the refund

The list is the API's (`operations.sessions.list_sessions`, with the filters the API does not
take), the session is read as the API reads it (`operations.sessions.read_session`: another
merchant's session is 404) and a refund is the API's (`operations.refunds.create_refund`), under an
Idempotency-Key made when the form was rendered: the same rendered form sent twice refunds once, the
engine answering the second with the first one's answer. Money goes out only after the admin has
seen the amount, the currency and the session named on a confirmation step: the form's amount is
typed (it is never filled in with what remains), sending it shows the confirmation, and only the
confirmation's own form (`confirmed=yes`, the same Idempotency-Key) refunds.
"""

from __future__ import annotations

import contextlib
import re
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from decimal import Decimal
from typing import Any
from urllib.parse import urlencode

from quart import Response, request, url_for
from werkzeug.datastructures import MultiDict

from payorch.engine.idempotency import MAX_KEY_LENGTH
from payorch.engine.payments.records import SessionRecord
from payorch.engine.payments.refund_rules import REFUND_REASONS
from payorch.engine.payments.states import REFUNDABLE
from payorch.http.auth import application_for
from payorch.http.console.kit import (
    Session,
    action,
    application_section,
    blueprint,
    field_errors,
    listing,
    message_page,
    page,
    render_page,
    see_other,
    text_fields,
    validated,
)
from payorch.http.console.session_timeline import timeline
from payorch.http.error_responses import SHAPE_B_STATUS_OF
from payorch.http.models import RefundCreateRequest
from payorch.http.operations import refunds as refund_operations
from payorch.http.operations import sessions as session_operations
from payorch.http.services import services
from payorch.storage import outbox
from payorch.storage import sessions as sessions_store
from payorch.storage.database import Connection
from payorch.storage.database_thread import on_database_thread
from payorch.storage.session_deliveries import DeliveryStep, delivery_steps
from payorch.values import errors as domain
from payorch.values.money import AmountOutOfRange, TooManyDecimals, to_major_units, to_minor_units
from payorch.values.pagination import PageRequest
from payorch.values.statuses import RefundStatus, SessionStatus

application_section("Sessions", "sessions")

FILTER_FIELDS = ("status", "from", "to")
REFUND_FIELDS = ("amount", "reason", "idempotency_key")
REASON_LABELS = {reason: reason.replace("_", " ").capitalize() for reason in REFUND_REASONS}
_DAY = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}")
_AMOUNT = re.compile(r"[0-9]{1,16}(\.[0-9]{1,16})?")
# What a refund refused by the engine leaves to do, beside the engine's own message.
_AFTER_REFUSAL = {
    domain.IdempotencyKeyInProgress: "This form was already sent and its refund is under way: nothing "
    "more was refunded. Reload the page to see it.",
    domain.IdempotencyKeyMismatch: "This form was already sent with other values: nothing more was "
    "refunded. Fill in the new form below to refund again.",
}


def money(amount: Decimal | int, currency: str) -> str:
    """An exact amount with the currency's decimal places (as the API writes it), and its currency.
    Amounts are Decimal (or int, from an event's JSON), never float; nothing is rounded."""
    exact = Decimal(amount)
    with contextlib.suppress(ValueError):  # a currency the API would not take: shown as stored
        exact = to_major_units(to_minor_units(exact, currency), currency)
    return f"{exact:f} {currency}"


# --- The list ----------------------------------------------------------------------------------


def _day(value: str, field: str, problems: list[domain.FieldProblem]) -> date | None:
    if not value:
        return None
    try:
        if _DAY.fullmatch(value):
            return date.fromisoformat(value)
    except ValueError:
        pass
    problems.append(domain.FieldProblem(field, "must be a date written YYYY-MM-DD, such as 2025-03-31"))
    return None


def _midnight(day: date) -> datetime:
    return datetime.combine(day, time(0), UTC)


def session_filter(values: Mapping[str, str]) -> sessions_store.SessionFilter:
    """The filter of the list's form: a status, and the days (UTC) from and to which sessions were
    created, both included; `InvalidInput` with a problem per field for anything else."""
    problems: list[domain.FieldProblem] = []
    status = values["status"]
    if status and status not in {item.value for item in SessionStatus}:
        problems.append(domain.FieldProblem("status", "must be one of the statuses listed"))
    start, end = _day(values["from"], "from", problems), _day(values["to"], "to", problems)
    if start and end and end < start:
        problems.append(domain.FieldProblem("to", "must be the same day as 'from' or later"))
    if problems:
        raise domain.InvalidInput("the filters are not valid", problems)
    return sessions_store.SessionFilter(
        status=SessionStatus(status) if status else None,
        created_from=_midnight(start) if start else None,
        created_before=_midnight(end + timedelta(days=1)) if end and end < date.max else None,
    )


def _list_url(application_id: str, filters: Mapping[str, str], page_number: int) -> str:
    """The list's address at `page_number`, with the filters in use."""
    query = {name: value for name, value in filters.items() if value}
    if page_number > 1:
        query["page"] = str(page_number)
    base = url_for("console.sessions", application_id=application_id)
    return f"{base}?{urlencode(query)}" if query else base


@blueprint.get("/applications/<application_id>/sessions")
@page
async def sessions(application_id: str, session: Session) -> tuple[str, int]:
    application = await application_for(session.principal, application_id)
    filters = {name: request.args.get(name, "").strip() for name in FILTER_FIELDS}
    errors: dict[str, str] = {}
    try:
        where: sessions_store.SessionFilter | None = session_filter(filters)
    except domain.InvalidInput as error:
        where, errors = None, field_errors(error)

    async def matching(page: PageRequest) -> tuple[list[SessionRecord], int]:
        if where is None:  # filters that are not valid list nothing: the form says what is wrong
            return [], 0
        return await session_operations.list_sessions(
            services(), session.principal, application_id, page, where
        )

    found = await listing(matching)
    return await render_page(
        "console/sessions.html",
        session,
        400 if errors else 200,
        title="Sessions",
        application=application,
        listing=found,
        filters=filters,
        filtered=any(filters.values()),
        errors=errors,
        statuses=list(SessionStatus),
        money=money,
        newer=_list_url(application_id, filters, found.page - 1) if found.page > 1 else None,
        older=_list_url(application_id, filters, found.page + 1) if found.more else None,
    )


# --- A session ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class History:
    particulars: sessions_store.SessionParticulars | None
    events: list[dict[str, Any]]  # the delivery bodies of the session's events, newest first
    deliveries: list[DeliveryStep]  # each attempt of each delivery of its events, oldest first


@on_database_thread
async def _history(conn: Connection, application_id: Any, session_id: Any) -> History:
    particulars = await sessions_store.session_particulars(conn, session_id)
    events = await outbox.events_of_session(conn, session_id)
    deliveries = await delivery_steps(conn, application_id, session_id)
    return History(particulars, events[::-1], deliveries)


def _refunded(record: SessionRecord) -> Decimal:
    """The sum of the session's refunds that are not FAILED (what the refund rules count)."""
    shown = record["refunds"] or []
    return sum((item["amount"] for item in shown if item["status"] != RefundStatus.FAILED), Decimal(0))


async def _session_page(
    session: Session,
    session_id: str,
    status: int,
    *,
    form: Mapping[str, str] | None = None,
    errors: dict[str, str] | None = None,
    refund_error: str | None = None,
    confirming: RefundCreateRequest | None = None,
) -> tuple[str, int]:
    checkout, record = await session_operations.read_session(
        services(), session.principal, session_id
    )  # not the merchant's: the 404 page
    application = await application_for(session.principal, str(checkout.application_id))
    history = await services().context.db.snapshot(_history, checkout.application_id, checkout.id)
    refunds = list(reversed(record["refunds"] or []))
    remaining = record["amount"] - _refunded(record)
    notice = None
    if done := request.args.get("refund"):
        notice = next((item for item in refunds if item["id"] == done), None)
    particulars = history.particulars
    return await render_page(
        "console/session.html",
        session,
        status,
        title=f"Session {record['orderReference']}",
        application=application,
        record=record,
        checkout=checkout,
        particulars=particulars,
        shipping=to_major_units(particulars.shipping_minor, checkout.currency) if particulars else None,
        tax=to_major_units(particulars.tax_minor, checkout.currency) if particulars else None,
        attempts=record["attempts"],  # oldest first: the last is the one the session describes
        refunds=refunds,
        events=history.events,
        customer=record["customer"],
        items=(particulars.order_items or []) if particulars else [],
        timeline=timeline(record, history.events, history.deliveries, money),
        refunded=record["amount"] - remaining,
        remaining=remaining,
        refundable=record["status"] in REFUNDABLE and remaining > 0,
        notice=notice,
        notice_again=request.args.get("again") == "1",
        notice_later=request.args.get("later") == "1",
        # A new key each time the form is rendered: sending this rendered form again is the same refund.
        idempotency_key=secrets.token_urlsafe(24),
        reasons=REASON_LABELS,
        form={"amount": "", "reason": "", "idempotency_key": "", **(form or {})},
        errors=errors or {},
        refund_error=refund_error,
        confirming=confirming,
        money=money,
    )


@blueprint.get("/sessions/<session_id>")
@page
async def session_page(session_id: str, session: Session) -> tuple[str, int]:
    return await _session_page(session, session_id, 200)


# --- Refunds -----------------------------------------------------------------------------------


def refund_request(fields: Mapping[str, str]) -> tuple[RefundCreateRequest, dict[str, Any]]:
    """The refund the form asks for, validated as the API validates its body, and that body (what the
    Idempotency-Key's fingerprint is taken of): the amount typed, always."""
    typed = fields["amount"].strip()
    problems: list[domain.FieldProblem] = []
    body: dict[str, Any] = {}
    if not typed:
        problems.append(domain.FieldProblem("amount", "type the amount to refund"))
    elif not _AMOUNT.fullmatch(typed):
        problems.append(domain.FieldProblem("amount", "must be digits, with a point before any decimals"))
    else:
        body["amount"] = Decimal(typed)
    if fields["reason"]:
        body["reason"] = fields["reason"]
    if problems:
        raise domain.InvalidInput("the refund is not valid", problems)
    return validated(RefundCreateRequest, body), body


def _within_what_remains(data: RefundCreateRequest, record: SessionRecord) -> None:
    """`InvalidInput` naming `amount` when the amount to review has more decimals than its currency
    or is more than what remains to refund (the refund itself is checked again by the engine, under
    the session's lock)."""
    remaining, currency = record["amount"] - _refunded(record), record["currency"]
    if data.amount is None:
        return
    try:
        to_minor_units(data.amount, currency)
    except (TooManyDecimals, AmountOutOfRange) as error:
        raise domain.InvalidInput(
            "the refund is not valid", [domain.FieldProblem("amount", str(error))]
        ) from None
    if data.amount > remaining:
        raise domain.InvalidInput(
            "the refund is not valid",
            [domain.FieldProblem("amount", f"at most {remaining} {currency} remains to refund")],
        )


@blueprint.post("/sessions/<session_id>/refunds")
@action
async def refund_session(
    session_id: str, session: Session, form: MultiDict[str, str]
) -> tuple[str, int] | Response:
    shown = {name: form.get(name, "") for name in ("amount", "reason", "idempotency_key")}
    _, record = await session_operations.read_session(
        services(), session.principal, session_id
    )  # another merchant's: the 404 page before anything
    try:
        fields = text_fields(form, REFUND_FIELDS)
        key = fields["idempotency_key"]
        if not 0 < len(key) <= MAX_KEY_LENGTH:
            raise domain.InvalidInput(
                "this form was not sent from its page: open the session's page and refund from there"
            )
        data, body = refund_request(fields)
        if form.get("confirmed") != "yes":  # the review: nothing refunded until it is confirmed
            _within_what_remains(data, record)
            return await _session_page(session, session_id, 200, form=shown, confirming=data)
        answer = await refund_operations.create_refund(
            services(), session.principal, session_id, key, body, data
        )
    except domain.InvalidInput as error:
        errors = field_errors(error)
        message = None if errors else f"Nothing was refunded: {error.message}."
        return await _session_page(session, session_id, 400, form=shown, errors=errors, refund_error=message)
    except domain.CodedError as error:
        status = int(SHAPE_B_STATUS_OF[type(error)])
        after = _AFTER_REFUSAL.get(type(error), "")
        message = f"Nothing was refunded: {error.message}. {after}".strip()
        return await _session_page(session, session_id, status, form=shown, refund_error=message)
    except domain.NotFound as error:
        if error.missing == "session":
            raise  # the console's 404 page
        return await message_page("Not refunded", error.message, 404)
    query = {"refund": str(answer.body["refundId"])}
    if answer.replayed:
        query["again"] = "1"
    if answer.status == 202:
        query["later"] = "1"
    return see_other(f"{url_for('console.session_page', session_id=session_id)}?{urlencode(query)}#refunds")
