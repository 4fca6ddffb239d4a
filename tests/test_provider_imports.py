"""Stripe's and Mollie's SDKs are imported only by a process that enables their provider: every
other `payorch` process (and command) starts without them."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

pytestmark = pytest.mark.long  # a process of its own

_PROBE = """
import json, sys
from payorch.config import Settings, ProviderSettings, StripeSettings, MollieSettings
from payorch.runtime import enabled_providers
from payorch.values.secretbox import SecretBox
from cryptography.fernet import Fernet

enabled = sys.argv[1] == "enabled"
providers = ProviderSettings(stripe=StripeSettings(enabled=enabled), mollie=MollieSettings(enabled=enabled))
settings = Settings(providers=providers)
names = [p.name for p in enabled_providers(settings, None, SecretBox([Fernet.generate_key().decode()]))]
print(json.dumps({"providers": names, "stripe": "stripe" in sys.modules, "mollie": "mollie" in sys.modules}))
"""


def _probe(enabled: str) -> dict[str, object]:
    done = subprocess.run(  # noqa: S603 - our own interpreter and arguments
        [sys.executable, "-c", _PROBE, enabled], capture_output=True, text=True, check=True, timeout=120
    )
    found: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return found


def test_a_process_without_stripe_or_mollie_enabled_never_imports_their_sdks() -> None:
    assert _probe("disabled") == {"providers": ["sandbox"], "stripe": False, "mollie": False}


def test_a_process_that_enables_them_imports_their_sdks() -> None:
    assert _probe("enabled") == {"providers": ["sandbox", "stripe", "mollie"], "stripe": True, "mollie": True}
