"""Building blocks for tests: invited merchants, their tokens, applications and API keys."""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any

from quart.typing import TestClientProtocol as Client

from payorch.config import Settings
from payorch.invites import issue_invite
from payorch.storage.database import Database

PASSWORD = "correct-horse-battery"  # 21 characters: inside 16..32
_numbers = itertools.count(1)


def signup_body(email: str, registration_number: str, password: str = PASSWORD) -> dict[str, Any]:
    return {
        "organization": {
            "legalBusinessName": "Acme Widgets Ltd",
            "companyRegistrationNumber": registration_number,
            "registeredAddress": {
                "line1": "1 Market Street",
                "line2": "Floor 2",
                "city": "Warsaw",
                "state": "Mazowieckie",
                "postalCode": "00-001",
                "country": "PL",
            },
            "companyWebsite": "https://acme.example",
            "industry": "Retail",
            "sector": "E-commerce",
            "contactPersonFirstName": "Ada",
            "contactPersonLastName": "Lovelace",
            "contactPersonEmail": "ada@acme.example",
        },
        "admin": {"email": email, "password": password, "firstName": "Ada", "lastName": "Lovelace"},
    }


@dataclass(frozen=True)
class Merchant:
    email: str
    access_token: str

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.access_token}"}


async def new_merchant(client: Client, db: Database, settings: Settings) -> Merchant:
    """A merchant signed up through an invite and logged in."""
    number = next(_numbers)
    email = f"admin{number}@merchant{number}.example"
    invite = await issue_invite(db, settings, email)
    response = await client.post(
        f"/api/v1/merchants/signup?token={invite.token}", json=signup_body(email, f"REG-{number:06d}")
    )
    assert response.status_code == 201, await response.get_data()
    response = await client.post("/api/v1/auth/login", json={"email": email, "password": PASSWORD})
    assert response.status_code == 200, await response.get_data()
    return Merchant(email=email, access_token=(await response.get_json())["accessToken"])


async def new_application(client: Client, merchant: Merchant, name: str = "Shop") -> dict[str, Any]:
    response = await client.post("/api/v1/applications", json={"name": name}, headers=merchant.headers)
    assert response.status_code == 201, await response.get_data()
    body: dict[str, Any] = await response.get_json()
    return body


async def new_api_key(client: Client, merchant: Merchant, application_id: str) -> dict[str, Any]:
    response = await client.post(
        f"/api/v1/applications/{application_id}/api-keys",
        json={"description": "server"},
        headers=merchant.headers,
    )
    assert response.status_code == 201, await response.get_data()
    body: dict[str, Any] = await response.get_json()
    return body
