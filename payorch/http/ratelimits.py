"""The request limits of one running service: per credential, and per client address for login and
signup. Both answer an excess with `RateLimited` (429, `retryAfter`, `Retry-After`).

Per credential (`limits.requests_per_second`, `limits.burst`): charged by `authenticate` once a
credential is verified, keyed `apikey:<key id>` or `merchant:<merchant id>` (every JWT of a merchant
shares one bucket). Requests without a credential (health probes, sandbox pages) and inbound provider
events (their signature is the credential) are not charged.

Per client address (`limits.login_per_minute`, a burst of the same size): charged by login and
signup before any work, keyed `ip:<remote address>`; the two share one bucket. The address is the
TCP peer's: `X-Forwarded-For` is not read (a client could forge it), so behind a reverse proxy all
clients share the proxy's bucket.

The buckets live in this process; see `docs/rate-limits.md` for sizing several processes.
"""

from __future__ import annotations

import trio

from payorch.config import LimitSettings
from payorch.engine.errors import RateLimited
from payorch.engine.ratelimit import RateLimiter, whole_seconds


class RequestLimits:
    """The two rate limiters of one service, on trio's clock."""

    def __init__(self, settings: LimitSettings) -> None:
        self.per_credential = RateLimiter(rate=settings.requests_per_second, burst=settings.burst)
        self.per_client_address = RateLimiter(
            rate=settings.login_per_minute / 60.0, burst=settings.login_per_minute
        )

    def charge_credential(self, key: str) -> None:
        """Count one request of the credential `key`; `RateLimited` when its bucket is empty."""
        wait = self.per_credential.take(key, trio.current_time())
        if wait is not None:
            retry_after = whole_seconds(wait)
            raise RateLimited(
                f"too many requests for this credential: retry after {retry_after} s", retry_after
            )

    def charge_login(self, remote_address: str | None) -> None:
        """Count one login or signup attempt from `remote_address`; `RateLimited` when its bucket
        is empty."""
        key = f"ip:{remote_address or 'unknown'}"
        wait = self.per_client_address.take(key, trio.current_time())
        if wait is not None:
            retry_after = whole_seconds(wait)
            raise RateLimited(
                f"too many login and signup attempts from this address: retry after {retry_after} s",
                retry_after,
            )
