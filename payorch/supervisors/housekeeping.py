"""What the service remembers between requests and no longer needs, dropped while it is idle.

Remembered API keys past `auth.api_key_cache_s` and rate-limit buckets that refilled are dropped
as requests come; with no requests they would stay. This loop drops them every few seconds, so a
service that served many merchants and then went quiet gives that memory back (the application
actors stop by themselves after `engine.actor_idle_s`).
"""

from __future__ import annotations

import trio

from payorch.http.context import Services

SWEEP_EVERY_S = 5.0


async def forget_idle_state(services: Services) -> None:
    """Runs until cancelled."""
    while True:
        await trio.sleep(SWEEP_EVERY_S)
        services.api_keys.forget_expired(trio.current_time())
        services.limits.forget_idle()
