"""Every secret payorch checks is compared in constant time: signatures with hmac.compare_digest,
stored credentials by looking up their hash (the secret itself is never compared)."""

from __future__ import annotations

import hmac
import time
import uuid
from typing import Any

import pytest

from payorch.engine.accounts.access_tokens import AccessClaims, issue_access_token, verify_access_token
from payorch.providers.sandbox.signing import (
    SIGNATURE_HEADER,
    SignatureInvalid,
    signature_header,
    verify_signature,
)
from payorch.values.clock import SYSTEM_CLOCK

SECRET = "s" * 48


@pytest.fixture
def compared(monkeypatch: pytest.MonkeyPatch) -> list[tuple[Any, Any]]:
    """Every call of hmac.compare_digest from now on."""
    calls: list[tuple[Any, Any]] = []
    real = hmac.compare_digest

    def spy(left: Any, right: Any) -> bool:
        calls.append((left, right))
        return real(left, right)

    monkeypatch.setattr(hmac, "compare_digest", spy)
    return calls


def test_access_token_signature_is_compared_in_constant_time(compared: list[tuple[Any, Any]]) -> None:
    token = issue_access_token(
        AccessClaims(user_id=uuid.uuid4(), merchant_id=uuid.uuid4()),
        secret=SECRET,
        ttl_s=60,
        now=SYSTEM_CLOCK.now(),
    )
    verify_access_token(token, secret=SECRET, now=SYSTEM_CLOCK.now())
    assert compared


def test_provider_event_signature_is_compared_in_constant_time(compared: list[tuple[Any, Any]]) -> None:
    body = b'{"id": "evt_sbx_1"}'
    now = int(time.time())
    verify_signature({SIGNATURE_HEADER: signature_header(SECRET, body, now)}, body, SECRET, now=now)
    assert compared
    compared.clear()
    with pytest.raises(SignatureInvalid):
        verify_signature({SIGNATURE_HEADER: f"t={now},v1={'0' * 64}"}, body, SECRET, now=now)
    assert compared


def test_api_keys_and_invite_tokens_are_found_by_hash_never_compared() -> None:
    import inspect

    from payorch.http import auth
    from payorch.storage import accounts, applications

    assert "token_hash(api_key)" in inspect.getsource(auth._api_key_principal)
    assert "WHERE k.key_hash = $1" in inspect.getsource(applications.find_api_key_owner)
    assert "WHERE token_hash = $1" in inspect.getsource(accounts.sign_up)
