"""`PayuClient`: the part of PayU's REST API (v2.1) payorch uses, over one httpx connection pool.

- OAuth (`POST /pl/standard/user/oauth/authorize`, form `grant_type=client_credentials`): a token
  per account, kept until `TOKEN_MARGIN_S` before its `expires_in` ends, fetched again when PayU
  answers 401 with it; concurrent calls of one account wait for one fetch. Tokens and secrets are
  never logged nor put in an error message.
- Orders: create (`POST /api/v2_1/orders`: PayU answers 302 with a JSON body whose `redirectUri` is
  its page; redirects are never followed), read (`GET .../orders/{id}`, `GET .../orders/ext/{extOrderId}`),
  cancel (`DELETE .../orders/{id}`); refunds: create (`POST .../orders/{id}/refunds`) and list.

PayU's errors become `PayuApiError`: its HTTP status (None when PayU could not be reached or did
not answer its JSON) and its `statusCode` (`ERROR_ORDER_NOT_UNIQUE`...) or OAuth `error`.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final
from urllib.parse import quote

import httpx
import trio

from payorch.providers.payu.credentials import PayuAccount

PRODUCTION_BASE: Final = "https://secure.payu.com"
SANDBOX_BASE: Final = "https://secure.snd.payu.com"
TOKEN_PATH: Final = "/pl/standard/user/oauth/authorize"  # noqa: S105 (a path, not a secret)
ORDERS_PATH: Final = "/api/v2_1/orders"
# A token is fetched anew this long before PayU says it ends (its `expires_in`, 12 hours for
# client_credentials): a call that starts with it never reaches PayU with an expired token.
TOKEN_MARGIN_S: Final = 60.0
_TOKENS_KEPT: Final = 10_000  # accounts whose token is kept at once; the oldest go first


class PayuApiError(Exception):
    """PayU refused or failed a call: `status` its HTTP status (None: unreachable, or an answer that
    is not PayU's JSON), `code` PayU's `statusCode` (or OAuth `error`), `description` its text."""

    def __init__(self, status: int | None, code: str, description: str, literal: str = "") -> None:
        shown = f"{code}/{literal}" if literal else code
        super().__init__(f"{status or 'no answer'} {shown}: {description}".strip())
        self.status, self.code, self.description, self.literal = status, code, description, literal

    @property
    def provider_wide(self) -> bool:
        """PayU's own failure (unreachable, a 5xx), not the account's or the request's."""
        return self.status is None or self.status >= 500


@dataclass(frozen=True)
class _Token:
    value: str
    renew_at: float  # on the client's clock


class PayuClient:
    """PayU's REST API for any number of accounts, each call with the account's own token."""

    def __init__(
        self,
        *,
        api_base: str = "",
        timeout_s: float = 10.0,
        clock: Callable[[], float] = trio.current_time,
    ) -> None:
        self._api_base = api_base.rstrip("/")
        self._clock = clock
        self._http = httpx.AsyncClient(timeout=timeout_s, follow_redirects=False)
        self._tokens: dict[bytes, _Token] = {}
        self._fetching: dict[bytes, trio.Lock] = {}

    async def aclose(self) -> None:
        await self._http.aclose()

    def base_url(self, account: PayuAccount) -> str:
        """The node's `api_base` when set, else PayU's address for the account's environment."""
        if self._api_base:
            return self._api_base
        return SANDBOX_BASE if account.environment == "sandbox" else PRODUCTION_BASE

    # OAuth

    async def fetch_token(self, account: PayuAccount) -> str:
        """A new token for `account`, kept for its next calls. `PayuApiError` with status 401 when
        PayU refuses the client id and secret."""
        response = await self._send(
            "POST",
            self.base_url(account) + TOKEN_PATH,
            data={
                "grant_type": "client_credentials",
                "client_id": account.client_id,
                "client_secret": account.client_secret,
            },
        )
        body = _json(response)
        if response.status_code != 200:
            raise _error(response.status_code, body)
        value, expires_in = body.get("access_token"), body.get("expires_in")
        if not isinstance(value, str) or not value or not isinstance(expires_in, int | float):
            raise PayuApiError(response.status_code, "BAD_TOKEN_ANSWER", "no access_token or expires_in")
        key = self._account_key(account)
        if len(self._tokens) >= _TOKENS_KEPT:
            self._tokens.pop(next(iter(self._tokens)))
        self._tokens[key] = _Token(value, self._clock() + float(expires_in) - TOKEN_MARGIN_S)
        return value

    async def _token(self, account: PayuAccount, *, not_this: str | None = None) -> str:
        """The account's kept token (one other than `not_this`, which PayU refused), or one fetched
        now; callers of one account that find none wait for one fetch."""
        key = self._account_key(account)
        kept = self._usable(key, not_this)
        if kept is not None:
            return kept
        lock = self._fetching.setdefault(key, trio.Lock())
        try:
            async with lock:
                kept = self._usable(key, not_this)
                if kept is not None:
                    return kept
                return await self.fetch_token(account)
        finally:
            if not lock.locked() and lock.statistics().tasks_waiting == 0:
                self._fetching.pop(key, None)

    def _usable(self, key: bytes, not_this: str | None) -> str | None:
        token = self._tokens.get(key)
        if token is None or token.value == not_this or self._clock() >= token.renew_at:
            return None
        return token.value

    def _account_key(self, account: PayuAccount) -> bytes:
        whole = "\0".join((self.base_url(account), account.client_id, account.client_secret))
        return hashlib.sha256(whole.encode()).digest()

    # Orders and refunds

    async def create_order(self, account: PayuAccount, order: Mapping[str, Any]) -> dict[str, Any]:
        """Place `order`; PayU's answer (`orderId`, `redirectUri`, `extOrderId`). PayU answers 302
        (or 200/201) with a JSON body, never followed."""
        return await self._call(account, "POST", ORDERS_PATH, order, success=(200, 201, 302))

    async def order(self, account: PayuAccount, order_id: str) -> dict[str, Any] | None:
        """The order `order_id` (None: PayU does not know it for this account)."""
        return await self._one_order(account, f"{ORDERS_PATH}/{quote(order_id, safe='')}")

    async def order_by_ext_id(self, account: PayuAccount, ext_order_id: str) -> dict[str, Any] | None:
        """The account's order placed with `ext_order_id` (None: none is)."""
        return await self._one_order(account, f"{ORDERS_PATH}/ext/{quote(ext_order_id, safe='')}")

    async def cancel_order(self, account: PayuAccount, order_id: str) -> None:
        """Cancel the order `order_id` (PayU refuses it once the order is COMPLETED)."""
        await self._call(account, "DELETE", f"{ORDERS_PATH}/{quote(order_id, safe='')}")

    async def refund(self, account: PayuAccount, order_id: str, refund: Mapping[str, Any]) -> dict[str, Any]:
        """Refund the order: `refund` is the API's `refund` object; PayU's answer."""
        path = f"{ORDERS_PATH}/{quote(order_id, safe='')}/refunds"
        return await self._call(account, "POST", path, {"refund": refund})

    async def refunds(self, account: PayuAccount, order_id: str) -> list[dict[str, Any]]:
        """The order's refunds as PayU lists them."""
        answer = await self._call(account, "GET", f"{ORDERS_PATH}/{quote(order_id, safe='')}/refunds")
        found = answer.get("refunds")
        return [each for each in found if isinstance(each, dict)] if isinstance(found, list) else []

    async def _one_order(self, account: PayuAccount, path: str) -> dict[str, Any] | None:
        try:
            answer = await self._call(account, "GET", path)
        except PayuApiError as error:
            if error.status == 404:
                return None
            raise
        orders = answer.get("orders")
        if not isinstance(orders, list) or not orders or not isinstance(orders[0], dict):
            return None
        found: dict[str, Any] = orders[0]
        return found

    async def _call(
        self,
        account: PayuAccount,
        method: str,
        path: str,
        body: Mapping[str, Any] | None = None,
        *,
        success: tuple[int, ...] = (200,),
    ) -> dict[str, Any]:
        """One authenticated call; once more with a new token when PayU answers 401 to the kept one."""
        token = await self._token(account)
        for last_try in (False, True):
            response = await self._send(
                method,
                self.base_url(account) + path,
                headers={"Authorization": f"Bearer {token}"},
                content=None if body is None else json.dumps(body).encode(),
            )
            if response.status_code == 401 and not last_try:
                token = await self._token(account, not_this=token)
                continue
            answer = _json(response)
            if response.status_code not in success:
                raise _error(response.status_code, answer)
            return answer
        raise AssertionError("unreachable: the last try returns or raises")

    async def _send(
        self,
        method: str,
        url: str,
        *,
        headers: Mapping[str, str] | None = None,
        content: bytes | None = None,
        data: Mapping[str, str] | None = None,
    ) -> httpx.Response:
        sent_headers = {"Accept": "application/json", **(headers or {})}
        if content is not None:
            sent_headers["Content-Type"] = "application/json"
        try:
            return await self._http.request(method, url, headers=sent_headers, content=content, data=data)
        except httpx.HTTPError as error:
            # The message names the URL at most; the token travels in a header, secrets in a body.
            raise PayuApiError(None, type(error).__name__, "PayU could not be reached") from None


def _json(response: httpx.Response) -> dict[str, Any]:
    try:
        body = response.json()
    except ValueError:
        raise PayuApiError(None, "NOT_JSON", f"PayU answered {response.status_code} without JSON") from None
    if not isinstance(body, dict):
        raise PayuApiError(None, "NOT_JSON", f"PayU answered {response.status_code} without an object")
    return body


def _error(status: int, body: Mapping[str, Any]) -> PayuApiError:
    """PayU's error answer: `{"status": {"statusCode", "statusDesc", "codeLiteral"?}}`, or OAuth's
    `{"error", "error_description"}`."""
    found = body.get("status")
    if isinstance(found, dict):
        code, literal = str(found.get("statusCode") or "ERROR"), str(found.get("codeLiteral") or "")
        description = str(found.get("statusDesc") or "")
    else:
        code, literal = str(body.get("error") or "ERROR"), ""
        description = str(body.get("error_description") or "")
    return PayuApiError(status, code, description[:300], literal)


def validity_seconds(expires_at: float, requested_at: float) -> int:
    """PayU's `validityTime` (seconds the order can be paid) for an order payorch expires at
    `expires_at`, asked for at `requested_at`: at least one second."""
    return max(1, math.ceil(expires_at - requested_at))
