"""The running parts of the service, built once from the settings and passed down.

`open_runtime` owns one nursery holding the application actors and the supervisors, each started
once it is ready (`nursery.start`); leaving it cancels them all. The HTTP server is started beside
it by `service.run`; tests use it directly.
`Runtime.reload` applies a reloaded configuration (SIGHUP) to the running parts: every part reads
its settings through `LiveSettings` at each use, and what was built from them (rate limiters, the
provider adapters, the webhook test-send client) is reconfigured or replaced here.
"""

from __future__ import annotations

import logging
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from functools import partial

import httpx
import trio

from payorch.config import (
    ConfigError,
    LiveSettings,
    Settings,
    changed_keys,
    check_loopback_webhooks,
    keep_restart_only,
)
from payorch.engine.accounts.passwords import PasswordHasher, hashes_at_once
from payorch.engine.commands import PaymentActors
from payorch.engine.context import Context
from payorch.engine.provider_health import ProviderHealth, RoutingPolicy
from payorch.engine.reconciliation.runs import ReconciliationRuns
from payorch.engine.routing.backtest_processes import BacktestProcesses
from payorch.http.api_key_cache import ApiKeyCache
from payorch.http.app import create_app
from payorch.http.provider_config_cache import ProviderConfigCache
from payorch.http.request_limits import RequestLimits
from payorch.http.services import PayorchApp, Services
from payorch.http.shared_limits import DatabaseBuckets
from payorch.logs import set_log_level
from payorch.metrics import Metrics
from payorch.outbound.client import CurrentClient, close_after, webhook_client
from payorch.providers.base import Provider
from payorch.providers.catalogue import ProviderCatalogue
from payorch.providers.sandbox import SandboxProvider
from payorch.providers.sandbox.pages import serve_checkout_pages
from payorch.providers.sandbox.sender import run_event_sender
from payorch.restarts import SupervisorBoard, supervised
from payorch.storage.application_changes import keep_fresh
from payorch.storage.database import Database
from payorch.storage.nodes import NodeChannels, NodeIdentity, hold_node_identity
from payorch.supervisors.attempt_details import run_attempt_details_pruning
from payorch.supervisors.daily_reconciliation import run_daily_reconciliation
from payorch.supervisors.delivery_loop import run_webhook_supervisor
from payorch.supervisors.delivery_statistics import run_delivery_statistics
from payorch.supervisors.expiry_loop import run_expiry_supervisor
from payorch.supervisors.housekeeping import delete_full_buckets, forget_idle_state
from payorch.supervisors.key_sweeper import run_idempotency_supervisor
from payorch.supervisors.refund_loop import run_refund_supervisor
from payorch.supervisors.takeover_loop import run_claim_takeover
from payorch.values.clock import SYSTEM_CLOCK, Clock
from payorch.values.secretbox import SecretBox

log = logging.getLogger("payorch.runtime")

# Every provider payorch has an adapter for, as named in `[providers.<name>]`.
PROVIDER_NAMES = ("sandbox", "stripe", "mollie", "payu")
# A replaced client or adapter is closed this long after the longest its calls may still take.
RETIRE_MARGIN_S = 5.0


def enabled_providers(
    settings: Settings, db: Database, secrets: SecretBox, clock: Clock = SYSTEM_CLOCK
) -> list[Provider]:
    """The provider adapters `config.toml` enables, reading time from `clock`."""
    return [
        provider_adapter(name, settings, db, secrets, clock)
        for name in PROVIDER_NAMES
        if getattr(settings.providers, name).enabled
    ]


def provider_adapter(
    name: str, settings: Settings, db: Database, secrets: SecretBox, clock: Clock
) -> Provider:
    """The adapter of the provider `name`, built from `[providers.<name>]`."""
    if name == "sandbox":
        sandbox = settings.providers.sandbox
        return SandboxProvider(
            db,
            secrets,
            public_base_url=settings.server.public_base_url,
            refund_delay_ms=sandbox.refund_delay_ms,
            dispute_delay_ms=sandbox.dispute_delay_ms,
            settlement_lag_days=sandbox.settlement_lag_days,
            settlement_fees=sandbox.settlement_fees,
            clock=clock,
        )
    # Stripe's and Mollie's SDKs are imported only when their provider is enabled: importing them
    # (and the HTTP clients they bring) costs every process about a fifth of a second otherwise.
    if name == "stripe":
        from payorch.providers.stripe import StripeProvider

        stripe = settings.providers.stripe
        return StripeProvider(
            public_base_url=settings.server.public_base_url,
            api_base=stripe.api_base,
            timeout_s=stripe.timeout_s,
            max_network_retries=stripe.max_network_retries,
        )
    if name == "mollie":
        from payorch.providers.mollie import MollieProvider

        mollie = settings.providers.mollie
        return MollieProvider(
            public_base_url=settings.server.public_base_url,
            api_base=mollie.api_base,
            timeout_s=mollie.timeout_s,
            max_concurrent_calls=mollie.max_concurrent_calls,
        )
    if name == "payu":
        from payorch.providers.payu import PayuProvider

        payu = settings.providers.payu
        return PayuProvider(
            public_base_url=settings.server.public_base_url, api_base=payu.api_base, timeout_s=payu.timeout_s
        )
    raise ValueError(f"no provider adapter is named {name!r}")


def longest_provider_call_s(settings: Settings) -> float:
    """The longest a call to a provider adapter can take under `settings`: a deadline of the engine
    (`engine.provider_timeout_s`, `refunds.submit_timeout_s`), or every try of one SDK request."""
    stripe, mollie = settings.providers.stripe, settings.providers.mollie
    return max(
        settings.engine.provider_timeout_s,
        settings.refunds.submit_timeout_s,
        stripe.timeout_s * (stripe.max_network_retries + 2),  # its tries, and payorch's one after a 429
        mollie.timeout_s,
        settings.providers.payu.timeout_s * 4,  # a token, the call, and both again after a 401
    )


class Runtime:
    """The running parts: `services` (what the HTTP app and the supervisors use) and `app`; `reload`
    applies a reloaded configuration to them."""

    def __init__(
        self, services: Services, app: PayorchApp, nursery: trio.Nursery, db: Database, clock: Clock
    ) -> None:
        self.services = services
        self.app = app
        self._nursery = nursery
        self._db = db
        self._clock = clock
        self._keepers: dict[Provider, trio.CancelScope] = {}

    def start_connection_keeper(self, provider: Provider) -> None:
        """Run the connection pool of `provider` (Stripe's: a provider with
        `keep_connections_until_cancelled`) until it is retired or the runtime stops."""
        keep: Callable[[], Awaitable[None]] | None
        keep = getattr(provider, "keep_connections_until_cancelled", None)
        if keep is not None:
            scope = trio.CancelScope()
            self._keepers[provider] = scope
            self._nursery.start_soon(_within, scope, keep)

    def reload(self, loaded: Settings) -> None:
        """Make `loaded` the running configuration, from the next read of any setting on; the keys
        of `config.RESTART_ONLY` keep their running value and are logged. Nothing awaits in
        between, so no request sees half of it. `ConfigError` (nothing changed) when it cannot be
        applied: a `webhooks.ca_bundle` that cannot be read, or `webhooks.allow_loopback` on while
        the running `server.bind` or `server.public_base_url` (restart only) is not loopback."""
        services = self.services
        running = services.context.settings
        settings, kept = keep_restart_only(running, loaded)
        check_loopback_webhooks(settings)
        changed = changed_keys(running, settings)
        test_sends = services.test_send_client
        new_client = None
        if settings.webhooks != test_sends.built_from:
            try:
                new_client = webhook_client(settings)
            except (OSError, ssl.SSLError) as error:
                raise ConfigError(
                    f"invalid setting webhooks.ca_bundle: cannot be read as PEM certificates ({error})",
                    key="webhooks.ca_bundle",
                ) from None
        offered = self._providers_for(running, settings) if settings.providers != running.providers else None
        # From here on nothing fails, and nothing awaits.
        if new_client is not None:
            self._nursery.start_soon(close_after, test_sends.client, _longest_send_s(running))
            test_sends.client, test_sends.built_from = new_client, settings.webhooks
        if settings.limits != running.limits:
            services.limits.reconfigure(settings.limits)
        services.api_keys.ttl_s = settings.auth.api_key_cache_s
        services.api_keys.miss_ttl_s = settings.auth.api_key_miss_cache_s
        services.provider_configs.ttl_s = settings.auth.provider_config_cache_s
        self.app.config["MAX_CONTENT_LENGTH"] = settings.server.max_body_bytes
        if offered is not None:
            self._offer(offered, running)
        if settings.logging.level != running.logging.level:
            set_log_level(settings.logging.level)
        services.context.live.replace(settings, loaded_at=self._clock.now().timestamp())
        log.info(
            "configuration reloaded",
            extra={"generation": services.context.live.generation, "changed": changed},
        )
        if kept:
            log.warning(
                "configuration reloaded, but these keys need a restart: they keep their running value",
                extra={"generation": services.context.live.generation, "restartOnly": kept},
            )

    def _providers_for(self, running: Settings, settings: Settings) -> list[Provider]:
        """The adapters of the providers `settings` enables: the running one where its
        `[providers.<name>]` did not change, else one built anew."""
        offered: list[Provider] = []
        for name in PROVIDER_NAMES:
            section = getattr(settings.providers, name)
            if not section.enabled:
                continue
            current = self.services.context.providers.get(name)
            if current is not None and section == getattr(running.providers, name):
                offered.append(current)
            else:
                offered.append(
                    provider_adapter(name, settings, self._db, self.services.context.secrets, self._clock)
                )
        return offered

    def _offer(self, offered: list[Provider], running: Settings) -> None:
        """Offer `offered` from now on; the adapters no longer offered (replaced or disabled) are
        closed once their calls in flight are over."""
        services = self.services
        for provider in offered:
            if (
                provider not in self._keepers
                and services.context.providers.get(provider.name) is not provider
            ):
                self.start_connection_keeper(provider)
        retired = [provider for provider in services.context.providers if provider not in offered]
        services.context.providers.replace(offered)
        for provider in retired:
            scope = self._keepers.pop(provider, None)
            if scope is not None:
                self._nursery.start_soon(
                    _cancel_after, scope, longest_provider_call_s(running) + RETIRE_MARGIN_S
                )


def _longest_send_s(settings: Settings) -> float:
    return settings.webhooks.timeout_s + RETIRE_MARGIN_S


async def _within(scope: trio.CancelScope, run: Callable[[], Awaitable[None]]) -> None:
    with scope:
        await run()


async def _cancel_after(scope: trio.CancelScope, delay_s: float) -> None:
    await trio.sleep(delay_s)
    scope.cancel()


@asynccontextmanager
async def open_runtime(
    settings: Settings, db: Database, clock: Clock = SYSTEM_CLOCK
) -> AsyncIterator[Runtime]:
    """Services, the HTTP app, and every background task, running until the block is left. Every
    part reads wall time from `clock` (a test hands in one it can move). The block is entered once
    every part is ready: the node identity held, the listeners listening, each supervisor's first
    pass done. A part that fails before it is ready is logged and its error raised: the block is
    never entered."""
    live = LiveSettings(settings, loaded_at=clock.now().timestamp())
    secrets = SecretBox(settings.security.keys)
    providers = ProviderCatalogue(enabled_providers(settings, db, secrets, clock))
    health = ProviderHealth(RoutingPolicy(max_accounts=settings.limits.provider_health_accounts))
    metrics = Metrics()
    node = NodeIdentity()
    channels = NodeChannels()
    context = Context(
        live=live,
        db=db,
        secrets=secrets,
        providers=providers,
        health=health,
        metrics=metrics,
        node=node,
        channels=channels,
        clock=clock,
    )
    test_sends = CurrentClient(webhook_client(settings), settings.webhooks)
    try:
        async with trio.open_nursery() as nursery:
            # Held before anything is claimed, so every claim names a live node (`storage.nodes`);
            # its connection listens for what the loops below read.
            await nursery.start(
                partial(
                    hold_node_identity,
                    public_base_url=settings.server.public_base_url,
                    channels=channels.by_channel(),
                ),
                db,
                node,
            )
            actors = PaymentActors(
                nursery,
                context,
                mailbox_size=settings.engine.mailbox_size,
                idle_s=settings.engine.actor_idle_s,
            )
            board = SupervisorBoard()
            # Routing backtests are decided in worker processes of their own, never in this
            # interpreter; started at their first use, killed and waited for when the runtime stops.
            backtests = BacktestProcesses()
            await nursery.start(backtests.run)
            reconciliations = ReconciliationRuns(context, actors)
            await nursery.start(reconciliations.run)
            services = Services(
                context=context,
                actors=actors,
                supervisors=board,
                test_send_client=test_sends,
                limits=RequestLimits(settings.limits, DatabaseBuckets(db)),
                api_keys=ApiKeyCache(
                    settings.auth.api_key_cache_s, miss_ttl_s=settings.auth.api_key_miss_cache_s
                ),
                provider_configs=ProviderConfigCache(settings.auth.provider_config_cache_s),
                backtests=backtests,
                reconciliations=reconciliations,
                passwords=PasswordHasher(
                    hashes_at_once(settings.auth.password_hashes_at_once),
                    settings.auth.password_hashing_cpu_share,
                ),
            )
            app = create_app(services)
            runtime = Runtime(services, app, nursery, db, clock)
            sandbox = providers.get("sandbox")
            if isinstance(sandbox, SandboxProvider):
                serve_checkout_pages(app, sandbox)
            # Each part is started once it is ready (see its docstring), in this order: the claim
            # takeover's first pass releases what the loops after it claim in their first round.
            # One that fails before it is ready fails the runtime's start, with a log line naming it.
            await nursery.start(
                supervised,
                board,
                "application changes",
                keep_fresh,
                channels.applications,
                [services.api_keys, services.provider_configs, actors],
            )
            await nursery.start(
                supervised,
                board,
                "idle state",
                forget_idle_state,
                [services.api_keys, services.provider_configs, services.limits],
            )
            await nursery.start(supervised, board, "full rate buckets", delete_full_buckets, db)
            await nursery.start(run_claim_takeover, context, board)
            await nursery.start(run_expiry_supervisor, context, actors, board)
            await nursery.start(run_refund_supervisor, context, actors, board)
            await nursery.start(run_idempotency_supervisor, context, board)
            await nursery.start(run_webhook_supervisor, context, board)
            await nursery.start(run_delivery_statistics, context, board)
            await nursery.start(run_attempt_details_pruning, context, board)
            await nursery.start(run_daily_reconciliation, context, reconciliations, board)
            for provider in providers:
                runtime.start_connection_keeper(provider)
            if settings.providers.sandbox.enabled:
                # The sandbox lives in this process: it hands its signed events to payorch's own HTTP
                # app (same route, same signature check) instead of going out over the network.
                sandbox_client = httpx.AsyncClient(
                    transport=httpx.ASGITransport(app=app),  # type: ignore[arg-type]  # ASGI typing differs
                    base_url=settings.server.public_base_url,
                )
                nursery.start_soon(_closing, sandbox_client)
                await nursery.start(
                    supervised,
                    board,
                    "sandbox events",
                    run_event_sender,
                    db,
                    secrets,
                    sandbox_client,
                    node,
                    clock,
                )
            yield runtime
            nursery.cancel_scope.cancel()
    finally:
        with trio.CancelScope(shield=True):
            await test_sends.client.aclose()


async def _closing(client: httpx.AsyncClient) -> None:
    """Close `client` when the runtime stops."""
    try:
        await trio.sleep_forever()
    finally:
        with trio.CancelScope(shield=True):
            await client.aclose()
