"""Long-running loops that restart on failure: webhook delivery, session expiry, refund submission."""
