"""Merchant signup with a one-time invite token."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from payorch.config import Settings
from payorch.engine.accounts.invites import issue_invite
from payorch.storage import accounts
from payorch.storage.database import Connection, Database
from payorch.values.clock import SYSTEM_CLOCK
from payorch.values.secrets import token_hash
from tests.helpers import PASSWORD, Client, signup_body


async def _count(conn: Connection, table: str) -> int:
    return int(await conn.fetchval(f"SELECT count(*) FROM {table}"))  # noqa: S608


async def _signup(client: Client, token: str | None, body: dict[str, Any]) -> Any:
    path = "/api/v1/merchants/signup" + (f"?token={token}" if token is not None else "")
    return await client.post(path, json=body)


async def test_signup_echoes_organization_and_admin_without_password(
    client: Client, db: Database, settings: Settings
) -> None:
    invite = await issue_invite(db, settings, "owner@acme.example")
    body = signup_body("owner@acme.example", "REG-1")
    response = await _signup(client, invite.token, body)
    assert response.status_code == 201
    answer = await response.get_json()
    assert answer["organization"] == body["organization"]
    assert answer["admin"] == {"email": "owner@acme.example", "firstName": "Ada", "lastName": "Lovelace"}
    assert PASSWORD not in (await response.get_data(as_text=True))


async def test_password_is_stored_as_argon2id_hash(client: Client, db: Database, settings: Settings) -> None:
    invite = await issue_invite(db, settings, "owner@acme.example")
    await _signup(client, invite.token, signup_body("owner@acme.example", "REG-1"))

    async def stored(conn: Connection) -> str:
        return str(await conn.fetchval("SELECT password_hash FROM users"))

    password_hash = await db.autocommit(stored)
    assert password_hash.startswith("$argon2id$")
    assert PASSWORD not in password_hash


async def test_invite_token_is_stored_only_as_hash(db: Database, settings: Settings) -> None:
    invite = await issue_invite(db, settings, "owner@acme.example")

    async def stored(conn: Connection) -> bytes:
        return bytes(await conn.fetchval("SELECT token_hash FROM invites"))

    assert await db.autocommit(stored) == token_hash(invite.token)


async def test_missing_token_is_400(client: Client, db: Database) -> None:
    response = await _signup(client, None, signup_body("owner@acme.example", "REG-1"))
    assert response.status_code == 400
    assert await db.autocommit(_count, "merchants") == 0


async def test_empty_token_is_400(client: Client) -> None:
    response = await _signup(client, "", signup_body("owner@acme.example", "REG-1"))
    assert response.status_code == 400


async def test_unknown_token_is_400(client: Client, db: Database) -> None:
    response = await _signup(client, "not-a-real-token", signup_body("owner@acme.example", "REG-1"))
    assert response.status_code == 400
    assert (await response.get_json())["code"] == 400
    assert await db.autocommit(_count, "merchants") == 0


async def test_used_token_is_410(client: Client, db: Database, settings: Settings) -> None:
    invite = await issue_invite(db, settings, "owner@acme.example")
    first = await _signup(client, invite.token, signup_body("owner@acme.example", "REG-1"))
    assert first.status_code == 201
    again = await _signup(client, invite.token, signup_body("owner@acme.example", "REG-2"))
    assert again.status_code == 410
    assert await db.autocommit(_count, "merchants") == 1


async def test_expired_token_is_410(client: Client, db: Database) -> None:
    await db.transaction(
        accounts.create_invite,
        token_hash=token_hash("expired-token"),
        email="owner@acme.example",
        expires_at=SYSTEM_CLOCK.now() - timedelta(seconds=1),
    )
    response = await _signup(client, "expired-token", signup_body("owner@acme.example", "REG-1"))
    assert response.status_code == 410
    assert await db.autocommit(_count, "merchants") == 0


async def test_invite_lifetime_comes_from_settings(db: Database, settings: Settings) -> None:
    ttl = timedelta(seconds=settings.signup.invite_ttl_s)
    before = SYSTEM_CLOCK.now()
    invite = await issue_invite(db, settings, "owner@acme.example")
    after = SYSTEM_CLOCK.now()
    assert before + ttl <= invite.expires_at <= after + ttl


async def test_duplicate_admin_email_is_409_naming_neither_field(
    client: Client, db: Database, settings: Settings
) -> None:
    first = await issue_invite(db, settings, "owner@acme.example")
    await _signup(client, first.token, signup_body("owner@acme.example", "REG-1"))
    second = await issue_invite(db, settings, "OWNER@acme.example")
    duplicate = await _signup(client, second.token, signup_body("OWNER@acme.example", "REG-2"))
    assert duplicate.status_code == 409
    assert (await duplicate.get_json())["message"] == accounts.ACCOUNT_EXISTS
    assert await db.autocommit(_count, "merchants") == 1


async def test_duplicate_company_registration_number_is_409_naming_neither_field(
    client: Client, db: Database, settings: Settings
) -> None:
    first = await issue_invite(db, settings, "one@acme.example")
    await _signup(client, first.token, signup_body("one@acme.example", "REG-1"))
    second = await issue_invite(db, settings, "two@acme.example")
    duplicate = await _signup(client, second.token, signup_body("two@acme.example", "reg-1"))
    assert duplicate.status_code == 409
    assert (await duplicate.get_json())["message"] == accounts.ACCOUNT_EXISTS
    assert await db.autocommit(_count, "users") == 1


async def test_a_409_spends_the_invite_so_it_cannot_probe_again(
    client: Client, db: Database, settings: Settings
) -> None:
    first = await issue_invite(db, settings, "one@acme.example")
    await _signup(client, first.token, signup_body("one@acme.example", "REG-1"))
    probe = await issue_invite(db, settings, "two@acme.example")
    taken = await _signup(client, probe.token, signup_body("two@acme.example", "REG-1"))
    assert taken.status_code == 409
    # Neither another registration number nor a free one learns anything more with this invite.
    again = await _signup(client, probe.token, signup_body("two@acme.example", "REG-2"))
    assert again.status_code == 410
    assert await db.autocommit(_count, "merchants") == 1


async def test_signup_with_another_email_than_the_invite_is_400_whether_or_not_it_exists(
    client: Client, db: Database, settings: Settings
) -> None:
    first = await issue_invite(db, settings, "taken@acme.example")
    await _signup(client, first.token, signup_body("taken@acme.example", "REG-1"))
    invite = await issue_invite(db, settings, "invited@acme.example")
    registered = await _signup(client, invite.token, signup_body("taken@acme.example", "REG-2"))
    unknown = await _signup(client, invite.token, signup_body("nobody@acme.example", "REG-3"))
    assert registered.status_code == unknown.status_code == 400
    assert await registered.get_json() == await unknown.get_json()
    assert await _fields(registered) == ["admin.email"]
    # Nothing was used up: the invited address still signs up with it.
    own = await _signup(client, invite.token, signup_body("Invited@ACME.example", "REG-2"))
    assert own.status_code == 201


async def test_password_shorter_than_16_is_400(client: Client, db: Database, settings: Settings) -> None:
    invite = await issue_invite(db, settings, "a@acme.example")
    response = await _signup(client, invite.token, signup_body("a@acme.example", "REG-1", password="x" * 15))
    assert response.status_code == 400
    assert [item["field"] for item in (await response.get_json())["details"]] == ["admin.password"]


async def test_password_longer_than_32_is_400(client: Client, db: Database, settings: Settings) -> None:
    invite = await issue_invite(db, settings, "a@acme.example")
    response = await _signup(client, invite.token, signup_body("a@acme.example", "REG-1", password="x" * 33))
    assert response.status_code == 400


async def test_password_of_16_and_32_characters_is_accepted(
    client: Client, db: Database, settings: Settings
) -> None:
    for number, length in enumerate((16, 32)):
        invite = await issue_invite(db, settings, f"a{number}@acme.example")
        password = ("pass-word" * 4)[:length]
        body = signup_body(f"a{number}@acme.example", f"REG-{number}", password=password)
        assert (await _signup(client, invite.token, body)).status_code == 201


async def test_invalid_admin_email_is_400(client: Client, db: Database, settings: Settings) -> None:
    invite = await issue_invite(db, settings, "a@acme.example")
    response = await _signup(client, invite.token, signup_body("not-an-email", "REG-1"))
    assert response.status_code == 400
    assert (await response.get_json())["details"][0]["field"] == "admin.email"


async def test_missing_organization_field_is_400_and_does_not_use_the_invite(
    client: Client, db: Database, settings: Settings
) -> None:
    invite = await issue_invite(db, settings, "a@acme.example")
    body = signup_body("a@acme.example", "REG-1")
    del body["organization"]["legalBusinessName"]
    response = await _signup(client, invite.token, body)
    assert response.status_code == 400
    assert (await response.get_json())["details"][0]["field"] == "organization.legalBusinessName"
    assert (await _signup(client, invite.token, signup_body("a@acme.example", "REG-1"))).status_code == 201


async def test_address_line2_is_optional(client: Client, db: Database, settings: Settings) -> None:
    invite = await issue_invite(db, settings, "a@acme.example")
    body = signup_body("a@acme.example", "REG-1")
    del body["organization"]["registeredAddress"]["line2"]
    assert (await _signup(client, invite.token, body)).status_code == 201


async def _fields(response: Any) -> list[str]:
    return [item["field"] for item in (await response.get_json())["details"]]


# --- Passwords ------------------------------------------------------------------------------------


@pytest.mark.parametrize("password", ["a" * 16, "0" * 32, " " * 16, " \t" * 8, "\u3000" * 16, " \u200b" * 8])
async def test_password_of_one_repeated_character_or_only_white_space_is_400(
    client: Client, db: Database, settings: Settings, password: str
) -> None:
    invite = await issue_invite(db, settings, "a@acme.example")
    response = await _signup(client, invite.token, signup_body("a@acme.example", "REG-1", password=password))
    assert response.status_code == 400
    assert await _fields(response) == ["admin.password"]
    assert await db.autocommit(_count, "users") == 0


# --- Registration numbers and e-mails: compared as a reader sees them ----------------------------


async def _stored(conn: Connection) -> tuple[str, str]:
    row = await conn.fetchrow(
        "SELECT m.company_registration_number, u.email FROM merchants m JOIN users u ON u.merchant_id = m.id"
    )
    return row["company_registration_number"], row["email"]


@pytest.mark.parametrize(
    "spelling",
    ["REG\u200b-1", "\ufeffREG-1", "R\u2060EG-1", "RE\u200dG-1", "\uff32\uff25\uff27\uff0d\uff11"],
)
async def test_registration_number_differing_by_invisible_or_full_width_characters_is_409(
    client: Client, db: Database, settings: Settings, spelling: str
) -> None:
    first = await issue_invite(db, settings, "one@acme.example")
    assert (await _signup(client, first.token, signup_body("one@acme.example", "REG-1"))).status_code == 201
    second = await issue_invite(db, settings, "two@acme.example")
    duplicate = await _signup(client, second.token, signup_body("two@acme.example", spelling))
    assert duplicate.status_code == 409
    assert await db.autocommit(_count, "merchants") == 1


@pytest.mark.parametrize(
    "spelling",
    ["own\u200ber@acme.example", "owner\ufeff@acme.example", "\uff4f\uff57\uff4e\uff45\uff52@acme.example"],
)
async def test_admin_email_differing_by_invisible_or_full_width_characters_is_409(
    client: Client, db: Database, settings: Settings, spelling: str
) -> None:
    first = await issue_invite(db, settings, "owner@acme.example")
    assert (await _signup(client, first.token, signup_body("owner@acme.example", "REG-1"))).status_code == 201
    second = await issue_invite(db, settings, spelling)  # the invite's address is compared as stored
    duplicate = await _signup(client, second.token, signup_body(spelling, "REG-2"))
    assert duplicate.status_code == 409
    assert await db.autocommit(_count, "users") == 1


async def test_registration_number_and_email_are_stored_and_echoed_in_canonical_form(
    client: Client, db: Database, settings: Settings
) -> None:
    invite = await issue_invite(db, settings, "owner@acme.example")
    body = signup_body("own\u200ber@acme.example", "\uff32\uff25\uff27\u200b-1")
    response = await _signup(client, invite.token, body)
    assert response.status_code == 201
    answer = await response.get_json()
    assert answer["organization"]["companyRegistrationNumber"] == "REG-1"
    assert answer["admin"]["email"] == "owner@acme.example"
    assert await db.autocommit(_stored) == ("REG-1", "owner@acme.example")


async def test_registration_number_of_only_invisible_characters_is_400(
    client: Client, db: Database, settings: Settings
) -> None:
    invite = await issue_invite(db, settings, "a@acme.example")
    response = await _signup(client, invite.token, signup_body("a@acme.example", "\u200b\ufeff"))
    assert response.status_code == 400
    assert await _fields(response) == ["organization.companyRegistrationNumber"]


# --- Company website ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "website",
    [
        "https://acme.example\r\n",
        " https://acme.example",
        "https://acme.example/a b",
        "https://acme\u200b.example",
        "ftp://acme.example",
    ],
)
async def test_company_website_with_control_characters_white_space_or_another_scheme_is_400(
    client: Client, db: Database, settings: Settings, website: str
) -> None:
    invite = await issue_invite(db, settings, "a@acme.example")
    body = signup_body("a@acme.example", "REG-1")
    body["organization"]["companyWebsite"] = website
    response = await _signup(client, invite.token, body)
    assert response.status_code == 400
    assert await _fields(response) == ["organization.companyWebsite"]


async def test_plain_http_company_website_is_accepted(
    client: Client, db: Database, settings: Settings
) -> None:
    invite = await issue_invite(db, settings, "a@acme.example")
    body = signup_body("a@acme.example", "REG-1")
    body["organization"]["companyWebsite"] = "http://acme.example"
    assert (await _signup(client, invite.token, body)).status_code == 201
