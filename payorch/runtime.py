"""The parts of a running service, built once from the settings and passed down."""

from __future__ import annotations

from payorch.config import Settings
from payorch.engine.secretbox import SecretBox
from payorch.http.context import Services
from payorch.providers.base import Provider
from payorch.providers.catalogue import ProviderCatalogue
from payorch.storage.database import Database


def enabled_providers(settings: Settings, db: Database, secrets: SecretBox) -> list[Provider]:
    """The provider adapters `config.toml` enables."""
    providers: list[Provider] = []
    return providers


def build_services(settings: Settings, db: Database) -> Services:
    secrets = SecretBox(settings.security.encryption_key)
    return Services(
        settings=settings,
        db=db,
        secrets=secrets,
        providers=ProviderCatalogue(enabled_providers(settings, db, secrets)),
    )
