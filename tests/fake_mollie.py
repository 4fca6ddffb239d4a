"""A fake Mollie on loopback, for the Mollie adapter's tests.

A real HTTP server (a QuartTrio app served by hypercorn's trio worker, plain HTTP on 127.0.0.1): the
adapter's SDK talks to it with `requests` from worker threads, as it would to Mollie. It speaks, at
the HTTP boundary, the part of Mollie's API v2 payorch uses, the way Mollie documents it:

- JSON bodies; `Authorization: Bearer <API key>`: keys the test accepted (`live_`/`test_`), any other
  key gets 401; the key names the account (objects of one account are invisible to another, 404);
- amounts as objects `{"currency": "PLN", "value": "100.00"}`, the value a string with exactly the
  currency's decimals (none for JPY and ISK), else 422 naming the `field`;
- errors as `application/hal+json` `{"status", "title", "detail", "field"?, "_links": {"documentation"}}`;
- objects as HAL: `resource`, Mollie's id prefixes (`tr_`, `re_`, `chb_`), `_links.self`, a payment's
  `_links.checkout` while it can be paid, `_links.refunds` / `_links.chargebacks` once it has some;
  lists as `{"count", "_embedded": {"<resources>": [...]}, "_links"}`;
- `Idempotency-Key` on POST and DELETE, per account: the same key with the same request replays the
  first answer, byte for byte, with `Idempotent-Replayed: true`; with another request it is 422;
- a `webhookUrl` Mollie could not reach (localhost, loopback) is 422, as Mollie refuses it;
- payments: create, get, list, cancel (DELETE, only while `isCancelable`); refunds of a payment:
  create (only of a paid payment, at most what remains), get, list; chargebacks of a payment: list;
- settlements (`settle`), read with an organization access token only (`accept_organization_token`;
  an API key gets 403): list, get, and each one's payments, refunds and chargebacks, newest first,
  paginated with `from` and `limit` (up to 250) and `_links.next`; a settlement's costs per method
  in its `periods`, its amount their sum unless the test makes one that does not add up.
  Parameters payorch does not send are refused with 422: stricter than Mollie, so a typo shows.
- scripted failures (`fail_next`): an error status, or an answer delayed past the caller's deadline
  (`status=None`: the request is then served for real after the delay, as a slow Mollie would).

The test moves Mollie's side along (`pay`, `fail`, `expire`, `settle_refund`, `chargeback`) and calls
the payment's `webhookUrl` as Mollie does (`call_webhook`: a form body `id=tr_...`, unsigned) through
an httpx client the test gives (an ASGI transport to payorch's app).

Every request is recorded (`requests`, `requests_to`, `only`) so tests assert exactly what payorch sent.
"""

from __future__ import annotations

import itertools
import json
import re
import secrets
import time
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import httpx
import pytest
import trio
from quart import request
from quart_trio import QuartTrio

from tests.loopback import serving_on_loopback

HAL = "application/hal+json"
DOCS = "https://docs.mollie.com/overview/handling-errors"
_TITLES = {
    400: "Bad Request",
    401: "Unauthorized Request",
    404: "Not Found",
    409: "Conflict",
    422: "Unprocessable Entity",
    429: "Too Many Requests",
    500: "Internal Server Error",
    502: "Bad Gateway",
    503: "Service Unavailable",
}
_NO_DECIMALS = {"JPY", "ISK"}
# A payment's statuses before a final one: `open` (nothing done yet, or a method the customer
# completes later, as a bank transfer) and `pending` (the method started and has not settled).
_UNSETTLED = ("open", "pending")
_METHODS = {"creditcard", "applepay", "blik", "ideal", "bancontact", "paypal", "banktransfer"}
_PAYMENT_PARAMS = {
    "amount",
    "description",
    "redirectUrl",
    "cancelUrl",
    "webhookUrl",
    "method",
    "metadata",
    "locale",
}
_REFUND_PARAMS = {"amount", "description", "metadata"}
_LOCALES = set(
    "en_US en_GB nl_NL nl_BE de_DE de_AT de_CH fr_FR fr_BE es_ES ca_ES pt_PT it_IT nb_NO sv_SE fi_FI "  # noqa: SIM905
    "da_DK is_IS hu_HU pl_PL lv_LV lt_LT".split()
)


class MollieFailure(Exception):
    """An answer in Mollie's error shape."""

    def __init__(self, status: int, detail: str, field: str | None = None) -> None:
        super().__init__(detail)
        self.status, self.detail, self.field = status, detail, field

    def body(self) -> dict[str, Any]:
        return error_body(self.status, self.detail, self.field)


def error_body(status: int, detail: str, field: str | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {"status": status, "title": _TITLES.get(status, "Error"), "detail": detail}
    if field:
        body["field"] = field
    body["_links"] = {"documentation": {"href": DOCS, "type": "text/html"}}
    return body


@dataclass(frozen=True)
class ScriptedFailure:
    """How the fake answers one matching request instead of serving it: `status` with Mollie's error
    body after `delay_s`, or (`status=None`) the real answer after `delay_s`."""

    status: int | None = 500
    delay_s: float = 0.0
    detail: str = "An internal server error occurred while processing your request."
    headers: dict[str, str] = field(default_factory=dict)  # e.g. a 429's Retry-After


@dataclass
class ReceivedMollieRequest:
    """A request as the fake received it, and how it answered."""

    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str]  # names lowercased
    body: bytes
    json: dict[str, Any] | None
    status: int = 0
    answer: dict[str, Any] = field(default_factory=dict)

    @property
    def api_key(self) -> str | None:
        scheme, _, key = self.headers.get("authorization", "").partition(" ")
        return key if scheme == "Bearer" else None


@dataclass
class _Account:
    profile: str
    payments: dict[str, dict[str, Any]] = field(default_factory=dict)
    refunds: dict[str, dict[str, Any]] = field(default_factory=dict)
    chargebacks: dict[str, dict[str, Any]] = field(default_factory=dict)
    settlements: dict[str, dict[str, Any]] = field(default_factory=dict)  # oldest first
    idempotent: dict[str, tuple[tuple[str, str, bytes], int, str]] = field(default_factory=dict)


def mollie_value(value: Any, currency: str, field_name: str) -> int:
    """An amount's `value` in minor units; 422 unless it has exactly the currency's decimals."""
    decimals = 0 if currency in _NO_DECIMALS else 2
    pattern = r"\d+" if decimals == 0 else r"\d+\.\d{2}"
    if not isinstance(value, str) or not re.fullmatch(pattern, value):
        raise MollieFailure(
            422, f"The amount contains an invalid value or number of decimals for {currency}.", field_name
        )
    return int(value.replace(".", ""))


def _written(minor: int, currency: str) -> str:
    if currency in _NO_DECIMALS:
        return str(minor)
    sign = "-" if minor < 0 else ""
    return f"{sign}{abs(minor) // 100}.{abs(minor) % 100:02d}"


def _amount(minor: int, currency: str) -> dict[str, str]:
    return {"currency": currency, "value": _written(minor, currency)}


class FakeMollie:
    """Mollie's API for the accounts whose keys the test accepts."""

    url: str = ""

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self.clock = clock
        self.requests: list[ReceivedMollieRequest] = []
        self._accounts: dict[str, _Account] = {}
        self._script: list[tuple[str, str, ScriptedFailure]] = []
        self._numbers = itertools.count(1)
        # Mollie's cost of a card payment of `amount` minor units (1.8% + 0.25, Mollie's card
        # pricing in the EU), charged per settlement as one line per method.
        self.fee_of: Callable[[int], int] = lambda amount: round(amount * 0.018) + 25

    # The test's side

    def accept_key(self, api_key: str, account: _Account | None = None) -> _Account:
        """Accept `api_key`, for a new account or for `account` (a second key of the same one)."""
        found = account or _Account(profile=self._id("pfl_"))
        self._accounts[api_key] = found
        return found

    def accept_organization_token(self, token: str, account: _Account) -> None:
        """Accept the organization access token `token` (`access_...`) of `account`'s organization:
        it reads the settlements (and nothing else here)."""
        assert token.startswith("access_")
        self._accounts[token] = account

    def revoke_key(self, api_key: str) -> None:
        """Stop accepting `api_key` (revoked in Mollie's dashboard): from now on it gets 401."""
        del self._accounts[api_key]

    def fail_next(self, method: str, path: str, *failures: ScriptedFailure | int) -> None:
        """Answer the next requests to `path` (a prefix) with `failures`, one each, in order."""
        for failure in failures:
            scripted = failure if isinstance(failure, ScriptedFailure) else ScriptedFailure(failure)
            self._script.append((method, path, scripted))

    def requests_to(self, method: str, path: str) -> list[ReceivedMollieRequest]:
        return [r for r in self.requests if (r.method, r.path) == (method, path)]

    def only(self, method: str, path: str) -> ReceivedMollieRequest:
        found = self.requests_to(method, path)
        assert len(found) == 1, f"{len(found)} requests {method} {path}: {[r.status for r in found]}"
        return found[0]

    def payment(self, payment_id: str) -> dict[str, Any]:
        return self._payment(payment_id)

    def refund(self, refund_id: str) -> dict[str, Any]:
        return next(a.refunds[refund_id] for a in self._accounts.values() if refund_id in a.refunds)

    def pay(self, payment_id: str) -> dict[str, Any]:
        """The customer pays the open payment on Mollie's checkout (or the pending one settles)."""
        payment = self._payment(payment_id)
        assert payment["status"] in _UNSETTLED, payment["status"]
        payment.update(status="paid", paidAt=self.now(), method=payment["method"] or "creditcard")
        payment.pop("isCancelable", None)
        payment["_links"].pop("checkout", None)
        self._set_remaining(payment)
        return payment

    def fail(self, payment_id: str, failure_reason: str | None = None) -> dict[str, Any]:
        """The open or pending payment fails (the issuer declined it): final at Mollie. A card
        payment's `details.failureReason` says why (Mollie's codes: `card_declined`,
        `insufficient_funds`, `possible_fraud`...)."""
        payment = self._finish(payment_id, "failed", "failedAt")
        if failure_reason is not None:
            payment.setdefault("details", {})["failureReason"] = failure_reason
        return payment

    def start(self, payment_id: str) -> dict[str, Any]:
        """The customer started paying and the method has not settled it yet (BLIK waiting for the
        customer's bank): `pending`, not final."""
        payment = self._payment(payment_id)
        assert payment["status"] == "open", payment["status"]
        payment.update(status="pending")
        payment.pop("isCancelable", None)
        return payment

    def cancel(self, payment_id: str) -> dict[str, Any]:
        """The customer cancels the payment on Mollie's checkout: final at Mollie."""
        return self._finish(payment_id, "canceled", "canceledAt")

    def expire(self, payment_id: str) -> dict[str, Any]:
        """Mollie expires the open payment by itself."""
        return self._finish(payment_id, "expired", "expiredAt")

    def make_uncancelable(self, payment_id: str) -> None:
        """The payment's method no longer lets it be cancelled (`isCancelable: false`)."""
        self._payment(payment_id)["isCancelable"] = False

    def settle_refund(self, refund_id: str, status: str = "refunded") -> dict[str, Any]:
        """Mollie settles the refund: `refunded`, or `failed` / `canceled` (the amount returns)."""
        assert status in ("refunded", "failed", "canceled")
        refund = self.refund(refund_id)
        refund["status"] = status
        if status != "refunded":
            payment = self._payment(refund["paymentId"])
            payment["_refunded_minor"] -= mollie_value(
                refund["amount"]["value"], refund["amount"]["currency"], ""
            )
            self._set_remaining(payment)
        return refund

    def chargeback(self, payment_id: str, *, reversed_: bool = False) -> dict[str, Any]:
        """The customer's bank charges the paid payment back (reversed: the bank withdrew it)."""
        payment = self._payment(payment_id)
        account = self._account_of(payment_id)
        chargeback_id = self._id("chb_")
        chargeback = {
            "resource": "chargeback",
            "id": chargeback_id,
            "amount": dict(payment["amount"]),
            "createdAt": self.now(),
            "reason": {"code": "MD06", "description": "Disputed authorized transaction"},
            "reversedAt": self.now() if reversed_ else None,
            "paymentId": payment_id,
            "_links": {
                "self": self._link(f"/v2/payments/{payment_id}/chargebacks/{chargeback_id}"),
                "payment": self._link(f"/v2/payments/{payment_id}"),
            },
        }
        account.chargebacks[chargeback["id"]] = chargeback
        payment["amountChargedBack"] = dict(payment["amount"])
        payment["_links"]["chargebacks"] = self._link(f"/v2/payments/{payment_id}/chargebacks")
        return chargeback

    def settle(
        self,
        api_key: str,
        payments: Sequence[str] = (),
        refunds: Sequence[str] = (),
        chargebacks: Sequence[str] = (),
        *,
        amount_minor: int | None = None,
        status: str = "paidout",
    ) -> dict[str, Any]:
        """Mollie settles the account's `payments`, `refunds` and `chargebacks` (ids): a settlement
        paid out now (`settledAt`; none while `open`), its costs one line per payment method
        (`fee_of` each payment), its amount what they add up to unless the test says otherwise (a
        settlement that does not add up). Each object settled gets `settlementId` and
        `settlementAmount` (a refund's and a chargeback's negative)."""
        account = self._accounts[api_key]
        settlement_id = self._id("stl_")
        objects = [account.payments[p] for p in payments]
        currency = (
            objects or [account.refunds[r] for r in refunds] or [account.chargebacks[c] for c in chargebacks]
        )[0]["amount"]["currency"]
        total, costs = 0, {}
        for payment in objects:
            total += payment["_minor"]
            cost = costs.setdefault(payment["method"], [0, 0])
            cost[0] += 1
            cost[1] += self.fee_of(payment["_minor"])
            payment.update(settlementId=settlement_id, settlementAmount=dict(payment["amount"]))
        for refund_id in refunds:
            refund = account.refunds[refund_id]
            minor = mollie_value(refund["amount"]["value"], currency, "")
            total -= minor
            refund.update(settlementId=settlement_id, settlementAmount=_amount(-minor, currency))
        for chargeback_id in chargebacks:
            chargeback = account.chargebacks[chargeback_id]
            minor = mollie_value(chargeback["amount"]["value"], currency, "")
            total -= minor
            chargeback.update(settlementId=settlement_id, settlementAmount=_amount(-minor, currency))
        total -= sum(cost for _, cost in costs.values())
        now = datetime.fromtimestamp(int(self.clock()), UTC)
        settlement = {
            "resource": "settlement",
            "id": settlement_id,
            "reference": f"1234567.{now:%y%m}.{len(account.settlements) + 1:02d}",
            "createdAt": self.now(),
            "settledAt": None if status == "open" else self.now(),
            "status": status,
            "amount": _amount(total if amount_minor is None else amount_minor, currency),
            "periods": {
                str(now.year): {
                    f"{now.month:02d}": {
                        "revenue": [],
                        "costs": [
                            {
                                "description": method,
                                "method": method,
                                "count": count,
                                "rate": {"fixed": _amount(25, currency), "percentage": "1.80"},
                                "amountNet": _amount(cost, currency),
                                "amountVat": None,
                                "amountGross": _amount(cost, currency),
                            }
                            for method, (count, cost) in costs.items()
                        ],
                        "invoiceId": None,
                    }
                }
            },
            "_links": {
                "self": self._link(f"/v2/settlements/{settlement_id}"),
                "payments": self._link(f"/v2/settlements/{settlement_id}/payments"),
                "refunds": self._link(f"/v2/settlements/{settlement_id}/refunds"),
                "chargebacks": self._link(f"/v2/settlements/{settlement_id}/chargebacks"),
                "captures": self._link(f"/v2/settlements/{settlement_id}/captures"),
                "documentation": {
                    "href": "https://docs.mollie.com/reference/get-settlement",
                    "type": "text/html",
                },
            },
        }
        account.settlements[settlement_id] = settlement
        return settlement

    async def call_webhook(
        self, payment_id: str, *, via: httpx.AsyncClient, url: str | None = None
    ) -> httpx.Response:
        """POST `id=<payment_id>` to the payment's `webhookUrl` (or `url`), as Mollie does: a form,
        unsigned, with Mollie's user agent."""
        target = url or self._payment(payment_id)["webhookUrl"]
        return await via.post(
            target,
            content=f"id={payment_id}".encode(),
            headers={
                "Content-Type": "application/x-www-form-urlencoded",
                "User-Agent": "Mollie HTTP client/1.0",
            },
        )

    # The API

    def scripted_left(self) -> int:
        """How many scripted answers no request has taken yet."""
        return len(self._script)

    def take_script(self, method: str, path: str) -> ScriptedFailure | None:
        for index, (scripted_method, prefix, failure) in enumerate(self._script):
            if scripted_method == method and path.startswith(prefix):
                del self._script[index]
                return failure
        return None

    def serve(
        self,
        method: str,
        path: str,
        query: dict[str, str],
        headers: dict[str, str],
        body: bytes,
        scripted: ScriptedFailure | None = None,
    ) -> tuple[int, dict[str, Any], dict[str, str]]:
        """Answer one request: (status, JSON body, extra headers)."""
        try:
            found = json.loads(body) if body.strip() else None
        except ValueError:
            found = None
        received = ReceivedMollieRequest(
            method, path, query, headers, body, found if isinstance(found, dict) else None
        )
        self.requests.append(received)
        if scripted is not None and scripted.status is not None:
            body = error_body(scripted.status, scripted.detail)
            return self._answer(received, scripted.status, body, scripted.headers)
        account = self._accounts.get(received.api_key or "")
        if account is None:
            return self._answer(
                received, 401, error_body(401, "Missing authentication, or failed to authenticate")
            )
        key = headers.get("idempotency-key")
        fingerprint = (method, path, body)
        if method in ("POST", "DELETE", "PATCH") and key and key in account.idempotent:
            first, status, answer = account.idempotent[key]
            if first != fingerprint:
                return self._answer(
                    received,
                    422,
                    error_body(
                        422, "The Idempotency-Key was already used for a request with other parameters."
                    ),
                )
            return self._answer(received, status, json.loads(answer), {"Idempotent-Replayed": "true"})
        try:
            if body.strip() and not isinstance(found, dict):
                raise MollieFailure(400, "The request body is not valid JSON.")
            status, answer = self._route(account, received)
        except MollieFailure as failure:
            status, answer = failure.status, failure.body()
        if method in ("POST", "DELETE", "PATCH") and key and status < 500:
            account.idempotent[key] = (fingerprint, status, json.dumps(answer))
        return self._answer(received, status, answer)

    def _answer(
        self,
        received: ReceivedMollieRequest,
        status: int,
        answer: dict[str, Any],
        extra: dict[str, str] | None = None,
    ) -> tuple[int, dict[str, Any], dict[str, str]]:
        received.status, received.answer = status, answer
        return status, answer, dict(extra or {})

    def _route(self, account: _Account, received: ReceivedMollieRequest) -> tuple[int, dict[str, Any]]:
        method, parts, data = received.method, received.path.strip("/").split("/"), received.json or {}
        by_token = (received.api_key or "").startswith("access_")
        if parts[:2] == ["v2", "settlements"] and method == "GET":
            if not by_token:
                raise MollieFailure(403, "This endpoint needs an organization access token, not an API key.")
            return 200, self._settlements(account, parts[2:], received.query)
        if by_token:
            raise MollieFailure(403, "payorch's fake takes payments with an API key only.")
        if parts[:2] != ["v2", "payments"]:
            raise MollieFailure(404, "The resource does not exist.")
        if len(parts) == 2 and method == "GET":
            limit = int(received.query.get("limit", "50"))
            found = [_public(p) for p in reversed(account.payments.values())][:limit]
            return 200, self._list("payments", found, "/v2/payments")
        if len(parts) == 2 and method == "POST":
            return 201, self._create_payment(account, data)
        payment = account.payments.get(parts[2]) if len(parts) > 2 else None
        if payment is None:
            raise MollieFailure(404, f"No payment exists with token {parts[2] if len(parts) > 2 else ''}.")
        if len(parts) == 3 and method == "GET":
            return 200, _public(payment)
        if len(parts) == 3 and method == "DELETE":
            return 200, self._cancel(payment)
        if parts[3:] == ["refunds"] and method == "POST":
            return 201, self._create_refund(account, payment, data)
        if parts[3:] == ["refunds"] and method == "GET":
            found = [_public(r) for r in account.refunds.values() if r["paymentId"] == payment["id"]]
            return 200, self._list("refunds", found, f"/v2/payments/{payment['id']}/refunds")
        if parts[3] == "refunds" and len(parts) == 5 and method == "GET":
            refund = account.refunds.get(parts[4])
            if refund is None or refund["paymentId"] != payment["id"]:
                raise MollieFailure(404, f"No refund exists with token {parts[4]}.")
            return 200, _public(refund)
        if parts[3:] == ["chargebacks"] and method == "GET":
            found = [_public(c) for c in account.chargebacks.values() if c["paymentId"] == payment["id"]]
            return 200, self._list("chargebacks", found, f"/v2/payments/{payment['id']}/chargebacks")
        raise MollieFailure(404, "The resource does not exist.")

    def _settlements(self, account: _Account, parts: list[str], query: dict[str, str]) -> dict[str, Any]:
        """`GET /v2/settlements`, `/v2/settlements/{id}` and its `/payments`, `/refunds`,
        `/chargebacks`: lists newest first, paginated with `from` and `limit` (up to 250)."""
        if not parts:
            found = [_public(s) for s in reversed(account.settlements.values())]
            return self._paged("settlements", found, "/v2/settlements", query)
        settlement = account.settlements.get(parts[0])
        if settlement is None:
            raise MollieFailure(404, f"No settlement exists with token {parts[0]}.")
        if len(parts) == 1:
            return _public(settlement)
        kinds = {"payments": account.payments, "refunds": account.refunds, "chargebacks": account.chargebacks}
        if len(parts) != 2 or parts[1] not in kinds:
            raise MollieFailure(404, "The resource does not exist.")
        found = [_public(o) for o in reversed(kinds[parts[1]].values()) if o.get("settlementId") == parts[0]]
        return self._paged(parts[1], found, f"/v2/settlements/{parts[0]}/{parts[1]}", query)

    def _paged(
        self, name: str, found: list[dict[str, Any]], path: str, query: dict[str, str]
    ) -> dict[str, Any]:
        """A page of a Mollie list: from the object `from` names (the first by default), `limit`
        objects (1 to 250, default 50), and `_links.next` to the page that follows, if any."""
        unknown = sorted(set(query) - {"from", "limit"})
        if unknown:
            raise MollieFailure(400, f"Unknown query parameter {unknown[0]}.", unknown[0])
        limit = int(query.get("limit", "50")) if query.get("limit", "50").isdigit() else 0
        if not 1 <= limit <= 250:
            raise MollieFailure(400, "The limit must be between 1 and 250.", "limit")
        start = 0
        if "from" in query:
            start = next((i for i, each in enumerate(found) if each["id"] == query["from"]), -1)
            if start < 0:
                raise MollieFailure(404, f"No {name[:-1]} exists with token {query['from']}.")
        page, rest = found[start : start + limit], found[start + limit :]
        following = self._link(f"{path}?from={rest[0]['id']}&limit={limit}") if rest else None
        return {
            "count": len(page),
            "_embedded": {name: page},
            "_links": {"self": self._link(path), "previous": None, "next": following},
        }

    def _create_payment(self, account: _Account, data: dict[str, Any]) -> dict[str, Any]:
        unknown = sorted(set(data) - _PAYMENT_PARAMS)
        if unknown:
            raise MollieFailure(422, f"Unknown parameter {unknown[0]}.", unknown[0])
        amount = data.get("amount")
        if not isinstance(amount, dict) or set(amount) != {"currency", "value"}:
            raise MollieFailure(422, "The amount is required, as an object of currency and value.", "amount")
        minor = mollie_value(amount["value"], amount["currency"], "amount.value")
        if minor < 1:
            raise MollieFailure(422, "The amount is lower than the minimum.", "amount")
        if not isinstance(data.get("description"), str) or not 0 < len(data["description"]) <= 255:
            raise MollieFailure(422, "The description is invalid.", "description")
        for name in ("redirectUrl", "cancelUrl", "webhookUrl"):
            if name in data and not str(data[name]).startswith(("http://", "https://")):
                raise MollieFailure(422, f"The {name} is invalid.", name)
        if "redirectUrl" not in data:
            raise MollieFailure(422, "The redirect URL is required.", "redirectUrl")
        host = urlsplit(str(data.get("webhookUrl", "https://example.org"))).hostname or ""
        if host == "localhost" or host.startswith("127.") or host == "::1":
            raise MollieFailure(
                422,
                "The webhook URL is invalid because it is unreachable from Mollie's point of view.",
                "webhookUrl",
            )
        method = data.get("method")
        if method is not None and method not in _METHODS:
            raise MollieFailure(422, "The payment method is invalid.", "method")
        if method == "blik" and amount["currency"] != "PLN":
            raise MollieFailure(422, "The payment method is not available for this currency.", "method")
        if "locale" in data and data["locale"] not in _LOCALES:
            raise MollieFailure(422, "The locale is invalid.", "locale")
        if len(json.dumps(data.get("metadata"))) > 1024:
            raise MollieFailure(422, "The metadata is too large.", "metadata")
        payment_id = self._id("tr_")
        payment: dict[str, Any] = {
            "resource": "payment",
            "id": payment_id,
            "mode": "test",
            "createdAt": self.now(),
            "amount": {"currency": amount["currency"], "value": amount["value"]},
            "description": data["description"],
            "method": method,
            "metadata": data.get("metadata"),
            "status": "open",
            "isCancelable": True,
            "expiresAt": self.now(15 * 60),
            "profileId": account.profile,
            "sequenceType": "oneoff",
            "redirectUrl": data["redirectUrl"],
            "cancelUrl": data.get("cancelUrl"),
            "webhookUrl": data.get("webhookUrl"),
            "_links": {
                "self": self._link(f"/v2/payments/{payment_id}"),
                "checkout": {
                    "href": f"{self.url}/checkout/select-method/{payment_id[3:]}",
                    "type": "text/html",
                },
                "dashboard": {"href": f"{self.url}/dashboard/payments/{payment_id}", "type": "text/html"},
                "documentation": {
                    "href": "https://docs.mollie.com/reference/create-payment",
                    "type": "text/html",
                },
            },
            "_minor": minor,
            "_refunded_minor": 0,
        }
        if "locale" in data:
            payment["locale"] = data["locale"]
        account.payments[payment_id] = payment
        return _public(payment)

    def _cancel(self, payment: dict[str, Any]) -> dict[str, Any]:
        if payment["status"] != "open" or not payment.get("isCancelable"):
            raise MollieFailure(422, f"The payment {payment['id']} cannot be canceled.")
        return _public(self._finish(payment["id"], "canceled", "canceledAt"))

    def _create_refund(
        self, account: _Account, payment: dict[str, Any], data: dict[str, Any]
    ) -> dict[str, Any]:
        unknown = sorted(set(data) - _REFUND_PARAMS)
        if unknown:
            raise MollieFailure(422, f"Unknown parameter {unknown[0]}.", unknown[0])
        if payment["status"] != "paid":
            raise MollieFailure(422, f"The payment {payment['id']} is not refundable.")
        amount = data.get("amount")
        if not isinstance(amount, dict) or set(amount) != {"currency", "value"}:
            raise MollieFailure(422, "The amount is required, as an object of currency and value.", "amount")
        if amount["currency"] != payment["amount"]["currency"]:
            raise MollieFailure(422, "The currency differs from the payment's.", "amount.currency")
        minor = mollie_value(amount["value"], amount["currency"], "amount.value")
        if not 0 < minor <= payment["_minor"] - payment["_refunded_minor"]:
            raise MollieFailure(422, "The refund amount exceeds the amount remaining.", "amount")
        refund_id = self._id("re_")
        refund = {
            "resource": "refund",
            "id": refund_id,
            "amount": dict(amount),
            "status": "pending",
            "createdAt": self.now(),
            "description": data.get("description", ""),
            "metadata": data.get("metadata"),
            "paymentId": payment["id"],
            "_links": {
                "self": self._link(f"/v2/payments/{payment['id']}/refunds/{refund_id}"),
                "payment": self._link(f"/v2/payments/{payment['id']}"),
            },
        }
        account.refunds[refund_id] = refund
        payment["_refunded_minor"] += minor
        self._set_remaining(payment)
        payment["_links"]["refunds"] = self._link(f"/v2/payments/{payment['id']}/refunds")
        return _public(refund)

    # Bookkeeping

    def now(self, later_s: float = 0) -> str:
        """Mollie's time format: ISO 8601 with its offset, whole seconds."""
        return datetime.fromtimestamp(int(self.clock() + later_s), UTC).isoformat()

    def _finish(self, payment_id: str, status: str, at: str) -> dict[str, Any]:
        payment = self._payment(payment_id)
        assert payment["status"] in _UNSETTLED, payment["status"]
        payment.update({"status": status, at: self.now()})
        payment.pop("isCancelable", None)
        payment["_links"].pop("checkout", None)
        return payment

    def _set_remaining(self, payment: dict[str, Any]) -> None:
        currency = payment["amount"]["currency"]
        payment["amountRefunded"] = {
            "currency": currency,
            "value": _written(payment["_refunded_minor"], currency),
        }
        payment["amountRemaining"] = {
            "currency": currency,
            "value": _written(payment["_minor"] - payment["_refunded_minor"], currency),
        }

    def _list(self, name: str, found: list[dict[str, Any]], path: str) -> dict[str, Any]:
        return {
            "count": len(found),
            "_embedded": {name: found},
            "_links": {"self": self._link(path), "previous": None, "next": None},
        }

    def _link(self, path: str) -> dict[str, str]:
        return {"href": f"{self.url}{path}", "type": HAL}

    def _id(self, prefix: str) -> str:
        return f"{prefix}{next(self._numbers):04d}{secrets.token_hex(5)}"

    def _payment(self, payment_id: str) -> dict[str, Any]:
        return self._account_of(payment_id).payments[payment_id]

    def _account_of(self, payment_id: str) -> _Account:
        return next(a for a in self._accounts.values() if payment_id in a.payments)


def _public(found: dict[str, Any]) -> dict[str, Any]:
    """An object as the API shows it: no fake-internal fields."""
    return json.loads(
        json.dumps({key: value for key, value in found.items() if not key.startswith("_") or key == "_links"})
    )


def _mollie_app(fake: FakeMollie) -> QuartTrio:
    app = QuartTrio("fake_mollie")

    @app.route("/<path:path>", methods=["GET", "POST", "DELETE", "PATCH"])
    async def api(path: str) -> tuple[str, int, dict[str, str]]:
        body = await request.get_data(as_text=False)
        query = dict(parse_qsl(request.query_string.decode(), keep_blank_values=True))
        headers = {name.lower(): value for name, value in request.headers.items()}
        scripted = fake.take_script(request.method, request.path)
        if scripted is not None and scripted.delay_s:
            await trio.sleep(scripted.delay_s)  # the behaviour scripted: Mollie too slow to answer in time
        status, answer, extra = fake.serve(request.method, request.path, query, headers, body, scripted)
        return json.dumps(answer), status, {"Content-Type": HAL, **extra}

    return app


@asynccontextmanager
async def open_fake_mollie(clock: Callable[[], float] = time.time) -> AsyncIterator[FakeMollie]:
    """A fake Mollie listening on http://127.0.0.1:<free port> until the block exits."""
    fake = FakeMollie(clock)
    async with serving_on_loopback(_mollie_app(fake), "tests.fake_mollie") as port:
        fake.url = f"http://127.0.0.1:{port}"
        yield fake


@pytest.fixture
async def fake_mollie() -> AsyncIterator[FakeMollie]:
    """A running fake Mollie for this test."""
    async with open_fake_mollie() as fake:
        yield fake
