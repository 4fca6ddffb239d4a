"""The request limits of one running service: per credential, per merchant over all its API keys,
per client address for login and signup and for failed API-key authentications, per account for
failed logins, and per merchant on list reads in flight. Each answers an excess with `RateLimited`
(429, `retryAfter`, `Retry-After`).

Per credential (`limits.requests_per_second`, `limits.burst`): charged by `authenticate` once a
credential is verified, keyed `apikey:<key id>` or `merchant:<merchant id>` (every JWT of a merchant
shares one bucket). Requests without a credential (health probes, sandbox pages) and inbound provider
events (their signature is the credential) are not charged.

Per merchant over its API keys (`limits.merchant_requests_per_second`, `limits.merchant_burst`):
every API-key request is charged to its key's bucket and to the merchant's, keyed
`merchant-keys:<merchant id>`, both or neither: more keys buy no more than this.

Per client address, failed API-key authentications (`limits.failed_api_keys_per_address_per_minute`,
a burst of the same size): each unknown, revoked or malformed key takes a token of `ip:<address>`.
Once it is empty, that address's keys that would need a database read to authenticate are refused
before the read; keys the cache holds as active still work.

List reads per merchant (`limits.merchant_list_reads`): at most that many of one merchant's list
reads hold a database connection at once; more wait up to `limits.merchant_list_read_wait_s`.

Per client address (`limits.login_per_minute`, a burst of the same size): charged by login and
signup before any work, keyed `ip:<remote address>`; the two share one bucket. The address is the
TCP peer's, or behind `server.trusted_proxy_hops` reverse proxies the one they report (never an
entry a client could have written itself).

Per account (`limits.failed_logins_per_account_per_hour`, a burst of the same size): each failed
login takes a token from the bucket of the e-mail it tried, keyed `account:<canonical e-mail>`,
whether or not such an account exists (a 429 must not tell which e-mails are registered). An empty
bucket refuses every login of that e-mail, right password or not, so guessing spread over many
addresses is slowed as much as guessing from one.

Per client address for inbound provider events (`limits.provider_events_per_address_per_second`,
`limits.provider_events_per_address_burst`): charged before the route reads anything, keyed
`ip:<address>` in a limiter of their own. Past the burst an event waits for its token, up to
`PACE_S`, so an address is paced to its rate (a flood then costs no more than the
rate, however fast it sends); beyond that wait, 429. A provider's genuine events come from a few
addresses at the provider's pace, far below it.
Nothing is recorded for a refused event, and providers send an unacknowledged event again.

Per application, provider lookups in flight (`limits.provider_event_lookups_per_application`): an
event that only names an object (Mollie's webhook) is read at the provider with the merchant's key,
out of the account's share of calls. At most this many such reads run at once per application; one
more is answered 503 with `Retry-After` (Mollie calls again), so unauthenticated calls never take
the capacity the merchant's own creates and refunds need.

Routing backtests in flight (`POST .../routing/backtest`): one per merchant at a time
(`BACKTESTS_PER_MERCHANT`), a second answered 429; at most `BACKTESTS_AT_ONCE` in the process, one
more answered 503. Each holds a worker thread deciding up to 100,000 sessions for a few seconds:
the first bound keeps one merchant from taking them all, the second keeps the process's CPU for
its requests. Both with `Retry-After` (`BACKTEST_RETRY_AFTER_S`).

The buckets live in this process; see `docs/rate-limits.md` for sizing several processes.
"""

from __future__ import annotations

import math
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager

import trio

from payorch.config import LimitSettings
from payorch.engine.token_buckets import InFlightLimit, RateLimiter, whole_seconds
from payorch.http.concurrency import KeyedConcurrencyLimit
from payorch.values.errors import RateLimited, ServiceBusy

# Test sends (`POST .../webhooks/{id}/test`) in flight at once per merchant. Each may wait on a
# receiver for the whole `webhooks.timeout_s` while holding a connection of the shared client: this
# keeps one merchant from holding them all.
TEST_SENDS_PER_MERCHANT = 2
# How long a request over its API key's, its merchant's or its address's provider-event rate waits
# for its token (paced, not refused): beyond this many seconds' worth of waiting requests, 429. A
# client sending faster than its rate is slowed to it, so a flood costs no more than the rate, and a
# burst a little over the limit is served late rather than refused.
PACE_S = 1.0
# Routing backtests in flight at once, per merchant and in the process, and when to come back: about
# the time a backtest of the most sessions takes.
BACKTESTS_PER_MERCHANT = 1
BACKTESTS_AT_ONCE = 2
BACKTEST_RETRY_AFTER_S = 5


def _address_key(remote_address: str | None) -> str:
    """The bucket key of a client address (the TCP peer's, or the one trusted proxies reported)."""
    return f"ip:{remote_address or 'unknown'}"


def _beyond_pace(wait: float) -> float | None:
    """`wait` when a request may not wait that long for its token, else None."""
    return wait if wait > PACE_S else None


def _refuse_while_waiting(wait: float | None, too_many: str) -> None:
    """`RateLimited` ("too many <too_many>: retry after N s") when a bucket answered `wait`, the
    seconds until its next token; nothing when it had one."""
    if wait is not None:
        retry_after = whole_seconds(wait)
        raise RateLimited(f"too many {too_many}: retry after {retry_after} s", retry_after)


class RequestLimits:
    """The rate limiters of one service, on trio's clock, and its limit on test sends in flight."""

    def __init__(self, settings: LimitSettings) -> None:
        self.per_credential = RateLimiter(rate=settings.requests_per_second, burst=settings.burst)
        self.per_client_address = RateLimiter(
            rate=settings.login_per_minute / 60.0, burst=settings.login_per_minute
        )
        self.failed_logins_per_account = RateLimiter(
            rate=settings.failed_logins_per_account_per_hour / 3600.0,
            burst=settings.failed_logins_per_account_per_hour,
        )
        self.per_merchant_keys = RateLimiter(
            rate=settings.merchant_requests_per_second, burst=settings.merchant_burst
        )
        self.failed_api_keys_per_address = RateLimiter(
            rate=settings.failed_api_keys_per_address_per_minute / 60.0,
            burst=settings.failed_api_keys_per_address_per_minute,
        )
        self.test_sends = InFlightLimit(TEST_SENDS_PER_MERCHANT)
        self.provider_events_per_address = RateLimiter(
            rate=settings.provider_events_per_address_per_second,
            burst=settings.provider_events_per_address_burst,
        )
        self.provider_event_lookups = InFlightLimit(settings.provider_event_lookups_per_application)
        self.list_reads = KeyedConcurrencyLimit(settings.merchant_list_reads)
        self.backtests = InFlightLimit(BACKTESTS_PER_MERCHANT)
        self.all_backtests = InFlightLimit(BACKTESTS_AT_ONCE)  # one key: the process
        self.list_read_wait_s = settings.merchant_list_read_wait_s

    def _limiters(self) -> tuple[RateLimiter, ...]:
        return (
            self.per_credential,
            self.per_client_address,
            self.failed_logins_per_account,
            self.per_merchant_keys,
            self.failed_api_keys_per_address,
            self.provider_events_per_address,
        )

    def reconfigure(self, settings: LimitSettings) -> None:
        """Apply reloaded `limits.*` from the next request on. Buckets keep their tokens (at most the
        new burst), so a lowered limit holds at once and a raised one fills up at its new rate."""
        self.per_credential.reconfigure(settings.requests_per_second, settings.burst)
        self.per_client_address.reconfigure(settings.login_per_minute / 60.0, settings.login_per_minute)
        self.failed_logins_per_account.reconfigure(
            settings.failed_logins_per_account_per_hour / 3600.0,
            settings.failed_logins_per_account_per_hour,
        )
        self.provider_events_per_address.reconfigure(
            settings.provider_events_per_address_per_second, settings.provider_events_per_address_burst
        )
        self.provider_event_lookups.per_key = settings.provider_event_lookups_per_application
        self.per_merchant_keys.reconfigure(settings.merchant_requests_per_second, settings.merchant_burst)
        self.failed_api_keys_per_address.reconfigure(
            settings.failed_api_keys_per_address_per_minute / 60.0,
            settings.failed_api_keys_per_address_per_minute,
        )
        self.list_reads.per_key = settings.merchant_list_reads
        self.list_read_wait_s = settings.merchant_list_read_wait_s

    def forget_idle(self) -> None:
        """Drop every bucket that refilled (they are dropped as requests come too; this is for
        when none come)."""
        now = trio.current_time()
        for limiter in self._limiters():
            limiter.forget_idle(now)

    def charge_credential(self, key: str) -> None:
        """Count one request of the credential `key`; `RateLimited` when its bucket is empty."""
        _refuse_while_waiting(
            self.per_credential.take(key, trio.current_time()), "requests for this credential"
        )

    async def pace_api_key(self, key_id: uuid.UUID, merchant_id: uuid.UUID) -> None:
        """Count one request of an API key to its own bucket and to its merchant's bucket over all
        its keys, both or neither, first waiting for their tokens when both are at most `PACE_S`
        away; `RateLimited` when either is further (the key's said first), nothing taken then."""
        now = trio.current_time()
        key, merchant = f"apikey:{key_id}", f"merchant-keys:{merchant_id}"
        key_wait = self.per_credential.wait(key, now) or 0.0
        merchant_wait = self.per_merchant_keys.wait(merchant, now) or 0.0
        _refuse_while_waiting(_beyond_pace(key_wait), "requests for this credential")
        _refuse_while_waiting(_beyond_pace(merchant_wait), "requests for this merchant's API keys together")
        self.per_credential.reserve(key, now, math.inf)
        self.per_merchant_keys.reserve(merchant, now, math.inf)
        if wait := max(key_wait, merchant_wait):
            await trio.sleep(wait)

    def check_api_key_failures(self, remote_address: str | None) -> None:
        """`RateLimited` when `remote_address` has used up its failed API-key authentications;
        takes nothing."""
        key = _address_key(remote_address)
        _refuse_while_waiting(
            self.failed_api_keys_per_address.wait(key, trio.current_time()),
            "failed API key authentications from this address",
        )

    def count_api_key_failure(self, remote_address: str | None) -> None:
        """Count one failed API-key authentication from `remote_address`."""
        key = _address_key(remote_address)
        self.failed_api_keys_per_address.take(key, trio.current_time())

    @asynccontextmanager
    async def list_read(self, merchant_id: uuid.UUID) -> AsyncIterator[None]:
        """Hold one of the merchant's list reads for the block, waiting up to
        `limits.merchant_list_read_wait_s` for a turn; `RateLimited` after that."""
        async with self.list_reads.hold(str(merchant_id), self.list_read_wait_s) as held:
            if not held:
                per_key = self.list_reads.per_key
                raise RateLimited(
                    f"at most {per_key} list reads of a merchant run at once: retry after 1 s", 1
                )
            yield

    def charge_login(self, remote_address: str | None) -> None:
        """Count one login or signup attempt from `remote_address`; `RateLimited` when its bucket
        is empty."""
        key = _address_key(remote_address)
        _refuse_while_waiting(
            self.per_client_address.take(key, trio.current_time()),
            "login and signup attempts from this address",
        )

    def check_account_login(self, email: str) -> None:
        """`RateLimited` when the account `email` has used up its failed logins; takes nothing."""
        _refuse_while_waiting(
            self.failed_logins_per_account.wait(f"account:{email}", trio.current_time()),
            "failed logins for this account",
        )

    def count_failed_login(self, email: str) -> None:
        """Count one failed login of the account `email` (past its limit, nothing more to count)."""
        self.failed_logins_per_account.take(f"account:{email}", trio.current_time())

    @contextmanager
    def test_send(self, merchant_id: uuid.UUID, *, retry_after: int) -> Iterator[None]:
        """Hold one of the merchant's test sends for the block; `RateLimited` (told to come back
        in `retry_after` seconds) while `TEST_SENDS_PER_MERCHANT` are already in flight."""
        key = str(merchant_id)
        if not self.test_sends.try_enter(key):
            raise RateLimited(
                f"at most {TEST_SENDS_PER_MERCHANT} webhook test sends of a merchant run at once: "
                f"retry after {retry_after} s",
                retry_after,
            )
        try:
            yield
        finally:
            self.test_sends.leave(key)

    async def pace_provider_event(self, remote_address: str | None) -> None:
        """Count one inbound provider event from `remote_address`, first waiting for its token when
        that is at most `PACE_S` away: an address sending faster than its rate is
        slowed to it, and a flood costs no more than the rate. `RateLimited` when more than that
        many seconds' worth of its events already wait."""
        wait, refused = self.provider_events_per_address.reserve(
            _address_key(remote_address), trio.current_time(), PACE_S
        )
        _refuse_while_waiting(refused, "provider events from this address")
        if wait > 0:
            await trio.sleep(wait)

    @contextmanager
    def provider_event_lookup(self, application_id: uuid.UUID) -> Iterator[None]:
        """Hold one of the application's provider-event lookups for the block; `ServiceBusy` (503,
        retry in a second) while `limits.provider_event_lookups_per_application` are in flight."""
        key = str(application_id)
        if not self.provider_event_lookups.try_enter(key):
            raise ServiceBusy(
                f"at most {self.provider_event_lookups.per_key} provider events of an application are "
                "looked up at the provider at once: retry after 1 s",
                retry_after=1,
            )
        try:
            yield
        finally:
            self.provider_event_lookups.leave(key)

    @contextmanager
    def backtest(self, merchant_id: uuid.UUID) -> Iterator[None]:
        """Hold one of the merchant's routing backtests and one of the process's for the block:
        `RateLimited` (429) while the merchant has `BACKTESTS_PER_MERCHANT` in flight, `ServiceBusy`
        (503) while the process has `BACKTESTS_AT_ONCE`, both to retry after
        `BACKTEST_RETRY_AFTER_S`."""
        key = str(merchant_id)
        if not self.backtests.try_enter(key):
            raise RateLimited(
                f"a merchant runs {BACKTESTS_PER_MERCHANT} routing backtest at a time: "
                f"retry after {BACKTEST_RETRY_AFTER_S} s",
                BACKTEST_RETRY_AFTER_S,
            )
        try:
            if not self.all_backtests.try_enter(""):
                raise ServiceBusy(
                    f"{BACKTESTS_AT_ONCE} routing backtests are running: "
                    f"retry after {BACKTEST_RETRY_AFTER_S} s",
                    retry_after=BACKTEST_RETRY_AFTER_S,
                )
            try:
                yield
            finally:
                self.all_backtests.leave("")
        finally:
            self.backtests.leave(key)
