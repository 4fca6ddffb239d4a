"""Provider configurations (sections 2.5, 2.6, 4.3): the catalogue, linking a provider to an
application, listing the links, replacing the provider API key and the enabled payment methods.

The provider key is sealed at rest and never answered; the sandbox keeps the event endpoint payorch
registers with it in its own table, `sandbox_webhook_endpoints`.
"""

from __future__ import annotations

import hashlib
import uuid
from typing import Any

import pytest
import trio

from payorch.config import ProviderSettings, SandboxSettings, Settings
from payorch.runtime import open_runtime
from payorch.storage.database import Connection, Database
from payorch.values.secretbox import SecretBox
from tests.helpers import (
    Client,
    Merchant,
    create_session,
    new_api_key,
    new_application,
    new_merchant,
    new_shop,
    post_sandbox_event,
    session_body,
)

KEY = "sk_sandbox_first_ABCDEFGH1234"
OTHER_KEY = "sk_sandbox_second_ZYXWVUTS9876"
CONFIG_FIELDS = {
    "applicationId",
    "provider",
    "isActive",
    "paymentMethods",
    "keyFingerprint",
    "createdAt",
    "updatedAt",
}
ENVELOPE_FIELDS = {"items", "page", "limit", "totalItems", "totalPages", "hasPreviousPage", "hasNextPage"}
SANDBOX_ENTRY = {
    "name": "sandbox",
    "displayName": "Sandbox (test mode)",
    "paymentMethods": ["apple_pay", "blik", "card"],
    "eventDelivery": "registered_endpoint",
}


def _link_body(**change: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "name": "sandbox",
        "paymentMethods": ["card", "blik"],
        "credentials": {"apiKey": KEY},
    }
    body.update(change)
    return body


async def _link(client: Client, merchant: Merchant, application_id: str, **change: Any) -> Any:
    return await client.post(
        f"/api/v1/applications/{application_id}/providers",
        json=_link_body(**change),
        headers=merchant.headers,
    )


async def _linked(client: Client, merchant: Merchant, **change: Any) -> tuple[str, dict[str, Any]]:
    """A new application of `merchant` linked to the sandbox: its id and the link's answer."""
    application = await new_application(client, merchant)
    response = await _link(client, merchant, application["id"], **change)
    assert response.status_code == 201, await response.get_data(as_text=True)
    body: dict[str, Any] = await response.get_json()
    return application["id"], body


def _providers_path(application_id: str, *rest: str) -> str:
    return "/".join([f"/api/v1/applications/{application_id}/providers", *rest])


async def _replace_key(client: Client, merchant: Merchant, application_id: str, api_key: Any) -> Any:
    return await client.patch(
        _providers_path(application_id, "sandbox", "api-key"),
        json={"apiKey": api_key},
        headers=merchant.headers,
    )


async def _set_methods(
    client: Client, merchant: Merchant, application_id: str, methods: Any, provider: str = "sandbox"
) -> Any:
    return await client.patch(
        _providers_path(application_id, provider, "payment-methods"),
        json={"paymentMethods": methods},
        headers=merchant.headers,
    )


async def _config_rows(db: Database) -> list[dict[str, Any]]:
    async def read(conn: Connection) -> list[dict[str, Any]]:
        return [dict(row.items()) for row in await conn.fetch("SELECT * FROM provider_configs")]

    return await db.autocommit(read)


async def _config_row(db: Database, application_id: str) -> dict[str, Any]:
    async def read(conn: Connection) -> dict[str, Any]:
        row = await conn.fetchrow(
            "SELECT * FROM provider_configs WHERE application_id = $1 AND provider = 'sandbox'",
            uuid.UUID(application_id),
        )
        assert row is not None
        return dict(row.items())

    return await db.autocommit(read)


async def _endpoints(db: Database) -> list[dict[str, Any]]:
    async def read(conn: Connection) -> list[dict[str, Any]]:
        rows = await conn.fetch("SELECT * FROM sandbox_webhook_endpoints ORDER BY created_at, id")
        return [dict(row.items()) for row in rows]

    return await db.autocommit(read)


def _account(api_key: str) -> str:
    return hashlib.sha256(api_key.encode()).hexdigest()


def _events_url(settings: Settings, application_id: str) -> str:
    return f"{settings.server.public_base_url}/api/v1/provider-events/sandbox/{application_id}"


def _box(settings: Settings) -> SecretBox:
    return SecretBox(settings.security.encryption_key)


# --- The catalogue ------------------------------------------------------------------------------


async def test_catalogue_lists_the_sandbox_in_a_pagination_envelope(
    client: Client, merchant: Merchant
) -> None:
    response = await client.get("/api/v1/providers", headers=merchant.headers)
    assert response.status_code == 200
    assert await response.get_json() == {
        "items": [SANDBOX_ENTRY],
        "page": 1,
        "limit": 20,
        "totalItems": 1,
        "totalPages": 1,
        "hasPreviousPage": False,
        "hasNextPage": False,
    }


async def test_catalogue_page_past_the_end_is_empty(client: Client, merchant: Merchant) -> None:
    response = await client.get("/api/v1/providers?page=2&limit=1", headers=merchant.headers)
    assert response.status_code == 200
    body = await response.get_json()
    assert body["items"] == []
    assert (body["totalItems"], body["hasPreviousPage"], body["hasNextPage"]) == (1, True, False)


async def test_catalogue_refuses_an_api_key_with_401(client: Client, merchant: Merchant) -> None:
    application = await new_application(client, merchant)
    key = await new_api_key(client, merchant, application["id"])
    response = await client.get("/api/v1/providers", headers={"X-API-Key": key["key"]})
    assert response.status_code == 401


async def test_catalogue_without_credentials_is_401(client: Client) -> None:
    assert (await client.get("/api/v1/providers")).status_code == 401


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ("page=0", "page"),
        ("page=-1", "page"),
        ("page=one", "page"),
        ("limit=0", "limit"),
        ("limit=101", "limit"),
        ("limit=1.5", "limit"),
        ("sort=name", "sort"),
    ],
)
async def test_catalogue_pagination_is_validated(
    client: Client, merchant: Merchant, query: str, field: str
) -> None:
    response = await client.get(f"/api/v1/providers?{query}", headers=merchant.headers)
    assert response.status_code == 400
    assert field in [item["field"] for item in (await response.get_json())["details"]]


async def test_catalogue_omits_providers_disabled_in_the_configuration(
    db: Database, settings: Settings
) -> None:
    without_sandbox = settings.model_copy(
        update={"providers": ProviderSettings(sandbox=SandboxSettings(enabled=False))}
    )
    async with open_runtime(without_sandbox, db) as runtime:
        client = runtime.app.test_client()
        merchant = await new_merchant(client, db, without_sandbox)
        response = await client.get("/api/v1/providers", headers=merchant.headers)
        assert response.status_code == 200
        body = await response.get_json()
    assert (body["items"], body["totalItems"]) == ([], 0)


# --- Linking a provider ---------------------------------------------------------------------------


async def test_linking_answers_201_with_the_provider_configuration(
    client: Client, merchant: Merchant
) -> None:
    application = await new_application(client, merchant)
    response = await _link(client, merchant, application["id"])
    assert response.status_code == 201
    body = await response.get_json()
    assert set(body) == CONFIG_FIELDS
    assert body["applicationId"] == application["id"]
    assert body["provider"] == "sandbox"
    assert body["isActive"] is True
    assert body["paymentMethods"] == ["card", "blik"]
    assert isinstance(body["createdAt"], str) and isinstance(body["updatedAt"], str)


async def test_key_fingerprint_is_the_first_8_and_last_4_characters(
    client: Client, merchant: Merchant
) -> None:
    _, linked = await _linked(client, merchant)
    assert linked["keyFingerprint"] == KEY[:8] + "..." + KEY[-4:] == "sk_sandb...1234"


async def test_repeated_payment_methods_are_kept_once(client: Client, merchant: Merchant) -> None:
    _, linked = await _linked(client, merchant, paymentMethods=["blik", "card", "blik"])
    assert linked["paymentMethods"] == ["blik", "card"]


async def test_full_key_appears_in_no_response(client: Client, merchant: Merchant) -> None:
    application = await new_application(client, merchant)
    answers = [
        await _link(client, merchant, application["id"]),
        await client.get(_providers_path(application["id"]), headers=merchant.headers),
        await _set_methods(client, merchant, application["id"], ["card"]),
        await _replace_key(client, merchant, application["id"], OTHER_KEY),
        await client.get(_providers_path(application["id"]), headers=merchant.headers),
    ]
    assert [answer.status_code for answer in answers] == [201, 200, 200, 200, 200]
    for answer in answers:
        text = await answer.get_data(as_text=True)
        assert KEY not in text and OTHER_KEY not in text


async def test_key_is_stored_as_a_fernet_token_of_the_key(
    client: Client, merchant: Merchant, db: Database, settings: Settings
) -> None:
    application_id, _ = await _linked(client, merchant)
    row = await _config_row(db, application_id)
    sealed = bytes(row["credentials"])
    assert KEY.encode() not in sealed
    assert not any(isinstance(value, str) and KEY in value for value in row.values())
    assert _box(settings).open(sealed) == KEY


async def test_linking_registers_the_event_endpoint_with_the_provider(
    client: Client, merchant: Merchant, db: Database, settings: Settings
) -> None:
    application_id, _ = await _linked(client, merchant)
    (endpoint,) = await _endpoints(db)
    assert endpoint["url"] == _events_url(settings, application_id)
    assert endpoint["account"] == _account(KEY)
    assert (await _config_row(db, application_id))["webhook_reference"] == endpoint["id"]


async def test_provider_event_secret_is_stored_sealed(
    client: Client, merchant: Merchant, db: Database, settings: Settings
) -> None:
    application_id, _ = await _linked(client, merchant)
    (endpoint,) = await _endpoints(db)
    secret = _box(settings).open(bytes(endpoint["secret"]))
    sealed = bytes((await _config_row(db, application_id))["webhook_secret"])
    assert secret.encode() not in sealed
    assert _box(settings).open(sealed) == secret


async def test_events_signed_with_the_registered_secret_are_accepted(
    client: Client, merchant: Merchant, db: Database, settings: Settings
) -> None:
    application_id, _ = await _linked(client, merchant)
    (endpoint,) = await _endpoints(db)
    response = await post_sandbox_event(
        client, application_id, _box(settings).open(bytes(endpoint["secret"]))
    )
    assert response.status_code == 200


async def test_linking_an_unknown_provider_is_404(client: Client, merchant: Merchant, db: Database) -> None:
    application = await new_application(client, merchant)
    response = await _link(client, merchant, application["id"], name="stripe")
    assert response.status_code == 404
    assert await _config_rows(db) == []


async def test_provider_name_of_100_characters_is_looked_up(client: Client, merchant: Merchant) -> None:
    application = await new_application(client, merchant)
    assert (await _link(client, merchant, application["id"], name="p" * 100)).status_code == 404


async def test_provider_name_over_100_characters_is_400(client: Client, merchant: Merchant) -> None:
    application = await new_application(client, merchant)
    response = await _link(client, merchant, application["id"], name="p" * 101)
    assert response.status_code == 400
    assert [item["field"] for item in (await response.get_json())["details"]] == ["name"]


async def test_linking_the_same_provider_twice_is_409(client: Client, merchant: Merchant) -> None:
    application_id, _ = await _linked(client, merchant)
    response = await _link(client, merchant, application_id, paymentMethods=["apple_pay"])
    assert response.status_code == 409


async def test_linking_twice_changes_neither_the_configuration_nor_the_endpoint(
    client: Client, merchant: Merchant, db: Database
) -> None:
    application_id, _ = await _linked(client, merchant)
    config_before, endpoints_before = await _config_row(db, application_id), await _endpoints(db)
    response = await _link(
        client, merchant, application_id, paymentMethods=["apple_pay"], credentials={"apiKey": OTHER_KEY}
    )
    assert response.status_code == 409
    assert await _config_row(db, application_id) == config_before
    assert await _endpoints(db) == endpoints_before


async def test_the_same_provider_may_be_linked_to_two_applications(
    client: Client, merchant: Merchant
) -> None:
    await _linked(client, merchant)
    await _linked(client, merchant)


async def test_payment_method_the_provider_does_not_offer_is_422(
    client: Client, merchant: Merchant, db: Database
) -> None:
    application = await new_application(client, merchant)
    response = await _link(client, merchant, application["id"], paymentMethods=["card", "paypal"])
    assert response.status_code == 422
    assert "paypal" in (await response.get_json())["message"]
    assert await _config_rows(db) == []
    assert await _endpoints(db) == []


async def test_rejected_credentials_are_422_and_nothing_is_stored(
    client: Client, merchant: Merchant, db: Database
) -> None:
    application = await new_application(client, merchant)
    response = await _link(client, merchant, application["id"], credentials={"apiKey": "nope"})
    assert response.status_code == 422
    assert await _config_rows(db) == []
    assert await _endpoints(db) == []


async def test_application_can_be_linked_after_its_credentials_were_rejected(
    client: Client, merchant: Merchant
) -> None:
    application = await new_application(client, merchant)
    assert (
        await _link(client, merchant, application["id"], credentials={"apiKey": "nope"})
    ).status_code == 422
    assert (await _link(client, merchant, application["id"])).status_code == 201


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"name": "sandbox", "paymentMethods": ["card"]}, "credentials"),
        ({"paymentMethods": ["card"], "credentials": {"apiKey": KEY}}, "name"),
        ({"name": "sandbox", "credentials": {"apiKey": KEY}}, "paymentMethods"),
        (_link_body(credentials=KEY), "credentials"),
        (_link_body(credentials={}), "credentials.apiKey"),
        (_link_body(credentials={"apiKey": 12345678}), "credentials.apiKey"),
        (_link_body(credentials={"apiKey": ""}), "credentials.apiKey"),
        (_link_body(credentials={"apiKey": KEY, "secret": "x"}), "credentials.secret"),
        (_link_body(name=7), "name"),
        (_link_body(name="   "), "name"),
        (_link_body(paymentMethods=[]), "paymentMethods"),
        (_link_body(paymentMethods="card"), "paymentMethods"),
        (_link_body(paymentMethods=["card", 1]), "paymentMethods.1"),
        (_link_body(paymentMethods=["card"] * 21), "paymentMethods"),
        (_link_body(isActive=True), "isActive"),
    ],
)
async def test_malformed_link_is_400_naming_the_field(
    client: Client, merchant: Merchant, db: Database, body: dict[str, Any], field: str
) -> None:
    application = await new_application(client, merchant)
    response = await client.post(_providers_path(application["id"]), json=body, headers=merchant.headers)
    assert response.status_code == 400
    assert field in [item["field"] for item in (await response.get_json())["details"]]
    assert await _config_rows(db) == []


async def test_link_body_that_is_not_json_is_400(client: Client, merchant: Merchant) -> None:
    application = await new_application(client, merchant)
    response = await client.post(
        _providers_path(application["id"]),
        data=b"{not json",
        headers={**merchant.headers, "Content-Type": "application/json"},
    )
    assert response.status_code == 400


async def test_linking_to_another_merchants_application_is_403(
    client: Client, merchant: Merchant, db: Database, settings: Settings
) -> None:
    other = await new_merchant(client, db, settings)
    application = await new_application(client, other)
    response = await _link(client, merchant, application["id"])
    assert response.status_code == 403
    assert await _config_rows(db) == []


async def test_linking_to_an_unknown_application_is_404(client: Client, merchant: Merchant) -> None:
    assert (await _link(client, merchant, str(uuid.uuid4()))).status_code == 404


async def test_linking_with_an_api_key_is_401(client: Client, merchant: Merchant, db: Database) -> None:
    application = await new_application(client, merchant)
    key = await new_api_key(client, merchant, application["id"])
    response = await client.post(
        _providers_path(application["id"]), json=_link_body(), headers={"X-API-Key": key["key"]}
    )
    assert response.status_code == 401
    assert await _config_rows(db) == []


async def test_linking_without_credentials_is_401_before_validation(
    client: Client, merchant: Merchant
) -> None:
    application = await new_application(client, merchant)
    response = await client.post(_providers_path(application["id"]), json={})
    assert response.status_code == 401


# --- Listing an application's configurations ------------------------------------------------------


async def test_configurations_are_listed_in_an_envelope(client: Client, merchant: Merchant) -> None:
    application_id, linked = await _linked(client, merchant)
    response = await client.get(_providers_path(application_id), headers=merchant.headers)
    assert response.status_code == 200
    body = await response.get_json()
    assert set(body) == ENVELOPE_FIELDS
    assert body["items"] == [linked]
    assert (body["page"], body["limit"], body["totalItems"], body["totalPages"]) == (1, 20, 1, 1)


async def test_listed_configurations_carry_no_secrets(
    client: Client, merchant: Merchant, db: Database, settings: Settings
) -> None:
    application_id, _ = await _linked(client, merchant)
    response = await client.get(_providers_path(application_id), headers=merchant.headers)
    (item,) = (await response.get_json())["items"]
    assert set(item) == CONFIG_FIELDS
    (endpoint,) = await _endpoints(db)
    text = await response.get_data(as_text=True)
    assert KEY not in text
    assert _box(settings).open(bytes(endpoint["secret"])) not in text


async def test_configurations_are_listed_newest_first(
    client: Client, merchant: Merchant, db: Database
) -> None:
    application_id, _ = await _linked(client, merchant)

    async def add_older(conn: Connection) -> None:
        # A link made a day earlier to a provider this deployment no longer offers; its name sorts
        # after "sandbox", so only the creation time puts it second.
        await conn.execute(
            """INSERT INTO provider_configs (application_id, provider, payment_methods, credentials,
                   key_fingerprint, created_at, updated_at)
               VALUES ($1, 'zeta', '{card}', '\\x00', 'zeta...0000', now() - interval '1 day',
                   now() - interval '1 day')""",
            uuid.UUID(application_id),
        )

    await db.transaction(add_older)
    response = await client.get(_providers_path(application_id), headers=merchant.headers)
    assert [item["provider"] for item in (await response.get_json())["items"]] == ["sandbox", "zeta"]


async def test_application_without_providers_lists_none(client: Client, merchant: Merchant) -> None:
    application = await new_application(client, merchant)
    response = await client.get(_providers_path(application["id"]), headers=merchant.headers)
    body = await response.get_json()
    assert (body["items"], body["totalItems"], body["totalPages"]) == ([], 0, 0)


async def test_configuration_list_lists_only_that_applications_links(
    client: Client, merchant: Merchant
) -> None:
    await _linked(client, merchant)
    application = await new_application(client, merchant)
    response = await client.get(_providers_path(application["id"]), headers=merchant.headers)
    assert (await response.get_json())["items"] == []


@pytest.mark.parametrize("query", ["page=0", "limit=0", "limit=101", "page=x"])
async def test_configuration_list_pagination_is_validated(
    client: Client, merchant: Merchant, query: str
) -> None:
    application_id, _ = await _linked(client, merchant)
    response = await client.get(f"{_providers_path(application_id)}?{query}", headers=merchant.headers)
    assert response.status_code == 400


async def test_configuration_list_of_another_merchants_application_is_403(
    client: Client, merchant: Merchant, db: Database, settings: Settings
) -> None:
    other = await new_merchant(client, db, settings)
    application_id, _ = await _linked(client, other)
    response = await client.get(_providers_path(application_id), headers=merchant.headers)
    assert response.status_code == 403


async def test_configuration_list_with_an_api_key_is_401(client: Client, merchant: Merchant) -> None:
    application_id, _ = await _linked(client, merchant)
    key = await new_api_key(client, merchant, application_id)
    response = await client.get(_providers_path(application_id), headers={"X-API-Key": key["key"]})
    assert response.status_code == 401


# --- Replacing the provider API key --------------------------------------------------------------


async def test_replacing_the_api_key_answers_an_empty_object(client: Client, merchant: Merchant) -> None:
    application_id, _ = await _linked(client, merchant)
    response = await _replace_key(client, merchant, application_id, OTHER_KEY)
    assert response.status_code == 200
    assert await response.get_json() == {}


async def test_replacing_the_api_key_changes_the_fingerprint(client: Client, merchant: Merchant) -> None:
    application_id, _ = await _linked(client, merchant)
    await _replace_key(client, merchant, application_id, OTHER_KEY)
    response = await client.get(_providers_path(application_id), headers=merchant.headers)
    (item,) = (await response.get_json())["items"]
    assert item["keyFingerprint"] == "sk_sandb...9876"


async def test_replacing_the_api_key_stores_the_new_key_sealed(
    client: Client, merchant: Merchant, db: Database, settings: Settings
) -> None:
    application_id, _ = await _linked(client, merchant)
    await _replace_key(client, merchant, application_id, OTHER_KEY)
    sealed = bytes((await _config_row(db, application_id))["credentials"])
    assert OTHER_KEY.encode() not in sealed
    assert _box(settings).open(sealed) == OTHER_KEY


async def test_replacing_the_api_key_moves_updated_at_and_keeps_the_rest(
    client: Client, merchant: Merchant, db: Database
) -> None:
    application_id, _ = await _linked(client, merchant)
    before = await _config_row(db, application_id)
    await _replace_key(client, merchant, application_id, OTHER_KEY)
    after = await _config_row(db, application_id)
    assert after["updated_at"] > before["updated_at"]
    kept = ("created_at", "payment_methods", "is_active")
    assert [after[name] for name in kept] == [before[name] for name in kept]


async def test_replacing_the_api_key_registers_the_event_endpoint_for_the_new_key(
    client: Client, merchant: Merchant, db: Database, settings: Settings
) -> None:
    application_id, _ = await _linked(client, merchant)
    old_secret = _box(settings).open(bytes((await _config_row(db, application_id))["webhook_secret"]))
    await _replace_key(client, merchant, application_id, OTHER_KEY)
    (endpoint,) = [item for item in await _endpoints(db) if item["account"] == _account(OTHER_KEY)]
    assert endpoint["url"] == _events_url(settings, application_id)
    row = await _config_row(db, application_id)
    assert row["webhook_reference"] == endpoint["id"]
    new_secret = _box(settings).open(bytes(row["webhook_secret"]))
    assert new_secret == _box(settings).open(bytes(endpoint["secret"]))
    assert new_secret != old_secret


async def test_replacing_with_the_same_key_keeps_the_endpoint_and_changes_its_secret(
    client: Client, merchant: Merchant, db: Database, settings: Settings
) -> None:
    application_id, _ = await _linked(client, merchant)
    (before,) = await _endpoints(db)
    assert (await _replace_key(client, merchant, application_id, KEY)).status_code == 200
    (after,) = await _endpoints(db)
    assert after["id"] == before["id"]
    secret = _box(settings).open(bytes(after["secret"]))
    assert secret != _box(settings).open(bytes(before["secret"]))
    assert _box(settings).open(bytes((await _config_row(db, application_id))["webhook_secret"])) == secret


async def test_events_signed_with_the_new_secret_are_accepted_after_the_key_is_replaced(
    client: Client, merchant: Merchant, db: Database, settings: Settings
) -> None:
    application_id, _ = await _linked(client, merchant)
    await _replace_key(client, merchant, application_id, OTHER_KEY)
    new_secret = _box(settings).open(bytes((await _config_row(db, application_id))["webhook_secret"]))
    assert (await post_sandbox_event(client, application_id, new_secret)).status_code == 200


async def test_events_signed_with_the_replaced_secret_are_refused(
    client: Client, merchant: Merchant, db: Database, settings: Settings
) -> None:
    application_id, _ = await _linked(client, merchant)
    old_secret = _box(settings).open(bytes((await _config_row(db, application_id))["webhook_secret"]))
    await _replace_key(client, merchant, application_id, OTHER_KEY)
    assert (await post_sandbox_event(client, application_id, old_secret)).status_code == 400


async def test_rejected_replacement_key_is_422(client: Client, merchant: Merchant) -> None:
    application_id, _ = await _linked(client, merchant)
    assert (await _replace_key(client, merchant, application_id, "nope")).status_code == 422


async def test_rejected_replacement_key_keeps_the_old_key_and_endpoint(
    client: Client, merchant: Merchant, db: Database, settings: Settings
) -> None:
    application_id, linked = await _linked(client, merchant)
    config_before, endpoints_before = await _config_row(db, application_id), await _endpoints(db)
    await _replace_key(client, merchant, application_id, "nope")
    assert await _config_row(db, application_id) == config_before
    assert await _endpoints(db) == endpoints_before
    assert _box(settings).open(bytes(config_before["credentials"])) == KEY
    response = await client.get(_providers_path(application_id), headers=merchant.headers)
    assert (await response.get_json())["items"] == [linked]


async def test_replacing_the_key_of_an_unlinked_provider_is_404(
    client: Client, merchant: Merchant, db: Database
) -> None:
    application = await new_application(client, merchant)
    assert (await _replace_key(client, merchant, application["id"], KEY)).status_code == 404
    assert await _endpoints(db) == []


async def test_replacing_the_key_of_an_unknown_provider_is_404(client: Client, merchant: Merchant) -> None:
    application_id, _ = await _linked(client, merchant)
    response = await client.patch(
        _providers_path(application_id, "stripe", "api-key"), json={"apiKey": KEY}, headers=merchant.headers
    )
    assert response.status_code == 404


@pytest.mark.parametrize(
    ("body", "field"),
    [({}, "apiKey"), ({"apiKey": 5}, "apiKey"), ({"apiKey": ""}, "apiKey"), ({"apiKey": KEY, "x": 1}, "x")],
)
async def test_malformed_replacement_key_is_400_naming_the_field(
    client: Client, merchant: Merchant, body: dict[str, Any], field: str
) -> None:
    application_id, _ = await _linked(client, merchant)
    response = await client.patch(
        _providers_path(application_id, "sandbox", "api-key"), json=body, headers=merchant.headers
    )
    assert response.status_code == 400
    assert field in [item["field"] for item in (await response.get_json())["details"]]


async def test_replacing_the_key_of_another_merchants_application_is_403(
    client: Client, merchant: Merchant, db: Database, settings: Settings
) -> None:
    other = await new_merchant(client, db, settings)
    application_id, _ = await _linked(client, other)
    assert (await _replace_key(client, merchant, application_id, OTHER_KEY)).status_code == 403
    assert _box(settings).open(bytes((await _config_row(db, application_id))["credentials"])) == KEY


async def test_replacing_the_key_with_an_api_key_is_401(client: Client, merchant: Merchant) -> None:
    application_id, _ = await _linked(client, merchant)
    key = await new_api_key(client, merchant, application_id)
    response = await client.patch(
        _providers_path(application_id, "sandbox", "api-key"),
        json={"apiKey": OTHER_KEY},
        headers={"X-API-Key": key["key"]},
    )
    assert response.status_code == 401


# --- Replacing the enabled payment methods -------------------------------------------------------


async def test_setting_payment_methods_returns_the_configuration_with_the_new_list(
    client: Client, merchant: Merchant
) -> None:
    application_id, linked = await _linked(client, merchant)
    response = await _set_methods(client, merchant, application_id, ["apple_pay", "blik"])
    assert response.status_code == 200
    body = await response.get_json()
    assert body["paymentMethods"] == ["apple_pay", "blik"]
    unchanged = {"applicationId", "provider", "isActive", "keyFingerprint", "createdAt"}
    assert {name: body[name] for name in unchanged} == {name: linked[name] for name in unchanged}
    assert set(body) == CONFIG_FIELDS


async def test_repeated_payment_methods_are_set_once(client: Client, merchant: Merchant) -> None:
    application_id, _ = await _linked(client, merchant)
    response = await _set_methods(client, merchant, application_id, ["card", "card", "apple_pay"])
    assert (await response.get_json())["paymentMethods"] == ["card", "apple_pay"]


async def test_set_payment_methods_are_listed(client: Client, merchant: Merchant) -> None:
    application_id, _ = await _linked(client, merchant)
    await _set_methods(client, merchant, application_id, ["blik"])
    response = await client.get(_providers_path(application_id), headers=merchant.headers)
    assert [item["paymentMethods"] for item in (await response.get_json())["items"]] == [["blik"]]


async def test_setting_an_unsupported_payment_method_is_422_and_keeps_the_list(
    client: Client, merchant: Merchant, db: Database
) -> None:
    application_id, _ = await _linked(client, merchant)
    response = await _set_methods(client, merchant, application_id, ["card", "paypal"])
    assert response.status_code == 422
    assert "paypal" in (await response.get_json())["message"]
    assert (await _config_row(db, application_id))["payment_methods"] == ["card", "blik"]


@pytest.mark.parametrize("methods", [[], "card", ["card", None], None])
async def test_malformed_payment_methods_are_400(
    client: Client, merchant: Merchant, db: Database, methods: Any
) -> None:
    application_id, _ = await _linked(client, merchant)
    response = await _set_methods(client, merchant, application_id, methods)
    assert response.status_code == 400
    assert (await _config_row(db, application_id))["payment_methods"] == ["card", "blik"]


async def test_setting_payment_methods_of_an_unlinked_provider_is_404(
    client: Client, merchant: Merchant
) -> None:
    application = await new_application(client, merchant)
    assert (await _set_methods(client, merchant, application["id"], ["card"])).status_code == 404


async def test_setting_payment_methods_of_an_unknown_provider_is_404(
    client: Client, merchant: Merchant
) -> None:
    application_id, _ = await _linked(client, merchant)
    assert (
        await _set_methods(client, merchant, application_id, ["card"], provider="stripe")
    ).status_code == 404


async def test_setting_payment_methods_of_another_merchants_application_is_403(
    client: Client, merchant: Merchant, db: Database, settings: Settings
) -> None:
    other = await new_merchant(client, db, settings)
    application_id, _ = await _linked(client, other)
    assert (await _set_methods(client, merchant, application_id, ["blik"])).status_code == 403
    assert (await _config_row(db, application_id))["payment_methods"] == ["card", "blik"]


async def test_setting_payment_methods_with_an_api_key_is_401(client: Client, merchant: Merchant) -> None:
    application_id, _ = await _linked(client, merchant)
    key = await new_api_key(client, merchant, application_id)
    response = await client.patch(
        _providers_path(application_id, "sandbox", "payment-methods"),
        json={"paymentMethods": ["blik"]},
        headers={"X-API-Key": key["key"]},
    )
    assert response.status_code == 401


async def test_card_session_finds_no_provider_after_card_is_removed(
    client: Client, db: Database, settings: Settings
) -> None:
    shop = await new_shop(client, db, settings)
    assert (await _set_methods(client, shop.merchant, shop.application_id, ["blik"])).status_code == 200
    response = await create_session(client, shop, "card-after-removal", session_body(method="card"))
    assert response.status_code == 422
    body = await response.get_json()
    assert (body["statusCode"], body["code"]) == (422, "NO_PROVIDER_AVAILABLE")


async def test_blik_session_still_routes_after_card_is_removed(
    client: Client, db: Database, settings: Settings
) -> None:
    shop = await new_shop(client, db, settings)
    await _set_methods(client, shop.merchant, shop.application_id, ["blik"])
    response = await create_session(client, shop, "blik-after-removal", session_body(method="blik"))
    assert response.status_code == 201, await response.get_data(as_text=True)
    assert (await response.get_json())["routing"]["selectedProvider"] == "sandbox"


async def test_two_links_at_once_make_one_configuration_whose_events_verify(
    client: Client, merchant: Merchant, db: Database, settings: Settings
) -> None:
    application = await new_application(client, merchant)
    statuses: list[int] = []

    async def link() -> None:
        statuses.append((await _link(client, merchant, application["id"])).status_code)

    async with trio.open_nursery() as racing:
        racing.start_soon(link)
        racing.start_soon(link)
    assert sorted(statuses) == [201, 409]
    (endpoint,) = await _endpoints(db)
    response = await post_sandbox_event(
        client, application["id"], _box(settings).open(bytes(endpoint["secret"]))
    )
    assert response.status_code == 200


async def test_two_key_changes_at_once_leave_events_verifying(
    client: Client, merchant: Merchant, db: Database, settings: Settings
) -> None:
    application_id, _ = await _linked(client, merchant)
    statuses: list[int] = []

    async def change(key: str) -> None:
        statuses.append((await _replace_key(client, merchant, application_id, key)).status_code)

    async with trio.open_nursery() as racing:
        racing.start_soon(change, "sk_sandbox_first_0001")
        racing.start_soon(change, "sk_sandbox_second_002")
    assert 200 in statuses and set(statuses) <= {200, 409}
    sealed = bytes((await _config_row(db, application_id))["webhook_secret"])
    response = await post_sandbox_event(client, application_id, _box(settings).open(sealed))
    assert response.status_code == 200
