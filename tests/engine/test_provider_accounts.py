"""The provider account routing health is kept per (`engine.context.account_of`): one per linked
configuration and key, never a secret, the same however often it is asked."""

from __future__ import annotations

import uuid
from dataclasses import replace
from datetime import UTC, datetime

from payorch.engine.context import account_of
from payorch.storage.provider_configs import ProviderConfig

NOW = datetime(2026, 11, 29, tzinfo=UTC)


def _config(credentials: bytes, application_id: uuid.UUID | None = None) -> ProviderConfig:
    return ProviderConfig(
        application_id=application_id or uuid.UUID(int=1),
        provider="sandbox",
        is_active=True,
        payment_methods=["card"],
        credentials=credentials,
        key_fingerprint="sk_test_...abcd",
        webhook_reference=None,
        webhook_secret=None,
        created_at=NOW,
        updated_at=NOW,
    )


def test_a_configuration_asked_again_is_the_same_account() -> None:
    config = _config(b"sealed-key-one")
    assert account_of(config) == account_of(config) == account_of(replace(config, is_active=False))


def test_a_new_key_or_another_application_is_another_account() -> None:
    config = _config(b"sealed-key-one")
    assert account_of(replace(config, credentials=b"sealed-key-two")) != account_of(config)
    assert account_of(_config(b"sealed-key-one", uuid.UUID(int=2))) != account_of(config)


def test_the_account_names_its_provider_and_application_and_holds_no_sealed_bytes() -> None:
    account = account_of(_config(b"sealed-key-one"))
    assert account.provider == "sandbox"
    assert account.account.startswith(f"{uuid.UUID(int=1)}/")
    assert "sealed-key-one" not in account.account
