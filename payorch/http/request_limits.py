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
a burst of the same size): each unknown, revoked or malformed key takes a token of
`ip:<address group>` (an IPv6 client by its /64, as logins).
Once this process has found it empty, that address's keys that would need a database read to
authenticate are refused before the read, without asking the shared bucket; keys the cache holds as
active still work.

List reads per merchant (`limits.merchant_list_reads`): at most that many of one merchant's list
reads hold a database connection at once; more wait up to `limits.merchant_list_read_wait_s`.

Per client address (`limits.login_per_minute`, a burst of the same size): charged by login and
signup before any work, keyed `ip:<address group>`; the two share one bucket. The address is the
TCP peer's, or behind `server.trusted_proxy_hops` reverse proxies the one they report (never an
entry a client could have written itself); its group (`address_group`) is an IPv4 address itself
(an IPv4-mapped IPv6 one too), an IPv6 address its /64. A login or signup its group's bucket
refuses is held first (up to `limits.login_refusal_hold_s`: until the bucket's next token or half
that, plus a random part of the other half), and as many times as long as the refusals its group
holds at that moment, this one included (at most `limits.login_refusal_hold_max_s`): then it
takes that token if it came, else it is answered 429. So a person past the limit waits a few
seconds, and a client flooding logins gets about one answer every few seconds per address group,
however many connections it sends them on (up to the maximum hold), not one per round trip or
per connection, and costs the process (and everyone it serves) next to nothing. Holds end, with
their 429, as soon as the service begins to stop (`end_login_holds`). At most
`limits.login_refusals_held_per_address` are held per address group and
`limits.login_refusals_held` in all; beyond either, refused at once. Each held
request sits on a connection its client opened and would hold anyway (bounded by
`server.max_connections_per_address` and `server.max_connections`).

Per account (`limits.failed_logins_per_account_per_hour`, a burst of the same size): each login
takes a token from the bucket of the e-mail it tried, keyed `account:<canonical e-mail>`, before its
password is checked, and one that succeeds gives it back: so failed logins are what is counted, and
attempts running at once cannot pass the limit together. Whether or not such an account exists (a
429 must not tell which e-mails are registered). An empty bucket does not lock the account: a login
then takes a token of the bucket of the account and its address group instead,
`ip:<address group>/account:<canonical e-mail>`, `LOGINS_PER_ADDRESS_WHILE_ACCOUNT_SPENT` an hour,
and only that one empty refuses it (OWASP's advice on lockout: strangers failing elsewhere must not
keep the owner out). So the right password from an address group that has not failed on the account
passes, and guessing spread over many addresses gets the account's budget plus that many an hour per
address group, each group also held to its `login_per_minute`.

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

Routing changes per application (`limits.routing_changes_per_hour`, `limits.routing_changes_burst`):
a routing document found sound takes a token of `application:<application id>` before it is
stored, and gives it back when it was the one in force already (nothing stored); once this process
knows the bucket is empty, a PUT is refused before its body is read. Every version being kept, this
bounds the versions an application stores (docs/routing.md, "Versions kept").

Routing evaluations per merchant (`limits.routing_evaluations_per_second`,
`limits.routing_evaluations_burst`): each `POST .../routing/evaluate` (and the console's) takes a
token of `merchant:<merchant id>` (in a limiter of its own) before its body is read.

Routing backtests in flight (`POST .../routing/backtest`), running or waiting their turn at the
backtest worker processes (`engine.routing.backtest_processes`, which serve them in the order they came):
one per merchant (`BACKTESTS_PER_MERCHANT`), a second answered 429; at most `BACKTESTS_AT_ONCE` in
the process, one more answered 503. The first keeps one merchant from taking every turn (two
merchants looping take two places of the queue, and a third merchant's backtest waits behind one
of each, never refused for them); the second bounds how long a backtest may wait (each takes up to
a few seconds in the worker). Both with `Retry-After` (`BACKTEST_RETRY_AFTER_S`).

The rate limits hold for every process on the database: their buckets are kept in PostgreSQL, and
each process leases batches of tokens (`http.shared_limits`; docs/rate-limits.md says how precise
that is and what it costs). The limits on operations in flight (list reads, test sends, provider
lookups, backtests) are this process's own: each guards something of the process's (its pool's
connections, its client's, its threads, its CPU).
"""

from __future__ import annotations

import ipaddress
import random
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass

import trio

from payorch.config import LimitSettings
from payorch.http.concurrency import KeyedConcurrencyLimit
from payorch.http.shared_limits import BucketStore, Refused, SharedLimiter, reserve
from payorch.values.errors import RateLimited, ServiceBusy
from payorch.values.token_buckets import InFlightLimit, whole_seconds

# Test sends (`POST .../webhooks/{id}/test`) in flight at once per merchant. Each may wait on a
# receiver for the whole `webhooks.timeout_s` while holding a connection of the shared client: this
# keeps one merchant from holding them all.
TEST_SENDS_PER_MERCHANT = 2
# How long a request over its API key's, its merchant's or its address's provider-event rate waits
# for its token (paced, not refused): beyond this many seconds' worth of waiting requests, 429. A
# client sending faster than its rate is slowed to it, so a flood costs no more than the rate, and a
# burst a little over the limit is served late rather than refused.
PACE_S = 1.0
# Routing backtests in flight at once (running in a worker process or waiting their turn), per
# merchant and in the process, and when to come back: about the time a backtest of the most sessions
# takes. With one worker process, the last of `BACKTESTS_AT_ONCE` waits for the three before it.
BACKTESTS_PER_MERCHANT = 1
BACKTESTS_AT_ONCE = 4
BACKTEST_RETRY_AFTER_S = 5
# Logins of one account from one address group an hour (also the burst) while the account's failed
# logins are used up: the owner's typos from its own address, never a stranger's failures elsewhere.
LOGINS_PER_ADDRESS_WHILE_ACCOUNT_SPENT = 3


def address_group(remote_address: str | None) -> str:
    """The client address as the login budgets count it: an IPv4 address by itself (an IPv4-mapped
    IPv6 address as that IPv4 address), an IPv6 address by its /64, the network one host or one
    customer line is given (holding one /64, a client holds 2**64 addresses); anything else (no
    address, a Unix socket's name) as written."""
    if not remote_address:
        return "unknown"
    try:
        address = ipaddress.ip_address(remote_address)
    except ValueError:
        return remote_address
    if isinstance(address, ipaddress.IPv4Address):
        return str(address)
    if address.ipv4_mapped is not None:
        return str(address.ipv4_mapped)
    return str(ipaddress.IPv6Network((int(address) >> 64 << 64, 64)))


@dataclass(frozen=True)
class LoginCount:
    """Where `RequestLimits.count_login_attempt` counted a login: the bucket `key` of `limiter`."""

    limiter: SharedLimiter
    key: str


def _group_key(remote_address: str | None) -> str:
    """The bucket key of a client address's group (`address_group`)."""
    return f"ip:{address_group(remote_address)}"


def _address_key(remote_address: str | None) -> str:
    """The bucket key of a client address (the TCP peer's, or the one trusted proxies reported)."""
    return f"ip:{remote_address or 'unknown'}"


def _rate_limited(wait: float, too_many: str) -> RateLimited:
    """The refusal ("too many <too_many>: retry after N s") of a bucket whose next token is `wait`
    seconds away."""
    retry_after = whole_seconds(wait)
    return RateLimited(f"too many {too_many}: retry after {retry_after} s", retry_after)


def _refuse_while_waiting(wait: float | None, too_many: str) -> None:
    """`RateLimited` (`_rate_limited`) when a bucket answered `wait`, the seconds until its next
    token; nothing when it had one."""
    if wait is not None:
        raise _rate_limited(wait, too_many)


class RequestLimits:
    """The rate limits of one service, shared with every process on its database through `store`
    (`http.shared_limits`), and its limits on operations in flight, which are this process's own."""

    def __init__(self, settings: LimitSettings, store: BucketStore) -> None:
        self.per_credential = SharedLimiter(
            "requests", store, rate=settings.requests_per_second, burst=settings.burst
        )
        self.per_client_address = SharedLimiter(
            "logins", store, rate=settings.login_per_minute / 60.0, burst=settings.login_per_minute
        )
        self.login_refusal_hold_s = settings.login_refusal_hold_s
        self.login_refusal_hold_max_s = settings.login_refusal_hold_max_s
        self._holds_ended = trio.Event()
        self.held_login_refusals = InFlightLimit(settings.login_refusals_held_per_address)
        self.all_held_login_refusals = InFlightLimit(settings.login_refusals_held)  # one key: the process
        self.failed_logins_per_account = SharedLimiter(
            "failed-logins",
            store,
            rate=settings.failed_logins_per_account_per_hour / 3600.0,
            burst=settings.failed_logins_per_account_per_hour,
        )
        self.logins_while_account_spent = SharedLimiter(
            "logins-while-account-spent",
            store,
            rate=LOGINS_PER_ADDRESS_WHILE_ACCOUNT_SPENT / 3600.0,
            burst=LOGINS_PER_ADDRESS_WHILE_ACCOUNT_SPENT,
        )
        self.per_merchant_keys = SharedLimiter(
            "merchant-keys", store, rate=settings.merchant_requests_per_second, burst=settings.merchant_burst
        )
        self.failed_api_keys_per_address = SharedLimiter(
            "failed-api-keys",
            store,
            rate=settings.failed_api_keys_per_address_per_minute / 60.0,
            burst=settings.failed_api_keys_per_address_per_minute,
        )
        self.test_sends = InFlightLimit(TEST_SENDS_PER_MERCHANT)
        self.provider_events_per_address = SharedLimiter(
            "provider-events",
            store,
            rate=settings.provider_events_per_address_per_second,
            burst=settings.provider_events_per_address_burst,
        )
        self.provider_event_lookups = InFlightLimit(settings.provider_event_lookups_per_application)
        self.checkout_returns = InFlightLimit(settings.checkout_returns_per_application)
        self.routing_changes = SharedLimiter(
            "routing-changes",
            store,
            rate=settings.routing_changes_per_hour / 3600.0,
            burst=settings.routing_changes_burst,
        )
        self.routing_evaluations = SharedLimiter(
            "routing-evaluations",
            store,
            rate=settings.routing_evaluations_per_second,
            burst=settings.routing_evaluations_burst,
        )
        self.list_reads = KeyedConcurrencyLimit(settings.merchant_list_reads)
        self.backtests = InFlightLimit(BACKTESTS_PER_MERCHANT)
        self.all_backtests = InFlightLimit(BACKTESTS_AT_ONCE)  # one key: the process
        self.list_read_wait_s = settings.merchant_list_read_wait_s

    def _limiters(self) -> tuple[SharedLimiter, ...]:
        return (
            self.per_credential,
            self.per_client_address,
            self.failed_logins_per_account,
            self.logins_while_account_spent,
            self.per_merchant_keys,
            self.failed_api_keys_per_address,
            self.provider_events_per_address,
            self.routing_changes,
            self.routing_evaluations,
        )

    def reconfigure(self, settings: LimitSettings) -> None:
        """Apply reloaded `limits.*` from the next request on. The shared buckets keep their tokens
        (at most the new burst), so a lowered limit holds at once and a raised one fills up at its
        new rate; tokens this process leased stay spendable."""
        self.per_credential.reconfigure(settings.requests_per_second, settings.burst)
        self.per_client_address.reconfigure(settings.login_per_minute / 60.0, settings.login_per_minute)
        self.login_refusal_hold_s = settings.login_refusal_hold_s
        self.login_refusal_hold_max_s = settings.login_refusal_hold_max_s
        self.held_login_refusals.per_key = settings.login_refusals_held_per_address
        self.all_held_login_refusals.per_key = settings.login_refusals_held
        self.failed_logins_per_account.reconfigure(
            settings.failed_logins_per_account_per_hour / 3600.0,
            settings.failed_logins_per_account_per_hour,
        )
        self.provider_events_per_address.reconfigure(
            settings.provider_events_per_address_per_second, settings.provider_events_per_address_burst
        )
        self.provider_event_lookups.per_key = settings.provider_event_lookups_per_application
        self.checkout_returns.per_key = settings.checkout_returns_per_application
        self.routing_changes.reconfigure(
            settings.routing_changes_per_hour / 3600.0, settings.routing_changes_burst
        )
        self.routing_evaluations.reconfigure(
            settings.routing_evaluations_per_second, settings.routing_evaluations_burst
        )
        self.per_merchant_keys.reconfigure(settings.merchant_requests_per_second, settings.merchant_burst)
        self.failed_api_keys_per_address.reconfigure(
            settings.failed_api_keys_per_address_per_minute / 60.0,
            settings.failed_api_keys_per_address_per_minute,
        )
        self.list_reads.per_key = settings.merchant_list_reads
        self.list_read_wait_s = settings.merchant_list_read_wait_s

    def forget_idle(self) -> None:
        """Drop every key with nothing leased and nothing known (they are dropped as requests come
        too; this is for when none come). The shared buckets' rows are the housekeeping's."""
        for limiter in self._limiters():
            limiter.forget_idle()

    async def charge_credential(self, key: str) -> None:
        """Count one request of the credential `key`; `RateLimited` when its bucket is empty."""
        _refuse_while_waiting(await self.per_credential.take(key), "requests for this credential")

    async def pace_api_key(self, key_id: uuid.UUID, merchant_id: uuid.UUID) -> None:
        """Count one request of an API key to its own bucket and to its merchant's bucket over all
        its keys, both or neither, first waiting for their tokens when both are at most `PACE_S`
        away; `RateLimited` when either is further, nothing taken then."""
        claims = [
            (self.per_credential, f"apikey:{key_id}"),
            (self.per_merchant_keys, f"merchant-keys:{merchant_id}"),
        ]
        try:
            wait = await reserve(claims, PACE_S)
        except Refused as refused:
            too_many = ("this credential", "this merchant's API keys together")[refused.index]
            raise _rate_limited(refused.wait, f"requests for {too_many}") from None
        if wait > 0:
            await trio.sleep(wait)

    def check_api_key_failures(self, remote_address: str | None) -> None:
        """`RateLimited` when `remote_address` has used up its failed API-key authentications, as
        far as this process knows (its last count found the shared bucket empty); takes nothing and
        asks nothing, so it costs no round trip."""
        _refuse_while_waiting(
            self.failed_api_keys_per_address.known_refusal(_group_key(remote_address)),
            "failed API key authentications from this address",
        )

    async def count_api_key_failure(self, remote_address: str | None) -> None:
        """Count one failed API-key authentication from `remote_address` (past its limit, nothing
        more to count: once this process knows the bucket is empty, no round trip either). Counted
        per address group (`address_group`), as logins are: an IPv6 client holds a whole /64."""
        key = _group_key(remote_address)
        if self.failed_api_keys_per_address.known_refusal(key) is None:
            await self.failed_api_keys_per_address.take(key)

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

    async def charge_login(self, remote_address: str | None) -> None:
        """Count one login or signup attempt from `remote_address`'s group (`address_group`). When
        its bucket is empty, first hold the attempt (`_hold_login_refusal`) and then take the token
        if it came meanwhile; `RateLimited` when there is still none (or it was not held)."""
        group = address_group(remote_address)
        key = f"ip:{group}"
        wait = await self.per_client_address.take(key)
        if wait is not None and await self._hold_login_refusal(group, wait):
            # Known here until the hold ends: a take that finds no token yet asks nothing.
            wait = await self.per_client_address.take(key)
        _refuse_while_waiting(wait, "login and signup attempts from this address")

    async def _hold_login_refusal(self, group: str, wait: float) -> bool:
        """Wait a while and say True: until the group's next token is due (`wait` seconds from
        now) or half of `limits.login_refusal_hold_s` if sooner, plus a random part of the other
        half, so that refusals that came together (a flood's first, or one group's connections
        waiting for one token) are not all answered, and sent again, at once; and that times the
        refusals the group holds now, this one included, at most `limits.login_refusal_hold_max_s`:
        a group holding many at once is flooding, and its refusals are answered at about one per
        hold however many connections carry them. False at once (nothing held) when the hold is
        0, the service is stopping, or the group (`limits.login_refusals_held_per_address`) or the
        process (`limits.login_refusals_held`) holds as many refusals as it may."""
        half = self.login_refusal_hold_s / 2
        hold = min(wait, half) + half * random.random()  # noqa: S311  # spreading, not a secret
        if hold <= 0 or self._holds_ended.is_set() or not self.held_login_refusals.try_enter(group):
            return False
        try:
            if not self.all_held_login_refusals.try_enter(""):
                return False
            try:
                held_now = self.held_login_refusals.in_flight(group)
                with trio.move_on_after(min(hold * held_now, self.login_refusal_hold_max_s)):
                    await self._holds_ended.wait()
            finally:
                self.all_held_login_refusals.leave("")
        finally:
            self.held_login_refusals.leave(group)
        return True

    def end_login_holds(self) -> None:
        """Answer every held login refusal now, and hold none from now on: the service is stopping,
        and its graceful shutdown should not wait out a flood's holds."""
        self._holds_ended.set()

    async def count_login_attempt(self, email: str, remote_address: str | None) -> LoginCount:
        """Count a login attempt of the account `email` from `remote_address` as failed before it
        is checked, so that attempts running at once, on any process, never pass the limit
        together: in the account's bucket, or once that is empty in the bucket of the account and
        the address's group. `RateLimited` when both are empty. A login that succeeds is forgiven
        (`forgive_login_attempt`, given what this answered)."""
        account_key = f"account:{email}"
        account_wait = await self.failed_logins_per_account.take(account_key)
        if account_wait is None:
            return LoginCount(self.failed_logins_per_account, account_key)
        group_key = f"ip:{address_group(remote_address)}/{account_key}"
        group_wait = await self.logins_while_account_spent.take(group_key)
        if group_wait is None:
            return LoginCount(self.logins_while_account_spent, group_key)
        raise _rate_limited(min(account_wait, group_wait), "failed logins for this account from this address")

    async def forgive_login_attempt(self, counted: LoginCount) -> None:
        """Give back what `count_login_attempt` counted for a login that succeeded."""
        await counted.limiter.give_back(counted.key)

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

    async def pace_provider_event(self, remote_address: str | None, what: str = "provider events") -> None:
        """Count one inbound provider event (or customer's return from a checkout: `what` they are)
        from `remote_address`, first waiting for its token when that is at most `PACE_S` away: an
        address sending faster than its rate is slowed to it, and a flood costs no more than the
        rate. `RateLimited` when more than that many seconds' worth of its requests already wait."""
        try:
            wait = await reserve([(self.provider_events_per_address, _address_key(remote_address))], PACE_S)
        except Refused as refused:
            raise _rate_limited(refused.wait, f"{what} from this address") from None
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
    def checkout_return(self, application_id: uuid.UUID) -> Iterator[None]:
        """Hold one of the application's customer returns being answered for the block;
        `ServiceBusy` (503, retry in a second) while `limits.checkout_returns_per_application` are."""
        key = str(application_id)
        if not self.checkout_returns.try_enter(key):
            raise ServiceBusy(
                f"at most {self.checkout_returns.per_key} returns from a checkout of an application are "
                "answered at once: retry after 1 s",
                retry_after=1,
            )
        try:
            yield
        finally:
            self.checkout_returns.leave(key)

    def check_routing_changes(self, application_id: uuid.UUID) -> None:
        """`RateLimited` when this process knows the application's routing changes are used up
        (its last take found the shared bucket empty); takes nothing and asks nothing."""
        _refuse_while_waiting(
            self.routing_changes.known_refusal(f"application:{application_id}"),
            "routing document changes for this application",
        )

    async def charge_routing_change(self, application_id: uuid.UUID) -> None:
        """Count one change of the application's routing document; `RateLimited` when its bucket
        is empty."""
        _refuse_while_waiting(
            await self.routing_changes.take(f"application:{application_id}"),
            "routing document changes for this application",
        )

    async def forgive_routing_change(self, application_id: uuid.UUID) -> None:
        """Give back what `charge_routing_change` took for a document that changed nothing."""
        await self.routing_changes.give_back(f"application:{application_id}")

    async def charge_routing_evaluation(self, merchant_id: uuid.UUID) -> None:
        """Count one routing evaluation of the merchant; `RateLimited` when its bucket is empty."""
        _refuse_while_waiting(
            await self.routing_evaluations.take(f"merchant:{merchant_id}"),
            "routing evaluations for this merchant",
        )

    @contextmanager
    def backtest(self, merchant_id: uuid.UUID) -> Iterator[None]:
        """Hold one of the merchant's routing backtests and one of the process's for the block
        (running or waiting its turn): `RateLimited` (429) while the merchant has
        `BACKTESTS_PER_MERCHANT` in flight, `ServiceBusy` (503) while the process has
        `BACKTESTS_AT_ONCE`, both to retry after `BACKTEST_RETRY_AFTER_S`."""
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
