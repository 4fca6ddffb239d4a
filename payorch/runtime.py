"""The running parts of the service, built once from the settings and passed down.

`open_runtime` owns one nursery holding the application actors and the supervisors; leaving it
cancels them all. The HTTP server is started beside it by `service.run`; tests use it directly.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

import httpx
import trio

from payorch.config import Settings
from payorch.engine.actors import ActorRegistry
from payorch.engine.context import PaymentsContext
from payorch.engine.routing import ProviderHealth, RoutingPolicy
from payorch.http.api_key_cache import ApiKeyCache
from payorch.http.app import create_app
from payorch.http.context import PayorchApp, Services
from payorch.http.ratelimits import RequestLimits
from payorch.metrics import Metrics
from payorch.outbound.client import webhook_client
from payorch.providers.base import Provider
from payorch.providers.catalogue import ProviderCatalogue
from payorch.providers.mollie import MollieProvider
from payorch.providers.sandbox import SandboxProvider
from payorch.providers.sandbox.pages import serve_checkout_pages
from payorch.providers.sandbox.sender import run_event_sender
from payorch.providers.stripe import StripeProvider
from payorch.storage.application_changes import keep_fresh
from payorch.storage.database import Database
from payorch.storage.nodes import NodeIdentity, hold_node_identity
from payorch.supervision import SupervisorBoard, supervised
from payorch.supervisors.claim_takeover import run_claim_takeover
from payorch.supervisors.expiry import run_expiry_supervisor
from payorch.supervisors.housekeeping import forget_idle_state
from payorch.supervisors.idempotency import run_idempotency_supervisor
from payorch.supervisors.refunds import run_refund_supervisor
from payorch.supervisors.webhooks import run_webhook_supervisor
from payorch.values.clock import SYSTEM_CLOCK, Clock
from payorch.values.secretbox import SecretBox


def enabled_providers(
    settings: Settings, db: Database, secrets: SecretBox, clock: Clock = SYSTEM_CLOCK
) -> list[Provider]:
    """The provider adapters `config.toml` enables, reading time from `clock`."""
    providers: list[Provider] = []
    sandbox = settings.providers.sandbox
    if sandbox.enabled:
        providers.append(
            SandboxProvider(
                db,
                secrets,
                public_base_url=settings.server.public_base_url,
                refund_delay_ms=sandbox.refund_delay_ms,
                dispute_delay_ms=sandbox.dispute_delay_ms,
                clock=clock,
            )
        )
    stripe = settings.providers.stripe
    if stripe.enabled:
        providers.append(
            StripeProvider(
                public_base_url=settings.server.public_base_url,
                api_base=stripe.api_base,
                timeout_s=stripe.timeout_s,
                max_network_retries=stripe.max_network_retries,
            )
        )
    mollie = settings.providers.mollie
    if mollie.enabled:
        providers.append(
            MollieProvider(
                public_base_url=settings.server.public_base_url,
                api_base=mollie.api_base,
                timeout_s=mollie.timeout_s,
                max_concurrent_calls=mollie.max_concurrent_calls,
            )
        )
    return providers


@dataclass(frozen=True)
class Runtime:
    services: Services
    app: PayorchApp


@asynccontextmanager
async def open_runtime(
    settings: Settings, db: Database, clock: Clock = SYSTEM_CLOCK
) -> AsyncIterator[Runtime]:
    """Services, the HTTP app, and every background task, running until the block is left. Every
    part reads wall time from `clock` (a test hands in one it can move)."""
    secrets = SecretBox(settings.security.keys)
    providers = ProviderCatalogue(enabled_providers(settings, db, secrets, clock))
    health = ProviderHealth(RoutingPolicy())
    metrics = Metrics()
    node = NodeIdentity()
    context = PaymentsContext(
        settings=settings,
        db=db,
        secrets=secrets,
        providers=providers,
        health=health,
        metrics=metrics,
        node=node,
        clock=clock,
    )
    async with webhook_client(settings) as webhooks, trio.open_nursery() as nursery:
        # Held before anything is claimed, so every claim names a live node (`storage.nodes`).
        await nursery.start(hold_node_identity, db.dsn, node)
        actors = ActorRegistry(
            nursery, context, mailbox_size=settings.engine.mailbox_size, idle_s=settings.engine.actor_idle_s
        )
        services = Services(
            settings=settings,
            db=db,
            secrets=secrets,
            providers=providers,
            health=health,
            actors=actors,
            supervisors=SupervisorBoard(),
            webhooks=webhooks,
            metrics=metrics,
            limits=RequestLimits(settings.limits),
            api_keys=ApiKeyCache(settings.auth.api_key_cache_s),
            node=node,
            clock=clock,
        )
        app = create_app(services)
        sandbox = providers.get("sandbox")
        if isinstance(sandbox, SandboxProvider):
            serve_checkout_pages(app, sandbox)
        nursery.start_soon(
            supervised,
            services.supervisors,
            "application changes",
            keep_fresh,
            db.dsn,
            [services.api_keys, actors],
        )
        nursery.start_soon(
            supervised,
            services.supervisors,
            "idle state",
            forget_idle_state,
            [services.api_keys, services.limits],
        )
        await nursery.start(run_claim_takeover, services)
        await nursery.start(run_expiry_supervisor, services)
        await nursery.start(run_refund_supervisor, services)
        await nursery.start(run_idempotency_supervisor, services)
        await nursery.start(run_webhook_supervisor, services)
        stripe_provider = providers.get("stripe")
        if isinstance(stripe_provider, StripeProvider):
            nursery.start_soon(stripe_provider.keep_connections_until_cancelled)
        if settings.providers.sandbox.enabled:
            # The sandbox lives in this process: it hands its signed events to payorch's own HTTP
            # app (same route, same signature check) instead of going out over the network.
            sandbox_client = httpx.AsyncClient(
                transport=httpx.ASGITransport(app=app),  # type: ignore[arg-type]  # ASGI typing differs
                base_url=settings.server.public_base_url,
            )
            nursery.start_soon(_closing, sandbox_client)
            nursery.start_soon(
                supervised,
                services.supervisors,
                "sandbox events",
                run_event_sender,
                db,
                secrets,
                sandbox_client,
                node,
                clock,
            )
        yield Runtime(services=services, app=app)
        nursery.cancel_scope.cancel()


async def _closing(client: httpx.AsyncClient) -> None:
    """Close `client` when the runtime stops."""
    try:
        await trio.sleep_forever()
    finally:
        with trio.CancelScope(shield=True):
            await client.aclose()
