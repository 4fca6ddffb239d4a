"""Access tokens: only HS256 with our secret, only with every claim, only before exp."""

from __future__ import annotations

import uuid
from datetime import timedelta

import jwt
import pytest

from payorch.engine.accounts.access_tokens import AccessClaims, issue_access_token, verify_access_token
from payorch.values.clock import SYSTEM_CLOCK
from payorch.values.errors import AuthenticationRequired

SECRET = "s" * 48
CLAIMS = AccessClaims(user_id=uuid.uuid4(), merchant_id=uuid.uuid4())


def test_issued_token_verifies_to_its_claims() -> None:
    token = issue_access_token(CLAIMS, secret=SECRET, ttl_s=60, now=SYSTEM_CLOCK.now())
    assert verify_access_token(token, secret=SECRET, now=SYSTEM_CLOCK.now()) == CLAIMS


def test_token_past_its_lifetime_is_refused() -> None:
    token = issue_access_token(
        CLAIMS, secret=SECRET, ttl_s=60, now=SYSTEM_CLOCK.now() - timedelta(seconds=61)
    )
    with pytest.raises(AuthenticationRequired, match="expired"):
        verify_access_token(token, secret=SECRET, now=SYSTEM_CLOCK.now())


def test_token_signed_with_another_secret_is_refused() -> None:
    token = issue_access_token(CLAIMS, secret="o" * 48, ttl_s=60, now=SYSTEM_CLOCK.now())
    with pytest.raises(AuthenticationRequired):
        verify_access_token(token, secret=SECRET, now=SYSTEM_CLOCK.now())


def test_unsigned_token_is_refused() -> None:
    payload = jwt.decode(
        issue_access_token(CLAIMS, secret=SECRET, ttl_s=60, now=SYSTEM_CLOCK.now()),
        options={"verify_signature": False},
    )
    unsigned = jwt.encode(payload, key=None, algorithm="none")
    with pytest.raises(AuthenticationRequired):
        verify_access_token(unsigned, secret=SECRET, now=SYSTEM_CLOCK.now())


def test_token_with_a_subject_that_is_not_a_uuid_is_refused() -> None:
    now = int(SYSTEM_CLOCK.now().timestamp())
    token = jwt.encode(
        {"sub": "admin", "mid": str(uuid.uuid4()), "iat": now, "exp": now + 60, "jti": "x"},
        SECRET,
        algorithm="HS256",
    )
    with pytest.raises(AuthenticationRequired):
        verify_access_token(token, secret=SECRET, now=SYSTEM_CLOCK.now())


def test_expiry_is_judged_by_the_clock_it_is_given() -> None:
    issued = SYSTEM_CLOCK.now()
    token = issue_access_token(CLAIMS, secret=SECRET, ttl_s=60, now=issued)
    assert verify_access_token(token, secret=SECRET, now=issued + timedelta(seconds=59)) == CLAIMS
    with pytest.raises(AuthenticationRequired, match="expired"):
        verify_access_token(token, secret=SECRET, now=issued + timedelta(seconds=60))


def test_a_token_issued_after_the_clocks_now_is_refused() -> None:
    issued = SYSTEM_CLOCK.now()
    token = issue_access_token(CLAIMS, secret=SECRET, ttl_s=60, now=issued + timedelta(seconds=5))
    with pytest.raises(AuthenticationRequired):
        verify_access_token(token, secret=SECRET, now=issued)


@pytest.mark.parametrize("bad", [{"exp": "never"}, {"iat": 1.5}, {"exp": True}])
def test_a_token_whose_times_are_not_whole_seconds_is_refused(bad: dict[str, object]) -> None:
    now = int(SYSTEM_CLOCK.now().timestamp())
    claims = {"sub": str(uuid.uuid4()), "mid": str(uuid.uuid4()), "iat": now, "exp": now + 60, "jti": "x"}
    token = jwt.encode({**claims, **bad}, SECRET, algorithm="HS256")
    with pytest.raises(AuthenticationRequired):
        verify_access_token(token, secret=SECRET, now=SYSTEM_CLOCK.now())


def test_a_token_carries_its_session_version() -> None:
    claims = AccessClaims(user_id=uuid.uuid4(), merchant_id=uuid.uuid4(), session_version=3)
    token = issue_access_token(claims, secret=SECRET, ttl_s=60, now=SYSTEM_CLOCK.now())
    assert verify_access_token(token, secret=SECRET, now=SYSTEM_CLOCK.now()).session_version == 3


def test_a_token_issued_before_session_versions_counts_as_version_0() -> None:
    now = int(SYSTEM_CLOCK.now().timestamp())
    claims = {"sub": str(uuid.uuid4()), "mid": str(uuid.uuid4()), "iat": now, "exp": now + 60, "jti": "x"}
    token = jwt.encode(claims, SECRET, algorithm="HS256")
    assert verify_access_token(token, secret=SECRET, now=SYSTEM_CLOCK.now()).session_version == 0


@pytest.mark.parametrize("version", ["1", 1.0, True, None])
def test_a_session_version_that_is_not_an_integer_is_refused(version: object) -> None:
    now = int(SYSTEM_CLOCK.now().timestamp())
    claims = {"sub": str(uuid.uuid4()), "mid": str(uuid.uuid4()), "iat": now, "exp": now + 60, "jti": "x"}
    token = jwt.encode({**claims, "sv": version}, SECRET, algorithm="HS256")
    with pytest.raises(AuthenticationRequired):
        verify_access_token(token, secret=SECRET, now=SYSTEM_CLOCK.now())
