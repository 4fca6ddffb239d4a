"""Fixtures for the sandbox provider: the adapter on the test database, and a sandbox account."""

from __future__ import annotations

import pytest

from payorch.providers.base import Credentials
from payorch.providers.sandbox import SandboxProvider
from payorch.storage.database import Database
from payorch.values.secretbox import SecretBox
from tests.clock import ShiftedClock
from tests.conftest import TEST_ENCRYPTION_KEY
from tests.providers.helpers import DISPUTE_DELAY_MS, REFUND_DELAY_MS, SANDBOX_KEY


@pytest.fixture
def secrets() -> SecretBox:
    return SecretBox(TEST_ENCRYPTION_KEY)


@pytest.fixture
def sandbox(db: Database, secrets: SecretBox, clock: ShiftedClock) -> SandboxProvider:
    """The sandbox on the test database, on its own (no app): for adapter and sender tests."""
    return SandboxProvider(
        db,
        secrets,
        public_base_url="http://payorch.test",
        refund_delay_ms=REFUND_DELAY_MS,
        dispute_delay_ms=DISPUTE_DELAY_MS,
        clock=clock,
    )


@pytest.fixture
def credentials() -> Credentials:
    return Credentials(api_key=SANDBOX_KEY)
