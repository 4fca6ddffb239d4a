"""The fees reconciliation observes, weighed by `net` routing: through the API, a run over the
sandbox's settlements (its fees set in `[providers.sandbox.settlement_fees]`) then the routing
decision of a session, by the share of the amount each fee leaves (docs/reconciliation.md,
"Observed fees")."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest

from payorch.config import ProviderSettings, SandboxFee, SandboxFees, SandboxSettings, Settings
from payorch.storage.database import Database
from tests.clock import ShiftedClock
from tests.helpers import Client, Shop, eventually, new_shop, post_json, put_routing, session_body
from tests.reconciliation.test_sandbox_runs import exact_json, paid_session, pay, reconcile, status_of, today

# Card payments of 100.00 PLN settle with 2% + 1.00 PLN kept: 3.00 PLN, a mean rate of 3%.
CARD_FEE = SandboxFee(percent=Decimal("2.0"), fixed_minor=100)
OBSERVED_SHARE_LEFT = Decimal("0.97")


@pytest.fixture
def settings(settings: Settings) -> Settings:
    """The sandbox settles the day it is paid, at `CARD_FEE` for cards; routing reads its learned
    inputs again for every session (`routing.refresh_s` 0), so a decision sees a run at once;
    access tokens outlive the window a test moves time over."""
    sandbox = SandboxSettings(settlement_lag_days=0, settlement_fees=SandboxFees(card=CARD_FEE))
    routing = settings.routing.model_copy(update={"refresh_s": 0.0})
    auth = settings.auth.model_copy(update={"jwt_ttl_s": 40 * 86400})
    return settings.model_copy(
        update={"providers": ProviderSettings(sandbox=sandbox), "routing": routing, "auth": auth}
    )


@pytest.fixture
async def shop(client: Client, db: Database, settings: Settings) -> Shop:
    return await new_shop(client, db, settings)


async def sandbox_place(client: Client, shop: Shop, document: dict[str, Any] | None = None) -> Any:
    """The sandbox's place in the decision of a card session of 100.00 PLN, by `document` when
    given (tried, not stored), else by the one in force."""
    body = session_body() if document is None else {**session_body(), "routing": document}
    response = await post_json(
        client, f"/api/v1/applications/{shop.application_id}/routing/evaluate", body, shop.merchant.headers
    )
    assert response.status_code == 200, await response.get_data(as_text=True)
    [place] = (await exact_json(response))["ranking"]
    assert place["provider"] == "sandbox"
    return place


async def sandbox_score(client: Client, shop: Shop, document: dict[str, Any] | None = None) -> Decimal:
    return Decimal((await sandbox_place(client, shop, document))["score"])


async def share_left(client: Client, shop: Shop, fees: dict[str, Any] | None = None) -> Decimal:
    """What the fee `net` routing weighs leaves of the sandbox's score: its score under objective
    net over its score under objective approval, both with `fees` as the document's."""
    document = {"fees": fees or {}}
    net = await sandbox_score(client, shop, {**document, "objective": "net"})
    approval = await sandbox_score(client, shop, {**document, "objective": "approval"})
    return net / approval


def close(ratio: Decimal, expected: Decimal) -> bool:
    """Equal but for the scores' rounding to 4 decimals."""
    return abs(ratio - expected) < Decimal("0.0005")


async def test_before_any_run_net_routing_weighs_no_fee_for_a_provider_the_document_gives_none(
    client: Client, shop: Shop
) -> None:
    await paid_session(client, shop)
    assert await share_left(client, shop) == 1


async def test_net_routing_weighs_the_observed_fee_where_the_document_gives_the_provider_none(
    client: Client, shop: Shop, clock: ShiftedClock
) -> None:
    await paid_session(client, shop)
    await paid_session(client, shop)
    run = await reconcile(client, shop, today(clock))
    assert {item["fee"] for item in run["items"]["items"]} == {Decimal("3.00")}
    assert close(await share_left(client, shop), OBSERVED_SHARE_LEFT)


async def test_the_observed_fee_is_weighed_by_the_document_in_force_too(
    client: Client, shop: Shop, clock: ShiftedClock
) -> None:
    await put_routing(client, shop, {"objective": "net"})
    await paid_session(client, shop)
    await reconcile(client, shop, today(clock))
    net = await sandbox_score(client, shop)
    approval = await sandbox_score(client, shop, {"objective": "approval"})
    assert close(net / approval, OBSERVED_SHARE_LEFT)


async def test_the_documents_fee_wins_over_the_observed_one(
    client: Client, shop: Shop, clock: ShiftedClock
) -> None:
    await paid_session(client, shop)
    await reconcile(client, shop, today(clock))
    assert close(await share_left(client, shop, {"sandbox": {"percent": "10"}}), Decimal("0.90"))


async def test_the_observed_fee_is_kept_per_payment_method(
    client: Client, shop: Shop, clock: ShiftedClock
) -> None:
    await paid_session(client, shop)
    await reconcile(client, shop, today(clock))
    body = {**session_body(method="blik"), "routing": {"objective": "net"}}
    response = await post_json(
        client, f"/api/v1/applications/{shop.application_id}/routing/evaluate", body, shop.merchant.headers
    )
    net = Decimal((await exact_json(response))["ranking"][0]["score"])
    body["routing"] = {"objective": "approval"}
    response = await post_json(
        client, f"/api/v1/applications/{shop.application_id}/routing/evaluate", body, shop.merchant.headers
    )
    approval = Decimal((await exact_json(response))["ranking"][0]["score"])
    assert net == approval  # no BLIK payment settled: no fee observed for BLIK


async def test_a_payment_settled_short_is_left_out_of_the_observed_fee(
    client: Client, shop: Shop, clock: ShiftedClock
) -> None:
    await paid_session(client, shop, "4000000000000077")  # settled 1% short: AMOUNT_MISMATCH
    run = await reconcile(client, shop, today(clock))
    assert run["counts"]["AMOUNT_MISMATCH"] == 1
    assert await share_left(client, shop) == 1


async def test_a_second_run_over_the_same_day_replaces_what_the_first_observed(
    client: Client, shop: Shop, clock: ShiftedClock
) -> None:
    await paid_session(client, shop)  # 100.00: 3.00 kept
    await reconcile(client, shop, today(clock))
    session_id = await pay(client, shop, total="50.00")  # 50.00: 2.00 kept

    async def succeeded() -> bool:
        return await status_of(client, shop, session_id) == "SUCCEEDED"

    await eventually(succeeded)
    await reconcile(client, shop, today(clock))
    # 5.00 of 150.00; counting the first run's payment twice would make it 8.00 of 250.00 (0.968).
    assert close(await share_left(client, shop), 1 - Decimal(5) / Decimal(150))


async def test_fees_settled_before_the_window_are_not_weighed(
    client: Client, shop: Shop, clock: ShiftedClock, settings: Settings
) -> None:
    await paid_session(client, shop)
    await reconcile(client, shop, today(clock))
    clock.advance((settings.reconciliation.fee_window_days - 1) * 86400)
    assert close(await share_left(client, shop), OBSERVED_SHARE_LEFT)  # the window's last day
    clock.advance(86400)
    assert await share_left(client, shop) == 1


async def test_the_evaluation_names_the_fee_each_score_weighed_and_whose_it_is(
    client: Client, shop: Shop, clock: ShiftedClock
) -> None:
    assert "fee" not in await sandbox_place(client, shop, {"objective": "net"})  # none observed yet
    await paid_session(client, shop)
    await reconcile(client, shop, today(clock))
    observed = await sandbox_place(client, shop, {"objective": "net"})
    assert observed["fee"] == {"source": "observed", "percent": "3.0000", "fixed": {}}
    given = {"objective": "net", "fees": {"sandbox": {"percent": "1.2", "fixed": {"PLN": "0.30"}}}}
    assert (await sandbox_place(client, shop, given))["fee"] == {
        "source": "document",
        "percent": "1.2",
        "fixed": {"PLN": "0.30"},
    }
    assert "fee" not in await sandbox_place(client, shop, {"objective": "approval"})
