"""The payment domain: creating checkout sessions, their states and events, refunds, expiry, the
providers' verified events, and the sessions' representations (docs/architecture.md, "Rooms")."""
