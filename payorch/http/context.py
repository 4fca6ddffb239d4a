"""What request handlers reach through the app: settings, database and the rest, passed in, never global."""

from __future__ import annotations

from dataclasses import dataclass
from typing import cast

import httpx
from quart import current_app
from quart_trio import QuartTrio

from payorch.config import LiveSettings, Settings
from payorch.engine.actors import ActorRegistry
from payorch.engine.context import PaymentsContext
from payorch.engine.routing import ProviderHealth
from payorch.http.api_key_cache import ApiKeyCache
from payorch.http.request_limits import RequestLimits
from payorch.metrics import Metrics
from payorch.outbound.client import CurrentClient
from payorch.providers.catalogue import ProviderCatalogue
from payorch.restarts import SupervisorBoard
from payorch.storage.database import Database
from payorch.storage.nodes import NodeIdentity
from payorch.values.clock import Clock
from payorch.values.secretbox import SecretBox


@dataclass(frozen=True)
class Services:
    live: LiveSettings  # the settings now: read them through `settings`
    db: Database
    secrets: SecretBox
    providers: ProviderCatalogue
    health: ProviderHealth
    actors: ActorRegistry[PaymentsContext]
    supervisors: SupervisorBoard
    test_send_client: CurrentClient  # for webhook test sends (deliveries have a client of their own)
    metrics: Metrics
    limits: RequestLimits  # per-credential and per-address token buckets of this process
    api_keys: ApiKeyCache  # active API keys recently seen, forgotten on revocation
    node: NodeIdentity  # what this process's claims are named by
    clock: Clock  # wall time for everything stored or compared (`values.clock`)

    @property
    def settings(self) -> Settings:
        """The settings now: a reload replaces them, so read them once where values must agree."""
        return self.live.current

    @property
    def webhooks(self) -> httpx.AsyncClient:
        """The client for webhook test sends now (a reload that changes `webhooks.*` replaces it)."""
        return self.test_send_client.client


class PayorchApp(QuartTrio):
    services: Services


def services() -> Services:
    """The services of the app handling the current request."""
    return cast(PayorchApp, current_app).services
