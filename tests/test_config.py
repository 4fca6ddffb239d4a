"""Settings: the shipped config.toml, PAYORCH_* overrides, path resolution, kept secrets, and errors."""

from __future__ import annotations

import os
import stat
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cryptography.fernet import Fernet
from pydantic import BaseModel

from payorch.config import REDACTED, ConfigError, Settings, config_path_from, load_settings, redacted
from payorch.development_ca import development_ca_certificate

REPO_CONFIG = Path(__file__).resolve().parent.parent / "config.toml"

REQUIRED_KEYS = [
    "server.bind",
    "server.public_base_url",
    "server.max_body_bytes",
    "server.graceful_timeout_s",
    "database.url",
    "database.data_dir",
    "database.pool_min",
    "database.pool_max",
    "auth.jwt_secret",
    "auth.jwt_ttl_s",
    "security.encryption_key",
    "signup.invite_ttl_s",
    "sessions.ttl_s",
    "idempotency.retention_s",
    "webhooks.allow_private_networks",
    "webhooks.allow_loopback",
    "webhooks.ca_bundle",
    "webhooks.timeout_s",
    "webhooks.retry_schedule_s",
    "webhooks.rotation_overlap_s",
    "providers.sandbox.enabled",
    "providers.sandbox.refund_delay_ms",
    "limits.requests_per_second",
    "limits.burst",
    "limits.login_per_minute",
]


@pytest.fixture(autouse=True)
def no_payorch_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test sets the PAYORCH_* variables it is about; none leak in from the caller's shell."""
    for name in list(os.environ):
        if name.upper().startswith("PAYORCH_"):
            monkeypatch.delenv(name)


def write_config(directory: Path, text: str) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "config.toml"
    path.write_text(text)
    return path


def lookup(data: dict[str, Any], dotted: str) -> Any:
    value: Any = data
    for part in dotted.split("."):
        value = value[part]
    return value


def comment_above(lines: list[str], index: int) -> bool:
    """Whether a comment opens the block of `key = value` lines that line `index` belongs to."""
    while index > 0:
        index -= 1
        above = lines[index].strip()
        if above.startswith("#"):
            return True
        if not above or above.startswith("[") or "=" not in above:
            return False
    return False


def key_lines(text: str) -> dict[str, int]:
    """Line index of each `key = value` line, by dotted key (`[section]` headers give the prefix)."""
    found: dict[str, int] = {}
    section = ""
    for index, line in enumerate(text.splitlines()):
        stripped = line.strip()
        if stripped.startswith("[") and stripped.endswith("]"):
            section = stripped.strip("[]").strip()
        elif "=" in stripped and not stripped.startswith("#"):
            found[f"{section}.{stripped.split('=', 1)[0].strip()}"] = index
    return found


def setting_keys(model: type[Any], prefix: str = "") -> Iterator[str]:
    """Every leaf setting of `model` as a dotted key, sections first to last."""
    for name, field in model.model_fields.items():
        annotation = field.annotation
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            yield from setting_keys(annotation, f"{prefix}{name}.")
        else:
            yield f"{prefix}{name}"


SHIPPED_KEYS = list(setting_keys(Settings))


# The shipped config.toml


def test_shipped_config_loads() -> None:
    settings = load_settings(REPO_CONFIG, ensure_secrets=False)
    assert settings.server.bind == "127.0.0.1:8080"


def test_shipped_config_keeps_state_next_to_itself() -> None:
    settings = load_settings(REPO_CONFIG, ensure_secrets=False)
    assert settings.server.state_dir == REPO_CONFIG.parent / "var"
    assert settings.database.data_dir == REPO_CONFIG.parent / "var" / "pgdata"


def test_every_required_key_is_a_setting() -> None:
    assert set(REQUIRED_KEYS) <= set(setting_keys(Settings))


@pytest.mark.parametrize("key", SHIPPED_KEYS)
def test_shipped_config_sets_key(key: str) -> None:
    data = tomllib.loads(REPO_CONFIG.read_text())
    lookup(data, key)  # KeyError names the missing key


@pytest.mark.parametrize("key", SHIPPED_KEYS)
def test_shipped_config_has_a_comment_above_key(key: str) -> None:
    text = REPO_CONFIG.read_text()
    assert comment_above(text.splitlines(), key_lines(text)[key]), f"no comment above {key}"


# Environment overrides and the choice of file


def test_environment_overrides_the_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = write_config(tmp_path, '[server]\nbind = "127.0.0.1:8080"\n')
    monkeypatch.setenv("PAYORCH_SERVER__BIND", "0.0.0.0:9090")
    assert load_settings(path, ensure_secrets=False).server.bind == "0.0.0.0:9090"


def test_environment_overrides_a_nested_provider_key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = write_config(tmp_path, "[providers.sandbox]\nenabled = true\n")
    monkeypatch.setenv("PAYORCH_PROVIDERS__SANDBOX__ENABLED", "false")
    assert load_settings(path, ensure_secrets=False).providers.sandbox.enabled is False


def test_environment_list_is_json(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = write_config(tmp_path, "[webhooks]\nretry_schedule_s = [0, 5, 300]\n")
    monkeypatch.setenv("PAYORCH_WEBHOOKS__RETRY_SCHEDULE_S", "[0, 1, 2.5]")
    assert load_settings(path, ensure_secrets=False).webhooks.retry_schedule_s == [0, 1, 2.5]


def test_environment_overrides_one_key_and_keeps_the_rest_of_its_section(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = write_config(tmp_path, "[server]\nmax_body_bytes = 2048\n")
    monkeypatch.setenv("PAYORCH_SERVER__GRACEFUL_TIMEOUT_S", "3")
    settings = load_settings(path, ensure_secrets=False)
    assert settings.server.max_body_bytes == 2048
    assert settings.server.graceful_timeout_s == 3


def test_config_option_beats_config_environment_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PAYORCH_CONFIG", "/etc/payorch/from-env.toml")
    assert config_path_from("/srv/from-option.toml") == Path("/srv/from-option.toml")


def test_config_environment_variable_picks_the_file(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PAYORCH_CONFIG", "/etc/payorch/from-env.toml")
    assert config_path_from(None) == Path("/etc/payorch/from-env.toml")


def test_config_file_defaults_to_config_toml_in_working_directory() -> None:
    assert config_path_from(None) == Path("config.toml")


def test_absent_default_config_file_means_defaults(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    settings = load_settings(config_path_from(None), ensure_secrets=False)
    assert settings.server.max_body_bytes == 1_048_576
    assert settings.server.state_dir == tmp_path / "var"


def test_config_variable_does_not_count_as_a_setting(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = write_config(tmp_path, "")
    monkeypatch.setenv("PAYORCH_CONFIG", str(path))
    assert load_settings(config_path_from(None), ensure_secrets=False).server.bind == "127.0.0.1:8080"


def test_public_base_url_loses_its_trailing_slash(tmp_path: Path) -> None:
    path = write_config(tmp_path, '[server]\npublic_base_url = "https://pay.example.com/"\n')
    assert load_settings(path, ensure_secrets=False).server.public_base_url == "https://pay.example.com"


def test_explicit_public_base_url_does_not_follow_bind(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = write_config(tmp_path, '[server]\npublic_base_url = "https://pay.example.com"\n')
    monkeypatch.setenv("PAYORCH_SERVER__BIND", "0.0.0.0:18080")
    server = load_settings(path, ensure_secrets=False).server
    assert server.public_base_url == "https://pay.example.com"
    assert not server.public_base_url_follows_bind


def test_shipped_config_public_base_url_follows_a_bind_set_in_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("PAYORCH_SERVER__BIND", "127.0.0.1:18080")
    server = load_settings(REPO_CONFIG, ensure_secrets=False).server
    assert server.public_base_url == "http://127.0.0.1:18080"
    assert server.public_base_url_follows_bind


FOLLOWED_BINDS = {
    "loopback": ("127.0.0.1:18080", "http://127.0.0.1:18080", True),
    "any_ipv4_address_as_loopback": ("0.0.0.0:8080", "http://127.0.0.1:8080", False),
    "any_ipv6_address_as_loopback": ("[::]:8080", "http://[::1]:8080", False),
    "ipv6_loopback": ("[::1]:9000", "http://[::1]:9000", True),
    "localhost": ("localhost:8080", "http://localhost:8080", True),
    "a_host_name": ("pay.internal:8080", "http://pay.internal:8080", False),
    "a_private_address": ("10.1.2.3:8080", "http://10.1.2.3:8080", False),
}


@pytest.mark.parametrize(("bind", "url", "loopback"), list(FOLLOWED_BINDS.values()), ids=list(FOLLOWED_BINDS))
def test_empty_public_base_url_follows_bind(tmp_path: Path, bind: str, url: str, loopback: bool) -> None:
    path = write_config(tmp_path, f'[server]\nbind = "{bind}"\npublic_base_url = ""\n')
    server = load_settings(path, ensure_secrets=False).server
    assert server.public_base_url == url
    assert server.public_base_url_follows_bind
    assert server.bind_is_loopback is loopback


def test_absent_public_base_url_follows_bind(tmp_path: Path) -> None:
    path = write_config(tmp_path, '[server]\nbind = "127.0.0.1:9999"\n')
    assert load_settings(path, ensure_secrets=False).server.public_base_url == "http://127.0.0.1:9999"


# Relative paths


def test_relative_paths_resolve_against_the_config_file_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = write_config(
        tmp_path / "etc",
        '[server]\nstate_dir = "state"\n[database]\ndata_dir = "db/pg"\n[webhooks]\nca_bundle = "ca.pem"\n',
    )
    monkeypatch.chdir(tmp_path)
    settings = load_settings(Path("etc/config.toml"), ensure_secrets=False)
    assert settings.server.state_dir == path.parent / "state"
    assert settings.database.data_dir == path.parent / "db" / "pg"
    assert settings.webhooks.ca_bundle == path.parent / "ca.pem"


def test_absolute_paths_are_kept(tmp_path: Path) -> None:
    path = write_config(tmp_path / "etc", f'[server]\nstate_dir = "{tmp_path / "elsewhere"}"\n')
    assert load_settings(path, ensure_secrets=False).server.state_dir == tmp_path / "elsewhere"


def test_empty_ca_bundle_means_none(tmp_path: Path) -> None:
    path = write_config(tmp_path, '[webhooks]\nca_bundle = ""\n')
    assert load_settings(path, ensure_secrets=False).webhooks.ca_bundle is None


# webhooks.allow_loopback: local development only


def test_shipped_config_refuses_loopback_webhooks() -> None:
    settings = load_settings(REPO_CONFIG, ensure_secrets=False)
    assert (settings.webhooks.allow_loopback, settings.webhooks.allow_private_networks) == (False, False)


@pytest.mark.parametrize(
    ("server", "named"),
    [
        ('public_base_url = "https://pay.example.com"', "server.public_base_url https://pay.example.com"),
        ('bind = "127.0.0.1:8080"\npublic_base_url = "http://192.168.1.5:8080"', "server.public_base_url"),
        ('bind = "0.0.0.0:8080"', "server.bind 0.0.0.0:8080"),
        ('bind = "0.0.0.0:8080"\npublic_base_url = "http://localhost:8080"', "server.bind 0.0.0.0:8080"),
    ],
)
def test_loopback_webhooks_where_others_reach_payorch_are_config_error_naming_the_key(
    tmp_path: Path, server: str, named: str
) -> None:
    path = write_config(tmp_path, f"[server]\n{server}\n[webhooks]\nallow_loopback = true\n")
    with pytest.raises(ConfigError) as refused:
        load_settings(path, ensure_secrets=False)
    assert refused.value.key == "webhooks.allow_loopback"
    message = str(refused.value)
    assert message.startswith("invalid setting webhooks.allow_loopback: ") and named in message
    assert "\n" not in message


@pytest.mark.parametrize(
    "server",
    [
        "",  # bind 127.0.0.1:8080, public_base_url following it
        'bind = "localhost:8080"',
        'bind = "[::1]:8080"',
        'public_base_url = "http://localhost:8080"',
    ],
)
def test_loopback_webhooks_on_a_payorch_only_this_machine_reaches_are_accepted(
    tmp_path: Path, server: str
) -> None:
    path = write_config(tmp_path, f"[server]\n{server}\n[webhooks]\nallow_loopback = true\n")
    assert load_settings(path, ensure_secrets=False).webhooks.allow_loopback


def test_loopback_webhooks_make_the_development_ca_in_the_state_dir(tmp_path: Path) -> None:
    path = write_config(tmp_path, '[server]\nstate_dir = "state"\n[webhooks]\nallow_loopback = true\n')
    load_settings(path, ensure_secrets=False)
    assert not (tmp_path / "state").exists()  # check-config writes nothing
    load_settings(path)
    assert development_ca_certificate(tmp_path / "state").read_text().startswith("-----BEGIN CERTIFICATE")


def test_without_loopback_webhooks_no_development_ca_is_made(tmp_path: Path) -> None:
    load_settings(write_config(tmp_path, '[server]\nstate_dir = "state"\n'))
    assert not development_ca_certificate(tmp_path / "state").exists()


# Generated secrets


def test_empty_secrets_are_generated_once_and_kept(tmp_path: Path) -> None:
    path = write_config(tmp_path, '[auth]\njwt_secret = ""\n[security]\nencryption_key = ""\n')
    first = load_settings(path)
    second = load_settings(path)
    assert first.auth.jwt_secret == second.auth.jwt_secret
    assert first.security.encryption_key == second.security.encryption_key


def test_generated_secrets_are_kept_in_state_dir_readable_by_owner_only(tmp_path: Path) -> None:
    path = write_config(tmp_path, '[server]\nstate_dir = "state"\n')
    settings = load_settings(path)
    jwt_file = tmp_path / "state" / "jwt_secret"
    key_file = tmp_path / "state" / "encryption_key"
    assert jwt_file.read_text().strip() == settings.auth.jwt_secret
    assert key_file.read_text().strip() == settings.security.encryption_key
    assert stat.S_IMODE(jwt_file.stat().st_mode) == 0o600
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600


@pytest.mark.parametrize(
    ("name", "key"), [("jwt_secret", "auth.jwt_secret"), ("encryption_key", "security.encryption_key")]
)
@pytest.mark.parametrize("mode", [0o640, 0o604, 0o620, 0o666])
def test_a_kept_secret_other_users_may_read_or_write_stops_loading_with_the_fix(
    tmp_path: Path, name: str, key: str, mode: int
) -> None:
    path = write_config(tmp_path, '[server]\nstate_dir = "state"\n')
    load_settings(path)
    secret = tmp_path / "state" / name
    secret.chmod(mode)
    with pytest.raises(ConfigError) as refused:
        load_settings(path)
    assert refused.value.key == key
    assert str(refused.value) == (
        f"invalid setting {key}: other users may read or write {secret} (mode {mode:04o}): "
        f"run `chmod 600 {secret}` and start again"
    )


def test_a_state_dir_other_users_may_write_to_stops_loading_with_the_fix(tmp_path: Path) -> None:
    path = write_config(tmp_path, '[server]\nstate_dir = "state"\n')
    state = tmp_path / "state"
    state.mkdir(mode=0o777)
    state.chmod(0o777)
    with pytest.raises(ConfigError) as refused:
        load_settings(path)
    assert refused.value.key == "server.state_dir"
    assert f"run `chmod go-w {state}` and start again" in str(refused.value)
    assert list(state.iterdir()) == []  # nothing was written there


def test_a_new_state_dir_is_the_owners_only(tmp_path: Path) -> None:
    load_settings(write_config(tmp_path, '[server]\nstate_dir = "state/deeper"\n'))
    assert stat.S_IMODE((tmp_path / "state" / "deeper").stat().st_mode) == 0o700


def test_generated_secrets_are_usable(tmp_path: Path) -> None:
    settings = load_settings(write_config(tmp_path, ""))
    assert len(settings.auth.jwt_secret) >= 32
    Fernet(settings.security.encryption_key.encode())


def test_configured_secrets_are_used_and_nothing_is_generated(tmp_path: Path) -> None:
    key = Fernet.generate_key().decode()
    path = write_config(
        tmp_path,
        f'[server]\nstate_dir = "state"\n[auth]\njwt_secret = "{"s" * 40}"\n'
        f'[security]\nencryption_key = "{key}"\n',
    )
    settings = load_settings(path)
    assert settings.auth.jwt_secret == "s" * 40
    assert settings.security.encryption_key == key
    assert not (tmp_path / "state").exists()


# Encryption keys: one, or a list with the one that encrypts first

KEY_A = Fernet.generate_key().decode()
KEY_B = Fernet.generate_key().decode()


def test_one_encryption_key_is_the_only_key(tmp_path: Path) -> None:
    path = write_config(tmp_path, f'[security]\nencryption_key = "{KEY_A}"\n')
    assert load_settings(path, ensure_secrets=False).security.keys == [KEY_A]


def test_encryption_keys_list_every_key_the_first_first(tmp_path: Path) -> None:
    path = write_config(tmp_path, f'[security]\nencryption_keys = ["{KEY_B}", "{KEY_A}"]\n')
    assert load_settings(path, ensure_secrets=False).security.keys == [KEY_B, KEY_A]


def test_encryption_key_may_hold_a_list(tmp_path: Path) -> None:
    path = write_config(tmp_path, f'[security]\nencryption_key = ["{KEY_B}", "{KEY_A}"]\n')
    assert load_settings(path, ensure_secrets=False).security.keys == [KEY_B, KEY_A]


def test_encryption_key_list_from_the_environment_is_json(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = write_config(tmp_path, f'[security]\nencryption_key = "{KEY_A}"\n')
    monkeypatch.setenv("PAYORCH_SECURITY__ENCRYPTION_KEY", f'["{KEY_B}", "{KEY_A}"]')
    assert load_settings(path, ensure_secrets=False).security.keys == [KEY_B, KEY_A]


def test_encryption_keys_from_the_environment_may_keep_the_files_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = write_config(tmp_path, f'[security]\nencryption_key = "{KEY_A}"\n')
    monkeypatch.setenv("PAYORCH_SECURITY__ENCRYPTION_KEYS", f'["{KEY_B}", "{KEY_A}"]')
    assert load_settings(path, ensure_secrets=False).security.keys == [KEY_B, KEY_A]


def test_encryption_key_missing_from_encryption_keys_is_config_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = write_config(tmp_path, f'[security]\nencryption_key = "{KEY_A}"\n')
    monkeypatch.setenv("PAYORCH_SECURITY__ENCRYPTION_KEYS", f'["{KEY_B}"]')
    with pytest.raises(ConfigError, match=r"^invalid setting security: .*encryption_keys") as error:
        load_settings(path, ensure_secrets=False)
    assert KEY_A not in str(error.value)
    assert KEY_B not in str(error.value)


def test_a_bad_key_in_the_list_is_named_by_its_place_and_not_echoed(tmp_path: Path) -> None:
    bad = "c2hvcnQ="  # base64, but of 5 bytes
    path = write_config(tmp_path, f'[security]\nencryption_keys = ["{KEY_B}", "{bad}"]\n')
    with pytest.raises(
        ConfigError, match=r"^invalid setting security\.encryption_keys: .*key 2 of 2"
    ) as error:
        load_settings(path, ensure_secrets=False)
    assert bad not in str(error.value)
    assert KEY_B not in str(error.value)


def test_a_bad_key_in_an_encryption_key_list_is_named(tmp_path: Path) -> None:
    path = write_config(tmp_path, f'[security]\nencryption_key = ["not-a-key", "{KEY_A}"]\n')
    with pytest.raises(
        ConfigError, match=r"^invalid setting security\.encryption_key: .*key 1 of 2"
    ) as error:
        load_settings(path, ensure_secrets=False)
    assert "not-a-key" not in str(error.value)


def test_with_encryption_keys_set_no_key_is_generated(tmp_path: Path) -> None:
    path = write_config(
        tmp_path, f'[server]\nstate_dir = "state"\n[security]\nencryption_keys = ["{KEY_A}"]\n'
    )
    assert load_settings(path).security.keys == [KEY_A]
    assert not (tmp_path / "state" / "encryption_key").exists()


def test_with_no_key_set_one_is_generated_and_is_the_only_key(tmp_path: Path) -> None:
    settings = load_settings(write_config(tmp_path, "[security]\nencryption_keys = []\n"))
    (key,) = settings.security.keys
    assert key == settings.security.encryption_key
    Fernet(key.encode())


# What check-config prints: every setting, no secret


def test_redacted_settings_hold_no_secret_and_keep_the_rest(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    jwt_secret = "j" * 40
    path = write_config(
        tmp_path,
        f'[auth]\njwt_secret = "{jwt_secret}"\n[security]\nencryption_keys = ["{KEY_B}", "{KEY_A}"]\n'
        f'encryption_key = "{KEY_A}"\n',
    )
    monkeypatch.setenv("PAYORCH_DATABASE__URL", "postgresql://payorch:pg-p%40ss@db.internal:5432/payorch")
    monkeypatch.setenv("PAYORCH_SERVER__BIND", "0.0.0.0:9090")
    shown = redacted(load_settings(path, ensure_secrets=False))
    text = repr(shown)
    for secret in (jwt_secret, KEY_A, KEY_B, "pg-p%40ss", "pg-p"):
        assert secret not in text
    assert shown["auth"]["jwt_secret"] == REDACTED
    assert shown["security"] == {"encryption_key": REDACTED, "encryption_keys": [REDACTED, REDACTED]}
    assert shown["database"]["url"] == f"postgresql://payorch:{REDACTED}@db.internal:5432/payorch"
    assert shown["server"]["bind"] == "0.0.0.0:9090"
    assert shown["server"]["public_base_url"] == "http://127.0.0.1:9090"
    assert shown["server"]["state_dir"] == str(tmp_path / "var")
    assert shown["auth"]["api_key_cache_s"] == 5.0  # a `key` in the middle of a name is no secret
    assert set(setting_keys(Settings)) == {
        f"{section}.{key}" for section, keys in _flat(shown).items() for key in keys
    }


def test_redacted_settings_show_an_empty_secret_as_empty(tmp_path: Path) -> None:
    shown = redacted(load_settings(write_config(tmp_path, ""), ensure_secrets=False))
    assert shown["auth"]["jwt_secret"] == ""
    assert shown["security"] == {"encryption_key": "", "encryption_keys": []}


def _flat(shown: dict[str, Any], prefix: str = "") -> dict[str, list[str]]:
    """Leaf keys by dotted section."""
    found: dict[str, list[str]] = {}
    for key, value in shown.items():
        if isinstance(value, dict):
            found.update(_flat(value, f"{prefix}{key}."))
        else:
            found.setdefault(prefix.rstrip("."), []).append(key)
    return found


# Bad configuration: ConfigError with one line naming what is wrong


BAD_FILES = {
    "negative_max_body_bytes": ("[server]\nmax_body_bytes = -1\n", "server.max_body_bytes"),
    "nonsense_bind": ('[server]\nbind = "nonsense"\n', "server.bind"),
    "pool_max_below_pool_min": ("[database]\npool_min = 5\npool_max = 2\n", "database.pool_max"),
    "several_hosts_not_only_the_primary": (
        '[database]\nurl = "postgresql://payorch:pw@db-a:5432,db-b:5432/payorch"\n',
        "database.url",
    ),
    "short_jwt_secret": ('[auth]\njwt_secret = "short"\n', "auth.jwt_secret"),
    "not_a_fernet_key": ('[security]\nencryption_key = "not-a-key"\n', "security.encryption_key"),
    "public_base_url_not_http": ('[server]\npublic_base_url = "ftp://x"\n', "server.public_base_url"),
    "retry_schedule_empty": ("[webhooks]\nretry_schedule_s = []\n", "webhooks.retry_schedule_s"),
}


@pytest.mark.parametrize(("text", "key"), list(BAD_FILES.values()), ids=list(BAD_FILES))
def test_bad_value_is_config_error_naming_the_key(tmp_path: Path, text: str, key: str) -> None:
    path = write_config(tmp_path, text)
    with pytest.raises(ConfigError) as error:
        load_settings(path, ensure_secrets=False)
    message = str(error.value)
    assert f"invalid setting {key}:" in message
    assert "\n" not in message


def test_rejected_secret_is_not_echoed(tmp_path: Path) -> None:
    path = write_config(tmp_path, '[auth]\njwt_secret = "hunter2-oops"\n')
    with pytest.raises(ConfigError) as error:
        load_settings(path, ensure_secrets=False)
    assert "hunter2-oops" not in str(error.value)


def test_a_rejected_database_url_is_not_echoed_with_its_password(tmp_path: Path) -> None:
    url = "postgresql://payorch:pg-hunter2@db-a:5432,db-b:5432/payorch"
    path = write_config(tmp_path, f'[database]\nurl = "{url}"\n')
    with pytest.raises(ConfigError, match="target_session_attrs=read-write") as error:
        load_settings(path, ensure_secrets=False)
    assert "pg-hunter2" not in str(error.value)


@pytest.mark.parametrize(
    "url",
    [
        "postgresql://payorch@db-a:5432,db-b:5432/payorch?target_session_attrs=read-write",
        "postgresql://payorch@db-a,db-b/payorch?target_session_attrs=primary",
        "postgresql://payorch@/payorch?host=db-a,db-b&target_session_attrs=read-write",
        "postgresql://payorch@db-a:5432/payorch",  # one host: whatever it is
    ],
)
def test_a_url_of_several_hosts_that_asks_for_the_primary_is_accepted(tmp_path: Path, url: str) -> None:
    path = write_config(tmp_path, f'[database]\nurl = "{url}"\n')
    assert load_settings(path, ensure_secrets=False).database.url == url


def test_bad_environment_value_is_config_error_naming_the_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PAYORCH_SERVER__MAX_BODY_BYTES", "-1")
    with pytest.raises(ConfigError, match=r"^invalid setting server\.max_body_bytes:"):
        load_settings(write_config(tmp_path, ""), ensure_secrets=False)


def test_unknown_environment_key_in_a_section_is_config_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PAYORCH_SERVER__COLOUR", "blue")
    with pytest.raises(ConfigError, match=r"^PAYORCH_SERVER__COLOUR: unknown setting server\.colour$"):
        load_settings(write_config(tmp_path, ""), ensure_secrets=False)


# Names that are no setting: refused in payorch's words, with the nearest name that is one

UNKNOWN_VARIABLES = {
    "misspelt_section": (
        "PAYORCH_WEBHOOK__ALLOW_PRIVATE_NETWORKS",
        "webhook",
        'PAYORCH_WEBHOOK__ALLOW_PRIVATE_NETWORKS: unknown section "webhook" (did you mean "webhooks"?)',
    ),
    "misspelt_key": (
        "PAYORCH_SERVER__BNID",
        "server.bnid",
        "PAYORCH_SERVER__BNID: unknown setting server.bnid (did you mean server.bind?)",
    ),
    "misspelt_provider_key": (
        "PAYORCH_PROVIDERS__STRIPE__API_BAES",
        "providers.stripe.api_baes",
        "PAYORCH_PROVIDERS__STRIPE__API_BAES: unknown setting providers.stripe.api_baes "
        "(did you mean providers.stripe.api_base?)",
    ),
    "unknown_provider": (
        "PAYORCH_PROVIDERS__ADYEN__ENABLED",
        "providers.adyen",
        'PAYORCH_PROVIDERS__ADYEN__ENABLED: unknown section "providers.adyen"',
    ),
    "key_in_the_wrong_section": (
        "PAYORCH_SERVER__CA_BUNDLE",
        "server.ca_bundle",
        "PAYORCH_SERVER__CA_BUNDLE: unknown setting server.ca_bundle (did you mean webhooks.ca_bundle?)",
    ),
    "one_underscore_between_section_and_key": (
        "PAYORCH_SERVER_BIND",
        "server_bind",
        'PAYORCH_SERVER_BIND: unknown section "server_bind" (did you mean PAYORCH_SERVER__BIND? a section '
        "and its key are joined by two underscores)",
    ),
    "keys_below_a_setting": (
        "PAYORCH_SERVER__BIND__PORT",
        "server.bind.port",
        "PAYORCH_SERVER__BIND__PORT: unknown setting server.bind.port (did you mean server.bind?)",
    ),
    "lower_case": (
        "payorch_server__bnid",
        "server.bnid",
        "payorch_server__bnid: unknown setting server.bnid (did you mean server.bind?)",
    ),
}


@pytest.mark.parametrize(
    ("variable", "key", "message"), list(UNKNOWN_VARIABLES.values()), ids=list(UNKNOWN_VARIABLES)
)
def test_a_variable_that_names_no_setting_is_refused_with_the_nearest_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, variable: str, key: str, message: str
) -> None:
    monkeypatch.setenv(variable, "true")
    with pytest.raises(ConfigError) as refused:
        load_settings(write_config(tmp_path, ""), ensure_secrets=False)
    assert str(refused.value) == message
    assert refused.value.key == key


@pytest.mark.parametrize(
    "variable", ["PAYORCH_CONFIG", "PAYORCH_TEST_DATABASE_URL", "PAYORCH_SCHEMATHESIS_EXAMPLES"]
)
def test_the_variables_that_are_not_settings_are_accepted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, variable: str
) -> None:
    path = write_config(tmp_path, "")
    monkeypatch.setenv(variable, str(path))
    assert load_settings(path, ensure_secrets=False).server.bind == "127.0.0.1:8080"


def test_the_value_of_a_variable_that_names_no_setting_is_not_shown(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PAYORCH_AUTH__JWT_SECRTE", "hunter2-never-shown")
    with pytest.raises(ConfigError) as refused:
        load_settings(write_config(tmp_path, ""), ensure_secrets=False)
    assert "did you mean auth.jwt_secret?" in str(refused.value)
    assert "hunter2" not in str(refused.value)


def test_several_unknown_variables_are_refused_by_the_first_and_counted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PAYORCH_SERVER__BNID", "1")
    monkeypatch.setenv("PAYORCH_WEBHOOK__TIMEOUT_S", "1")
    with pytest.raises(ConfigError) as refused:
        load_settings(write_config(tmp_path, ""), ensure_secrets=False)
    assert str(refused.value).startswith("PAYORCH_SERVER__BNID: unknown setting server.bnid")
    assert str(refused.value).endswith(" (and 1 more)")


UNKNOWN_KEYS = {
    "misspelt_key": (
        '[server]\nbnid = "127.0.0.1:1"\n',
        "server.bnid",
        "unknown setting server.bnid (did you mean server.bind?)",
    ),
    "key_without_a_near_one": ("[server]\ncolour = 3\n", "server.colour", "unknown setting server.colour"),
    "misspelt_section": (
        "[webhook]\ntimeout_s = 3\n",
        "webhook",
        'unknown section "webhook" (did you mean "webhooks"?)',
    ),
    "unknown_section": ("[mystery]\nanswer = 42\n", "mystery", 'unknown section "mystery"'),
    "misspelt_provider": (
        "[providers.strpe]\nenabled = true\n",
        "providers.strpe",
        'unknown section "providers.strpe" (did you mean "providers.stripe"?)',
    ),
    "key_in_the_wrong_section": (
        '[server]\nca_bundle = "ca.pem"\n',
        "server.ca_bundle",
        "unknown setting server.ca_bundle (did you mean webhooks.ca_bundle?)",
    ),
}


@pytest.mark.parametrize(("text", "key", "message"), list(UNKNOWN_KEYS.values()), ids=list(UNKNOWN_KEYS))
def test_a_key_of_the_file_that_names_no_setting_is_refused_with_the_nearest_one(
    tmp_path: Path, text: str, key: str, message: str
) -> None:
    path = write_config(tmp_path, text)
    with pytest.raises(ConfigError) as refused:
        load_settings(path, ensure_secrets=False)
    assert str(refused.value) == f"{path}: {message}"
    assert refused.value.key == key


def test_a_key_of_a_table_given_as_json_that_names_no_setting_is_refused_with_the_nearest_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PAYORCH_AUTH", '{"jwt_secrte": "hunter2-never-shown"}')
    with pytest.raises(ConfigError) as refused:
        load_settings(write_config(tmp_path, ""), ensure_secrets=False)
    assert str(refused.value) == "unknown setting auth.jwt_secrte (did you mean auth.jwt_secret?)"
    assert refused.value.key == "auth.jwt_secrte"


def test_environment_list_that_is_not_json_is_config_error_naming_the_variable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PAYORCH_WEBHOOKS__RETRY_SCHEDULE_S", "0, 5, 300")
    with pytest.raises(ConfigError, match="PAYORCH_WEBHOOKS__RETRY_SCHEDULE_S") as error:
        load_settings(write_config(tmp_path, ""), ensure_secrets=False)
    assert "\n" not in str(error.value)


def test_invalid_toml_is_config_error_naming_the_file(tmp_path: Path) -> None:
    path = write_config(tmp_path, "[server\nbind = \n")
    with pytest.raises(ConfigError, match="not valid TOML") as error:
        load_settings(path, ensure_secrets=False)
    assert str(path) in str(error.value)


def test_missing_named_config_file_is_config_error(tmp_path: Path) -> None:
    missing = tmp_path / "absent.toml"
    with pytest.raises(ConfigError, match="configuration file not found") as error:
        load_settings(missing, ensure_secrets=False)
    assert str(missing) in str(error.value)


def test_unreadable_config_path_is_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read"):
        load_settings(tmp_path, ensure_secrets=False)


def test_state_dir_that_cannot_hold_secrets_is_config_error_naming_it(tmp_path: Path) -> None:
    (tmp_path / "a-file").write_text("")
    path = write_config(tmp_path, '[server]\nstate_dir = "a-file/state"\n')
    with pytest.raises(ConfigError, match=r"^invalid setting server\.state_dir:"):
        load_settings(path)


# server.workers: how many processes `payorch serve` runs


@pytest.mark.parametrize(("text", "workers"), [("1", 1), ("64", 64), ('"auto"', "auto"), ('"8"', 8)])
def test_workers_is_a_count_or_auto(tmp_path: Path, text: str, workers: int | str) -> None:
    path = write_config(tmp_path, f"[server]\nworkers = {text}\n")
    assert load_settings(path, ensure_secrets=False).server.workers == workers


@pytest.mark.parametrize("text", ["0", "65", '"many"', "2.5", "true", '""'])
def test_workers_outside_1_to_64_or_auto_is_config_error_naming_the_key(tmp_path: Path, text: str) -> None:
    path = write_config(tmp_path, f"[server]\nworkers = {text}\n")
    with pytest.raises(
        ConfigError, match=r'^invalid setting server\.workers: .*from 1 to 64, or "auto"'
    ) as error:
        load_settings(path, ensure_secrets=False)
    assert error.value.key == "server.workers"


def test_workers_from_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PAYORCH_SERVER__WORKERS", "auto")
    assert (
        load_settings(write_config(tmp_path, "[server]\nworkers = 4\n"), ensure_secrets=False).server.workers
        == "auto"
    )
