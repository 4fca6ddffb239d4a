"""Recovery: whether a declined payment attempt may be followed by another at the next provider of the
session's routing decision, and the attempts a session would get in order.

Pure code: it decides, it stores and calls nothing.

Design notes
- The policy is the application's, in its routing document (`recovery`, docs/routing.md
  "Recovery"): at most `max_attempts` attempts per session (1 to `MAX_ATTEMPTS`), a decline retried
  only when its `FailureReason` is one of `retry_on` and its provider's code is none of
  `never_retry`. Left out of the document, `DEFAULT_POLICY`: one attempt, no recovery.
- Hard declines are never retried at another provider, whatever the document says: the card is
  lost, stolen, to be picked up, closed or unknown to its issuer, the issuer suspects fraud or the
  cardholder revoked the merchant's authorisation. Such a decline says the same everywhere (the
  issuer decides it, not the acquirer), and trying the card again elsewhere is what card-testing
  fraud looks like to the networks. `DECLINE_CODES` lists, per provider, the codes payorch knows,
  each hard or soft, with the `FailureReason` the provider's events already translate it to
  (`providers.stripe.events`, `providers.mollie.events`, `providers.sandbox.adapter`; a test keeps
  them equal). What is hard follows Visa's "issuer will never approve" category and the fraud
  codes; a soft decline (insufficient funds, a generic refusal, a failed 3-D Secure, an expired
  card whose customer types another on the next provider's page) may be approved elsewhere.
- A code that is hard somewhere is hard wherever it is met, even at a provider whose table does not
  list it; a `LOST_OR_STOLEN_CARD` decline is hard whatever its code.
- The attempts follow the routing decision's order (`Decision.order`), never a provider already
  tried in the session, never a provider that cannot be tried now (its circuit open), at most
  `max_attempts` in all. The first is there for the decision's reason (or `cascade`, when the
  decision's first provider cannot be tried); every later one for `recovery`.

Reference
- `RecoveryPolicy`, `DEFAULT_POLICY`, `RETRYABLE_REASONS`, `MAX_ATTEMPTS`, `MAX_NEVER_RETRY`,
  `DECLINE_CODE`: the policy and its bounds.
- `DeclineCode`, `DECLINE_CODES`, `DECLINE_CODE_SOURCES`, `is_hard_decline`: the decline table.
- `RetryVerdict`, `retry_verdict`, `may_retry`: whether a declined attempt may be followed by another.
- `PlannedAttempt`, `planned_attempts`: the attempts a session gets from its routing decision.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Final, NamedTuple, Protocol

from payorch.values.statuses import FailureReason, RoutingReason

MAX_ATTEMPTS: Final = 5
MAX_NEVER_RETRY: Final = 100  # codes in `neverRetry`
# A provider's decline code as `neverRetry` takes it: letters, digits, `_`, `.` and `-`.
DECLINE_CODE: Final = re.compile(r"[A-Za-z0-9_.\-]{1,64}")
# The reasons a decline may carry that another provider may approve; `retryOn`'s default.
RETRYABLE_REASONS: Final[tuple[FailureReason, ...]] = (
    FailureReason.CARD_DECLINED,
    FailureReason.INSUFFICIENT_FUNDS,
    FailureReason.EXPIRED_OR_CANCELED_CARD,
    FailureReason.PAYMENT_FAILED,
)
# A decline's reason that is hard whatever its code.
HARD_REASONS: Final = frozenset({FailureReason.LOST_OR_STOLEN_CARD})


@dataclass(frozen=True)
class RecoveryPolicy:
    """An application's recovery policy: at most `max_attempts` attempts per session; a declined one
    is followed by the next only when the decline's reason is one of `retry_on` and its provider's
    code none of `never_retry` (and it is not a hard decline)."""

    max_attempts: int = 1
    retry_on: tuple[FailureReason, ...] = RETRYABLE_REASONS
    never_retry: tuple[str, ...] = ()


DEFAULT_POLICY: Final = RecoveryPolicy()  # one attempt: a declined session is not retried elsewhere


class DeclineCode(NamedTuple):
    """One decline code of a provider: whether it is hard (never retried at another provider), the
    `FailureReason` payorch translates it to, and what it means."""

    hard: bool
    reason: FailureReason
    meaning: str


def _codes(*rows: tuple[str, bool, FailureReason, str]) -> Mapping[str, DeclineCode]:
    return {code: DeclineCode(hard, reason, meaning) for code, hard, reason, meaning in rows}


HARD, SOFT = True, False
_CARD, _FUNDS, _LOST = (
    FailureReason.CARD_DECLINED,
    FailureReason.INSUFFICIENT_FUNDS,
    FailureReason.LOST_OR_STOLEN_CARD,
)
_EXPIRED, _OTHER = FailureReason.EXPIRED_OR_CANCELED_CARD, FailureReason.PAYMENT_FAILED

# Where each provider's list comes from.
DECLINE_CODE_SOURCES: Final[Mapping[str, str]] = {
    "stripe": "https://docs.stripe.com/declines/codes (the decline_code of a failed payment)",
    "mollie": "https://docs.mollie.com/docs/handling-errors-with-mollie-components (details.failureReason)",
    "sandbox": "payorch/providers/sandbox/simulator.py (the sandbox's failure codes)",
}

DECLINE_CODES: Final[Mapping[str, Mapping[str, DeclineCode]]] = {
    "stripe": _codes(
        ("authentication_required", SOFT, _OTHER, "the issuer asks for 3-D Secure"),
        ("approve_with_id", SOFT, _OTHER, "the payment cannot be authorised now"),
        ("call_issuer", SOFT, _OTHER, "declined for an unknown reason"),
        ("card_declined", SOFT, _CARD, "declined (the error code beside a decline code)"),
        ("card_not_supported", SOFT, _OTHER, "the card does not support this kind of purchase"),
        ("card_velocity_exceeded", SOFT, _OTHER, "the card's balance or limit is exceeded"),
        ("currency_not_supported", SOFT, _OTHER, "the card does not support the currency"),
        ("do_not_honor", SOFT, _OTHER, "declined for an unknown reason"),
        ("do_not_try_again", HARD, _OTHER, "the issuer says never to try again"),
        ("duplicate_transaction", SOFT, _OTHER, "an identical payment was just made"),
        ("expired_card", SOFT, _EXPIRED, "the card has expired: the customer may type another"),
        ("fraudulent", HARD, _OTHER, "the issuer or Stripe suspects fraud"),
        ("generic_decline", SOFT, _CARD, "declined for an unknown reason"),
        ("incorrect_cvc", SOFT, _OTHER, "the CVC is incorrect"),
        ("incorrect_number", HARD, _OTHER, "the card number is incorrect"),
        ("incorrect_pin", SOFT, _OTHER, "the PIN is incorrect"),
        ("incorrect_zip", SOFT, _OTHER, "the postal code is incorrect"),
        ("insufficient_funds", SOFT, _FUNDS, "the card has insufficient funds"),
        ("invalid_account", HARD, _OTHER, "the card or its account is invalid"),
        ("invalid_amount", SOFT, _OTHER, "the amount is invalid or too large"),
        ("invalid_cvc", SOFT, _OTHER, "the CVC is incorrect"),
        ("invalid_expiry_month", SOFT, _OTHER, "the expiry month is incorrect"),
        ("invalid_expiry_year", SOFT, _OTHER, "the expiry year is incorrect"),
        ("invalid_number", HARD, _OTHER, "the card number is incorrect"),
        ("invalid_pin", SOFT, _OTHER, "the PIN is incorrect"),
        ("issuer_not_available", SOFT, _OTHER, "the issuer could not be reached"),
        ("lost_card", HARD, _LOST, "the card is reported lost"),
        ("merchant_blacklist", HARD, _OTHER, "the card is on the merchant's block list"),
        ("new_account_information_available", HARD, _OTHER, "the card or its account is invalid"),
        ("no_action_taken", SOFT, _OTHER, "declined for an unknown reason"),
        ("not_permitted", SOFT, _OTHER, "the payment is not permitted"),
        ("offline_pin_required", SOFT, _OTHER, "a PIN is required"),
        ("online_or_offline_pin_required", SOFT, _OTHER, "a PIN is required"),
        ("pickup_card", HARD, _OTHER, "the issuer asks to retain the card (lost or stolen)"),
        ("pin_try_exceeded", SOFT, _OTHER, "too many PIN attempts"),
        ("processing_error", SOFT, _OTHER, "an error while processing the card"),
        ("reenter_transaction", SOFT, _OTHER, "the issuer could not process the payment"),
        ("restricted_card", HARD, _OTHER, "the card cannot be used (possibly lost or stolen)"),
        ("revocation_of_all_authorizations", HARD, _OTHER, "the cardholder revoked every authorisation"),
        ("revocation_of_authorization", HARD, _OTHER, "the cardholder revoked this authorisation"),
        ("security_violation", HARD, _OTHER, "declined for a security violation"),
        ("service_not_allowed", SOFT, _OTHER, "the card does not allow this kind of purchase"),
        ("stolen_card", HARD, _LOST, "the card is reported stolen"),
        ("stop_payment_order", HARD, _OTHER, "the cardholder stopped payments to the merchant"),
        ("testmode_decline", HARD, _OTHER, "a test card was used for a live payment"),
        ("transaction_not_allowed", SOFT, _OTHER, "the card does not allow this payment"),
        ("try_again_later", SOFT, _OTHER, "declined for an unknown reason: may be approved later"),
        ("withdrawal_count_limit_exceeded", SOFT, _OTHER, "the card's balance or limit is exceeded"),
    ),
    "mollie": _codes(
        ("authentication_abandoned", SOFT, _OTHER, "the customer left 3-D Secure"),
        ("authentication_failed", SOFT, _OTHER, "3-D Secure failed"),
        ("authentication_required", SOFT, _OTHER, "the issuer asks for 3-D Secure"),
        ("authentication_unavailable_acs", SOFT, _OTHER, "the issuer's 3-D Secure was unavailable"),
        ("card_declined", SOFT, _CARD, "declined by the issuer"),
        ("card_expired", SOFT, _EXPIRED, "the card has expired: the customer may type another"),
        ("inactive_card", HARD, _OTHER, "the card is inactive or blocked"),
        ("insufficient_funds", SOFT, _FUNDS, "the card has insufficient funds"),
        ("invalid_card_holder_name", SOFT, _OTHER, "the cardholder's name is invalid"),
        ("invalid_card_number", HARD, _OTHER, "the card number is invalid"),
        ("invalid_card_type", SOFT, _OTHER, "the card's type is not accepted"),
        ("invalid_cvv", SOFT, _OTHER, "the CVV is incorrect"),
        ("possible_fraud", HARD, _OTHER, "fraud is suspected"),
        ("refused_by_issuer", SOFT, _CARD, "refused by the issuer"),
        ("unknown_reason", SOFT, _OTHER, "declined for an unknown reason"),
    ),
    "sandbox": _codes(
        ("card_declined", SOFT, _CARD, "declined (test card 4000000000000002, or any unknown number)"),
        ("insufficient_funds", SOFT, _FUNDS, "insufficient funds (test card 4000000000009995)"),
        ("lost_or_stolen_card", HARD, _LOST, "the card is reported lost or stolen"),
        ("payment_failed", SOFT, _OTHER, "declined (any unknown BLIK code)"),
    ),
}

_HARD_ANYWHERE: Final = frozenset(
    code for codes in DECLINE_CODES.values() for code, entry in codes.items() if entry.hard
)


def is_hard_decline(provider: str, code: str | None, reason: FailureReason | None) -> bool:
    """Whether a decline at `provider` with its `code` (None: the provider gave none) and `reason` is
    hard: never retried at another provider. Hard: a code the provider's table marks hard (or, when
    its table does not list the code, one hard at any provider), or a reason hard whatever its code."""
    if reason in HARD_REASONS:
        return True
    if code is None:
        return False
    entry = DECLINE_CODES.get(provider, {}).get(code)
    return entry.hard if entry is not None else code in _HARD_ANYWHERE


class RetryVerdict(enum.StrEnum):
    """Whether a declined attempt may be followed by another, and if not, why."""

    RETRY = "retry"
    LAST_ATTEMPT = "last_attempt"  # the policy's `max_attempts` are used up
    HARD_DECLINE = "hard_decline"
    REASON_NOT_RETRIED = "reason_not_retried"  # the reason is none of `retry_on`
    CODE_NEVER_RETRIED = "code_never_retried"  # the code is one of `never_retry`


def retry_verdict(
    policy: RecoveryPolicy,
    attempt: int,
    reason: FailureReason | None,
    provider: str,
    code: str | None,
) -> RetryVerdict:
    """Whether the session's `attempt`-th attempt (1 for the first), declined at `provider` with
    `reason` and the provider's `code`, may be followed by another (`RETRY`), or why not. A hard
    decline is never retried, whatever the policy says."""
    if attempt >= policy.max_attempts:
        return RetryVerdict.LAST_ATTEMPT
    if is_hard_decline(provider, code, reason):
        return RetryVerdict.HARD_DECLINE
    if (reason or FailureReason.PAYMENT_FAILED) not in policy.retry_on:
        return RetryVerdict.REASON_NOT_RETRIED
    if code is not None and code in policy.never_retry:
        return RetryVerdict.CODE_NEVER_RETRIED
    return RetryVerdict.RETRY


def may_retry(
    policy: RecoveryPolicy, attempt: int, reason: FailureReason | None, provider: str, code: str | None
) -> bool:
    """Whether the declined `attempt` may be followed by another (`retry_verdict` is `RETRY`)."""
    return retry_verdict(policy, attempt, reason, provider, code) is RetryVerdict.RETRY


class DecidedOrder(Protocol):
    """What the attempts are planned from: a routing decision's order of providers and its reason
    (`engine.routing.decision.Decision` is one; named here by its shape, so that the routing
    document, which holds a recovery policy, and the decision, which reads the document, do not
    import each other through this module)."""

    @property
    def order(self) -> Sequence[str]: ...

    @property
    def reason(self) -> str: ...


class PlannedAttempt(NamedTuple):
    """One attempt a session would get: its provider, and why it is there."""

    provider: str
    reason: RoutingReason


def planned_attempts(
    decision: DecidedOrder,
    policy: RecoveryPolicy,
    *,
    tried: Collection[str] = (),
    unavailable: Collection[str] = (),
) -> tuple[PlannedAttempt, ...]:
    """The attempts a session routed by `decision` gets after those at the providers `tried`, in
    order: the decision's eligible providers, without those tried or `unavailable` (their circuit
    open), at most `policy.max_attempts` attempts in all (the tried ones count). Without any tried,
    the first is there for the decision's reason (`cascade` when the decision's first provider is
    unavailable); every other for `recovery`. Empty when no attempt is left."""
    left = policy.max_attempts - len(tried)
    if left <= 0:
        return ()
    order = list(dict.fromkeys(decision.order))
    candidates = [name for name in order if name not in tried and name not in unavailable][:left]
    attempts = []
    for index, provider in enumerate(candidates):
        if index == 0 and not tried:
            first = provider == order[0]
            reason = RoutingReason(decision.reason) if first else RoutingReason.CASCADE
        else:
            reason = RoutingReason.RECOVERY
        attempts.append(PlannedAttempt(provider, reason))
    return tuple(attempts)
