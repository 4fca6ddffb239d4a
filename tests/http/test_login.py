"""Login: e-mail and password for a JWT."""

from __future__ import annotations

import jwt
import pytest

from payorch.config import Settings
from tests.helpers import PASSWORD, Client, Merchant


async def test_login_returns_hs256_jwt_with_documented_claims(
    client: Client, merchant: Merchant, settings: Settings
) -> None:
    response = await client.post("/api/v1/auth/login", json={"email": merchant.email, "password": PASSWORD})
    assert response.status_code == 200
    body = await response.get_json()
    assert body["expiresIn"] == 3600
    assert jwt.get_unverified_header(body["accessToken"])["alg"] == "HS256"
    claims = jwt.decode(body["accessToken"], settings.auth.jwt_secret, algorithms=["HS256"])
    # The contract's claims, and `sv`: the session version a sign-out moves on (docs/api.md).
    assert set(claims) == {"sub", "mid", "iat", "exp", "jti", "sv"}
    assert claims["exp"] - claims["iat"] == 3600
    assert claims["sv"] == 0


async def test_login_email_is_case_insensitive(client: Client, merchant: Merchant) -> None:
    response = await client.post(
        "/api/v1/auth/login", json={"email": merchant.email.upper(), "password": PASSWORD}
    )
    assert response.status_code == 200


async def test_wrong_password_is_401(client: Client, merchant: Merchant) -> None:
    response = await client.post(
        "/api/v1/auth/login", json={"email": merchant.email, "password": PASSWORD + "x"}
    )
    assert response.status_code == 401
    assert "accessToken" not in await response.get_json()


async def test_unknown_email_is_401_with_the_same_message(client: Client, merchant: Merchant) -> None:
    unknown = await client.post(
        "/api/v1/auth/login", json={"email": "nobody@x.example", "password": PASSWORD}
    )
    wrong = await client.post("/api/v1/auth/login", json={"email": merchant.email, "password": "wrong" * 4})
    assert unknown.status_code == wrong.status_code == 401
    assert (await unknown.get_json())["message"] == (await wrong.get_json())["message"]


async def test_login_without_password_is_400(client: Client) -> None:
    response = await client.post("/api/v1/auth/login", json={"email": "a@b.example"})
    assert response.status_code == 400


async def test_two_logins_give_distinct_tokens(client: Client, merchant: Merchant) -> None:
    tokens = set()
    for _ in range(2):
        response = await client.post(
            "/api/v1/auth/login", json={"email": merchant.email, "password": PASSWORD}
        )
        tokens.add((await response.get_json())["accessToken"])
    assert len(tokens) == 2


@pytest.mark.parametrize("invisible", ["\u200b", "\u200d", "\ufeff", "\u2060"])
async def test_login_email_with_an_invisible_character_finds_the_account(
    client: Client, merchant: Merchant, invisible: str
) -> None:
    local, _, domain = merchant.email.partition("@")
    email = f"{local[:2]}{invisible}{local[2:]}@{domain}"
    response = await client.post("/api/v1/auth/login", json={"email": email, "password": PASSWORD})
    assert response.status_code == 200


async def test_login_email_in_full_width_letters_finds_the_account(
    client: Client, merchant: Merchant
) -> None:
    full_width = "".join(chr(ord(c) + 0xFEE0) if "!" <= c <= "~" else c for c in merchant.email)
    response = await client.post("/api/v1/auth/login", json={"email": full_width, "password": PASSWORD})
    assert response.status_code == 200
