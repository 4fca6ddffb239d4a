"""Mollie: payorch's adapter for Mollie, on Mollie's official Python SDK (`mollie-api-python`), whose
blocking calls run in worker threads.

- `adapter.MollieProvider`: the `Provider` interface. Linking checks the key; each payment carries
  payorch's endpoint as its `webhookUrl`; a checkout is a Mollie payment, a refund a Mollie refund;
- `amounts`: the methods, currencies and amounts payorch offers on Mollie, and Mollie's amount objects;
- `events`: Mollie's classic webhook (an id only) and what payorch reads from the objects it names.

docs/providers.md explains the choices: webhooks, method mapping, expiry, chargebacks.
"""

from payorch.providers.mollie.adapter import MollieProvider, MollieRefundRefused

__all__ = ["MollieProvider", "MollieRefundRefused"]
