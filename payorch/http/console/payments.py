"""The merchant's payments across its applications: one list of the sessions of every application,
searched and filtered, in keyset pages, and exported as CSV.

    GET /console/payments        the sessions, newest first; the filter form is a GET, so the
                                 address of a filtered list (and of its pages) can be shared
    GET /console/payments.csv    every session the filters hold, as CSV, streamed

Both are the API's (`GET /api/v1/sessions`, `operations.session_search`): the same filters by the
same names, the same pages (`after`, the cursor of the page before), the same CSV.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from quart import Response, request, url_for

from payorch.http.console.kit import Session, blueprint, field_errors, message_page, page, render_page
from payorch.http.console.sessions import money
from payorch.http.operations import applications as application_operations
from payorch.http.operations import session_search
from payorch.http.services import services
from payorch.values import errors as domain
from payorch.values.pagination import MAX_LIMIT, PageRequest
from payorch.values.statuses import SessionStatus

PAGE_SIZE = 25


def _address(endpoint: str, filters: dict[str, str], **more: str) -> str:
    """`endpoint`'s address with the filters in use (and `more`)."""
    query = {name: value for name, value in {**filters, **more}.items() if value}
    base = url_for(endpoint)
    return f"{base}?{urlencode(query)}" if query else base


@blueprint.get("/payments")
@page
async def payments(session: Session) -> tuple[str, int]:
    filters = {name: request.args.get(name, "").strip() for name in session_search.SEARCH_FIELDS}
    after = request.args.get("after", "")
    principal = session.principal
    errors: dict[str, str] = {}
    found = session_search.SearchPage([], None)
    try:
        search = session_search.parse_search(principal.merchant_id, filters)
        found = await session_search.search_page(
            services(), principal, search, session_search.key_of(after), PAGE_SIZE
        )
    except domain.InvalidInput as error:  # the form says what is wrong, and nothing is listed
        errors = field_errors(error)
    listed, _ = await application_operations.list_applications(
        services(), principal, PageRequest(1, MAX_LIMIT), with_api_keys=False
    )
    applications = [application for application, _ in listed]
    context: dict[str, Any] = {
        "items": found.items,
        "filters": filters,
        "filtered": any(filters.values()),
        "errors": errors,
        "statuses": list(SessionStatus),
        "applications": applications,
        "application_names": {str(application.id): application.name for application in applications},
        "first": _address("console.payments", filters) if after else None,
        "next": _address("console.payments", filters, after=found.next_cursor) if found.next_cursor else None,
        "export": _address("console.payments_csv", filters),
        "money": money,
    }
    return await render_page(
        "console/payments.html", session, 400 if errors else 200, title="Payments", **context
    )


@blueprint.get("/payments.csv")
@page
async def payments_csv(session: Session) -> Response:
    filters = {name: request.args.get(name, "").strip() for name in session_search.SEARCH_FIELDS}
    try:
        search = session_search.parse_search(session.principal.merchant_id, filters)
    except domain.InvalidInput as error:
        problems = "; ".join(f"{problem.field} {problem.message}" for problem in error.details)
        return await message_page("Not exported", f"The filters are not valid: {problems}.", 400)
    rows = session_search.export_csv(services(), session.principal, search)
    return Response(
        rows,
        content_type="text/csv; charset=utf-8",
        headers={"Content-Disposition": 'attachment; filename="payments.csv"'},
    )
