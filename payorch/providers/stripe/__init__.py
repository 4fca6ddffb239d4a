"""Stripe: payorch's adapter for Stripe, on the official `stripe` SDK (its `*_async` calls over
`stripe.HTTPXClient`, which run under Trio: httpx and anyio both speak Trio).

- `adapter.StripeProvider`: the `Provider` interface. Linking checks the key and registers a webhook
  endpoint; a checkout is a Stripe Checkout Session, a refund a Stripe Refund of its PaymentIntent;
- `amounts`: the currencies, methods and amounts payorch offers on Stripe, and Stripe's minor units;
- `events`: the events the endpoint receives, their signature check and their translation.

docs/providers.md explains the choices: limits and their sources, expiry clamping, event mapping.
"""

from payorch.providers.stripe.adapter import StripeProvider, StripeRefundRefused

__all__ = ["StripeProvider", "StripeRefundRefused"]
