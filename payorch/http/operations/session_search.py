"""Payments across a merchant's applications (docs/api.md "Payments across applications"): the
filters of a search read from query text, a keyset page of the sessions it holds, and every one of
them as CSV, read from the database a batch at a time. The API's `GET /api/v1/sessions` and the
console's Payments page share them.

A page's cursor is the key of its last session (its creation time and id), written opaque: the next
page starts after it, so a page stays the same when sessions are created meanwhile (they are newer,
ahead of the first page) and a deep page reads no more rows than the first.
"""

from __future__ import annotations

import base64
import binascii
import csv
import io
import re
import uuid
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from decimal import Decimal

from payorch.engine.payments.reads import searched_sessions
from payorch.engine.payments.records import ListedSession
from payorch.http.auth import Principal
from payorch.http.services import Services
from payorch.storage.session_search import SessionKey, SessionSearch, export_batch
from payorch.storage.sessions import CheckoutSession
from payorch.values.errors import FieldProblem, InvalidInput
from payorch.values.money import (
    AmountOutOfRange,
    TooManyDecimals,
    UnknownCurrency,
    to_major_units,
    to_minor_units,
)
from payorch.values.pagination import DEFAULT_LIMIT, MAX_LIMIT
from payorch.values.statuses import SessionStatus
from payorch.values.timefmt import iso

# The filters a search takes, by their names in the query string (the API's and the console's).
SEARCH_FIELDS = (
    "orderReference",
    "customerEmail",
    "amount",
    "amountMin",
    "amountMax",
    "currency",
    "provider",
    "status",
    "createdFrom",
    "createdTo",
    "applicationId",
)
EXPORT_BATCH = 1000  # sessions per read of an export: its memory, whatever the list's length

# Up to 10^15 major units, as a session's amount (its minor units then fit a bigint).
_AMOUNT = re.compile(r"[0-9]{1,15}(\.[0-9]{1,18})?")
_DAY = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}")
_PROVIDER = re.compile(r"[a-z0-9_-]{1,64}")
_CURRENCY = re.compile(r"[A-Z]{3}")
_INVALID = "the search is not valid"


@dataclass(frozen=True)
class SearchPage:
    """A page of a search: its sessions, and the cursor of the page after it (None: the last)."""

    items: list[ListedSession]
    next_cursor: str | None


def _time(text: str, field: str, *, end: bool, problems: list[FieldProblem]) -> datetime | None:
    """A day (`YYYY-MM-DD`, UTC) or a time with its offset (RFC 3339), as the bound it is: the
    first moment it covers, or with `end` the first moment after it (None after the last day)."""
    try:
        if _DAY.fullmatch(text):
            day = date.fromisoformat(text)
            if end and day == date.max:
                return None  # to the end of time: no bound
            return datetime.combine(day + timedelta(days=1) if end else day, time(0), UTC)
        moment = datetime.fromisoformat(text)
        if moment.tzinfo is not None and "T" in text.upper():
            return (moment + timedelta(microseconds=1) if end else moment).astimezone(UTC)
    except (ValueError, OverflowError):
        pass
    problems.append(
        FieldProblem(field, "must be a day (YYYY-MM-DD, UTC) or a time with its offset (RFC 3339)")
    )
    return None


def _minor(text: str, field: str, currency: str | None, problems: list[FieldProblem]) -> int | None:
    if not _AMOUNT.fullmatch(text):
        problems.append(FieldProblem(field, "must be an amount: digits, with a point before any decimals"))
        return None
    if currency is None:
        return None  # the missing currency is the problem said
    try:
        return to_minor_units(Decimal(text), currency)
    except (TooManyDecimals, AmountOutOfRange) as error:
        problems.append(FieldProblem(field, str(error)))
        return None


def parse_search(merchant_id: uuid.UUID, values: Mapping[str, str]) -> SessionSearch:
    """The merchant's search that the query `values` ask for (`SEARCH_FIELDS`; an empty value is
    no filter): `InvalidInput` (400) with one problem per field that is not valid."""
    given = {name: values[name].strip() for name in SEARCH_FIELDS if values.get(name, "").strip()}
    problems: list[FieldProblem] = []
    application_id = None
    if "applicationId" in given:
        try:
            application_id = uuid.UUID(given["applicationId"])
        except ValueError:
            problems.append(FieldProblem("applicationId", "must be an application's id (a UUID)"))
    for field, most in (("orderReference", 255), ("customerEmail", 320)):
        if len(given.get(field, "")) > most:
            problems.append(FieldProblem(field, f"at most {most} characters"))
    currency = given.get("currency")
    if currency is not None:
        try:
            if not _CURRENCY.fullmatch(currency):
                raise UnknownCurrency(currency)
            to_minor_units(Decimal(0), currency)
        except UnknownCurrency:
            problems.append(FieldProblem("currency", "must be an ISO 4217 currency code, such as EUR"))
            currency = None
    amounts = [name for name in ("amount", "amountMin", "amountMax") if name in given]
    if amounts and "currency" not in given:
        problems.append(FieldProblem("currency", "is required with amount, amountMin or amountMax"))
    if "amount" in given and len(amounts) > 1:
        problems.append(FieldProblem("amount", "give amount, or amountMin and amountMax, not both"))
    minor = {name: _minor(given[name], name, currency, problems) for name in amounts}
    low, high = minor.get("amountMin", minor.get("amount")), minor.get("amountMax", minor.get("amount"))
    if low is not None and high is not None and high < low:
        problems.append(FieldProblem("amountMax", "must not be less than amountMin"))
    status = given.get("status")
    if status is not None and status not in {item.value for item in SessionStatus}:
        problems.append(
            FieldProblem("status", f"must be one of {', '.join(item.value for item in SessionStatus)}")
        )
    provider = given.get("provider")
    if provider is not None and not _PROVIDER.fullmatch(provider):
        problems.append(FieldProblem("provider", "must be a provider's name, such as sandbox"))
    start = (
        _time(given["createdFrom"], "createdFrom", end=False, problems=problems)
        if "createdFrom" in given
        else None
    )
    stop = (
        _time(given["createdTo"], "createdTo", end=True, problems=problems) if "createdTo" in given else None
    )
    if start is not None and stop is not None and stop <= start:
        problems.append(FieldProblem("createdTo", "must not be before createdFrom"))
    if problems:
        raise InvalidInput(_INVALID, problems)
    return SessionSearch(
        merchant_id=merchant_id,
        application_id=application_id,
        order_reference=given.get("orderReference"),
        customer_email=given.get("customerEmail"),
        currency=currency,
        amount_min_minor=low,
        amount_max_minor=high,
        provider=provider,
        status=SessionStatus(status) if status is not None else None,
        created_from=start,
        created_before=stop,
    )


def parse_limit(text: str | None) -> int:
    """A page's `limit`: 1 to `MAX_LIMIT`, `DEFAULT_LIMIT` when not given; `InvalidInput` otherwise."""
    if text is None or text == "":
        return DEFAULT_LIMIT
    if not re.fullmatch(r"[0-9]{1,4}", text) or not 1 <= int(text) <= MAX_LIMIT:
        raise InvalidInput(_INVALID, [FieldProblem("limit", f"must be a whole number from 1 to {MAX_LIMIT}")])
    return int(text)


def cursor_of(key: SessionKey) -> str:
    """The opaque cursor of a page that starts after the session of `key`."""
    created_at, session_id = key
    return base64.urlsafe_b64encode(f"{created_at.isoformat()}|{session_id}".encode()).decode().rstrip("=")


def key_of(cursor: str | None) -> SessionKey | None:
    """The key a page starts after, from its `after` cursor (None: the first page); `InvalidInput`
    for a cursor payorch did not write."""
    if not cursor:
        return None
    try:
        text = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
        created, _, session_id = text.partition("|")
        created_at = datetime.fromisoformat(created)
        if created_at.tzinfo is None:
            raise ValueError(created)
        return created_at, uuid.UUID(session_id)
    except (ValueError, binascii.Error, UnicodeDecodeError):
        raise InvalidInput(
            _INVALID, [FieldProblem("after", "must be the nextCursor of an earlier page")]
        ) from None


async def search_page(
    services: Services, principal: Principal, search: SessionSearch, after: SessionKey | None, limit: int
) -> SearchPage:
    """The `limit` sessions of the principal's merchant that `search` holds after `after`, newest
    first, and the cursor of the page after them; within one of the merchant's list-read turns."""
    assert search.merchant_id == principal.merchant_id
    async with services.limits.list_read(principal.merchant_id):
        found = await services.context.db.snapshot(searched_sessions, search, after, limit + 1)
    shown = found[:limit]
    more = len(found) > limit
    return SearchPage([record for _, record in shown], cursor_of(shown[-1][0]) if more else None)


# The export's columns, in order: the API's names of a session's fields.
CSV_COLUMNS = (
    "id",
    "applicationId",
    "orderReference",
    "customerEmail",
    "amount",
    "currency",
    "status",
    "failureReason",
    "providerName",
    "paymentMethod",
    "createdAt",
    "updatedAt",
)


def csv_row(session: CheckoutSession) -> dict[str, str]:
    """A session's line of the export, as its read record writes each value ("" for null)."""
    customer = session.customer or {}
    return {
        "id": str(session.id),
        "applicationId": str(session.application_id),
        "orderReference": session.order_reference,
        "customerEmail": str(customer.get("email", "")),
        "amount": str(to_major_units(session.amount_minor, session.currency)),
        "currency": session.currency,
        "status": session.status.value,
        "failureReason": session.failure_reason.value if session.failure_reason else "",
        "providerName": session.provider_name or "",
        "paymentMethod": session.payment_method,
        "createdAt": iso(session.created_at),
        "updatedAt": iso(session.updated_at),
    }


async def export_csv(services: Services, principal: Principal, search: SessionSearch) -> AsyncIterator[bytes]:
    """Every session of the principal's merchant that `search` holds, newest first, as CSV (a header
    line, then one line per session), read `EXPORT_BATCH` at a time, each batch within one of the
    merchant's list-read turns: what is held is one batch, however long the list."""
    assert search.merchant_id == principal.merchant_id
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=CSV_COLUMNS, lineterminator="\r\n")
    writer.writeheader()
    after: SessionKey | None = None
    while True:
        async with services.limits.list_read(principal.merchant_id):
            batch = await services.context.db.autocommit(export_batch, search, after, EXPORT_BATCH)
        for session in batch:
            writer.writerow(csv_row(session))
        yield out.getvalue().encode()
        out.seek(0)
        out.truncate()
        if len(batch) < EXPORT_BATCH:
            return
        after = (batch[-1].created_at, batch[-1].id)
