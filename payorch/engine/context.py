"""The service's one context: built once by the runtime (the composition root) and passed down the
way hypercorn passes its `Config`. It holds what every floor above shares: the settings, the
database, the sealed-secret box, the providers and their health, the metrics, this node's identity
and what its connection hears, and the clock; and it times every provider call the same way. The
actors' commands receive it as `actor.context`, the HTTP app as `Services.context` (beside what only
HTTP uses), every background loop as its first argument (beside the actors or the supervisor board,
when it uses them)."""

from __future__ import annotations

import functools
import hashlib
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import trio

from payorch.config import LiveSettings, Settings
from payorch.engine.provider_health import ProviderAccount, ProviderHealth
from payorch.metrics import Metrics
from payorch.providers.base import Credentials, CredentialsRejected, ProviderError, RefundRefused
from payorch.providers.catalogue import ProviderCatalogue
from payorch.storage.database import Database
from payorch.storage.nodes import NodeChannels, NodeIdentity
from payorch.storage.provider_configs import ProviderConfig
from payorch.values.clock import Clock
from payorch.values.secretbox import SecretBox


@dataclass(frozen=True)
class Context:
    """What the service's parts share; one per service."""

    live: LiveSettings  # the settings now: read them through `settings`
    db: Database
    secrets: SecretBox
    providers: ProviderCatalogue
    health: ProviderHealth
    metrics: Metrics
    node: NodeIdentity  # what this process's claims are named by
    channels: NodeChannels  # what the node's connection hears (`storage.nodes`)
    clock: Clock  # wall time for everything stored or compared (`values.clock`)

    @property
    def settings(self) -> Settings:
        """The settings now: a reload replaces them, so read them once where values must agree."""
        return self.live.current

    def credentials(self, config: ProviderConfig) -> Credentials:
        """The provider credentials `config` holds sealed, opened for one call."""
        return credentials_of(self.secrets, config)

    @contextmanager
    def provider_call(self, config: ProviderConfig, operation: str, timeout_s: float) -> Iterator[None]:
        """One call to `config`'s provider with its credentials, cut off after `timeout_s`
        (`trio.TooSlowError`), counted in the metrics and in routing health by how it ended. A failure
        counts for `config`'s account; for the provider as a whole too when it is provider-wide (a
        timeout, or `ProviderError.provider_wide`), never when the provider rejected the credentials
        (docs/routing.md). A refused refund is an answer, not a failure: counted as `refused`,
        health untouched."""
        provider, account = config.provider, account_of(config)
        started = trio.current_time()
        try:
            with trio.fail_after(timeout_s):
                yield
        except RefundRefused:
            self.metrics.provider_call(provider, operation, "refused", trio.current_time() - started)
            raise
        except (ProviderError, CredentialsRejected, trio.TooSlowError) as error:
            elapsed = trio.current_time() - started
            provider_wide = isinstance(error, trio.TooSlowError) or (
                isinstance(error, ProviderError) and error.provider_wide
            )
            self.health.record_failure(account, elapsed, trio.current_time(), provider_wide=provider_wide)
            failure = "timeout" if isinstance(error, trio.TooSlowError) else "error"
            self.metrics.provider_call(provider, operation, failure, elapsed)
            raise
        self.provider_answered(config, operation, trio.current_time() - started)

    def provider_answered(self, config: ProviderConfig, operation: str, elapsed_s: float) -> None:
        """A call to `config`'s provider that succeeded after `elapsed_s`, counted as `provider_call`
        counts one: for a call made apart from it (a checkout created in payorch's own transaction,
        `providers.base.CheckoutInDatabase`)."""
        self.health.record_success(account_of(config), elapsed_s, trio.current_time())
        self.metrics.provider_call(config.provider, operation, "ok", elapsed_s)


def account_of(config: ProviderConfig) -> ProviderAccount:
    """The provider account `config` links, as routing health knows it: the application and the key
    it holds (a digest of the sealed key, so a new key starts with a clean record and nothing secret
    is kept). Two applications never share one, whatever their keys."""
    return _account(config.provider, config.application_id, config.credentials)


@functools.lru_cache(maxsize=1024)
def _account(provider: str, application_id: uuid.UUID, credentials: bytes) -> ProviderAccount:
    """`account_of`, kept for the last 1,024 accounts used: routing asks it of each eligible provider
    at every create (2 µs a digest, 0.2 µs remembered). An entry holds the sealed key and the
    account, about 600 bytes, after its application's actor stopped: so not one per account ever
    used (the health kept per account is bounded on its own, `RoutingPolicy.max_accounts`)."""
    digest = hashlib.blake2b(credentials, digest_size=8).hexdigest()
    return ProviderAccount(provider, f"{application_id}/{digest}")


def credentials_of(secrets: SecretBox, config: ProviderConfig) -> Credentials:
    """The provider credentials `config` holds sealed, opened with `secrets` for one call."""
    return Credentials(api_key=secrets.open(config.credentials))
