"""Routing: the merchant's routing document and its validation, success rates learned from outcomes,
the decision, routing one session in its actor, and backtests (docs/routing.md)."""
