"""Many applications, each touched once, then idle: their actors must stop and the memory they held
must come back.

payorch runs here on its own (a fresh instance and database) with a short `engine.actor_idle_s`.
One application is made over HTTP with the sandbox linked; the others are copies of it made in the
database (its provider configuration, a new API key each), which takes a second for thousands where
HTTP would take minutes. Then:
1. warm-up: a few hundred applications get one session create each, and their actors are left to
   stop, so the code and caches a first create loads are in memory before the baseline;
2. baseline: this process's RSS, with no actor running;
3. every application gets one session create (32 connections, from the load generator process),
   while RSS and the live actors (`payorch_actor_mailboxes` on `/metrics`) are sampled;
4. idle: wait until no actor runs (bounded), then RSS again.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import httpx
import trio

from bench.load import LoadResult
from bench.measure import Shape, encoded, load_spec, progress, rss_bytes, run_load_process
from bench.payorch_target import Payorch, bench_settings, create_target, running_payorch
from bench.shop import Application, sandbox_link, signed_up_merchant
from payorch.storage.database import Connection, open_database
from payorch.supervisors.housekeeping import SWEEP_EVERY_S
from payorch.values.secrets import api_key_prefix, new_api_key, token_hash

WARMUP_APPLICATIONS = 200
SAMPLE_EVERY_S = 0.5
# After the last create, actors must all have stopped within the idle timeout and this much more.
EVICTION_GRACE_S = 30.0
# Once no actor runs, memory is read after this pause (the last responses' buffers are let go).
SETTLE_S = 1.0
MIB = 1024 * 1024


@dataclass(frozen=True)
class IdleResult:
    applications: int
    actor_idle_s: float
    warmup: LoadResult  # the warm-up's creates
    touch: LoadResult  # one create per application
    rss_baseline: int  # bytes: after the warm-up, no actor running
    rss_peak: int  # the most sampled while the creates ran
    rss_after: int  # once no actor ran any more
    actors_baseline: int
    actors_peak: int  # the most sampled while the creates ran
    actors_at_end: int  # when the last create was answered
    actors_after: int  # at the end of the wait: 0 unless some never stopped
    waited_s: float  # from the last create until no actor ran (or the wait gave up)
    idle_s: float  # from the last create until RSS was read the last time

    @property
    def rss_change(self) -> float:
        return (self.rss_after - self.rss_baseline) / self.rss_baseline if self.rss_baseline else 0.0


async def _copy(
    conn: Connection, template_id: uuid.UUID, ids: list[uuid.UUID], hashes: list[bytes], prefixes: list[str]
) -> None:
    await conn.execute(
        """INSERT INTO applications (id, merchant_id, name)
           SELECT new.id, a.merchant_id, 'Bench idle ' || new.n
           FROM applications a, unnest($2::uuid[]) WITH ORDINALITY AS new(id, n) WHERE a.id = $1""",
        template_id,
        ids,
    )
    await conn.execute(
        """INSERT INTO provider_configs (application_id, provider, is_active, payment_methods, credentials,
               key_fingerprint, webhook_reference, webhook_secret)
           SELECT new.id, c.provider, c.is_active, c.payment_methods, c.credentials, c.key_fingerprint,
               c.webhook_reference, c.webhook_secret
           FROM provider_configs c, unnest($2::uuid[]) AS new(id) WHERE c.application_id = $1""",
        template_id,
        ids,
    )
    await conn.execute(
        """INSERT INTO api_keys (id, application_id, key_hash, key_prefix, description)
           SELECT new.key_id, new.id, new.hash, new.prefix, 'bench'
           FROM unnest($1::uuid[], $2::uuid[], $3::bytea[], $4::text[]) AS new(key_id, id, hash, prefix)""",
        [uuid.uuid4() for _ in ids],
        ids,
        hashes,
        prefixes,
    )


async def copies_of(payorch: Payorch, template: Application, count: int) -> list[str]:
    """`count` new applications of the template's merchant, each with the template's providers and
    an API key of its own; returns the keys."""
    keys = [new_api_key() for _ in range(count)]
    ids = [uuid.uuid4() for _ in keys]
    async with open_database(payorch.service.db.dsn, min_size=1, max_size=1) as db:
        await db.transaction(
            _copy,
            uuid.UUID(template.id),
            ids,
            [token_hash(k) for k in keys],
            [api_key_prefix(k) for k in keys],
        )
    return keys


async def live_actors(http: httpx.AsyncClient) -> int:
    """Application actors running now, as payorch's `/metrics` tells."""
    response = await http.get("/metrics")
    response.raise_for_status()
    for line in response.text.splitlines():
        if line.startswith("payorch_actor_mailboxes "):
            return int(float(line.split()[1]))
    raise RuntimeError("/metrics has no payorch_actor_mailboxes")


async def _wait_until_no_actor(http: httpx.AsyncClient, deadline_s: float) -> tuple[int, float]:
    """Poll until no actor runs or `deadline_s` passed: (actors then, seconds waited)."""
    started = trio.current_time()
    with trio.move_on_after(deadline_s):
        while True:  # payorch's state as /metrics tells it: polled, there is no event to wait on
            if await live_actors(http) == 0:
                return 0, trio.current_time() - started
            await trio.sleep(SAMPLE_EVERY_S)
    return await live_actors(http), trio.current_time() - started


def _touch_each(payorch: Payorch, api_keys: Sequence[str], connections: int) -> bytes:
    """The load of one session create per API key, `connections` at a time, encoded for the load
    generator. Made before the baseline is read: payorch runs in this process, and a description
    of thousands of keys made after it would count as payorch's growth."""
    target = create_target(payorch.base_url, list(api_keys))
    # Bounded by the time thousands of creates take at a few dozen a second, at worst.
    shape = Shape(connections=connections, warmup_s=0, measured_s=600, max_requests=len(api_keys))
    return encoded(load_spec(target, shape))


async def _sample(http: httpx.AsyncClient, samples: list[tuple[int, int]]) -> None:
    """Every half second: (this process's RSS, live actors)."""
    while True:
        samples.append((rss_bytes(), await live_actors(http)))
        await trio.sleep(SAMPLE_EVERY_S)


async def measure_idle(
    work_dir: Path, applications: int, actor_idle_s: float, connections: int
) -> IdleResult:
    """The idle benchmark on a payorch of its own under `work_dir`."""
    settings = bench_settings(work_dir, actor_idle_s=actor_idle_s)
    eviction_deadline_s = actor_idle_s + EVICTION_GRACE_S
    async with running_payorch(settings, work_dir / "payorch.log") as payorch:
        async with signed_up_merchant(payorch) as merchant:
            template = await merchant.new_application("Bench idle 0", sandbox_link())
        progress(f"idle: copying the application {applications - 1} times in the database")
        api_keys = [template.api_key, *await copies_of(payorch, template, applications - 1)]
        async with httpx.AsyncClient(base_url=payorch.base_url, timeout=30) as http:
            warmup_keys = api_keys[:WARMUP_APPLICATIONS]
            progress(f"idle: warm-up, one create for each of {len(warmup_keys)} applications")
            warmup = await run_load_process(_touch_each(payorch, warmup_keys, connections))
            every_one = _touch_each(payorch, api_keys, connections)
            actors_baseline, _ = await _wait_until_no_actor(http, eviction_deadline_s)
            await trio.sleep(SETTLE_S)
            rss_baseline = rss_bytes()
            progress(f"idle: one create for each of {applications} applications, {connections} connections")
            samples: list[tuple[int, int]] = []
            async with trio.open_nursery() as nursery:
                nursery.start_soon(_sample, http, samples)
                touch = await run_load_process(every_one)  # kept until RSS is read after idle
                nursery.cancel_scope.cancel()
            actors_at_end = await live_actors(http)
            samples.append((rss_bytes(), actors_at_end))
            progress(f"idle: waiting for the actors to stop (engine.actor_idle_s = {actor_idle_s:g} s)")
            actors_after, waited_s = await _wait_until_no_actor(http, eviction_deadline_s)
            # Idle means also past what payorch forgets by time: remembered API keys are dropped
            # `auth.api_key_cache_s` after their last use, by a sweep every SWEEP_EVERY_S.
            forgotten_s = settings.auth.api_key_cache_s + SWEEP_EVERY_S
            await trio.sleep(max(0.0, forgotten_s - waited_s) + SETTLE_S)
            rss_after = rss_bytes()
            idle_s = max(waited_s, forgotten_s) + SETTLE_S
    return IdleResult(
        applications=applications,
        actor_idle_s=actor_idle_s,
        warmup=warmup,
        touch=touch,
        rss_baseline=rss_baseline,
        rss_peak=max(rss for rss, _ in samples),
        rss_after=rss_after,
        actors_baseline=actors_baseline,
        actors_peak=max(actors for _, actors in samples),
        actors_at_end=actors_at_end,
        actors_after=actors_after,
        waited_s=waited_s,
        idle_s=idle_s,
    )
