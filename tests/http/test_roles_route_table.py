"""Every route of the app that is not a read, walked from its route table: a read-only user is
refused (403, naming the role) unless the route is one of the few listed here as open to them (and
marked so in the code) or takes no access token at all. A route added later is walked too, so a new
change cannot forget the role check."""

from __future__ import annotations

import re
import uuid

from payorch.config import Settings
from payorch.http.auth import READING_METHODS, is_open_to_read_only
from payorch.http.services import PayorchApp
from payorch.storage.database import Database
from tests.console.helpers import signed_in
from tests.helpers import Client, new_merchant
from tests.http.test_users import second_user

# Routes that take no access token: a signup, a login, a provider's event, a checkout page.
WITHOUT_ACCESS_TOKEN = {
    "accounts.sign_up",
    "accounts.log_in",
    "users.join",
    "provider_events.receive_provider_event",
    "console.sign_in_submitted",
    "console.sign_up_submitted",
    "console.join_submitted",
    "console.reset_password_submitted",
    "sandbox_pages.pay_checkout",
}
# Routes that only read (or end the caller's own session) although their method is not GET.
OPEN_TO_READ_ONLY = {
    "accounts.log_out",
    "routing.evaluate_routing",
    "routing.backtest_routing",
    "console.sign_out",
    "console.evaluate_routing",
    "console.backtest_routing",
}
_ARGUMENT = re.compile(r"<(?:[^:>]+:)?([^>]+)>")


def _changing_routes(app: PayorchApp) -> list[tuple[str, str, str]]:
    """(endpoint, method, path with every argument filled) of each route that is not a read."""
    found = []
    for rule in app.url_map.iter_rules():
        for method in sorted(set(rule.methods or ()) - READING_METHODS - {"OPTIONS"}):
            path = _ARGUMENT.sub(
                lambda match: "sandbox" if "provider" in match[1] else str(uuid.uuid4()), rule.rule
            )
            found.append((rule.endpoint, method, path))
    return found


async def test_the_routes_open_to_read_only_users_are_exactly_those_listed(app: PayorchApp) -> None:
    marked = {endpoint for endpoint, view in app.view_functions.items() if is_open_to_read_only(view)}

    assert marked == OPEN_TO_READ_ONLY


async def test_a_read_only_user_is_refused_every_change_the_route_table_holds(
    app: PayorchApp, client: Client, db: Database, settings: Settings
) -> None:
    admin = await new_merchant(client, db, settings)
    viewer = await second_user(client, admin, "read_only")
    browser = app.test_client()
    await signed_in(browser, viewer.email)
    walked = []

    for endpoint, method, path in _changing_routes(app):
        if endpoint in WITHOUT_ACCESS_TOKEN or endpoint in OPEN_TO_READ_ONLY:
            continue
        response = await browser.open(path, method=method, headers=viewer.headers, json={})
        text = await response.get_data(as_text=True)
        assert response.status_code == 403, (endpoint, method, path, response.status_code, text[:300])
        assert "read_only" in text, (endpoint, text[:300])
        walked.append(endpoint)

    assert {"refunds.create_refund", "console.refund_session", "routing.put_routing"} <= set(walked)
