"""The benchmark's merchant, set up as a real one is: invited (straight into the database, as
`payorch invite` does, or by `payorch invite` itself for a payorch in another process), then
signup, login, applications, a provider linked to each, an API key each, all over HTTP. Many
applications at once (thousands, for the idle benchmark) are copied from one made this way, in the
database (`bench.many_applications`).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import httpx
import trio

from bench.payorch_target import IDEMPOTENCY_HEADER, SESSION_BODY, SESSIONS_PATH, Payorch
from payorch.engine.accounts.invites import issue_invite

MERCHANT_EMAIL = "bench@merchant.example"
# A throwaway merchant in a temporary database.
PASSWORD = "correct-horse-battery"  # noqa: S105
SANDBOX_API_KEY = "sk_sandbox_bench_0123456789"
STRIPE_API_KEY = "sk_test_bench_0123456789abcdef"
RATE_LIMITED_TRIES = 5


def sandbox_link() -> dict[str, Any]:
    """The body linking the sandbox provider for card payments."""
    return {"name": "sandbox", "paymentMethods": ["card"], "credentials": {"apiKey": SANDBOX_API_KEY}}


def stripe_link() -> dict[str, Any]:
    """The body linking Stripe (at `providers.stripe.api_base`) for card payments."""
    return {"name": "stripe", "paymentMethods": ["card"], "credentials": {"apiKey": STRIPE_API_KEY}}


@dataclass(frozen=True)
class Application:
    id: str
    api_key: str


async def expect(response: httpx.Response, status: int) -> Any:
    """The JSON body of `response`, which must have `status`."""
    if response.status_code != status:
        raise RuntimeError(
            f"{response.request.method} {response.request.url.path}: expected {status}, "
            f"got {response.status_code}: {response.text[:500]}"
        )
    return response.json()


async def _invite_token(payorch: Payorch, email: str) -> str:
    invite = await issue_invite(payorch.service.db, payorch.settings, email)
    return invite.token


def _signup_body(email: str, number: int) -> dict[str, Any]:
    return {
        "organization": {
            "legalBusinessName": f"Bench Widgets {number} Ltd",
            "companyRegistrationNumber": f"BENCH-{number:06d}",
            "registeredAddress": {
                "line1": "1 Market Street",
                "city": "Warsaw",
                "state": "Mazowieckie",
                "postalCode": "00-001",
                "country": "PL",
            },
            "companyWebsite": "https://bench.example",
            "industry": "Retail",
            "sector": "E-commerce",
            "contactPersonFirstName": "Ada",
            "contactPersonLastName": "Lovelace",
            "contactPersonEmail": "ada@bench.example",
        },
        "admin": {"email": email, "password": PASSWORD, "firstName": "Ada", "lastName": "Lovelace"},
    }


class Merchant:
    """The signed-up merchant, logged in: makes applications."""

    def __init__(self, http: httpx.AsyncClient, access_token: str) -> None:
        self._http = http
        self._jwt = {"Authorization": f"Bearer {access_token}"}

    async def _post(self, path: str, body: dict[str, Any]) -> httpx.Response:
        """POST `body` to `path` as the merchant; a 429 (the JWT's rate limit, at its defaults: a
        hundred endpoints made in a row pass its burst) waited out as its Retry-After says, a few
        times."""
        for _ in range(RATE_LIMITED_TRIES):
            response = await self._http.post(path, json=body, headers=self._jwt)
            if response.status_code != 429:
                break
            await trio.sleep(float(response.headers.get("Retry-After", "1")))
        return response

    @property
    def authorization(self) -> dict[str, str]:
        """The header of the merchant's access token (JWT), for load the benchmark sends as it."""
        return dict(self._jwt)

    async def subscribe(self, application: Application, url: str, events: list[str]) -> str:
        """A webhook endpoint of `application` at `url` for `events`; its id."""
        created = await expect(
            await self._post(
                f"/api/v1/applications/{application.id}/webhooks", {"url": url, "subscribedEvents": events}
            ),
            201,
        )
        return str(created["id"])

    async def new_application(self, name: str, link: dict[str, Any]) -> Application:
        """An application with the provider of `link` linked, and an API key for it."""
        created = await expect(await self._post("/api/v1/applications", {"name": name}), 201)
        path = f"/api/v1/applications/{created['id']}"
        await expect(await self._post(f"{path}/providers", link), 201)
        key = await expect(await self._post(f"{path}/api-keys", {"description": "bench"}), 201)
        return Application(id=str(created["id"]), api_key=str(key["key"]))

    async def new_applications(self, count: int, link: dict[str, Any]) -> list[Application]:
        return [await self.new_application(f"Bench {number}", link) for number in range(1, count + 1)]

    async def more_api_keys(self, application: Application, count: int) -> list[str]:
        """`count` more API keys of `application`."""
        path = f"/api/v1/applications/{application.id}/api-keys"
        keys = []
        for _ in range(count):
            key = await expect(await self._post(path, {"description": "bench"}), 201)
            keys.append(str(key["key"]))
        return keys


@asynccontextmanager
async def signed_up_merchant(
    payorch: Payorch, email: str = MERCHANT_EMAIL, number: int = 1
) -> AsyncIterator[Merchant]:
    """A merchant (the benchmark's own unless `email` names another, `number` making its company's
    name and registration number its own), invited, signed up and logged in, for the length of the
    block."""
    token = await _invite_token(payorch, email)
    async with invited_merchant(payorch.base_url, token, email, number) as merchant:
        yield merchant


@asynccontextmanager
async def invited_merchant(
    base_url: str, token: str, email: str = MERCHANT_EMAIL, number: int = 1
) -> AsyncIterator[Merchant]:
    """The merchant invited with `token` (for `email`), signed up and logged in at the payorch at
    `base_url` for the length of the block, over HTTP alone: for a payorch in another process, whose
    invite comes from `payorch invite`."""
    async with httpx.AsyncClient(base_url=base_url, timeout=30) as http:
        signup = _signup_body(email, number)
        await expect(await http.post(f"/api/v1/merchants/signup?token={token}", json=signup), 201)
        login = await expect(
            await http.post("/api/v1/auth/login", json={"email": email, "password": PASSWORD}), 200
        )
        yield Merchant(http, login["accessToken"])


async def new_session(base_url: str, api_key: str) -> str:
    """A session of the application of `api_key`, for the read benchmark."""
    async with httpx.AsyncClient(base_url=base_url, timeout=30) as http:
        created = await expect(
            await http.post(
                SESSIONS_PATH,
                content=SESSION_BODY,
                headers={
                    "X-API-Key": api_key,
                    "Content-Type": "application/json",
                    IDEMPOTENCY_HEADER: "bench-read",
                },
            ),
            201,
        )
    return str(created["sessionId"])
