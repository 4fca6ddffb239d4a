"""Merchant access tokens: HS256 JWTs with claims sub (user), mid (merchant), iat, exp, jti."""

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


def issue_access_token(claims: AccessClaims, *, secret: str, ttl_s: int, now: datetime) -> str:
    payload = {
        "sub": str(claims.user_id),
        "mid": str(claims.merchant_id),
        "iat": int(now.timestamp()),
        "exp": int((now + timedelta(seconds=ttl_s)).timestamp()),
        "jti": uuid.uuid4().hex,
    }
    return jwt.encode(payload, secret, algorithm=ALGORITHM)


def verify_access_token(token: str, *, secret: str) -> AccessClaims:
    """The claims of a valid token; `AuthenticationRequired` for a forged, expired, `alg: none` or
    otherwise unacceptable one. Only HS256 is accepted, whatever the token's header says."""
    try:
        payload = jwt.decode(
            token, secret, algorithms=[ALGORITHM], options={"require": _REQUIRED_CLAIMS}, leeway=0
        )
        return AccessClaims(user_id=uuid.UUID(payload["sub"]), merchant_id=uuid.UUID(payload["mid"]))
    except jwt.ExpiredSignatureError:
        raise AuthenticationRequired("access token expired: log in again") from None
    except (jwt.PyJWTError, ValueError, TypeError, AttributeError):
        raise AuthenticationRequired("invalid access token") from None
