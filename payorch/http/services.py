"""What request handlers reach through the app: the service's one `Context` (settings, database,
providers and the rest, `engine.context`) and the parts only the HTTP layer uses, passed in when the
app is built, never global."""

from __future__ import annotations

from dataclasses import dataclass
from typing import cast

import httpx
from quart import current_app
from quart_trio import QuartTrio

from payorch.engine.accounts.passwords import PasswordHasher
from payorch.engine.commands import PaymentActors
from payorch.engine.context import Context
from payorch.engine.reconciliation.runs import ReconciliationRuns
from payorch.engine.routing.backtest_processes import BacktestProcesses
from payorch.http.api_key_cache import ApiKeyCache
from payorch.http.provider_config_cache import ProviderConfigCache
from payorch.http.request_limits import RequestLimits
from payorch.outbound.client import CurrentClient
from payorch.restarts import SupervisorBoard


@dataclass(frozen=True)
class Services:
    context: Context  # the service's settings, database, providers, metrics, node and clock
    actors: PaymentActors  # the application actors: `actors.ask(application_id, <command>)`
    supervisors: SupervisorBoard  # which background loops run, for /readyz
    test_send_client: CurrentClient  # for webhook test sends (deliveries have a client of their own)
    limits: RequestLimits  # rate limits shared with every process on the database; caps in flight
    api_keys: ApiKeyCache  # active API keys recently seen, forgotten on revocation
    provider_configs: ProviderConfigCache  # what inbound provider events are checked against
    passwords: PasswordHasher  # the process's turns at hashing passwords (login, signup)
    backtests: BacktestProcesses  # the worker processes routing backtests are decided in
    reconciliations: ReconciliationRuns  # reconciliation runs, under way off the request path

    @property
    def webhooks(self) -> httpx.AsyncClient:
        """The client for webhook test sends now (a reload that changes `webhooks.*` replaces it)."""
        return self.test_send_client.client


class PayorchApp(QuartTrio):
    services: Services


def services() -> Services:
    """The services of the app handling the current request: the one way a route or a console page
    reaches the running service, to hand the operations (`http/operations/`) what they use."""
    return cast(PayorchApp, current_app).services
