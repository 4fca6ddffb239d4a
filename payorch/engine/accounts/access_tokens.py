"""Merchant access tokens: HS256 JWTs with claims sub (user), mid (merchant), iat, exp, jti, and sv
(the user's session version at login: a sign-out moves it on, which ends every earlier token)."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta

import jwt

from payorch.values.errors import AuthenticationRequired

ALGORITHM = "HS256"
_REQUIRED_CLAIMS = ["sub", "mid", "iat", "exp", "jti"]


@dataclass(frozen=True)
class AccessClaims:
    user_id: uuid.UUID
    merchant_id: uuid.UUID
    # The user's `session_version` when the token was issued; a token without `sv` (issued before
    # sign-out existed) counts as version 0.
    session_version: int = 0


def issue_access_token(claims: AccessClaims, *, secret: str, ttl_s: int, now: datetime) -> str:
    payload = {
        "sub": str(claims.user_id),
        "mid": str(claims.merchant_id),
        "iat": int(now.timestamp()),
        "exp": int((now + timedelta(seconds=ttl_s)).timestamp()),
        "jti": uuid.uuid4().hex,
        "sv": claims.session_version,
    }
    return jwt.encode(payload, secret, algorithm=ALGORITHM)


def verify_access_token(token: str, *, secret: str, now: datetime) -> AccessClaims:
    """The claims of a token valid at `now`; `AuthenticationRequired` for a forged, expired, not yet
    issued, `alg: none` or otherwise unacceptable one. Only HS256 is accepted, whatever the token's
    header says. The times are checked against `now` (the service's clock), not the host's."""
    try:
        payload = jwt.decode(
            token,
            secret,
            algorithms=[ALGORITHM],
            options={
                "require": _REQUIRED_CLAIMS,
                "verify_exp": False,
                "verify_iat": False,
                "verify_nbf": False,
            },
        )
        issued_at, expires_at = payload["iat"], payload["exp"]
        if not all(
            isinstance(moment, int) and not isinstance(moment, bool) for moment in (issued_at, expires_at)
        ):
            raise AuthenticationRequired("invalid access token")
        if expires_at <= now.timestamp():
            raise AuthenticationRequired("access token expired: log in again")
        if issued_at > now.timestamp():
            raise AuthenticationRequired("invalid access token")
        session_version = payload.get("sv", 0)
        if not isinstance(session_version, int) or isinstance(session_version, bool):
            raise AuthenticationRequired("invalid access token")
        return AccessClaims(
            user_id=uuid.UUID(payload["sub"]),
            merchant_id=uuid.UUID(payload["mid"]),
            session_version=session_version,
        )
    except (jwt.PyJWTError, ValueError, TypeError, AttributeError):
        raise AuthenticationRequired("invalid access token") from None
