"""Settings: `config.toml`, overridden by `PAYORCH_<SECTION>__<KEY>` environment variables.

One `Settings` object is built by the CLI and passed down; nothing reads configuration globally.
Relative paths in the file are resolved against the directory of the configuration file, so
`payorch serve --config /etc/payorch/config.toml` works from any working directory.
"""

from __future__ import annotations

import ipaddress
import os
import re
import secrets
import stat
import time
import tomllib
from collections.abc import Sequence
from decimal import Decimal
from pathlib import Path
from typing import Annotated, Any, Literal, TypeVar
from urllib.parse import parse_qs, urlsplit

from cryptography.fernet import Fernet
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_core import ErrorDetails
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
)
from pydantic_settings.exceptions import SettingsError

from payorch.config_names import UnknownName, unknown_keys, unknown_path, unknown_variables
from payorch.development_ca import ensure_development_ca

DEFAULT_CONFIG_FILE = Path("config.toml")
CONFIG_ENV_VAR = "PAYORCH_CONFIG"
ENV_PREFIX = "PAYORCH_"
# The `PAYORCH_*` variables that are not settings: every other one must name a section and a key.
# PAYORCH_CONFIG picks the file, `payorch dev-receiver` reads its secret from one, a worker its
# assignment from another, and the test suite reads the other two (tests/conftest.py,
# tests/test_schemathesis.py).
NOT_SETTINGS = frozenset(
    {
        CONFIG_ENV_VAR,
        "PAYORCH_TEST_DATABASE_URL",
        "PAYORCH_SCHEMATHESIS_EXAMPLES",
        "PAYORCH_DEV_RECEIVER_SECRET",  # `payorch dev-receiver`'s signing secret
        "PAYORCH_WORKER",  # a worker's number and sockets, from `payorch serve --workers N` (workers.py)
    }
)
# The files under `server.state_dir` that keep a generated secret, by the setting they stand in for.
KEPT_SECRET_FILES = {"auth.jwt_secret": "jwt_secret", "security.encryption_key": "encryption_key"}

PositiveInt = Annotated[int, Field(gt=0)]
PositiveFloat = Annotated[float, Field(gt=0)]
NonNegativeInt = Annotated[int, Field(ge=0)]
NonNegativeFloat = Annotated[float, Field(ge=0)]
MAX_WORKERS = 64


class ConfigError(Exception):
    """The configuration cannot be used; the message is one line that names the key (`key`, dotted,
    when one setting is to blame). `others`: the further problems found in the same reading, each a
    `ConfigError` of its own (the message says how many: "(and N more)"), for `check-config` to list."""

    def __init__(self, message: str, key: str | None = None, others: Sequence[ConfigError] = ()) -> None:
        super().__init__(message)
        self.key = key
        self.others = list(others)

    @property
    def every(self) -> list[ConfigError]:
        """This problem and the others, each with its own line (none saying "and N more")."""
        return [ConfigError(self.first_line, self.key), *self.others] if self.others else [self]

    @property
    def first_line(self) -> str:
        """The message without its "(and N more)"."""
        return re.sub(r" \(and \d+ more\)$", "", str(self))


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ServerSettings(_Section):
    bind: str = "127.0.0.1:8080"
    public_base_url: str = ""  # empty: follows bind (see `_follow_bind`)
    max_body_bytes: PositiveInt = 1_048_576
    graceful_timeout_s: PositiveFloat = 10.0
    state_dir: Path = Path("var")
    trusted_proxy_hops: NonNegativeInt = 0
    # What one client can hold of the HTTP server (payorch/http/server.py, docs/operations.md).
    max_connections: PositiveInt = 1000
    max_connections_per_address: PositiveInt = 100
    read_timeout_s: PositiveFloat = 10.0
    keep_alive_timeout_s: PositiveFloat = 5.0
    workers: int | Literal["auto"] = 1  # payorch/workers.py, docs/operations.md
    _public_base_url_follows_bind: bool = PrivateAttr(default=False)

    @field_validator("bind")
    @classmethod
    def _bind_is_host_port(cls, value: str) -> str:
        host, sep, port = value.rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
            raise ValueError("must be HOST:PORT, for example 127.0.0.1:8080")
        return value

    @field_validator("workers", mode="before")
    @classmethod
    def _workers_count_or_auto(cls, value: Any) -> int | str:
        return workers_setting(value)

    @field_validator("public_base_url")
    @classmethod
    def _url_is_http(cls, value: str) -> str:
        if value and not value.startswith(("http://", "https://")):
            raise ValueError("must be empty (to follow server.bind) or start with http:// or https://")
        return value.rstrip("/")

    @field_validator("max_connections_per_address")
    @classmethod
    def _per_address_within_node(cls, value: int, info: Any) -> int:
        if value > info.data.get("max_connections", value):
            raise ValueError("must be at most server.max_connections")
        return value

    @model_validator(mode="after")
    def _follow_bind(self) -> ServerSettings:
        """An empty `public_base_url` becomes `http://` + `bind`, a wildcard host (0.0.0.0, [::])
        replaced by loopback: `PAYORCH_SERVER__BIND=127.0.0.1:18080` alone moves every link too."""
        if not self.public_base_url:
            host, _, port = self.bind.rpartition(":")
            host = {"0.0.0.0": "127.0.0.1", "[::]": "[::1]"}.get(host, host)  # noqa: S104
            self.__dict__["public_base_url"] = f"http://{host}:{port}"  # frozen: set once, here
            self._public_base_url_follows_bind = True
        return self

    @property
    def public_base_url_follows_bind(self) -> bool:
        """Whether `public_base_url` was left empty and so follows `bind`."""
        return self._public_base_url_follows_bind

    @property
    def bind_is_loopback(self) -> bool:
        """Whether only this host can reach `bind` (127.0.0.0/8, ::1, localhost)."""
        return _is_loopback_host(self.bind.rpartition(":")[0].strip("[]"))


def workers_setting(value: object) -> int | Literal["auto"]:
    """`server.workers` (or `payorch serve --workers`) as written: a whole number of processes from 1
    to MAX_WORKERS (a number or its digits), or "auto"; ValueError otherwise."""
    if value == "auto":
        return "auto"
    if isinstance(value, str) and value.isdigit():
        value = int(value)
    if isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= MAX_WORKERS:
        return value
    raise ValueError(f'must be a whole number of processes from 1 to {MAX_WORKERS}, or "auto"')


# What `target_session_attrs` must say when `database.url` names several hosts: only a writable
# primary will do (asyncpg's default, "any", takes the first host that answers, a standby too).
_WRITABLE_SESSION_ATTRS = frozenset({"read-write", "primary"})


class DatabaseSettings(_Section):
    url: str = ""
    data_dir: Path = Path("var/pgdata")
    pool_min: Annotated[int, Field(ge=1)] = 2
    pool_max: PositiveInt = 10

    @field_validator("url")
    @classmethod
    def _several_hosts_only_to_the_primary(cls, value: str) -> str:
        """A URL of several hosts (a primary and its standbys, docs/operations.md) must ask for the
        writable one; without it, payorch would write to whichever host answers first."""
        parts = urlsplit(value)
        query = parse_qs(parts.query)
        hosts = [host for host in parts.netloc.rpartition("@")[2].split(",") if host]
        hosts += [host for listed in query.get("host", []) for host in listed.split(",") if host]
        attrs = query.get("target_session_attrs", [])
        if len(hosts) > 1 and not (attrs and attrs[-1] in _WRITABLE_SESSION_ATTRS):
            raise ValueError(
                "names several hosts: add target_session_attrs=read-write to it, so that payorch "
                "connects only to the one that is the primary"
            )
        return value

    @field_validator("pool_max")
    @classmethod
    def _max_not_below_min(cls, value: int, info: Any) -> int:
        if value < info.data.get("pool_min", 1):
            raise ValueError("must be at least database.pool_min")
        return value


class AuthSettings(_Section):
    jwt_secret: str = ""
    jwt_ttl_s: PositiveInt = 3600
    api_key_cache_s: NonNegativeFloat = 5.0
    api_key_miss_cache_s: NonNegativeFloat = 5.0
    provider_config_cache_s: NonNegativeFloat = 5.0
    # Password hashes running at once per process (engine/accounts/passwords.py); "auto": half the cores.
    password_hashes_at_once: int | Literal["auto"] = "auto"  # noqa: S105  # a count, not a password
    # The share of one core each hashing thread may take (values/cpu_share.py): it rests after a hash.
    password_hashing_cpu_share: Annotated[float, Field(gt=0, le=1)] = 0.25
    # Lifetime of a password reset link (`payorch reset-password`), in seconds.
    password_reset_ttl_s: PositiveInt = 3600

    @field_validator("jwt_secret")
    @classmethod
    def _long_enough(cls, value: str) -> str:
        if value and len(value) < 32:
            raise ValueError("must be at least 32 characters (or empty to generate one)")
        return value

    @field_validator("password_hashes_at_once", mode="before")
    @classmethod
    def _hashes_count_or_auto(cls, value: Any) -> int | str:
        if value == "auto":
            return "auto"
        if isinstance(value, str) and value.isdigit():
            value = int(value)
        if isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= 1024:
            return value
        raise ValueError('must be a whole number of hashes from 1 to 1024, or "auto"')


class SecuritySettings(_Section):
    """The Fernet keys that seal provider credentials and signing secrets at rest: the first of
    `keys` seals, every one of them opens (docs/operations.md, "Replacing the encryption key")."""

    encryption_key: str | list[str] = ""
    encryption_keys: list[str] = Field(default_factory=list)

    @field_validator("encryption_key", "encryption_keys")
    @classmethod
    def _are_fernet_keys(cls, value: str | list[str]) -> str | list[str]:
        listed = [value] if isinstance(value, str) else value
        for number, key in enumerate(listed, start=1):
            if isinstance(value, str) and not key:
                continue  # empty: generated (see `load_settings`)
            try:
                Fernet(key.encode())
            except (ValueError, TypeError):
                which = "" if isinstance(value, str) else f"key {number} of {len(listed)} (counting from 1) "
                raise ValueError(f"{which}must be a Fernet key: url-safe base64 of 32 bytes") from None
        return value

    @model_validator(mode="after")
    def _one_list(self) -> SecuritySettings:
        if self.encryption_keys and any(key not in self.encryption_keys for key in self._listed_key()):
            raise ValueError(
                "security.encryption_key holds a key that security.encryption_keys does not: list "
                "every key in encryption_keys (the one that encrypts first) and leave encryption_key empty"
            )
        return self

    def _listed_key(self) -> list[str]:
        if isinstance(self.encryption_key, str):
            return [self.encryption_key] if self.encryption_key else []
        return list(self.encryption_key)

    @property
    def keys(self) -> list[str]:
        """Every key, the one that encrypts first: `encryption_keys` if set, else `encryption_key` (one
        key, or a list); empty when neither is set (`load_settings` then generates one)."""
        return list(self.encryption_keys) or self._listed_key()


class SignupSettings(_Section):
    invite_ttl_s: PositiveInt = 7200


class SessionSettings(_Section):
    ttl_s: PositiveInt = 1800


class EngineSettings(_Section):
    actor_idle_s: PositiveFloat = 300.0
    mailbox_size: PositiveInt = 256
    provider_timeout_s: PositiveFloat = 10.0


class RefundSettings(_Section):
    submit_timeout_s: PositiveFloat = 5.0
    retry_max_delay_s: PositiveFloat = 300.0


class IdempotencySettings(_Section):
    retention_s: PositiveInt = 86400


class WebhookSettings(_Section):
    allow_private_networks: bool = False
    # Development only: loopback webhook URLs, plain http to them, the development CA trusted
    # (`check_loopback_webhooks`, `development_ca`).
    allow_loopback: bool = False
    ca_bundle: Path | None = None
    timeout_s: PositiveFloat = 15.0
    retry_schedule_s: list[Annotated[float, Field(ge=0)]] = Field(
        default_factory=lambda: [0.0, 5.0, 300.0, 1800.0, 7200.0, 18000.0, 36000.0, 36000.0], min_length=1
    )
    rotation_overlap_s: Annotated[int, Field(ge=0)] = 86400
    # Delivery attempts one merchant may start per second in one process (`supervisors.attempt_rates`).
    attempts_per_merchant_per_second: PositiveFloat = 50.0
    # Rows of `webhook_deliveries` changed since its last analysis that make payorch analyse it
    # (`supervisors.delivery_statistics`); 0: leave it to autovacuum.
    analyse_after_changes: NonNegativeInt = 10_000
    # Days a delivery attempt's details (headers sent and received, the body's first 4 KiB) are kept
    # (`supervisors.attempt_details`).
    attempt_details_retention_days: PositiveInt = 30

    @field_validator("ca_bundle", mode="before")
    @classmethod
    def _empty_is_none(cls, value: Any) -> Any:
        # `ca_bundle = ""` means none: Path("") would be "." and resolve to the config directory.
        return None if value == "" else value


class SandboxFee(_Section):
    """What the sandbox keeps of a payment of one method: `percent` of it, plus `fixed_minor` minor
    units of its currency."""

    percent: Annotated[Decimal, Field(ge=0, le=100)] = Decimal("0")
    fixed_minor: Annotated[int, Field(ge=0)] = 0


class SandboxFees(_Section):
    """The sandbox's fee per payment method."""

    card: SandboxFee = SandboxFee(percent=Decimal("1.4"), fixed_minor=25)
    apple_pay: SandboxFee = SandboxFee(percent=Decimal("1.4"), fixed_minor=25)
    blik: SandboxFee = SandboxFee(percent=Decimal("1.0"), fixed_minor=0)


class SandboxSettings(_Section):
    enabled: bool = True
    refund_delay_ms: Annotated[int, Field(ge=0)] = 500
    dispute_delay_ms: Annotated[int, Field(ge=0)] = 2000
    # Days after its payment (or refund) on which the sandbox settles it (docs/reconciliation.md).
    settlement_lag_days: Annotated[int, Field(ge=0, le=30)] = 1
    settlement_fees: SandboxFees = SandboxFees()


class _ExternalProviderSettings(_Section):
    """What every provider payorch reaches over the network has: off by default (it needs the
    merchant's own account), its API's address (empty: the provider's own; tests point it at a fake)
    and how long one HTTP request to it may take."""

    enabled: bool = False
    api_base: str = ""
    timeout_s: PositiveFloat = 10.0

    @field_validator("api_base")
    @classmethod
    def _empty_or_http(cls, value: str) -> str:
        if value and not value.startswith(("http://", "https://")):
            raise ValueError("must be empty or start with http:// or https://")
        return value.rstrip("/")


class StripeSettings(_ExternalProviderSettings):
    """Stripe (docs/providers.md), a secret key per application; `api_base` empty: https://api.stripe.com."""

    max_network_retries: Annotated[int, Field(ge=0, le=10)] = 2


class MollieSettings(_ExternalProviderSettings):
    """Mollie (docs/providers.md), an API key per application; `api_base` empty: https://api.mollie.com."""

    max_concurrent_calls: Annotated[int, Field(ge=1, le=1000)] = 16


class PayuSettings(_ExternalProviderSettings):
    """PayU (docs/providers.md), a POS's credentials per application; `api_base` empty: PayU's address
    for the POS's environment (https://secure.payu.com, or https://secure.snd.payu.com for the sandbox)."""


class ProviderSettings(_Section):
    sandbox: SandboxSettings = SandboxSettings()
    stripe: StripeSettings = StripeSettings()
    mollie: MollieSettings = MollieSettings()
    payu: PayuSettings = PayuSettings()


class LimitSettings(_Section):
    requests_per_second: PositiveFloat = 50.0
    burst: PositiveInt = 100
    login_per_minute: PositiveInt = 10
    login_refusal_hold_s: NonNegativeFloat = 5.0
    login_refusal_hold_max_s: NonNegativeFloat = 60.0
    login_refusals_held_per_address: PositiveInt = 100
    login_refusals_held: PositiveInt = 500
    failed_logins_per_account_per_hour: PositiveInt = 20
    provider_events_per_address_per_second: PositiveFloat = 50.0
    provider_events_per_address_burst: PositiveInt = 200
    provider_event_lookups_per_application: PositiveInt = 2
    checkout_returns_per_application: PositiveInt = 64
    provider_health_accounts: PositiveInt = 10000
    background_slots: PositiveInt = 64
    background_per_merchant: PositiveInt = 8
    merchant_requests_per_second: PositiveFloat = 150.0
    merchant_burst: PositiveInt = 300
    routing_changes_per_hour: PositiveFloat = 20.0
    routing_changes_burst: PositiveInt = 10
    routing_evaluations_per_second: PositiveFloat = 1.0
    routing_evaluations_burst: PositiveInt = 5
    failed_api_keys_per_address_per_minute: PositiveInt = 60
    merchant_list_reads: PositiveInt = 2
    merchant_list_read_wait_s: NonNegativeFloat = 2.0
    applications_per_merchant: PositiveInt = 100
    active_api_keys_per_application: PositiveInt = 20
    webhooks_per_application: PositiveInt = 100

    @model_validator(mode="after")
    def _hold_max_covers_the_hold(self) -> LimitSettings:
        if self.login_refusal_hold_max_s < self.login_refusal_hold_s:
            raise ValueError("limits.login_refusal_hold_max_s must be at least limits.login_refusal_hold_s")
        return self


class ReconciliationSettings(_Section):
    """Daily reconciliation (docs/reconciliation.md)."""

    daily: bool = True
    run_at_utc: Annotated[str, Field(pattern=r"^([01][0-9]|2[0-3]):[0-5][0-9]$")] = "06:00"
    retry_first_s: PositiveFloat = 60.0
    retry_max_s: PositiveFloat = 3600.0
    # A page of settlements the provider answers 429 or 5xx is asked again within the run.
    page_attempts: PositiveInt = 5
    page_retry_first_s: PositiveFloat = 1.0
    page_retry_max_s: PositiveFloat = 60.0
    # The share of the server's time a run may take: it rests after each batch in proportion.
    time_share: Annotated[float, Field(gt=0, le=1)] = 0.3
    # The settled days whose matched payments' fees `net` routing weighs (docs/reconciliation.md).
    fee_window_days: Annotated[int, Field(ge=1, le=366)] = 30


class RoutingSettings(_Section):
    """Learned routing (docs/routing.md; `engine.routing.success_rates.RoutingSettings` holds the same but
    `refresh_s`: how often an application's actor reads its success rates again)."""

    window: Annotated[int, Field(ge=1, le=10_000)] = 200
    exploration: Annotated[float, Field(ge=0, le=1)] = 0.01
    elimination_threshold: Annotated[float, Field(ge=0, le=1)] = 0.2
    abandonment_weight: Annotated[float, Field(ge=0, le=1)] = 0.5
    min_outcomes: PositiveInt = 20
    refresh_s: NonNegativeFloat = 5.0
    # The share of one core a backtest's worker process may take (values/cpu_share.py).
    backtest_cpu_share: Annotated[float, Field(gt=0, le=1)] = 1.0


LogLevel = Literal["debug", "info", "warning", "error"]


class LoggingSettings(_Section):
    level: LogLevel = "info"


class Settings(BaseSettings):
    """Every setting of the service; see `config.toml` for what each key means."""

    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX, env_nested_delimiter="__", extra="forbid", frozen=True
    )

    server: ServerSettings = ServerSettings()
    database: DatabaseSettings = DatabaseSettings()
    auth: AuthSettings = AuthSettings()
    security: SecuritySettings = SecuritySettings()
    signup: SignupSettings = SignupSettings()
    sessions: SessionSettings = SessionSettings()
    engine: EngineSettings = EngineSettings()
    refunds: RefundSettings = RefundSettings()
    idempotency: IdempotencySettings = IdempotencySettings()
    webhooks: WebhookSettings = WebhookSettings()
    providers: ProviderSettings = ProviderSettings()
    limits: LimitSettings = LimitSettings()
    routing: RoutingSettings = RoutingSettings()
    reconciliation: ReconciliationSettings = ReconciliationSettings()
    logging: LoggingSettings = LoggingSettings()


_Model = TypeVar("_Model", bound=BaseModel)

# What a running service cannot change without a restart (`payorch serve` reloads the rest on
# SIGHUP): a dotted key, or a whole section. What the HTTP server and the database pool were built
# with, the identity of links already handed out and registered with providers, the secrets every
# process must share, the actors' mailboxes, how many accounts routing health keeps, and the
# sandbox (its pages and event sender exist only when it was enabled at start).
RESTART_ONLY = frozenset(
    {
        "server.bind",
        "server.public_base_url",
        "server.graceful_timeout_s",
        "server.state_dir",
        "server.trusted_proxy_hops",
        "server.max_connections",
        "server.max_connections_per_address",
        "server.read_timeout_s",
        "server.keep_alive_timeout_s",
        "server.workers",
        "database",
        "auth.jwt_secret",
        "auth.password_hashes_at_once",
        "auth.password_hashing_cpu_share",
        "security",
        "engine.actor_idle_s",
        "engine.mailbox_size",
        "limits.provider_health_accounts",
        "providers.sandbox",
    }
)


def keep_restart_only(running: Settings, loaded: Settings) -> tuple[Settings, list[str]]:
    """`loaded` with every `RESTART_ONLY` key at its `running` value, and the dotted keys whose value
    `loaded` would have changed (kept: they take effect at the next start)."""
    return _keep_running(running, loaded, "")


def _keep_running(running: _Model, loaded: _Model, prefix: str) -> tuple[_Model, list[str]]:
    update: dict[str, Any] = {}
    changed: list[str] = []
    for name in type(loaded).model_fields:
        key = f"{prefix}{name}"
        old, new = getattr(running, name), getattr(loaded, name)
        if key in RESTART_ONLY:
            if old != new:
                update[name] = old
                changed += _differing_keys(old, new, key)
        elif isinstance(new, BaseModel):
            merged, inner = _keep_running(old, new, f"{key}.")
            if inner:
                update[name] = merged
                changed += inner
    return (loaded.model_copy(update=update) if update else loaded), changed


def changed_keys(old: BaseModel, new: BaseModel, prefix: str = "") -> list[str]:
    """The dotted keys (each after `prefix`) whose value differs from `old` to `new`, two models of
    the same type: what a reload logs as changed, secrets named but never shown."""
    return [
        found
        for name in type(new).model_fields
        for found in _differing_keys(getattr(old, name), getattr(new, name), f"{prefix}{name}")
    ]


def _differing_keys(old: Any, new: Any, key: str) -> list[str]:
    if isinstance(old, BaseModel) and isinstance(new, BaseModel):
        return changed_keys(old, new, f"{key}.")
    return [key] if old != new else []


class LiveSettings:
    """The settings a running service reads now. Built once by the runtime from those it started
    with; a reload (`runtime.Runtime.reload`) replaces `current`, so every `x.settings.y` read after
    it sees the new values. `generation` counts the configurations loaded (1: the one it started
    with); `loaded_at` is the wall time (Unix seconds) the current one was loaded at."""

    def __init__(self, settings: Settings, loaded_at: float) -> None:
        self.current = settings
        self.generation = 1
        self.loaded_at = loaded_at

    def replace(self, settings: Settings, loaded_at: float) -> None:
        self.current = settings
        self.generation += 1
        self.loaded_at = loaded_at


def config_path_from(argument: str | None) -> Path:
    """The file to read: `--config`, else `PAYORCH_CONFIG`, else `config.toml` here."""
    if argument:
        return Path(argument)
    if os.environ.get(CONFIG_ENV_VAR):
        return Path(os.environ[CONFIG_ENV_VAR])
    return DEFAULT_CONFIG_FILE


def load_settings(path: Path, *, ensure_secrets: bool = True) -> Settings:
    """Read `path` (which may be absent: defaults apply) and the environment.

    Raises `ConfigError` with one line naming the offending key (`check_loopback_webhooks` too). A
    key of the file or a `PAYORCH_*` variable that names no setting is refused with the nearest one
    that does. With `ensure_secrets`, an empty `auth.jwt_secret` or `security.encryption_key` is
    generated once and kept under `server.state_dir`, so tokens and encrypted data survive restarts;
    so is the development CA when `webhooks.allow_loopback` is on.
    """
    table: dict[str, Any] = {}
    if path.exists():
        try:
            table = tomllib.loads(path.read_text())
        except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
            raise ConfigError(f"{path}: not valid TOML: {exc}") from None
        except OSError as exc:
            raise ConfigError(f"{path}: cannot read the configuration file: {exc.strerror}") from None
    elif path != DEFAULT_CONFIG_FILE:
        raise ConfigError(f"{path}: configuration file not found")
    _refuse_unknown_names(path, table)

    class _FileSettings(Settings):
        @classmethod
        def settings_customise_sources(
            cls,
            settings_cls: type[BaseSettings],
            init_settings: PydanticBaseSettingsSource,
            env_settings: PydanticBaseSettingsSource,
            dotenv_settings: PydanticBaseSettingsSource,
            file_secret_settings: PydanticBaseSettingsSource,
        ) -> tuple[PydanticBaseSettingsSource, ...]:
            return (init_settings, env_settings, TomlConfigSettingsSource(settings_cls, toml_file=path))

    try:
        loaded: Settings = _FileSettings()
    except ValidationError as exc:
        raise _first_of([_error_problem(error) for error in exc.errors()]) from None
    except SettingsError as exc:
        raise ConfigError(_environment_error_line(exc)) from None
    settings = _resolve_paths(loaded, path.resolve().parent)
    check_loopback_webhooks(settings)
    if ensure_secrets:
        try:
            settings = _with_generated_secrets(settings)
        except OSError as exc:
            raise ConfigError(
                f"invalid setting server.state_dir: cannot keep generated secrets there: {exc}"
            ) from None
    return settings


def _refuse_unknown_names(path: Path, table: dict[str, Any]) -> None:
    """`ConfigError` for the first key of `table` (the file at `path`), else the first `PAYORCH_*`
    variable, that names no setting; the values are never shown."""
    in_file = unknown_keys(Settings, table)
    in_environment = unknown_variables(Settings, os.environ, ENV_PREFIX, NOT_SETTINGS)
    problems = [ConfigError(f"{path}: {name.text()}", key=name.key) for name in in_file] + [
        ConfigError(variable.text(), key=variable.unknown.key) for variable in in_environment
    ]
    if problems:
        raise _first_of(problems)


def check_loopback_webhooks(settings: Settings) -> None:
    """`ConfigError` naming `webhooks.allow_loopback` when it is on while others may reach this
    service: a merchant could then make payorch post to the services of its own host. It is for a
    payorch only its own machine reaches: `server.bind` and `server.public_base_url` both loopback
    (`localhost`, 127.0.0.0/8, `::1`), which a public address behind a proxy is not."""
    if not settings.webhooks.allow_loopback:
        return
    server = settings.server
    if not server.bind_is_loopback:
        where = f"server.bind {server.bind} is not a loopback address"
    elif not _is_loopback_host(urlsplit(server.public_base_url).hostname or ""):
        where = f"server.public_base_url {server.public_base_url} is not a loopback URL"
    else:
        return
    raise ConfigError(
        f"invalid setting webhooks.allow_loopback: it is for development on one machine, and {where} "
        "(others may reach this payorch): set it to false (in the environment: "
        "PAYORCH_WEBHOOKS__ALLOW_LOOPBACK=false)",
        key="webhooks.allow_loopback",
    )


def _is_loopback_host(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _first_of(problems: list[ConfigError]) -> ConfigError:
    """The first of `problems`, saying how many more there are and carrying them (`others`)."""
    first, others = problems[0], problems[1:]
    more = f" (and {len(others)} more)" if others else ""
    return ConfigError(f"{first}{more}", key=first.key, others=others)


def _error_problem(error: ErrorDetails) -> ConfigError:
    """One validation error of the settings as a `ConfigError` naming its key; a value is shown
    unless it may be a secret."""
    key = ".".join(str(part) for part in error["loc"])
    if error["type"] == "extra_forbidden":
        # A key of a table given whole as JSON (`PAYORCH_SERVER='{"bnid": 1}'`).
        parts = [str(part) for part in error["loc"]]
        unknown = unknown_path(Settings, parts) or UnknownName(key=key, section=len(parts) == 1)
        return ConfigError(unknown.text(), key=key)
    value = error.get("input")
    hidden = isinstance(value, dict) or "secret" in key or "key" in key or key == "database.url"  # a password
    shown = "" if hidden else f" (got {value!r})"
    return ConfigError(f"invalid setting {key}: {error['msg']}{shown}", key=key)


def _environment_error_line(exc: SettingsError) -> str:
    # pydantic-settings raises this when an environment value meant as a list or table is not JSON,
    # and names only the section: name the variables that feed it.
    found = re.search(r'field "(\w+)"', str(exc))
    section = found.group(1) if found else ""
    prefix = f"PAYORCH_{section}".upper()
    names = sorted(
        name for name in os.environ if name.upper() == prefix or name.upper().startswith(prefix + "__")
    )
    source = ", ".join(names) or "the environment"
    return f"invalid setting {section or '?'} from {source}: lists and tables must be JSON ({exc.__cause__})"


def _resolve_paths(settings: Settings, base: Path) -> Settings:
    def resolve(value: Path) -> Path:
        return value if value.is_absolute() else base / value

    ca_bundle = settings.webhooks.ca_bundle
    return settings.model_copy(
        update={
            "server": settings.server.model_copy(update={"state_dir": resolve(settings.server.state_dir)}),
            "database": settings.database.model_copy(
                update={"data_dir": resolve(settings.database.data_dir)}
            ),
            "webhooks": settings.webhooks.model_copy(
                update={"ca_bundle": resolve(ca_bundle) if ca_bundle else None}
            ),
        }
    )


def _with_generated_secrets(settings: Settings) -> Settings:
    state_dir = settings.server.state_dir
    jwt_secret = settings.auth.jwt_secret or _kept_secret(
        state_dir / KEPT_SECRET_FILES["auth.jwt_secret"],
        lambda: secrets.token_urlsafe(48),
        key="auth.jwt_secret",
    )
    security = settings.security
    if not security.keys:
        generated = _kept_secret(
            state_dir / KEPT_SECRET_FILES["security.encryption_key"],
            lambda: Fernet.generate_key().decode(),
            key="security.encryption_key",
        )
        security = security.model_copy(update={"encryption_key": generated})
    if settings.webhooks.allow_loopback:
        # Made before `serve` builds its webhook clients, which trust it (`development_ca`).
        ensure_development_ca(state_dir)
    return settings.model_copy(
        update={"auth": settings.auth.model_copy(update={"jwt_secret": jwt_secret}), "security": security}
    )


def _kept_secret(path: Path, generate: Any, *, key: str) -> str:
    """Read the secret at `path`, or write a new one there (mode 0600) if there is none.

    The file is created exclusively, so two processes starting at once agree on one secret. A
    directory other users may write to (they could put their own secret in place) or a secret file
    other users may read or write stops the service with `ConfigError` saying how to fix it: `key`
    names the setting the file stands in for."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    _refuse_if_others_may(path.parent, 0o022, "write to", key="server.state_dir")
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        _refuse_if_others_may(path, 0o077, "read or write", key=key)
        for _ in range(50):  # the other process may still be writing it
            value = path.read_text().strip()
            if value:
                return value
            time.sleep(0.02)
        raise ConfigError(f"{path} is empty: delete it to generate a new secret", key=key) from None
    value = str(generate())
    with os.fdopen(fd, "w") as handle:
        handle.write(value + "\n")
    return value


def _refuse_if_others_may(path: Path, others: int, what: str, *, key: str) -> None:
    """`ConfigError` when `path`'s mode grants any of the `others` bits (group and other users)."""
    problem = others_may(path, others, what, key=key)
    if problem is not None:
        raise problem


def others_may(path: Path, others: int, what: str, *, key: str) -> ConfigError | None:
    """The `ConfigError` (saying how to fix it) if `path`'s mode grants any of the `others` bits
    (group and other users): `what` they may do to it, `key` the setting it belongs to."""
    mode = stat.S_IMODE(path.stat().st_mode)
    if not mode & others:
        return None
    fix = "chmod go-w" if others == 0o022 else "chmod 600"
    return ConfigError(
        f"invalid setting {key}: other users may {what} {path} (mode {mode:04o}): "
        f"run `{fix} {path}` and start again",
        key=key,
    )


REDACTED = "<redacted>"
# A setting whose name ends so holds a secret: `payorch check-config` shows it only as REDACTED.
_SECRET_NAME = re.compile(r"(secret|password|token|(^|_)keys?)$")
# A password inside a URL: `scheme://user:PASSWORD@host`, or `password=PASSWORD` in its query. Up
# to the last `@`, so a password holding one is redacted whole (more rather than less).
_URL_PASSWORD = re.compile(r"(?<=://)([^/@:]*):(.*)@")
_QUERY_PASSWORD = re.compile(r"(?i)(\bpassword=)[^&#\s]*")


def redacted(settings: BaseModel) -> dict[str, Any]:
    """Every setting of `settings` as plain data (paths as text), secrets replaced by REDACTED: a
    setting named `*secret`, `*password`, `*token`, `*key` or `*keys` (an empty one stays empty, so
    "generated" shows; a list keeps its length), and the password of any URL."""
    shown: dict[str, Any] = {}
    for name in type(settings).model_fields:
        value = getattr(settings, name)
        if isinstance(value, BaseModel):
            shown[name] = redacted(value)
        elif _SECRET_NAME.search(name):
            shown[name] = [REDACTED for _ in value] if isinstance(value, list) else REDACTED if value else ""
        else:
            shown[name] = _plain(value)
    return shown


def _plain(value: Any) -> Any:
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, str) and "://" in value:
        return _QUERY_PASSWORD.sub(r"\1" + REDACTED, _URL_PASSWORD.sub(r"\1:" + REDACTED + "@", value))
    if isinstance(value, list):
        return [_plain(item) for item in value]
    return value
