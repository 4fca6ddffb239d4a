"""payorch's return route, where a provider's hosted checkout sends the customer back after an
attempt (docs/api.md "The way back"):

    GET /checkout/<sessionId>/return?attempt=<n>    n: the session's attempt (1: the first)

It answers 303 to wherever `engine.payments.recovery.ReturnFromCheckout` says: the merchant's
success or failure URL (or payorch's result page), or the next attempt's checkout. The query names
the attempt and nothing more: the outcome is what payorch reads of the session and of the attempt's
provider. Adapters build its address with `providers.base.return_url`. Like the result page, it
serves whoever holds the session id (the customer just sent there), and shows nothing of the
session but where to go next.
"""

from __future__ import annotations

import uuid

from quart import Blueprint, Response, request

from payorch.engine.payments.recovery import ReturnFromCheckout
from payorch.engine.routing.recovery import MAX_ATTEMPTS
from payorch.http.services import services
from payorch.storage import sessions
from payorch.values.errors import RateLimited, ServiceBusy
from payorch.values.html import html_page, see_other

blueprint = Blueprint("checkout_return", __name__, url_prefix="/checkout")


def _no_such_payment() -> Response:
    return html_page("No such payment", "<p>There is no payment here.</p>", 404)


def _busy(refused: RateLimited | ServiceBusy) -> Response:
    """A return refused by its bounds, for the customer: reload in a moment."""
    status = 429 if isinstance(refused, RateLimited) else 503
    page = html_page("One moment", "<p>Too many returns at once. Reload this page in a moment.</p>", status)
    page.headers["Retry-After"] = str(refused.retry_after or 1)
    return page


@blueprint.get("/<session_id>/return")
async def return_from_checkout(session_id: str) -> Response:
    """Send the customer on from the attempt's checkout they came back from."""
    try:
        parsed = uuid.UUID(session_id)
        attempt = int(request.args.get("attempt", "1"))
    except ValueError:
        return _no_such_payment()
    if not 1 <= attempt <= MAX_ATTEMPTS:
        return _no_such_payment()
    limits = services().limits
    try:
        # Public, and each return may read the attempt's state at its provider: paced per address
        # and bounded per application, as inbound provider events are (docs/rate-limits.md).
        await limits.pace_provider_event(request.remote_addr, "returns from a checkout")
        found = await services().context.db.autocommit(sessions.get_session, parsed)
        if found is None:
            return _no_such_payment()
        with limits.checkout_return(found.application_id):
            way = await services().actors.ask(found.application_id, ReturnFromCheckout(parsed, attempt))
    except (RateLimited, ServiceBusy) as refused:
        return _busy(refused)
    return _no_such_payment() if way is None else see_other(way)
