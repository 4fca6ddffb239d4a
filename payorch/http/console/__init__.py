"""The merchant console: server-rendered pages for a merchant's users.

`kit.py` holds what every page shares (the blueprint, the session, CSRF, error pages, security
headers), `display.py` how values are written (times, labels); each area has its own module, which
registers its pages on the blueprint when imported.
"""

from payorch.http.console import (
    applications,
    display,
    join,
    payments,
    providers,
    reconciliations,
    reset_password,
    routing,
    routing_rules,
    routing_versions,
    sessions,
    sign_in,
    sign_up,
    users,
    webhooks,
)
from payorch.http.console.kit import blueprint

__all__ = [
    "applications",
    "blueprint",
    "display",
    "join",
    "payments",
    "providers",
    "reconciliations",
    "reset_password",
    "routing",
    "routing_rules",
    "routing_versions",
    "sessions",
    "sign_in",
    "sign_up",
    "users",
    "webhooks",
]
