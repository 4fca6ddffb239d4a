"""Domain errors. Each says which rule refused a request; `http/error_responses.py` maps each to one
status."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Literal

# The machine-readable `code` of each error answered in shape B (one per `CodedError` below).
ErrorCode = Literal[
    "IDEMPOTENCY_KEY_MISMATCH",
    "IDEMPOTENCY_KEY_IN_PROGRESS",
    "SESSION_NOT_REFUNDABLE",
    "REFUND_EXCEEDS_BALANCE",
    "NO_PROVIDER_AVAILABLE",
]


class DomainError(Exception):
    """A rule of payorch refused a request. `message` is safe to show to the caller."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


@dataclass(frozen=True)
class FieldProblem:
    field: str
    message: str


class InvalidInput(DomainError):
    """The request is malformed; `details` names each offending field."""

    def __init__(self, message: str, details: list[FieldProblem] | None = None) -> None:
        super().__init__(message)
        self.details = details or []


class AuthenticationRequired(DomainError):
    """No usable credential: missing, malformed, forged, expired or revoked."""


class InvalidLogin(DomainError):
    """E-mail and password do not match an account."""


class WrongCredentialKind(DomainError):
    """A valid credential of a kind this operation does not accept (an API key on a JWT-only call)."""


class NotPermitted(DomainError):
    """The credential is valid but may not touch this resource (another merchant's application)."""


class RoleRefused(DomainError):
    """The user's role may not do this (a read-only user asking for a refund or a change): 403."""


class LastAdmin(DomainError):
    """The change would leave the merchant without an admin: 409, nothing changed."""


class ApplicationDisabled(DomainError):
    """The application is disabled; its API keys and session creation are refused."""


# The kinds of thing a `NotFound` names as missing, for a page to say which (the console's 404 page).
Missing = Literal[
    "application",
    "API key",
    "session",
    "webhook",
    "webhook configuration",
    "delivery",
    "provider configuration",
    "routing document version",
    "user",
    "invite",
]


class NotFound(DomainError):
    """The resource does not exist, or is not visible to this caller. `missing` says what kind of
    thing it is, when the message is about one (`"session not found"`): None when it says more."""

    def __init__(self, message: str, *, missing: Missing | None = None) -> None:
        super().__init__(message)
        self.missing = missing


class PreconditionFailed(DomainError):
    """The request's precondition (`If-Match`) does not hold for the resource as it is now: nothing
    was changed."""


class InviteInvalid(DomainError):
    """The signup token is missing or unknown."""


class InviteUsedOrExpired(DomainError):
    """The signup token was already used or has expired."""


class AccountExists(DomainError):
    """The admin e-mail or the company registration number is already registered."""


class StatusUnchanged(DomainError):
    """The application already has the requested status."""


class LimitReached(DomainError):
    """The merchant already has as many of something (applications, active API keys) as it may:
    409 until one goes (a key revoked) or an operator raises the limit."""


class ProviderAlreadyLinked(DomainError):
    """The application is linked to this provider already."""


class ChangeInProgress(DomainError):
    """Another change of the same resource is under way; retry shortly."""


class UnsupportedPaymentMethod(DomainError):
    """The provider does not offer a requested payment method."""


class ProviderCredentialsRejected(DomainError):
    """The provider refused the credentials."""


class ProviderUnavailable(DomainError):
    """Every eligible provider failed or could not be reached."""


class ServiceBusy(DomainError):
    """The application's mailbox is full: retry after `retry_after` seconds."""

    def __init__(self, message: str, retry_after: int = 1) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class StorageUnavailable(ServiceBusy):
    """The database could not serve this request (unreachable, or asked for a retry): 503."""


class CodedError(DomainError):
    """An error answered in shape B, with a machine-readable string `code`."""

    code: ClassVar[ErrorCode]

    def __init__(self, message: str, retry_after: int | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class IdempotencyKeyMismatch(CodedError):
    code = "IDEMPOTENCY_KEY_MISMATCH"


class IdempotencyKeyInProgress(CodedError):
    code = "IDEMPOTENCY_KEY_IN_PROGRESS"


class NoProviderAvailable(CodedError):
    code = "NO_PROVIDER_AVAILABLE"


class SessionNotRefundable(CodedError):
    code = "SESSION_NOT_REFUNDABLE"


class RefundExceedsBalance(CodedError):
    code = "REFUND_EXCEEDS_BALANCE"


class RateLimited(DomainError):
    """Too many requests from one credential or client address: retry after `retry_after` whole
    seconds (at least 1)."""

    def __init__(self, message: str, retry_after: int = 1) -> None:
        super().__init__(message)
        self.retry_after = max(1, retry_after)
