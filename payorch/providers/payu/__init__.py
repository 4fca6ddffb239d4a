"""PayU: payorch's adapter for PayU, on a small typed client of payorch's own over httpx (PayU
publishes no Python SDK).

- `adapter.PayuProvider`: the `Provider` interface. Linking checks the POS's OAuth credentials; each
  order carries payorch's endpoint as its `notifyUrl`; a checkout is a PayU order on PayU's hosted
  page, a refund a PayU refund with payorch's refund id as `extRefundId`;
- `client`: the part of PayU's REST API v2.1 payorch uses, and the OAuth token of each account;
- `credentials`: a POS's five credentials, checked, sealed and fingerprinted;
- `methods`: the methods, currencies and amounts payorch offers on PayU;
- `notifications`: the `OpenPayu-Signature` check and what payorch reads in PayU's notifications.

docs/providers.md explains the choices: the client, credentials, notifications, expiry, refunds.
"""

from payorch.providers.payu.adapter import PayuProvider, PayuRefundRefused

__all__ = ["PayuProvider", "PayuRefundRefused"]
