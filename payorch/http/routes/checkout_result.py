"""payorch's own result page, where a provider's hosted checkout sends the customer back when the
merchant gave no `redirectUrls` (Stripe needs somewhere to send them):

    GET /checkout/<sessionId>/result                      after paying
    GET /checkout/<sessionId>/result?checkout=cancelled   after leaving the checkout unpaid

Adapters build its address with `providers.base.result_page_url`. It shows the session's state
and amount, nothing else, to whoever holds the session id (the customer who was just sent there);
it refreshes itself while the provider's confirmation is on its way.
"""

from __future__ import annotations

import uuid
from html import escape

from quart import Blueprint, Response, request

from payorch.engine.payments.states import PAID
from payorch.http.services import services
from payorch.storage import sessions
from payorch.values.html import formatted_amount, html_page
from payorch.values.statuses import SessionStatus

blueprint = Blueprint("checkout_result", __name__, url_prefix="/checkout")

REFRESH_S = 3


@blueprint.get("/<session_id>/result")
async def show_result(session_id: str) -> Response:
    """The session's outcome, in words for the customer."""
    try:
        found = await services().context.db.autocommit(sessions.get_session, uuid.UUID(session_id))
    except ValueError:
        found = None
    if found is None:
        return html_page("No such payment", "<p>There is no payment here.</p>", 404)
    amount = f"<p>Amount: <strong>{escape(formatted_amount(found.amount_minor, found.currency))}</strong></p>"
    status = SessionStatus(found.status)
    if status in PAID:
        return html_page("Payment received", f"{amount}<p>Thank you. You can close this page.</p>", 200)
    if status is SessionStatus.FAILED:
        return html_page(
            "Checkout expired",
            f"{amount}<p>This checkout expired before it was paid; nothing was taken.</p>",
            200,
        )
    if request.args.get("checkout") == "cancelled":
        return html_page(
            "Payment cancelled", f"{amount}<p>Nothing was taken. Return to the shop to try again.</p>", 200
        )
    return html_page(
        "Confirming your payment",
        f"{amount}<p>Waiting for the payment provider to confirm the payment. This page updates itself.</p>",
        200,
        refresh_s=REFRESH_S,
    )
