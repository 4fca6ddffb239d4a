"""A login flood costs the process next to nothing: a login its address group's bucket refuses is held
(`limits.login_refusal_hold_s`, at most until the group's next token) before its 429, within bounds
per address group and in all, and a refusal this process already knows asks the shared bucket
nothing (docs/rate-limits.md, "Held, then refused").

The buckets refill slowly (one login a minute) so that no token comes back mid-test; the holds are
long, and each test ends them by cancelling the requests it left held.
"""

from __future__ import annotations

import contextlib
import gc
import itertools
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence

import pytest
import trio
import trio.testing
from quart import Request as QuartRequest
from quart import Response

from payorch.config import LimitSettings, Settings
from payorch.http.request_limits import RequestLimits
from payorch.http.shared_limits import DatabaseBuckets
from payorch.runtime import Runtime, open_runtime
from payorch.storage.database import Database
from payorch.storage.rate_buckets import BucketTake, Grant
from payorch.values.errors import RateLimited
from tests.helpers import PASSWORD, Client, eventually, new_merchant
from tests.http.test_shared_limits import InMemoryBuckets

_numbers = itertools.count(1)


def held_limits(*, per_address: int, in_all: int) -> LimitSettings:
    """One login a minute per address group, refusals held a minute, at most so many at once."""
    return LimitSettings(
        login_per_minute=1,
        login_refusal_hold_s=60.0,
        login_refusals_held_per_address=per_address,
        login_refusals_held=in_all,
    )


@pytest.fixture
async def per_address_of_two(settings: Settings, db: Database) -> AsyncIterator[Runtime]:
    small = settings.model_copy(update={"limits": held_limits(per_address=2, in_all=10)})
    async with open_runtime(small, db) as runtime:
        yield runtime


@pytest.fixture
async def one_in_all(settings: Settings, db: Database) -> AsyncIterator[Runtime]:
    small = settings.model_copy(update={"limits": held_limits(per_address=5, in_all=1)})
    async with open_runtime(small, db) as runtime:
        yield runtime


async def log_in(
    client: Client, address: str, email: str | None = None, password: str = PASSWORD
) -> Response:
    """A login from `address`, of an unknown e-mail unless `email` is given."""
    email = email or f"nobody{next(_numbers)}@unknown.example"
    return await client.post(
        "/api/v1/auth/login",
        json={"email": email, "password": password},
        scope_base={"client": (address, 40000)},
    )


async def until_held(runtime: Runtime, group: str, count: int) -> None:
    """Wait (`eventually`) until `count` logins of `group` are held."""
    limits = runtime.services.limits

    async def held() -> bool:
        return limits.held_login_refusals.in_flight(group) == count

    await eventually(held)


async def test_a_refused_login_is_held_and_beyond_its_groups_bound_refused_at_once(
    per_address_of_two: Runtime, client: Client, db: Database, settings: Settings
) -> None:
    owner = await new_merchant(client, db, settings)
    flooding = per_address_of_two.app.test_client()
    assert (await log_in(flooding, "192.0.2.60")).status_code == 401  # the group's one token
    answered: list[Response] = []

    async def send() -> None:
        answered.append(await log_in(flooding, "192.0.2.60"))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(send)
        nursery.start_soon(send)
        await until_held(per_address_of_two, "192.0.2.60", 2)
        # The group holds as many as it may: one more is answered at once.
        beyond = await log_in(flooding, "192.0.2.60")
        assert beyond.status_code == 429
        assert int(beyond.headers["Retry-After"]) >= 1
        assert answered == []  # the two are still held
        # Another address is not held up by them: the right password logs in.
        fresh = await log_in(flooding, "192.0.2.61", owner.email)
        assert fresh.status_code == 200
        nursery.cancel_scope.cancel()
    assert per_address_of_two.services.limits.held_login_refusals.in_flight("192.0.2.60") == 0


async def test_refused_logins_beyond_the_processs_bound_are_refused_at_once(
    one_in_all: Runtime,
) -> None:
    flooding = one_in_all.app.test_client()
    for address in ("192.0.2.70", "192.0.2.71"):
        assert (await log_in(flooding, address)).status_code == 401  # each group's one token
    async with trio.open_nursery() as nursery:
        nursery.start_soon(log_in, flooding, "192.0.2.70")
        await until_held(one_in_all, "192.0.2.70", 1)
        # The process holds as many as it may: another group's refusal is answered at once.
        assert (await log_in(flooding, "192.0.2.71")).status_code == 429
        nursery.cancel_scope.cancel()


class CountedBuckets:
    """The database's shared buckets, counting the takes asked of them."""

    def __init__(self, db: Database) -> None:
        self.buckets = DatabaseBuckets(db)
        self.takes = 0

    async def take(self, takes: Sequence[BucketTake]) -> list[Grant]:
        self.takes += 1
        return await self.buckets.take(takes)

    async def give_back(self, key: str, *, rate: float, burst: int, count: int) -> None:
        await self.buckets.give_back(key, rate=rate, burst=burst, count=count)


async def test_a_login_refusal_known_to_this_process_asks_the_shared_bucket_nothing(db: Database) -> None:
    store = CountedBuckets(db)
    # Held briefly, so that the take after each hold is exercised too.
    limits = RequestLimits(LimitSettings(login_per_minute=1, login_refusal_hold_s=0.01), store)
    address = f"198.51.100.{next(_numbers) % 250 + 1}"
    await limits.charge_login(address)  # the one token, and when the next comes: one take
    assert store.takes == 1
    for _ in range(20):
        with pytest.raises(RateLimited):
            await limits.charge_login(address)
    assert store.takes == 1


async def join(client: Client, address: str) -> Response:
    """A console join (an invited user choosing a password) from `address`, of a token nobody made."""
    return await client.post(
        "/console/join?token=unknown",
        form={"password": PASSWORD, "passwordAgain": PASSWORD},
        scope_base={"client": (address, 40000)},
    )


@pytest.mark.parametrize("attempt", [log_in, join], ids=["api login", "console join"])
async def test_a_held_refusal_keeps_no_request_of_quarts_alive(
    per_address_of_two: Runtime, attempt: Callable[[Client, str], Awaitable[Response]]
) -> None:
    """Held at the ASGI call (`http.login_gate`), before Quart builds a request: a flood's hundreds
    of held refusals are not hundreds of requests, contexts and tasks for the collector to walk."""

    def quart_requests_from(address: str) -> set[int]:
        gc.collect()
        return {
            id(alive)
            for alive in gc.get_objects()
            if isinstance(alive, QuartRequest) and alive.remote_addr == address
        }

    flooding = per_address_of_two.app.test_client()
    assert (await attempt(flooding, "192.0.2.80")).status_code != 429  # the group's one token
    answered = quart_requests_from("192.0.2.80")  # the one answered, if anything still holds it
    async with trio.open_nursery() as nursery:
        nursery.start_soon(attempt, flooding, "192.0.2.80")
        nursery.start_soon(attempt, flooding, "192.0.2.80")
        await until_held(per_address_of_two, "192.0.2.80", 2)
        assert quart_requests_from("192.0.2.80") <= answered  # none made for the two held
        nursery.cancel_scope.cancel()


async def test_a_refusal_held_before_the_route_is_answered_by_it_with_the_documented_shape(
    db: Database, settings: Settings
) -> None:
    briefly = settings.model_copy(
        update={"limits": LimitSettings(login_per_minute=1, login_refusal_hold_s=0.01)}
    )
    async with open_runtime(briefly, db) as runtime:
        flooding = runtime.app.test_client()
        assert (await log_in(flooding, "192.0.2.90")).status_code == 401
        refused = await log_in(flooding, "192.0.2.90")
    assert refused.status_code == 429
    body = await refused.get_json()
    assert set(body) == {"error", "message", "code", "retryAfter"}
    assert body["code"] == 429
    assert "login and signup attempts from this address" in body["message"]
    assert body["retryAfter"] == int(refused.headers["Retry-After"]) >= 1


async def _answers(limits: RequestLimits, address: str, connections: int, seconds: float) -> int:
    """How many answers (refusals, and the logins a token came for) `connections` clients from
    `address`, each sending its next login as soon as the last was answered, got in `seconds` (on
    the autojump clock)."""
    answered = 0

    async def connection() -> None:
        nonlocal answered
        while True:
            with contextlib.suppress(RateLimited):
                await limits.charge_login(address)
            answered += 1

    with trio.move_on_after(seconds):
        async with trio.open_nursery() as nursery:
            for _ in range(connections):
                nursery.start_soon(connection)
    return answered


def _flood_limits(**settings: float) -> RequestLimits:
    """One login a minute per address group, refusals held 4 s (2 to 4 s each alone)."""
    return RequestLimits(
        LimitSettings(login_per_minute=1, login_refusal_hold_s=4.0, **settings), InMemoryBuckets()
    )


async def _spend_the_token(limits: RequestLimits, address: str) -> None:
    await limits.charge_login(address)  # the group's one token


async def test_a_group_flooding_over_many_connections_is_answered_no_faster_than_over_one(
    autojump_clock: trio.testing.MockClock,
) -> None:
    limits = _flood_limits()
    await _spend_the_token(limits, "192.0.2.100")
    # Alone, a refusal is held 2 to 4 s: about one answer every 3 s on one connection.
    one = await _answers(limits, "192.0.2.100", connections=1, seconds=30.0)
    assert 30 / 4 <= one <= 30 / 2 + 1
    # Ten connections of one group share that pace: each refusal is held as many times as long as
    # the refusals the group holds, so ten connections get about what one gets, not ten times it.
    limits = _flood_limits()
    await _spend_the_token(limits, "192.0.2.101")
    ten = await _answers(limits, "192.0.2.101", connections=10, seconds=120.0)
    assert ten <= 120 / 2 + 10  # at most about one per half hold, with the first round's ten
    assert ten >= 120 / 60  # never held longer than login_refusal_hold_max_s (60 s)


async def test_a_refusal_is_never_held_longer_than_the_maximum_hold(
    autojump_clock: trio.testing.MockClock,
) -> None:
    limits = _flood_limits(login_refusal_hold_max_s=5.0)
    await _spend_the_token(limits, "192.0.2.102")
    started = trio.current_time()
    answered = await _answers(limits, "192.0.2.102", connections=50, seconds=6.0)
    # Fifty held at once, each held at most 5 s: all fifty were answered within the 6 s.
    assert answered >= 50
    assert trio.current_time() - started == pytest.approx(6.0)


async def test_holds_end_with_their_429_as_soon_as_the_service_begins_to_stop(
    autojump_clock: trio.testing.MockClock,
) -> None:
    limits = _flood_limits(login_refusal_hold_max_s=60.0)
    await _spend_the_token(limits, "192.0.2.103")
    answered_at: list[float] = []

    async def held() -> None:
        with pytest.raises(RateLimited):
            await limits.charge_login("192.0.2.103")
        answered_at.append(trio.current_time())

    async with trio.open_nursery() as nursery:
        for _ in range(5):
            nursery.start_soon(held)
        await trio.sleep(1.0)
        assert answered_at == []  # all five still held
        stopping = trio.current_time()
        limits.end_login_holds()
    assert answered_at and max(answered_at) - stopping < 0.1
    # From then on a refusal is answered at once.
    before = trio.current_time()
    with pytest.raises(RateLimited):
        await limits.charge_login("192.0.2.103")
    assert trio.current_time() - before < 0.1


def test_a_maximum_hold_below_the_hold_is_refused_at_load() -> None:
    with pytest.raises(ValueError, match="login_refusal_hold_max_s must be at least"):
        LimitSettings(login_refusal_hold_s=10.0, login_refusal_hold_max_s=5.0)
