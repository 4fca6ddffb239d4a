"""payorch: payment orchestration. Checkout sessions routed across providers, refunds, signed webhooks."""
