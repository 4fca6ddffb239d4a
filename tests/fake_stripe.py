"""A fake Stripe on loopback, for the Stripe adapter's tests.

A real HTTP server (a QuartTrio app served by hypercorn's trio worker, plain HTTP on 127.0.0.1) that
speaks, at the HTTP boundary, the part of Stripe's API payorch uses, the way Stripe documents it:

- bodies are `application/x-www-form-urlencoded` with nested keys (`line_items[0][price_data][currency]`),
  parsed back into objects and lists;
- `Authorization: Bearer <secret key>`: keys the test accepted; any other key gets 401 with Stripe's
  error body; the key names the account (objects of one account are invisible to another);
- `Idempotency-Key` on POSTs, per account: the same key with the same parameters replays the first
  answer, its body byte for byte even when the object changed since (header `Idempotent-Replayed:
  true`), with other parameters it is 400 `idempotency_error`;
- Stripe's objects (`balance`, `webhook_endpoint`, `checkout.session`, `payment_intent`, `charge`,
  `refund`, `dispute`, `balance_transaction`, `payout`, `event`, `list`) with Stripe's id prefixes,
  and Stripe's error shape `{"error": {"type", "code", "message", "param"}}` (400
  `parameter_missing`, `parameter_unknown`, `resource_missing`, `amount_too_large`...);
- scripted failures (`fail_next`): an error status, or an answer delayed past the caller's deadline.

The test moves Stripe's side along (`pay`, `decline`, `complete_delayed` and `pay_delayed` for a
delayed notification payment method, `expire`, `settle_refund`, `lose_dispute`), each giving the
event Stripe would send, and `deliver`s it: signed `Stripe-Signature: t=<unix>,v1=<hex
HMAC-SHA256 of "{t}.{payload}">` with each subscribed endpoint's `whsec_` secret, POSTed to the
endpoint's URL through an httpx client the test gives (an ASGI transport to payorch's app).

Money moves as on Stripe: a charge that succeeds (a paid checkout, or `charge` outside any
checkout) makes a `charge` balance transaction with Stripe's fee (`fee_of`, `fee_details`), available
`available_after_days` later at midnight UTC; a refund debits one when created (`refund`) and credits
it back if it fails (`refund_failure`); `pay_out` makes an automatic payout of transactions, which
`GET /v1/balance_transactions?payout=po_...` lists. Lists page as Stripe's do: newest first,
`limit` up to 100, `starting_after`, `has_more`; `created` and `arrival_date` bounds; `expand[]`.

Every request is recorded (`requests`, `requests_to`, `only`) so tests assert exactly what payorch sent.
A Checkout Session's hosted page, for a browser, is served too (tests/fake_stripe_checkout.py).
Stripe's clock (`created`, `expires_at` bounds, signature timestamps) is `clock`, `time.time` unless the
test sets another, e.g. one that stands still.

    async def test_...(fake_stripe: FakeStripe) -> None:
        fake_stripe.accept_key("sk_test_shop")
        ...  # link Stripe, create a session through payorch
        sent = fake_stripe.only("POST", "/v1/checkout/sessions")
        assert sent.form["mode"] == "payment"
        await fake_stripe.deliver(fake_stripe.pay(sent.answer["id"]), via=asgi_client)
"""

from __future__ import annotations

import hashlib
import hmac
import itertools
import json
import re
import secrets
import time
from collections import deque
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl

import httpx
import pytest
import trio
from quart import request
from quart_trio import QuartTrio

from tests.fake_stripe_checkout import hosted_checkout
from tests.loopback import serving_on_loopback

API_VERSION = "2026-10-28.endive"  # what the fake answers in and signs events as
CHECKOUT_MIN_LIFETIME_S = 30 * 60
CHECKOUT_MAX_LIFETIME_S = 24 * 60 * 60
_CHECKOUT_PARAMS = {
    "mode",
    "line_items",
    "allowed_payment_method_types",
    "client_reference_id",
    "metadata",
    "payment_intent_data",
    "success_url",
    "cancel_url",
    "expires_at",
    "customer_email",
    "locale",
}
_REFUND_PARAMS = {"payment_intent", "charge", "amount", "reason", "metadata"}
_ENDPOINT_PARAMS = {"url", "enabled_events", "api_version", "description", "metadata"}
_BALANCE_LIST_PARAMS = {
    "created",
    "currency",
    "ending_before",
    "expand",
    "limit",
    "payout",
    "source",
    "starting_after",
    "type",
}
_PAYOUT_LIST_PARAMS = {
    "arrival_date",
    "created",
    "destination",
    "ending_before",
    "expand",
    "limit",
    "starting_after",
    "status",
}
_REPORTING_CATEGORIES = {
    "charge": "charge",
    "payment": "charge",
    "refund": "refund",
    "refund_failure": "refund_failure",
    "payout": "payout",
    "stripe_fee": "fee",
    "adjustment": "other_adjustment",
}


class StripeFailure(Exception):
    """An answer in Stripe's error shape."""

    def __init__(
        self, status: int, kind: str, message: str, code: str | None = None, param: str | None = None
    ) -> None:
        super().__init__(message)
        self.status, self.kind, self.message, self.code, self.param = status, kind, message, code, param

    def body(self) -> dict[str, Any]:
        error: dict[str, Any] = {"type": self.kind, "message": self.message}
        if self.code:
            error["code"] = self.code
        if self.param:
            error["param"] = self.param
        return {"error": error}


@dataclass(frozen=True)
class ScriptedFailure:
    """How the fake answers one matching request instead of serving it: `status` with `body` and
    `headers` after `delay_s`, or (`status=None`) the real answer, at once (so that a test scripts
    a failure of the second such request, not the first)."""

    status: int | None = 500
    delay_s: float = 0.0
    body: dict[str, Any] = field(
        default_factory=lambda: {"error": {"type": "api_error", "message": "An unknown error occurred."}}
    )
    headers: dict[str, str] = field(default_factory=dict)


# Stripe's answer when an account sends too many requests (docs.stripe.com/rate-limits,
# docs.stripe.com/error-codes#rate-limit).
RATE_LIMITED = ScriptedFailure(
    429,
    body={
        "error": {
            "type": "invalid_request_error",
            "code": "rate_limit",
            "doc_url": "https://stripe.com/docs/error-codes/rate-limit",
            "message": "Request rate limit exceeded. Learn more about rate limits here "
            "https://stripe.com/docs/rate-limits.",
        }
    },
)


@dataclass
class ReceivedStripeRequest:
    """A request as the fake received it, and how it answered."""

    method: str
    path: str
    query: dict[str, Any]
    headers: dict[str, str]  # names lowercased
    body: bytes
    form: dict[str, Any]  # the body parsed, nested keys rebuilt
    status: int = 0
    answer: dict[str, Any] = field(default_factory=dict)

    @property
    def api_key(self) -> str | None:
        scheme, _, key = self.headers.get("authorization", "").partition(" ")
        return key if scheme == "Bearer" else None


def parse_form(text: str) -> dict[str, Any]:
    """A Stripe form body as the object it encodes: `a[b][0][c]=v` -> {"a": {"b": [{"c": "v"}]}}."""
    root: dict[str, Any] = {}
    for key, value in parse_qsl(text, keep_blank_values=True):
        found = re.fullmatch(r"([^\[\]]+)((?:\[[^\[\]]*\])*)", key)
        if found is None:
            raise StripeFailure(400, "invalid_request_error", f"Invalid parameter name: {key}")
        path = [found.group(1), *re.findall(r"\[([^\[\]]*)\]", found.group(2))]
        node = root
        for part in path[:-1]:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise StripeFailure(400, "invalid_request_error", f"Invalid parameter: {key}")
        node[path[-1]] = value
    return _lists(root)


def _lists(node: Any) -> Any:
    if not isinstance(node, dict):
        return node
    converted = {key: _lists(value) for key, value in node.items()}
    if converted and all(key.isdigit() for key in converted):
        return [converted[key] for key in sorted(converted, key=int)]
    return converted


def signature_header(secret: str, payload: bytes, timestamp: int) -> str:
    """Stripe's `Stripe-Signature` for `payload` sent at `timestamp`."""
    signed = f"{timestamp}.".encode() + payload
    return f"t={timestamp},v1={hmac.new(secret.encode(), signed, hashlib.sha256).hexdigest()}"


def _missing(param: str) -> StripeFailure:
    return StripeFailure(
        400, "invalid_request_error", f"Missing required param: {param}.", "parameter_missing", param
    )


def _unknown(params: dict[str, Any], allowed: set[str]) -> None:
    for name in params:
        if name not in allowed:
            raise StripeFailure(
                400, "invalid_request_error", f"Received unknown parameter: {name}", "parameter_unknown", name
            )


def _integer(value: Any, param: str, minimum: int = 0) -> int:
    if not isinstance(value, str) or not value.isdigit() or int(value) < minimum:
        raise StripeFailure(
            400, "invalid_request_error", f"Invalid integer: {value}", "parameter_invalid_integer", param
        )
    return int(value)


def _no_such(kind: str, object_id: str, param: str | None = None) -> StripeFailure:
    return StripeFailure(
        404, "invalid_request_error", f"No such {kind}: '{object_id}'", "resource_missing", param or "id"
    )


@dataclass
class _Account:
    id: str
    endpoints: dict[str, dict[str, Any]] = field(default_factory=dict)
    checkouts: dict[str, dict[str, Any]] = field(default_factory=dict)
    payment_intents: dict[str, dict[str, Any]] = field(default_factory=dict)
    refunds: dict[str, dict[str, Any]] = field(default_factory=dict)
    charges: dict[str, dict[str, Any]] = field(default_factory=dict)
    # Oldest first; listed newest first, as Stripe lists.
    balance_transactions: dict[str, dict[str, Any]] = field(default_factory=dict)
    payouts: dict[str, dict[str, Any]] = field(default_factory=dict)
    # By Idempotency-Key: the first request's (method, path, body), and its answer's status and JSON body.
    idempotent: dict[str, tuple[tuple[str, str, bytes], int, str]] = field(default_factory=dict)


class FakeStripe:
    """Stripe's state, the requests payorch made, and what the test scripted."""

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self.url = ""  # set once the server is bound
        self.clock = clock  # Stripe's time, in Unix seconds
        # Where Checkout Sessions' pages are (their `url`): Stripe's, or the fake's own `url`, which
        # serves them (tests/fake_stripe_checkout.py) for a test that drives a browser there.
        self.checkout_host = "https://checkout.stripe.com"
        self.requests: list[ReceivedStripeRequest] = []
        self.events: list[dict[str, Any]] = []
        self._accounts: dict[str, _Account] = {}  # by secret key
        self._event_accounts: dict[str, _Account] = {}  # by event id
        self._script: deque[tuple[str, str, ScriptedFailure]] = deque()
        self._numbers = itertools.count(1)
        # Stripe's fee for a payment of `amount` minor units (2.9% + 30, Stripe's standard card
        # pricing in the US), and how many days after it the money is available.
        self.fee_of: Callable[[int], int] = lambda amount: round(amount * 0.029) + 30
        self.available_after_days = 2

    # What the test sets up and reads

    def accept_key(self, api_key: str, account: str | None = None) -> str:
        """Accept `api_key` for `account` (a new account by default); returns the account id."""
        account_id = account or self._id("acct_")
        existing = next((a for a in self._accounts.values() if a.id == account_id), None)
        self._accounts[api_key] = existing or _Account(account_id)
        return account_id

    def revoke_key(self, api_key: str) -> None:
        """Stop accepting `api_key` (rolled, or the account deactivated): from now on it gets 401."""
        del self._accounts[api_key]

    def account_of(self, api_key: str) -> str:
        """The id of the account `api_key` belongs to."""
        return self._accounts[api_key].id

    def fail_next(self, method: str, path: str, *failures: ScriptedFailure | int) -> None:
        """Answer the next requests to `method path` (path prefix) with `failures`, in order."""
        for failure in failures:
            self._script.append(
                (method, path, ScriptedFailure(failure) if isinstance(failure, int) else failure)
            )

    def requests_to(self, method: str, path: str) -> list[ReceivedStripeRequest]:
        return [r for r in self.requests if r.method == method and r.path == path]

    def only(self, method: str, path: str) -> ReceivedStripeRequest:
        """The one request to `method path`; fails the test unless there was exactly one."""
        found = self.requests_to(method, path)
        assert len(found) == 1, f"{len(found)} requests to {method} {path}: {[r.form for r in found]}"
        return found[0]

    def endpoints(self, api_key: str) -> list[dict[str, Any]]:
        """The account's webhook endpoints, secrets included, oldest first."""
        return list(self._accounts[api_key].endpoints.values())

    def checkout(self, checkout_id: str) -> dict[str, Any]:
        return self._find("checkouts", checkout_id)

    def payment_intent(self, payment_intent_id: str) -> dict[str, Any]:
        return self._find("payment_intents", payment_intent_id)

    # Stripe's side moving on: each gives the event Stripe sends

    def pay(self, checkout_id: str) -> dict[str, Any]:
        """The customer pays the checkout: its PaymentIntent succeeds; `checkout.session.completed`."""
        checkout = self._find("checkouts", checkout_id)
        assert checkout["status"] == "open", f"a {checkout['status']} Checkout Session cannot be paid"
        account = self._account_of("checkouts", checkout_id)
        intent = self._attempted(account, checkout, "succeeded")
        checkout.update(status="complete", payment_status="paid", payment_intent=intent["id"])
        return self._event(account, "checkout.session.completed", checkout)

    def complete_delayed(self, checkout_id: str) -> dict[str, Any]:
        """The customer completes the checkout with a delayed notification payment method (a bank
        debit, a voucher): the session is `complete` and still `unpaid`, its PaymentIntent
        `processing`; `checkout.session.completed`. The outcome follows as
        `checkout.session.async_payment_succeeded` (`pay_delayed`) or `_failed`."""
        checkout = self._find("checkouts", checkout_id)
        assert checkout["status"] == "open", f"a {checkout['status']} Checkout Session cannot be completed"
        account = self._account_of("checkouts", checkout_id)
        intent = self._attempted(account, checkout, "processing")
        checkout.update(status="complete", payment_status="unpaid", payment_intent=intent["id"], url=None)
        return self._event(account, "checkout.session.completed", checkout)

    def _attempted(self, account: _Account, checkout: dict[str, Any], status: str) -> dict[str, Any]:
        """The checkout's PaymentIntent (the declined attempt's, if any) after a payment method was
        confirmed on it: `succeeded` (the whole amount received) or `processing` (none yet)."""
        intent = {
            "id": checkout["payment_intent"] or self._id("pi_"),
            "object": "payment_intent",
            "amount": checkout["amount_total"],
            "amount_received": checkout["amount_total"] if status == "succeeded" else 0,
            "currency": checkout["currency"],
            "status": status,
            "latest_charge": self._id("ch_"),
            "metadata": dict(checkout["_payment_intent_metadata"]),
            "refunded": 0,
            "last_payment_error": None,
        }
        account.payment_intents[intent["id"]] = intent
        if status == "succeeded":
            self._charged(account, intent, checkout["payment_method_types"][0])
        return intent

    def pay_delayed(self, checkout_id: str) -> dict[str, Any]:
        """The delayed payment of a completed checkout succeeds: the session `paid`, its
        PaymentIntent `succeeded`; `checkout.session.async_payment_succeeded`."""
        checkout = self._find("checkouts", checkout_id)
        assert (checkout["status"], checkout["payment_status"]) == ("complete", "unpaid")
        account = self._account_of("checkouts", checkout_id)
        intent = account.payment_intents[checkout["payment_intent"]]
        intent.update(status="succeeded", amount_received=intent["amount"])
        self._charged(account, intent, checkout["payment_method_types"][0])
        checkout["payment_status"] = "paid"
        return self._event(account, "checkout.session.async_payment_succeeded", checkout)

    def decline(self, checkout_id: str, decline_code: str = "insufficient_funds") -> dict[str, Any]:
        """A payment attempt on the checkout is declined: `payment_intent.payment_failed`. The
        customer stays on the open checkout; its PaymentIntent (the one Checkout made for the
        attempt, again for a later one) keeps the decline as `last_payment_error`."""
        checkout = self._find("checkouts", checkout_id)
        assert checkout["status"] == "open", f"a {checkout['status']} Checkout Session cannot be declined"
        account = self._account_of("checkouts", checkout_id)
        intent = account.payment_intents.get(checkout["payment_intent"] or "") or {
            "id": self._id("pi_"),
            "object": "payment_intent",
            "amount": checkout["amount_total"],
            "amount_received": 0,
            "currency": checkout["currency"],
            "metadata": dict(checkout["_payment_intent_metadata"]),
            "refunded": 0,
        }
        intent.update(
            status="requires_payment_method",
            last_payment_error={
                "type": "card_error",
                "code": "card_declined",
                "decline_code": decline_code,
            },
        )
        account.payment_intents[intent["id"]] = intent
        checkout["payment_intent"] = intent["id"]
        return self._event(account, "payment_intent.payment_failed", intent)

    def expire(self, checkout_id: str) -> dict[str, Any]:
        """The checkout expires unpaid: `checkout.session.expired`."""
        checkout = self._find("checkouts", checkout_id)
        checkout.update(status="expired")
        return self._event(self._account_of("checkouts", checkout_id), "checkout.session.expired", checkout)

    def settle_refund(
        self, refund_id: str, status: str = "succeeded", failure_reason: str | None = None
    ) -> dict[str, Any]:
        """The refund reaches `status`: `refund.updated`, or `refund.failed` when it failed."""
        refund = self._find("refunds", refund_id)
        account = self._account_of("refunds", refund_id)
        refund.update(status=status, failure_reason=failure_reason)
        if status in ("failed", "canceled"):
            intent = account.payment_intents[refund["payment_intent"]]
            intent["refunded"] -= refund["amount"]
            self._transaction(
                account, "refund_failure", refund["amount"], refund["currency"], refund["id"], fee=0
            )
        return self._event(account, "refund.failed" if status == "failed" else "refund.updated", refund)

    def charge_refunded(self, payment_intent_id: str) -> dict[str, Any]:
        """`charge.refunded` for the PaymentIntent's charge: its refunded total, not its refunds
        (Charges no longer list them since API version 2022-11-15)."""
        intent = self._find("payment_intents", payment_intent_id)
        charge = {
            "id": intent["latest_charge"],
            "object": "charge",
            "amount": intent["amount"],
            "amount_captured": intent["amount_received"],
            "amount_refunded": intent["refunded"],
            "refunded": intent["refunded"] == intent["amount_received"],
            "currency": intent["currency"],
            "payment_intent": payment_intent_id,
            "status": "succeeded",
            "metadata": {},
        }
        return self._event(self._account_of("payment_intents", payment_intent_id), "charge.refunded", charge)

    def refund_created(self, refund_id: str) -> dict[str, Any]:
        """`refund.created` for the refund as it is now."""
        return self._event(
            self._account_of("refunds", refund_id), "refund.created", self._find("refunds", refund_id)
        )

    def lose_dispute(self, payment_intent_id: str, metadata: dict[str, str] | None = None) -> dict[str, Any]:
        """The customer's bank wins a dispute of the payment: `charge.dispute.closed`, status lost."""
        intent = self._find("payment_intents", payment_intent_id)
        dispute = {
            "id": self._id("dp_"),
            "object": "dispute",
            "amount": intent["amount"],
            "currency": intent["currency"],
            "charge": intent["latest_charge"],
            "payment_intent": payment_intent_id,
            "reason": "fraudulent",
            "status": "lost",
            "metadata": metadata or {},
        }
        return self._event(
            self._account_of("payment_intents", payment_intent_id), "charge.dispute.closed", dispute
        )

    # Money moving: balance transactions and payouts

    def charge(
        self, api_key: str, amount: int, currency: str = "pln", method: str = "card"
    ) -> dict[str, Any]:
        """A payment made on the account outside any Checkout Session payorch made (another
        integration, the dashboard): a succeeded PaymentIntent, its charge and their balance
        transaction. No event is given: payorch never hears of it."""
        account = self._accounts[api_key]
        intent = {
            "id": self._id("pi_"),
            "object": "payment_intent",
            "amount": amount,
            "amount_received": amount,
            "currency": currency,
            "status": "succeeded",
            "latest_charge": self._id("ch_"),
            "metadata": {},
            "refunded": 0,
            "last_payment_error": None,
        }
        account.payment_intents[intent["id"]] = intent
        self._charged(account, intent, method)
        return intent

    def add_transaction(
        self,
        api_key: str,
        transaction_type: str,
        amount: int,
        currency: str = "pln",
        *,
        source: str | None = None,
        fee: int = 0,
        reporting_category: str | None = None,
    ) -> dict[str, Any]:
        """A balance transaction of any other kind (an `adjustment`, a `stripe_fee`...)."""
        return self._transaction(
            self._accounts[api_key], transaction_type, amount, currency, source, fee, reporting_category
        )

    def transaction_of(self, source: str) -> dict[str, Any]:
        """The (first) balance transaction of `source` (a charge `ch_...`, a refund `re_...`)."""
        return next(
            t
            for a in self._accounts.values()
            for t in a.balance_transactions.values()
            if t["source"] == source
        )

    def pay_out(
        self, api_key: str, transaction_ids: list[str] | None = None, *, amount: int | None = None
    ) -> dict[str, Any]:
        """An automatic payout of `transaction_ids` (default: every transaction not paid out yet),
        arriving on the day the last of them is available; its amount the sum of their nets unless
        the test says otherwise (a payout that does not add up). Its own `payout` transaction
        debits the balance."""
        account = self._accounts[api_key]
        carried = [
            account.balance_transactions[t]
            for t in transaction_ids
            or [
                t["id"]
                for t in account.balance_transactions.values()
                if t["type"] != "payout" and not t["_payout"]
            ]
        ]
        assert carried, "nothing to pay out"
        payout = {
            "id": self._id("po_"),
            "object": "payout",
            "amount": sum(t["net"] for t in carried) if amount is None else amount,
            "currency": carried[0]["currency"],
            "arrival_date": max(t["available_on"] for t in carried),
            "automatic": True,
            "method": "standard",
            "status": "paid",
            "type": "bank_account",
            "created": self.now(),
            "livemode": False,
        }
        account.payouts[payout["id"]] = payout
        for transaction in carried:
            transaction["_payout"] = payout["id"]
        payout["balance_transaction"] = self._transaction(
            account, "payout", -payout["amount"], payout["currency"], payout["id"], fee=0
        )["id"]
        return payout

    def _charged(self, account: _Account, intent: dict[str, Any], method: str) -> None:
        """The PaymentIntent's charge succeeded: the charge, and its balance transaction with
        Stripe's fee."""
        charge = {
            "id": intent["latest_charge"],
            "object": "charge",
            "amount": intent["amount"],
            "amount_captured": intent["amount"],
            "currency": intent["currency"],
            "payment_intent": intent["id"],
            "paid": True,
            "status": "succeeded",
            "payment_method_details": {"type": method},
            "created": self.now(),
        }
        account.charges[charge["id"]] = charge
        fee = self.fee_of(intent["amount"])
        charge["balance_transaction"] = self._transaction(
            account, "charge", intent["amount"], intent["currency"], charge["id"], fee
        )["id"]

    def _transaction(
        self,
        account: _Account,
        transaction_type: str,
        amount: int,
        currency: str,
        source: str | None,
        fee: int,
        reporting_category: str | None = None,
    ) -> dict[str, Any]:
        """A balance transaction created now, available `available_after_days` later (midnight
        UTC, as Stripe's `available_on` is)."""
        now = self.now()
        available_on = (now // 86400 + (self.available_after_days if amount > 0 else 0)) * 86400
        transaction = {
            "id": self._id("txn_"),
            "object": "balance_transaction",
            "amount": amount,
            "available_on": max(available_on, now // 86400 * 86400),
            "created": now,
            "currency": currency,
            "description": None,
            "exchange_rate": None,
            "fee": fee,
            "fee_details": [
                {
                    "amount": fee,
                    "application": None,
                    "currency": currency,
                    "description": "Stripe processing fees",
                    "type": "stripe_fee",
                }
            ]
            if fee
            else [],
            "net": amount - fee,
            "reporting_category": reporting_category
            or _REPORTING_CATEGORIES.get(transaction_type, "other_adjustment"),
            "source": source,
            "status": "available" if available_on <= now else "pending",
            "type": transaction_type,
            "_payout": None,
        }
        account.balance_transactions[transaction["id"]] = transaction
        return transaction

    async def deliver(
        self,
        event: dict[str, Any],
        *,
        via: httpx.AsyncClient,
        secret: str | None = None,
        timestamp: int | None = None,
    ) -> list[httpx.Response]:
        """POST `event` to every endpoint of its account subscribed to its type, as Stripe does: signed
        with the endpoint's secret (or `secret`) at `timestamp` (default now); the answers, in order."""
        account = self._event_accounts[event["id"]]
        payload = json.dumps(event).encode()
        answers = []
        for endpoint in account.endpoints.values():
            if not {"*", event["type"]} & set(endpoint["enabled_events"]):
                continue
            header = signature_header(secret or endpoint["secret"], payload, timestamp or self.now())
            answers.append(
                await via.post(
                    endpoint["url"],
                    content=payload,
                    headers={"Content-Type": "application/json; charset=utf-8", "Stripe-Signature": header},
                )
            )
        return answers

    # The API

    def serve(
        self, method: str, path: str, query: dict[str, Any], headers: dict[str, str], body: bytes
    ) -> tuple[int, dict[str, Any], dict[str, str], float]:
        """Answer one request: (status, JSON body, extra headers, seconds to wait first)."""
        try:
            form = parse_form(body.decode()) if body else {}
        except StripeFailure as failure:
            form = {}
            received = ReceivedStripeRequest(method, path, query, headers, body, form)
            self.requests.append(received)
            return self._answer(received, failure.status, failure.body())
        received = ReceivedStripeRequest(method, path, query, headers, body, form)
        self.requests.append(received)
        for index, (scripted_method, prefix, failure) in enumerate(self._script):
            if scripted_method == method and path.startswith(prefix):
                del self._script[index]
                if failure.status is None:  # served for real
                    break
                answered = self._answer(received, failure.status, failure.body, failure.headers)
                return (*answered[:3], failure.delay_s)
        account = self._accounts.get(received.api_key or "")
        if account is None:
            masked = f"{(received.api_key or '')[:8]}****{(received.api_key or '')[-4:]}"
            return self._answer(
                received,
                401,
                {
                    "error": {
                        "type": "invalid_request_error",
                        "message": f"Invalid API Key provided: {masked}",
                    }
                },
            )
        key = headers.get("idempotency-key")
        fingerprint = (method, path, body)
        if method == "POST" and key and key in account.idempotent:
            first, status, body = account.idempotent[key]
            if first != fingerprint:
                return self._answer(
                    received,
                    400,
                    {
                        "error": {
                            "type": "idempotency_error",
                            "message": "Keys for idempotent requests can only be used with the same "
                            "parameters they were first used with. Try using a key other than "
                            f"'{key}' if you meant to execute a different request.",
                        }
                    },
                )
            # The first answer as it was sent, not the object as it is now (a refund settled since
            # still replays as pending): Stripe stores the response, not a reference to the object.
            return self._answer(received, status, json.loads(body), {"Idempotent-Replayed": "true"})
        try:
            status, answer = 200, self._route(account, method, path, query, form)
        except StripeFailure as failure:
            status, answer = failure.status, failure.body()
        if method == "POST" and key and status != 500:
            account.idempotent[key] = (fingerprint, status, json.dumps(answer))
        return self._answer(received, status, answer)

    def _answer(
        self,
        received: ReceivedStripeRequest,
        status: int,
        answer: dict[str, Any],
        extra: dict[str, str] | None = None,
    ) -> tuple[int, dict[str, Any], dict[str, str], float]:
        received.status, received.answer = status, answer
        return (
            status,
            answer,
            {"Request-Id": self._id("req_"), "Stripe-Version": API_VERSION, **(extra or {})},
            0.0,
        )

    def _route(
        self, account: _Account, method: str, path: str, query: dict[str, Any], form: dict[str, Any]
    ) -> dict[str, Any]:
        parts = path.strip("/").split("/")
        if (method, path) == ("GET", "/v1/balance"):
            return {
                "object": "balance",
                "available": [{"amount": 0, "currency": "pln"}],
                "pending": [{"amount": 0, "currency": "pln"}],
                "livemode": False,
            }
        if (method, path) == ("POST", "/v1/webhook_endpoints"):
            return self._create_endpoint(account, form)
        if (method, path) == ("GET", "/v1/webhook_endpoints"):
            limit = _integer(query.get("limit", "10"), "limit", 1)
            found = [_public(endpoint) for endpoint in account.endpoints.values()][:limit]
            return {"object": "list", "url": "/v1/webhook_endpoints", "has_more": False, "data": found}
        if method == "DELETE" and parts[:2] == ["v1", "webhook_endpoints"] and len(parts) == 3:
            if account.endpoints.pop(parts[2], None) is None:
                raise _no_such("webhook_endpoint", parts[2])
            return {"id": parts[2], "object": "webhook_endpoint", "deleted": True}
        if (method, path) == ("POST", "/v1/checkout/sessions"):
            return self._create_checkout(account, form)
        if method == "GET" and parts[:3] == ["v1", "checkout", "sessions"] and len(parts) == 4:
            if parts[3] not in account.checkouts:
                raise _no_such("checkout.session", parts[3])
            return _public(account.checkouts[parts[3]])
        if method == "POST" and parts[:3] == ["v1", "checkout", "sessions"] and parts[4:] == ["expire"]:
            _unknown(form, set())
            return self._expire_checkout(account, parts[3])
        if method == "GET" and parts[:2] == ["v1", "payment_intents"] and len(parts) == 3:
            if parts[2] not in account.payment_intents:
                raise _no_such("payment_intent", parts[2], "intent")
            return _public(account.payment_intents[parts[2]])
        if (method, path) == ("POST", "/v1/refunds"):
            return self._create_refund(account, form)
        if (method, path) == ("GET", "/v1/refunds"):
            _unknown(query, {"payment_intent", "charge", "limit"})
            limit = _integer(query.get("limit", "10"), "limit", 1)
            found = [
                _public(refund)
                for refund in reversed(account.refunds.values())  # newest first, as Stripe lists
                if query.get("payment_intent") in (None, refund["payment_intent"])
                and query.get("charge") in (None, refund["charge"])
            ]
            return {
                "object": "list",
                "url": "/v1/refunds",
                "has_more": len(found) > limit,
                "data": found[:limit],
            }
        if (method, path) == ("GET", "/v1/balance_transactions"):
            return self._list_transactions(account, query)
        if (method, path) == ("GET", "/v1/payouts"):
            _unknown(query, _PAYOUT_LIST_PARAMS)
            found = [
                _public(p)
                for p in reversed(account.payouts.values())
                if _within(p["arrival_date"], query.get("arrival_date"), "arrival_date")
                and _within(p["created"], query.get("created"), "created")
                and query.get("status") in (None, p["status"])
            ]
            return _page(found, query, "/v1/payouts")
        raise StripeFailure(404, "invalid_request_error", f"Unrecognized request URL ({method}: {path}).")

    def _list_transactions(self, account: _Account, query: dict[str, Any]) -> dict[str, Any]:
        """`GET /v1/balance_transactions`: newest first, filtered as asked; `expand[]=data.source`
        puts each one's source object in place of its id."""
        _unknown(query, _BALANCE_LIST_PARAMS)
        payout = query.get("payout")
        if payout is not None and payout not in account.payouts:
            raise _no_such("payout", payout, "payout")
        expand = query.get("expand") or []
        found = []
        for transaction in reversed(account.balance_transactions.values()):
            if not _within(transaction["created"], query.get("created"), "created"):
                continue
            if any(
                query.get(name) not in (None, transaction[name]) for name in ("currency", "source", "type")
            ):
                continue
            if payout is not None and transaction["_payout"] != payout:
                continue
            shown = _public(transaction)
            if "data.source" in expand and shown["source"]:
                shown["source"] = _public(self._source(account, shown["source"]))
            found.append(shown)
        return _page(found, query, "/v1/balance_transactions")

    def _source(self, account: _Account, source_id: str) -> dict[str, Any]:
        for kind in ("charges", "refunds", "payouts"):
            found: dict[str, Any] | None = getattr(account, kind).get(source_id)
            if found is not None:
                return found
        return {"id": source_id, "object": "unknown"}

    def _create_endpoint(self, account: _Account, form: dict[str, Any]) -> dict[str, Any]:
        _unknown(form, _ENDPOINT_PARAMS)
        for required in ("url", "enabled_events"):
            if not form.get(required):
                raise _missing(required)
        if not isinstance(form["enabled_events"], list):
            raise StripeFailure(
                400, "invalid_request_error", "Invalid array", "parameter_invalid", "enabled_events"
            )
        endpoint = {
            "id": self._id("we_"),
            "object": "webhook_endpoint",
            "url": form["url"],
            "enabled_events": form["enabled_events"],
            "api_version": form.get("api_version"),
            "description": form.get("description"),
            "metadata": form.get("metadata", {}),
            "status": "enabled",
            "livemode": False,
            "created": self.now(),
            "secret": "whsec_" + secrets.token_hex(24),
        }
        account.endpoints[endpoint["id"]] = endpoint
        return endpoint  # the secret is shown once: here

    def _create_checkout(self, account: _Account, form: dict[str, Any]) -> dict[str, Any]:
        if "payment_method_types" in form:  # removed on 2026-09-30.endive
            raise StripeFailure(
                400,
                "invalid_request_error",
                "Received unknown parameter: payment_method_types",
                "parameter_unknown",
                "payment_method_types",
            )
        _unknown(form, _CHECKOUT_PARAMS)
        for required in ("mode", "line_items", "success_url"):
            if not form.get(required):
                raise _missing(required)
        if form["mode"] != "payment":
            raise StripeFailure(
                400, "invalid_request_error", "Invalid mode", "parameter_invalid_string", "mode"
            )
        currencies, total = set(), 0
        for index, item in enumerate(form["line_items"]):
            price = item.get("price_data") or {}
            if not price.get("currency") or not (price.get("product_data") or {}).get("name"):
                raise _missing(f"line_items[{index}][price_data]")
            if not re.fullmatch(r"[a-z]{3}", price["currency"]):
                raise StripeFailure(
                    400, "invalid_request_error", "Invalid currency", "parameter_invalid", "currency"
                )
            currencies.add(price["currency"])
            unit = _integer(price.get("unit_amount"), f"line_items[{index}][price_data][unit_amount]")
            total += unit * _integer(item.get("quantity"), f"line_items[{index}][quantity]", 1)
        if len(currencies) != 1:
            raise StripeFailure(400, "invalid_request_error", "Line items must share one currency")
        currency = currencies.pop()
        methods = form.get("allowed_payment_method_types") or ["card"]
        offered = [m for m in methods if m == "card" or (m == "blik" and currency == "pln")]
        if not offered:
            raise StripeFailure(
                400,
                "invalid_request_error",
                "None of the allowed payment method types can be used with this Checkout Session.",
                "payment_method_unactivated",
                "allowed_payment_method_types",
            )
        now = self.now()
        expires_at = now + CHECKOUT_MAX_LIFETIME_S
        if "expires_at" in form:
            expires_at = _integer(form["expires_at"], "expires_at")
            if not now + CHECKOUT_MIN_LIFETIME_S <= expires_at <= now + CHECKOUT_MAX_LIFETIME_S:
                raise StripeFailure(
                    400,
                    "invalid_request_error",
                    "The `expires_at` timestamp must be between 30 minutes and 24 hours from Checkout "
                    "Session creation.",
                    "parameter_invalid_integer",
                    "expires_at",
                )
        checkout_id = self._id("cs_test_a1")
        checkout = {
            "id": checkout_id,
            "object": "checkout.session",
            "mode": "payment",
            "status": "open",
            "payment_status": "unpaid",
            "amount_subtotal": total,
            "amount_total": total,
            "currency": currency,
            "client_reference_id": form.get("client_reference_id"),
            "customer_email": form.get("customer_email"),
            "metadata": form.get("metadata", {}),
            "payment_intent": None,
            "allowed_payment_method_types": form.get("allowed_payment_method_types"),
            "payment_method_types": offered,
            "locale": form.get("locale"),
            "success_url": form["success_url"],
            "cancel_url": form.get("cancel_url"),
            "expires_at": expires_at,
            "created": now,
            "livemode": False,
            "url": f"{self.checkout_host}/c/pay/{checkout_id}#fidkdWxOYHwnPyd1blpxYHZxWjA0",
            "_payment_intent_metadata": (form.get("payment_intent_data") or {}).get("metadata", {}),
        }
        account.checkouts[checkout_id] = checkout
        return _public(checkout)

    def _expire_checkout(self, account: _Account, checkout_id: str) -> dict[str, Any]:
        """Expire an open Checkout Session now; Stripe sends `checkout.session.expired` for it."""
        checkout = account.checkouts.get(checkout_id)
        if checkout is None:
            raise _no_such("checkout.session", checkout_id, "session")
        if checkout["status"] != "open":
            raise StripeFailure(
                400,
                "invalid_request_error",
                'Only Checkout Sessions with a status in ["open"] can be expired. This Checkout Session '
                f"has a status of `{checkout['status']}`.",
            )
        checkout.update(status="expired", url=None)
        self._event(account, "checkout.session.expired", checkout)
        return _public(checkout)

    def _create_refund(self, account: _Account, form: dict[str, Any]) -> dict[str, Any]:
        _unknown(form, _REFUND_PARAMS)
        if not form.get("payment_intent"):
            raise _missing("payment_intent")
        intent = account.payment_intents.get(form["payment_intent"])
        if intent is None:
            raise _no_such("payment_intent", form["payment_intent"], "payment_intent")
        left = intent["amount_received"] - intent["refunded"]
        amount = _integer(form["amount"], "amount", 1) if "amount" in form else left
        if left == 0:
            raise StripeFailure(
                400,
                "invalid_request_error",
                f"Charge {intent['latest_charge']} has already been refunded.",
                "charge_already_refunded",
            )
        if amount > left:
            raise StripeFailure(
                400,
                "invalid_request_error",
                f"Refund amount ({amount}) is greater than unrefunded amount on charge ({left})",
                "amount_too_large",
                "amount",
            )
        if form.get("reason") not in (None, "duplicate", "fraudulent", "requested_by_customer"):
            raise StripeFailure(
                400, "invalid_request_error", "Invalid reason", "parameter_invalid_string", "reason"
            )
        intent["refunded"] += amount
        refund = {
            "id": self._id("re_"),
            "object": "refund",
            "amount": amount,
            "currency": intent["currency"],
            "payment_intent": intent["id"],
            "charge": intent["latest_charge"],
            "reason": form.get("reason"),
            "metadata": form.get("metadata", {}),
            "status": "pending",
            "failure_reason": None,
            "created": self.now(),
        }
        account.refunds[refund["id"]] = refund
        # Stripe debits a refund from the balance when it is created (a failure credits it back).
        refund["balance_transaction"] = self._transaction(
            account, "refund", -amount, refund["currency"], refund["id"], fee=0
        )["id"]
        return refund

    # Bookkeeping

    def now(self) -> int:
        """Stripe's time: whole Unix seconds."""
        return int(self.clock())

    def _id(self, prefix: str) -> str:
        return f"{prefix}{next(self._numbers):06d}{secrets.token_hex(6)}"

    def _find(self, kind: str, object_id: str) -> dict[str, Any]:
        found: dict[str, Any] = getattr(self._account_of(kind, object_id), kind)[object_id]
        return found

    def _account_of(self, kind: str, object_id: str) -> _Account:
        return next(a for a in self._accounts.values() if object_id in getattr(a, kind))

    def _event(self, account: _Account, event_type: str, found: dict[str, Any]) -> dict[str, Any]:
        event = {
            "id": self._id("evt_"),
            "object": "event",
            "api_version": API_VERSION,
            "created": self.now(),
            "data": {"object": _public(found)},
            "livemode": False,
            "pending_webhooks": len(account.endpoints),
            "request": {"id": None, "idempotency_key": None},
            "type": event_type,
        }
        self.events.append(event)
        self._event_accounts[event["id"]] = account
        return event


def _within(value: int, bounds: Any, param: str) -> bool:
    """Whether `value` is within a list filter's bounds (`created[gte]=...`, or one exact value)."""
    if bounds is None:
        return True
    if not isinstance(bounds, dict):
        return value == _integer(bounds, param)
    _unknown(bounds, {"gt", "gte", "lt", "lte"})
    tests = {
        "gt": lambda bound: value > bound,
        "gte": lambda bound: value >= bound,
        "lt": lambda bound: value < bound,
        "lte": lambda bound: value <= bound,
    }
    return all(tests[name](_integer(bound, f"{param}[{name}]")) for name, bound in bounds.items())


def _page(found: list[dict[str, Any]], query: dict[str, Any], url: str) -> dict[str, Any]:
    """One page of a list, as Stripe paginates: `limit` (1 to 100, default 10) objects after the
    one `starting_after` names, and whether more follow (`has_more`)."""
    limit = _integer(query.get("limit", "10"), "limit", 1)
    if limit > 100:
        raise StripeFailure(
            400,
            "invalid_request_error",
            "This value must be less than or equal to 100.",
            "parameter_invalid_integer",
            "limit",
        )
    after = query.get("starting_after")
    if after is not None:
        index = next((i for i, each in enumerate(found) if each["id"] == after), None)
        if index is None:
            raise _no_such("object", after, "starting_after")
        found = found[index + 1 :]
    return {"object": "list", "url": url, "has_more": len(found) > limit, "data": found[:limit]}


def _public(found: dict[str, Any]) -> dict[str, Any]:
    """An object as the API shows it: no fake-internal fields, no endpoint secret after creation."""
    return {key: value for key, value in found.items() if not key.startswith("_") and key != "secret"}


def _stripe_app(fake: FakeStripe) -> QuartTrio:
    app = QuartTrio("fake_stripe")
    app.register_blueprint(hosted_checkout(fake))

    @app.route("/<path:path>", methods=["GET", "POST", "DELETE"])
    async def api(path: str) -> tuple[str, int, dict[str, str]]:
        body = await request.get_data(as_text=False)
        query = parse_form(request.query_string.decode())
        headers = {name.lower(): value for name, value in request.headers.items()}
        status, answer, extra, delay_s = fake.serve(request.method, request.path, query, headers, body)
        if delay_s:
            await trio.sleep(delay_s)  # the behaviour scripted: Stripe too slow to answer in time
        return json.dumps(answer), status, {"Content-Type": "application/json", **extra}

    return app


@asynccontextmanager
async def open_fake_stripe(clock: Callable[[], float] = time.time) -> AsyncIterator[FakeStripe]:
    """A fake Stripe listening on http://127.0.0.1:<free port> until the block exits."""
    fake = FakeStripe(clock)
    async with serving_on_loopback(_stripe_app(fake), "tests.fake_stripe") as port:
        fake.url = f"http://127.0.0.1:{port}"
        yield fake


@pytest.fixture
async def fake_stripe() -> AsyncIterator[FakeStripe]:
    """A running fake Stripe for this test."""
    async with open_fake_stripe() as fake:
        yield fake
