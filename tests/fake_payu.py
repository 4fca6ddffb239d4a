"""A fake PayU on loopback, for the PayU adapter's tests.

A real HTTP server (a QuartTrio app served by hypercorn's trio worker, plain HTTP on 127.0.0.1)
speaking, at the HTTP boundary, the part of PayU's REST API v2.1 payorch uses, as PayU documents it
(https://developers.payu.com/europe/api):

- OAuth: `POST /pl/standard/user/oauth/authorize`, a form (`Content-Type:
  application/x-www-form-urlencoded`, else 401 as PayU says) with `grant_type=client_credentials`,
  `client_id`, `client_secret`: `{"access_token", "token_type": "bearer", "expires_in",
  "grant_type"}`; a pair it does not know: 401 `{"error": "invalid_client", "error_description"}`.
  Tokens live `token_lifetime_s` (PayU: 43199 s); an expired or unknown token, or one `expire_tokens`
  ended, gets 401 `{"error": "invalid_token"}` from the API.
- Errors as `{"status": {"statusCode", "statusDesc", "codeLiteral"?}}`.
- Orders: `POST /api/v2_1/orders` answers 302 with a `Location` and a JSON body `{"status":
  {"statusCode": "SUCCESS"}, "redirectUri", "orderId", "extOrderId"}`; `extOrderId` is unique per
  POS (a second order with one: 400 `ERROR_ORDER_NOT_UNIQUE`); `merchantPosId` must be the token's
  POS; the documented required fields (`customerIp`, `merchantPosId`, `description`,
  `currencyCode`, `totalAmount`, `products`) are checked, and fields payorch does not send are
  refused (400 `ERROR_SYNTAX`: stricter than PayU, so a typo shows). `GET .../orders/{id}` and
  `GET .../orders/ext/{extOrderId}` answer `{"orders": [...], "status"}`, 404 `DATA_NOT_FOUND`
  for an order of another POS. `DELETE .../orders/{id}` cancels an order that is not COMPLETED
  (a COMPLETED one: 400 `ERROR_VALUE_INVALID`, the code this fake assumes: PayU's reference names
  none for it).
- Refunds: `POST .../orders/{id}/refunds` `{"refund": {"description", "amount"?, "extRefundId"?,
  "currencyCode"?}}` of a COMPLETED order, at most what is left (else 400 `OPENPAYU_BUSINESS_ERROR`
  with `codeLiteral` `TRANS_NOT_ENDED` / `NO_BALANCE`); the same `extRefundId` again answers the
  refund it made (PayU's idempotency); `GET .../orders/{id}/refunds` lists them.
- The hosted page (`/pay/?orderId=...`): the test pays or declines the order there (`pay`,
  `decline`, or a form POST with `outcome`), and PayU's side moves on: PENDING, then COMPLETED or
  CANCELED, each status owed as a notification.
- Notifications (`deliver`): each owed document POSTed to the order's `notifyUrl` through an httpx
  client the test gives, signed `OpenPayu-Signature: sender=checkout;signature=<hex>;algorithm=
  <MD5|SHA-256>;content=DOCUMENT` with the POS's second key, sent again until answered 200 (PayU
  retries for days; the fake a few times), optionally twice or in reverse order. Refund
  notifications follow PayU's documented example: they name `refundId`, not `extRefundId`.

Where python-getpaid-payu's simulator (`getpaid_payu/simulator`) differs, this fake follows PayU's
documentation: the simulator gives a token to any client id and secret (PayU: 401 `invalid_client`),
moves every new order to PENDING at once (PayU: NEW until the customer starts paying), takes a
second order with the same `extOrderId` (PayU: `ERROR_ORDER_NOT_UNIQUE`), finalizes a refund at
once (PayU: PENDING, then FINALIZED or CANCELED, notified), answers a cancel it cannot make with 200
and an error body, and signs with SHA-256 only (PayU: MD5 by default, SHA-256 too).

Every request is recorded (`requests`, `requests_to`, `only`) so tests assert exactly what payorch sent.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import secrets
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any
from urllib.parse import parse_qsl

import httpx
import pytest
import trio
from quart import request
from quart_trio import QuartTrio

from tests.loopback import serving_on_loopback

TOKEN_PATH = "/pl/standard/user/oauth/authorize"
ORDERS = "/api/v2_1/orders"
_ORDER_FIELDS = {
    "extOrderId",
    "notifyUrl",
    "continueUrl",
    "customerIp",
    "merchantPosId",
    "description",
    "currencyCode",
    "totalAmount",
    "validityTime",
    "buyer",
    "products",
    "payMethods",
}
_REQUIRED = ("customerIp", "merchantPosId", "description", "currencyCode", "totalAmount", "products")
_REFUND_FIELDS = {"description", "amount", "extRefundId", "currencyCode"}


class PayuFailure(Exception):
    def __init__(self, status: int, code: str, description: str, literal: str | None = None) -> None:
        super().__init__(description)
        body: dict[str, Any] = {"statusCode": code, "statusDesc": description}
        if literal:
            body["codeLiteral"] = literal
        self.status, self.body = status, {"status": body}


@dataclass
class ReceivedPayuRequest:
    method: str
    path: str
    headers: dict[str, str]  # names lowercased
    body: bytes
    json: dict[str, Any] | None
    form: dict[str, str]
    status: int = 0
    answer: dict[str, Any] = field(default_factory=dict)


@dataclass
class PayuPos:
    pos_id: str
    client_id: str
    client_secret: str
    second_key: str
    orders: dict[str, dict[str, Any]] = field(default_factory=dict)


@dataclass(frozen=True)
class Notification:
    url: str
    body: bytes
    second_key: str


class FakePayu:
    url = ""  # set once it listens

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self._clock = clock
        self._poses: dict[str, PayuPos] = {}  # by client_id
        self._tokens: dict[str, tuple[str, float]] = {}  # token -> (client_id, ends at)
        self._ids = itertools.count(1)
        self.requests: list[ReceivedPayuRequest] = []
        self.owed: list[Notification] = []
        self.token_lifetime_s = 43199
        self.token_delay_s = 0.0
        self.token_failures: list[int] = []  # statuses the next token requests are answered with
        self.algorithm = "MD5"
        self.refunds_read_delay_s = 0.0  # how long listing an order's refunds takes

    # The test's side

    def accept_pos(self, pos_id: str, client_id: str, client_secret: str, second_key: str) -> PayuPos:
        pos = PayuPos(pos_id, client_id, client_secret, second_key)
        self._poses[client_id] = pos
        return pos

    def revoke_pos(self, client_id: str) -> None:
        """The POS's client secret is regenerated in PayU's panel: its tokens end, the old one is refused."""
        self._poses[client_id].client_secret = secrets.token_hex(16)
        self._tokens = {token: kept for token, kept in self._tokens.items() if kept[0] != client_id}

    def token_requests(self) -> list[ReceivedPayuRequest]:
        return self.requests_to("POST", TOKEN_PATH)

    def expire_tokens(self) -> None:
        """Every token given so far ends now (PayU's tokens end after `expires_in`)."""
        self._tokens.clear()

    def requests_to(self, method: str, path: str) -> list[ReceivedPayuRequest]:
        return [r for r in self.requests if r.method == method and r.path == path]

    def only(self, method: str, path: str) -> ReceivedPayuRequest:
        (found,) = self.requests_to(method, path)
        return found

    def order(self, order_id: str) -> dict[str, Any]:
        return self._pos_of(order_id).orders[order_id]

    def orders(self) -> list[dict[str, Any]]:
        return [order for pos in self._poses.values() for order in pos.orders.values()]

    def place(self, client_id: str, order: dict[str, Any]) -> dict[str, Any]:
        """An order placed at the POS as if payorch had sent `order` (a call whose answer was lost)."""
        return self._create_order(self._poses[client_id], order)

    def pay(self, order_id: str) -> None:
        """The customer pays on PayU's page: PENDING, then COMPLETED (auto-receive on)."""
        self.move_order(order_id, "PENDING")
        self.move_order(order_id, "COMPLETED")

    def decline(self, order_id: str) -> None:
        """The customer's payment fails on PayU's page: PENDING, then CANCELED."""
        self.move_order(order_id, "PENDING")
        self.move_order(order_id, "CANCELED")

    def finish_refund(self, order_id: str, refund_id: str, status: str = "FINALIZED") -> None:
        """PayU settles a refund (FINALIZED) or gives it up (CANCELED), and owes its notification."""
        order = self.order(order_id)
        refund = next(r for r in order["_refunds"] if r["refundId"] == refund_id)
        refund["status"], refund["statusDateTime"] = status, self.now()
        document = {
            "orderId": order_id,
            "extOrderId": order["extOrderId"],
            "refund": {
                "refundId": refund_id,
                "amount": refund["amount"],
                "currencyCode": refund["currencyCode"],
                "status": status,
                "statusDateTime": refund["statusDateTime"],
                "reason": "refund",
                "reasonDescription": refund["description"],
                "refundDate": refund["statusDateTime"],
            },
        }
        self._owe(order, document)

    def signed(self, body: bytes, second_key: str, algorithm: str | None = None) -> str:
        algorithm = algorithm or self.algorithm
        digest = hashlib.new(
            "md5" if algorithm == "MD5" else "sha256", body + second_key.encode()
        ).hexdigest()
        return f"sender=checkout;signature={digest};algorithm={algorithm};content=DOCUMENT"

    async def deliver(
        self, via: httpx.AsyncClient, *, repeat: int = 1, reverse: bool = False, tries: int = 5
    ) -> list[httpx.Response]:
        """POST every owed notification (`repeat` times each; last owed first when `reverse`), each
        sent again until answered 200, at most `tries` times; the answers, in order."""
        owed, self.owed = self.owed, []
        answers = []
        for notification in reversed(owed) if reverse else owed:
            for _ in range(repeat):
                for _ in range(tries):
                    answer = await via.post(
                        notification.url,
                        content=notification.body,
                        headers={
                            "Content-Type": "application/json",
                            "OpenPayu-Signature": self.signed(notification.body, notification.second_key),
                        },
                    )
                    answers.append(answer)
                    if answer.status_code == 200:
                        break
        return answers

    def now(self) -> str:
        return datetime.fromtimestamp(self._clock(), UTC).isoformat(timespec="milliseconds")

    # The API

    def serve(
        self, method: str, path: str, headers: dict[str, str], body: bytes
    ) -> tuple[int, dict[str, Any], dict[str, str]]:
        try:
            found = json.loads(body) if body.strip() else None
        except ValueError:
            found = None
        form = dict(parse_qsl(body.decode(errors="replace"))) if method == "POST" and found is None else {}
        received = ReceivedPayuRequest(
            method, path, headers, body, found if isinstance(found, dict) else None, form
        )
        self.requests.append(received)
        try:
            status, answer, extra = self._route(received)
        except PayuFailure as failure:
            status, answer, extra = failure.status, failure.body, {}
        received.status, received.answer = status, answer
        return status, answer, extra

    def _route(self, received: ReceivedPayuRequest) -> tuple[int, dict[str, Any], dict[str, str]]:
        if received.path == TOKEN_PATH and received.method == "POST":
            if self.token_failures:
                raise PayuFailure(self.token_failures.pop(0), "SERVICE_NOT_AVAILABLE", "Try again later")
            return 200, self._token(received), {}
        pos = self._authorized(received)
        method, parts = received.method, received.path.removeprefix(ORDERS).strip("/").split("/")
        if not received.path.startswith(ORDERS):
            raise PayuFailure(404, "DATA_NOT_FOUND", "No such resource")
        if method == "POST" and parts == [""]:
            order = self._create_order(pos, received.json or {}, check=True)
            answer = {
                "status": {"statusCode": "SUCCESS"},
                "redirectUri": order["_redirectUri"],
                "orderId": order["orderId"],
                "extOrderId": order["extOrderId"],
            }
            return 302, answer, {"Location": order["_redirectUri"]}
        if method == "GET" and len(parts) == 2 and parts[0] == "ext":
            found = next((o for o in pos.orders.values() if o["extOrderId"] == parts[1]), None)
            return 200, self._orders_answer(found), {}
        order = pos.orders.get(parts[0])
        if order is None:
            raise PayuFailure(404, "DATA_NOT_FOUND", "Could not find order")
        if method == "GET" and len(parts) == 1:
            return 200, self._orders_answer(order), {}
        if method == "DELETE" and len(parts) == 1:
            return 200, self._cancel(order), {}
        if parts[1:] == ["refunds"] and method == "POST":
            return 200, self._refund(order, received.json or {}), {}
        if parts[1:] == ["refunds"] and method == "GET":
            return 200, {"refunds": [_public(r) for r in order["_refunds"]]}, {}
        raise PayuFailure(404, "DATA_NOT_FOUND", "No such resource")

    def _token(self, received: ReceivedPayuRequest) -> dict[str, Any]:
        if not received.headers.get("content-type", "").startswith("application/x-www-form-urlencoded"):
            raise PayuFailure(401, "invalid_request", "form expected")  # PayU: 401 without the form type
        form = received.form
        pos = self._poses.get(form.get("client_id", ""))
        if (
            form.get("grant_type") != "client_credentials"
            or pos is None
            or (not secrets.compare_digest(pos.client_secret, form.get("client_secret", "")))
        ):
            raise _oauth_failure("invalid_client", "Bad client credentials")
        token = secrets.token_hex(16)
        self._tokens[token] = (pos.client_id, self._clock() + self.token_lifetime_s)
        return {
            "access_token": token,
            "token_type": "bearer",
            "expires_in": self.token_lifetime_s,
            "grant_type": "client_credentials",
        }

    def _authorized(self, received: ReceivedPayuRequest) -> PayuPos:
        scheme, _, token = received.headers.get("authorization", "").partition(" ")
        kept = self._tokens.get(token) if scheme.lower() == "bearer" else None
        if kept is None or kept[1] <= self._clock():
            raise _oauth_failure("invalid_token", "Access token expired or unknown")
        return self._poses[kept[0]]

    def _create_order(self, pos: PayuPos, data: dict[str, Any], *, check: bool = False) -> dict[str, Any]:
        if check:
            unknown = sorted(set(data) - _ORDER_FIELDS)
            if unknown:
                raise PayuFailure(400, "ERROR_SYNTAX", f"Unknown fields: {', '.join(unknown)}")
            missing = [name for name in _REQUIRED if not data.get(name)]
            if missing:
                raise PayuFailure(400, "ERROR_VALUE_MISSING", f"Missing required field: {missing[0]}")
            if data["merchantPosId"] != pos.pos_id:
                raise PayuFailure(400, "ERROR_VALUE_INVALID", "Invalid merchantPosId")
            if not str(data["totalAmount"]).isdigit():
                raise PayuFailure(400, "ERROR_VALUE_INVALID", "Invalid totalAmount")
        ext_order_id = data.get("extOrderId")
        if ext_order_id and any(o["extOrderId"] == ext_order_id for o in pos.orders.values()):
            raise PayuFailure(400, "ERROR_ORDER_NOT_UNIQUE", "Order with the given extOrderId already exists")
        order_id = f"{secrets.token_hex(4).upper()}{next(self._ids):06d}GUEST000P01"
        order = {
            "orderId": order_id,
            "extOrderId": ext_order_id,
            "orderCreateDate": self.now(),
            "notifyUrl": data.get("notifyUrl"),
            "customerIp": data.get("customerIp"),
            "merchantPosId": pos.pos_id,
            "validityTime": data.get("validityTime"),
            "description": data.get("description"),
            "currencyCode": data.get("currencyCode"),
            "totalAmount": str(data.get("totalAmount")),
            "buyer": data.get("buyer"),
            "products": data.get("products"),
            "status": "NEW",
            "_continueUrl": data.get("continueUrl"),
            "_payMethods": data.get("payMethods"),
            "_redirectUri": f"{self.url}/pay/?orderId={order_id}&token={secrets.token_hex(8)}",
            "_refunds": [],
        }
        pos.orders[order_id] = order
        return order

    def _orders_answer(self, order: dict[str, Any] | None) -> dict[str, Any]:
        if order is None:
            raise PayuFailure(404, "DATA_NOT_FOUND", "Could not find order")
        return {
            "orders": [_public(order)],
            "status": {"statusCode": "SUCCESS", "statusDesc": "Request processing successful"},
        }

    def _cancel(self, order: dict[str, Any]) -> dict[str, Any]:
        if order["status"] == "COMPLETED":
            raise PayuFailure(400, "ERROR_VALUE_INVALID", "Order status does not allow cancellation")
        if order["status"] != "CANCELED":
            self.move_order(order["orderId"], "CANCELED")
        return {
            "orderId": order["orderId"],
            "extOrderId": order["extOrderId"],
            "status": {"statusCode": "SUCCESS"},
        }

    def _refund(self, order: dict[str, Any], data: dict[str, Any]) -> dict[str, Any]:
        asked = data.get("refund")
        if not isinstance(asked, dict) or set(asked) - _REFUND_FIELDS or not asked.get("description"):
            raise PayuFailure(400, "ERROR_SYNTAX", "Invalid refund request")
        ext_refund_id = asked.get("extRefundId")
        earlier = next(
            (r for r in order["_refunds"] if ext_refund_id and r["extRefundId"] == ext_refund_id), None
        )
        if earlier is not None:
            if asked.get("amount", earlier["amount"]) != earlier["amount"]:
                raise PayuFailure(
                    400, "OPENPAYU_BUSINESS_ERROR", "extRefundId reused", "REFUND_IDEMPOTENCY_MISMATCH"
                )
            return {
                "orderId": order["orderId"],
                "refund": _public(earlier),
                "status": {"statusCode": "SUCCESS"},
            }
        if order["status"] != "COMPLETED":
            raise PayuFailure(400, "OPENPAYU_BUSINESS_ERROR", "Transaction not ended", "TRANS_NOT_ENDED")
        refunded = sum(int(r["amount"]) for r in order["_refunds"] if r["status"] != "CANCELED")
        left = int(order["totalAmount"]) - refunded
        amount = int(asked.get("amount", left))
        if amount <= 0 or amount > left:
            raise PayuFailure(400, "OPENPAYU_BUSINESS_ERROR", "Lack of funds in account", "NO_BALANCE")
        refund = {
            "refundId": str(5_000_000_000 + next(self._ids)),
            "extRefundId": ext_refund_id,
            "amount": str(amount),
            "currencyCode": order["currencyCode"],
            "description": asked["description"],
            "creationDateTime": self.now(),
            "status": "PENDING",
            "statusDateTime": self.now(),
        }
        order["_refunds"].append(refund)
        return {
            "orderId": order["orderId"],
            "refund": _public(refund),
            "status": {"statusCode": "SUCCESS", "statusDesc": "Refund queued for processing"},
        }

    def move_order(self, order_id: str, status: str) -> None:
        """PayU moves the order to `status`, and owes its notification."""
        order = self.order(order_id)
        order["status"] = status
        document = {
            "order": {**_public(order), "payMethod": {"type": "PBL"}},
            "localReceiptDateTime": self.now(),
            "properties": [{"name": "PAYMENT_ID", "value": str(next(self._ids))}],
        }
        self._owe(order, document)

    def _owe(self, order: dict[str, Any], document: dict[str, Any]) -> None:
        if order["notifyUrl"]:
            pos = self._pos_of(order["orderId"])
            self.owed.append(Notification(order["notifyUrl"], json.dumps(document).encode(), pos.second_key))

    def _pos_of(self, order_id: str) -> PayuPos:
        return next(pos for pos in self._poses.values() if order_id in pos.orders)


def _oauth_failure(error: str, description: str) -> PayuFailure:
    failure = PayuFailure(401, error, description)
    failure.body = {"error": error, "error_description": description}
    return failure


def _public(found: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in found.items() if not key.startswith("_") and value is not None}


def _payu_app(fake: FakePayu) -> QuartTrio:
    app = QuartTrio("fake_payu")

    @app.route("/pay/", methods=["GET", "POST"])
    async def page() -> tuple[str, int, dict[str, str]]:
        """PayU's hosted page: shows the order; a POST with `outcome=pay|decline` settles it and
        sends the customer to the order's `continueUrl`."""
        if request.method == "GET":
            order = fake.order(request.args.get("orderId", ""))
            return f"<h1>PayU</h1><p>{order['description']}</p>", 200, {"Content-Type": "text/html"}
        form = await request.form
        order = fake.order(form.get("orderId", ""))
        (fake.pay if form.get("outcome") == "pay" else fake.decline)(order["orderId"])
        return "", 302, {"Location": order["_continueUrl"]}

    @app.route("/<path:path>", methods=["GET", "POST", "DELETE"])
    async def api(path: str) -> tuple[str, int, dict[str, str]]:
        body = await request.get_data(as_text=False)
        headers = {name.lower(): value for name, value in request.headers.items()}
        if request.path == TOKEN_PATH and fake.token_delay_s:
            await trio.sleep(fake.token_delay_s)
        status, answer, extra = fake.serve(request.method, request.path, headers, body)
        if request.method == "GET" and request.path.endswith("/refunds") and fake.refunds_read_delay_s:
            await trio.sleep(fake.refunds_read_delay_s)
        return json.dumps(answer), status, {"Content-Type": "application/json", **extra}

    return app


@asynccontextmanager
async def open_fake_payu(clock: Callable[[], float] = time.time) -> AsyncIterator[FakePayu]:
    fake = FakePayu(clock)
    async with serving_on_loopback(_payu_app(fake), "tests.fake_payu") as port:
        fake.url = f"http://127.0.0.1:{port}"
        yield fake


@pytest.fixture
async def fake_payu() -> AsyncIterator[FakePayu]:
    """A running fake PayU for this test."""
    async with open_fake_payu() as fake:
        yield fake
