"""The operator's commands. A command that stops at its configuration (exit 2, `check-config`, a
command's --help) runs in this test process (`payorch_here`: the same `main` as `python -m payorch`,
with the run's environment and its output captured), about half a second of CPU less than a process
importing payorch; one that goes on to a database or serves runs as `python -m payorch ...` in a
subprocess, as do the tests of `python -m payorch` itself.

Every run gets its own config file, state directory and database (through PAYORCH_* variables), so
nothing touches the repository's var/.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import importlib.metadata
import io
import json
import logging
import os
import socket
import subprocess
import sys
import tomllib
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import SimpleNamespace
from typing import Any
from unittest import mock
from urllib.parse import urlsplit

import pytest
import trio

from payorch import cli
from payorch.cli import _parser
from payorch.http.services import PayorchApp
from payorch.storage.database import Connection, Database
from payorch.storage.migrations import available_migrations
from tests.conftest import _admin, database_url
from tests.helpers import PASSWORD, Client, Merchant, signup_body
from tests.processes import free_port, serve_environment, serving

pytestmark = pytest.mark.long  # runs for seconds: handed to the test workers first (tests/conftest.py)

PUBLIC_BASE_URL = "https://pay.example.com"
INVITE_TTL_S = 600
# Nothing listens here: a command that got past its configuration would fail differently.
UNREACHABLE_DATABASE = "postgresql://payorch@127.0.0.1:9/nowhere"


def cli_environment(tmp_path: Path, database_dsn: str, config_text: str | None = None) -> dict[str, str]:
    """The caller's environment without PAYORCH_* and XDG_RUNTIME_DIR, pointed at tmp_path."""
    config = tmp_path / "config.toml"
    if config_text is None:
        config_text = (
            f'[server]\npublic_base_url = "{PUBLIC_BASE_URL}"\n[signup]\ninvite_ttl_s = {INVITE_TTL_S}\n'
        )
    config.write_text(config_text)
    env = {name: value for name, value in os.environ.items() if not name.upper().startswith("PAYORCH_")}
    # Unset in most containers; then nothing may print plain-text warnings among our output.
    env.pop("XDG_RUNTIME_DIR", None)
    env.update(
        PAYORCH_CONFIG=str(config),
        PAYORCH_SERVER__STATE_DIR=str(tmp_path / "state"),
        PAYORCH_DATABASE__URL=database_dsn,
    )
    return env


def payorch(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(  # noqa: S603 - our own interpreter and arguments
        [sys.executable, "-m", "payorch", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


class _WentOn(BaseException):
    """A command run by `payorch_here` went past its configuration, to serve or reach a database (a
    BaseException: `main` logs and answers 1 for any Exception a command raises)."""


def _refuse_to_go_on(*args: object, **kwargs: object) -> int:
    raise _WentOn("the command went past its configuration: run it with `payorch` (a subprocess)")


def payorch_here(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """`payorch *args` run by `payorch.cli.main` in this process, with `env` as the whole environment:
    its exit status, stdout and stderr as `payorch` (a subprocess) gives them. Only for commands that
    stop at their configuration: one that would serve or run a command raises `_WentOn`. The logging
    that `main` configures is put back afterwards."""
    root = logging.getLogger()
    kept_handlers, kept_level = root.handlers[:], root.level
    quieted = {name: logging.getLogger(name).level for name in ("pgserver", "stripe")}
    access_log = logging.getLogger("hypercorn.access")
    access_log_disabled = access_log.disabled
    stdout, stderr = io.StringIO(), io.StringIO()
    try:
        with (
            pytest.MonkeyPatch.context() as patch,
            mock.patch.dict(os.environ, env, clear=True),
            contextlib.redirect_stdout(stdout),
            contextlib.redirect_stderr(stderr),
        ):
            patch.setattr(cli, "_serve", _refuse_to_go_on)
            patch.setattr(cli, "trio", SimpleNamespace(run=_refuse_to_go_on))  # cli's trio only
            patch.setattr(cli.dev_receiver, "run", _refuse_to_go_on)
            try:
                status: int | str | None = cli.main(list(args))
            except SystemExit as exit_:  # argparse: --help, --version, a malformed argument
                status = exit_.code
    finally:
        root.handlers[:] = kept_handlers
        root.setLevel(kept_level)
        for name, level in quieted.items():
            logging.getLogger(name).setLevel(level)
        access_log.disabled = access_log_disabled
    assert isinstance(status, int | None), status
    return subprocess.CompletedProcess(["payorch", *args], status or 0, stdout.getvalue(), stderr.getvalue())


async def payorch_async(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[bytes]:
    with trio.fail_after(60):
        return await trio.run_process(
            [sys.executable, "-m", "payorch", *args],
            env=env,
            capture_stdout=True,
            capture_stderr=True,
            check=False,
        )


def test_python_dash_m_payorch_offers_serve_migrate_and_invite() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "payorch", "--help"], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0
    for command in ("serve", "migrate", "invite", "check-config", "rotate-credentials", "dev-receiver"):
        assert command in result.stdout


def test_version_is_the_installed_one() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "payorch", "--version"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0
    assert result.stdout == f"payorch {importlib.metadata.version('payorch')}\n"


def _commands() -> dict[str, argparse.ArgumentParser]:
    # argparse keeps the subcommands in the one action of that type, private but stable.
    (commands,) = [action for action in _parser()._actions if isinstance(action, argparse._SubParsersAction)]
    return dict(commands.choices)


@pytest.mark.parametrize("command", list(_commands()))
def test_every_command_has_a_description_and_an_example(command: str) -> None:
    parser = _commands()[command]
    assert parser.description
    assert parser.epilog
    assert parser.epilog.startswith("Example:\n  ")
    assert f"payorch {command}" in parser.epilog
    shown = parser.format_help()
    assert parser.description.splitlines()[0] in shown
    assert "Example:" in shown


def test_a_commands_help_shows_its_example_as_written(tmp_path: Path) -> None:
    result = payorch_here("serve", "--help", env=cli_environment(tmp_path, UNREACHABLE_DATABASE))
    assert result.returncode == 0
    assert "\nExample:\n  payorch serve --config /etc/payorch/config.toml\n" in result.stdout


# Bad configuration stops every command: exit status 2 and one line on stderr naming the problem.

BAD_CONFIGS = {
    "negative_max_body_bytes": ("[server]\nmax_body_bytes = -1\n", {}, "server.max_body_bytes"),
    "nonsense_bind": ('[server]\nbind = "nonsense"\n', {}, "server.bind"),
    "unknown_key": ("[server]\ncolour = 3\n", {}, "server.colour"),
    "invalid_toml": ("[server\n", {}, "not valid TOML"),
    "bad_environment_value": ("", {"PAYORCH_SERVER__MAX_BODY_BYTES": "-1"}, "server.max_body_bytes"),
    "environment_list_not_json": (
        "",
        {"PAYORCH_WEBHOOKS__RETRY_SCHEDULE_S": "0, 5"},
        "PAYORCH_WEBHOOKS__RETRY_SCHEDULE_S",
    ),
    "misspelt_section_in_a_variable": (
        "",
        {"PAYORCH_WEBHOOK__ALLOW_PRIVATE_NETWORKS": "true"},
        'PAYORCH_WEBHOOK__ALLOW_PRIVATE_NETWORKS: unknown section "webhook" (did you mean "webhooks"?)',
    ),
    "misspelt_key_in_a_variable": (
        "",
        {"PAYORCH_SERVER__BNID": "127.0.0.1:1"},
        "PAYORCH_SERVER__BNID: unknown setting server.bnid (did you mean server.bind?)",
    ),
    "misspelt_key_in_the_file": (
        '[server]\nbnid = "127.0.0.1:1"\n',
        {},
        "unknown setting server.bnid (did you mean server.bind?)",
    ),
    "unusable_database_url": ("", {"PAYORCH_DATABASE__URL": "mysql://db.internal"}, "database.url"),
}


@pytest.mark.parametrize(
    ("config_text", "extra_env", "named"), list(BAD_CONFIGS.values()), ids=list(BAD_CONFIGS)
)
def test_bad_config_exits_2_with_one_line_naming_it(
    tmp_path: Path, config_text: str, extra_env: dict[str, str], named: str
) -> None:
    env = cli_environment(tmp_path, UNREACHABLE_DATABASE, config_text) | extra_env
    result = payorch_here("migrate", env=env)
    assert result.returncode == 2
    assert result.stdout == ""
    assert len(result.stderr.splitlines()) == 1, result.stderr
    assert named in result.stderr


def test_serve_with_a_secret_file_others_may_read_exits_2_with_one_line_saying_how_to_fix_it(
    tmp_path: Path,
) -> None:
    env = cli_environment(tmp_path, UNREACHABLE_DATABASE)
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    secret = state / "encryption_key"
    secret.write_text("kept\n")
    secret.chmod(0o644)
    result = payorch_here("serve", env=env)
    assert result.returncode == 2
    assert result.stderr == (
        f"payorch: invalid setting security.encryption_key: other users may read or write "
        f"{secret} (mode 0644): run `chmod 600 {secret}` and start again\n"
    )


@pytest.mark.parametrize("bundle", [None, "not a certificate\n"], ids=["missing", "not_pem"])
def test_serve_with_a_bad_ca_bundle_exits_2_with_one_line_before_starting_postgresql(
    tmp_path: Path, bundle: str | None
) -> None:
    data_dir = tmp_path / "pgdata"
    env = serve_environment(
        "",  # no database.url: serve would start the embedded PostgreSQL under data_dir
        tmp_path,
        free_port(),
        extra={"PAYORCH_DATABASE__DATA_DIR": str(data_dir)},
        config='[webhooks]\nca_bundle = "ca.pem"\n',
    )
    if bundle is not None:
        (tmp_path / "ca.pem").write_text(bundle)
    result = payorch_here("serve", env=env)
    assert result.returncode == 2
    assert result.stdout == ""
    (line,) = result.stderr.splitlines()
    assert line.startswith(f"payorch: invalid setting webhooks.ca_bundle: {tmp_path / 'ca.pem'}: ")
    assert not data_dir.exists()


def test_serve_on_an_address_another_process_listens_on_exits_2_naming_it_before_starting_postgresql(
    tmp_path: Path,
) -> None:
    data_dir = tmp_path / "pgdata"
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        env = serve_environment("", tmp_path, port, extra={"PAYORCH_DATABASE__DATA_DIR": str(data_dir)})
        result = payorch("serve", env=env)
    assert result.returncode == 2
    assert result.stdout == ""
    (line,) = result.stderr.splitlines()
    assert line.startswith(
        f"payorch: cannot serve: server.bind 127.0.0.1:{port} is in use by another process"
    )
    assert not data_dir.exists()  # no PostgreSQL started, no node identity taken


def test_check_config_lists_every_invalid_value_of_a_file(tmp_path: Path) -> None:
    config = (
        '[server]\nbind = "127.0.0.1:notaport"\nmax_connections = -5\n[limits]\nlogin_per_minute = "lots"\n'
    )
    env = cli_environment(tmp_path, UNREACHABLE_DATABASE, config)
    checked = payorch_here("check-config", env=env)
    assert checked.returncode == 2
    assert [line.split(":", 2)[1].strip() for line in checked.stderr.splitlines()] == [
        "invalid setting server.bind",
        "invalid setting server.max_connections",
        "invalid setting limits.login_per_minute",
    ]
    served = payorch_here("serve", env=env)  # the first, and how many more
    (line,) = served.stderr.splitlines()
    assert line.startswith("payorch: invalid setting server.bind: ")
    assert line.endswith(" (and 2 more: `payorch check-config` lists them)")


def test_serve_names_the_first_problem_and_counts_the_others(tmp_path: Path) -> None:
    config = '[database]\nurl = "mysql://db.internal"\n[webhooks]\nca_bundle = "absent.pem"\n'
    env = cli_environment(tmp_path, UNREACHABLE_DATABASE, config)
    del env["PAYORCH_DATABASE__URL"]
    result = payorch_here("serve", env=env)
    assert result.returncode == 2
    (line,) = result.stderr.splitlines()
    assert line.startswith("payorch: invalid setting database.url: ")
    assert line.endswith(" (and 1 more: `payorch check-config` lists them)")


def test_migrate_checks_only_what_it_uses_of_the_configuration(tmp_path: Path) -> None:
    # The CA bundle is serve's: migrate goes on, to the (unreachable) database.
    config = '[webhooks]\nca_bundle = "absent.pem"\n'
    result = payorch("migrate", env=cli_environment(tmp_path, UNREACHABLE_DATABASE, config))
    assert result.returncode == 1
    log = [json.loads(line) for line in result.stderr.splitlines()]
    assert [entry["msg"] for entry in log if entry["level"] == "error"] == ["payorch migrate failed"]


def test_serve_with_loopback_webhooks_and_a_public_address_exits_2_with_one_line_naming_the_key(
    tmp_path: Path,
) -> None:
    env = cli_environment(tmp_path, UNREACHABLE_DATABASE) | {"PAYORCH_WEBHOOKS__ALLOW_LOOPBACK": "true"}
    result = payorch_here("serve", env=env)
    assert result.returncode == 2
    assert result.stderr == (
        "payorch: invalid setting webhooks.allow_loopback: it is for development on one machine, and "
        f"server.public_base_url {PUBLIC_BASE_URL} is not a loopback URL (others may reach this payorch): "
        "set it to false (in the environment: PAYORCH_WEBHOOKS__ALLOW_LOOPBACK=false)\n"
    )
    assert not (tmp_path / "state" / "development-ca").exists()


def test_missing_config_option_file_exits_2_naming_it(tmp_path: Path) -> None:
    env = cli_environment(tmp_path, UNREACHABLE_DATABASE)
    missing = tmp_path / "absent.toml"
    result = payorch_here("--config", str(missing), "migrate", env=env)
    assert result.returncode == 2
    assert result.stderr.splitlines() == [f"payorch: {missing}: configuration file not found"]


def test_missing_config_environment_file_exits_2_naming_it(tmp_path: Path) -> None:
    missing = tmp_path / "absent.toml"
    env = cli_environment(tmp_path, UNREACHABLE_DATABASE) | {"PAYORCH_CONFIG": str(missing)}
    result = payorch_here("migrate", env=env)
    assert result.returncode == 2
    assert result.stderr.splitlines() == [f"payorch: {missing}: configuration file not found"]


def test_config_option_beats_config_environment_variable(tmp_path: Path) -> None:
    good = tmp_path / "good"
    good.mkdir()
    env = cli_environment(good, UNREACHABLE_DATABASE, "[server]\nmax_body_bytes = -1\n")
    result = payorch_here("--config", str(tmp_path / "absent.toml"), "migrate", env=env)
    assert "absent.toml" in result.stderr
    assert "max_body_bytes" not in result.stderr


@pytest.mark.parametrize("command", [["migrate"], ["serve"], ["invite", "--email", "ops@merchant.example"]])
def test_config_option_is_taken_after_the_command_too(tmp_path: Path, command: list[str]) -> None:
    env = cli_environment(tmp_path, UNREACHABLE_DATABASE)
    missing = tmp_path / "absent.toml"
    result = payorch_here(*command, "--config", str(missing), env=env)
    assert result.returncode == 2
    assert result.stderr.splitlines() == [f"payorch: {missing}: configuration file not found"]


def test_config_option_after_the_command_beats_the_one_before(tmp_path: Path) -> None:
    env = cli_environment(tmp_path, UNREACHABLE_DATABASE)
    result = payorch_here(
        "--config",
        str(tmp_path / "first.toml"),
        "migrate",
        "--config",
        str(tmp_path / "second.toml"),
        env=env,
    )
    assert result.returncode == 2
    assert "second.toml" in result.stderr
    assert "first.toml" not in result.stderr


def _warnings(stderr: str) -> list[dict[str, Any]]:
    records = [json.loads(line) for line in stderr.splitlines()]
    return [record for record in records if record["level"] == "warning"]


def test_serve_warns_when_links_follow_a_bind_customers_may_not_reach(tmp_path: Path) -> None:
    # The database is unreachable: serve logs its warning, then fails before binding anything.
    config = '[server]\nbind = "0.0.0.0:0"\n'
    result = payorch("serve", env=cli_environment(tmp_path, UNREACHABLE_DATABASE, config))
    assert result.returncode == 1
    (warning,) = _warnings(result.stderr)
    assert "server.public_base_url is not set" in warning["msg"]
    assert warning["publicBaseUrl"] == "http://127.0.0.1:0"


@pytest.mark.parametrize(
    "config",
    [
        '[server]\nbind = "127.0.0.1:0"\n',
        '[server]\nbind = "0.0.0.0:0"\npublic_base_url = "https://pay.example.com"\n',
    ],
    ids=["loopback_bind", "public_base_url_set"],
)
def test_serve_does_not_warn_when_links_are_set_or_local(tmp_path: Path, config: str) -> None:
    result = payorch("serve", env=cli_environment(tmp_path, UNREACHABLE_DATABASE, config))
    assert result.returncode == 1
    assert _warnings(result.stderr) == []


def test_unreachable_database_exits_1_with_the_failure_logged_as_json(tmp_path: Path) -> None:
    result = payorch("migrate", env=cli_environment(tmp_path, UNREACHABLE_DATABASE))
    assert result.returncode == 1
    log = [json.loads(line) for line in result.stderr.splitlines()]
    assert [entry["msg"] for entry in log if entry["level"] == "error"] == ["payorch migrate failed"]


# payorch check-config

JWT_SECRET = "jwt-secret-never-printed-0123456789abcdef"
CHECKED_KEY = "S2vYjcy6bBtRN0mTGqkLVxr40z2HDG5cf7rjzmoAPpM="
CHECKED_CONFIG = (
    f'[server]\nbind = "0.0.0.0:18080"\n[auth]\njwt_secret = "{JWT_SECRET}"\n'
    f'[security]\nencryption_keys = ["{CHECKED_KEY}"]\n'
)
DATABASE_PASSWORD = "db-password-never-printed"


@pytest.mark.parametrize("config_first", [True, False], ids=["config_before", "config_after"])
def test_check_config_prints_the_effective_configuration_as_toml_without_secrets(
    tmp_path: Path, config_first: bool
) -> None:
    env = cli_environment(tmp_path, f"postgresql://payorch:{DATABASE_PASSWORD}@127.0.0.1:9/x", CHECKED_CONFIG)
    config = env.pop("PAYORCH_CONFIG")
    env["PAYORCH_LIMITS__BURST"] = "7"
    args = ("--config", config, "check-config") if config_first else ("check-config", "--config", config)
    result = payorch_here(*args, env=env)
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    for secret in (JWT_SECRET, CHECKED_KEY, DATABASE_PASSWORD):
        assert secret not in result.stdout
    shown = tomllib.loads(result.stdout)
    assert shown["limits"]["burst"] == 7  # the environment's
    assert shown["server"]["public_base_url"] == "http://127.0.0.1:18080"  # follows bind
    assert shown["server"]["state_dir"] == str(tmp_path / "state")
    assert shown["auth"]["jwt_secret"] == "<redacted>"
    assert shown["security"]["encryption_keys"] == ["<redacted>"]
    assert shown["database"]["url"] == "postgresql://payorch:<redacted>@127.0.0.1:9/x"
    assert shown["webhooks"]["ca_bundle"] == ""
    assert not (tmp_path / "state").exists()  # no secret generated, nothing started


def test_check_config_json(tmp_path: Path) -> None:
    result = payorch_here(
        "check-config", "--json", env=cli_environment(tmp_path, UNREACHABLE_DATABASE, CHECKED_CONFIG)
    )
    assert result.returncode == 0, result.stderr
    shown = json.loads(result.stdout)
    assert shown["auth"]["jwt_secret"] == "<redacted>"
    assert shown["webhooks"]["ca_bundle"] is None
    assert JWT_SECRET not in result.stdout


def test_check_config_of_a_file_with_no_secrets_generates_none(tmp_path: Path) -> None:
    result = payorch_here("check-config", env=cli_environment(tmp_path, UNREACHABLE_DATABASE, ""))
    assert result.returncode == 0, result.stderr
    assert "generated at the first start" in result.stdout
    assert tomllib.loads(result.stdout)["security"] == {"encryption_key": "", "encryption_keys": []}
    assert not (tmp_path / "state").exists()


@pytest.mark.parametrize(
    ("config_text", "extra_env", "named"), list(BAD_CONFIGS.values()), ids=list(BAD_CONFIGS)
)
def test_check_config_of_a_bad_config_exits_2_naming_the_key(
    tmp_path: Path, config_text: str, extra_env: dict[str, str], named: str
) -> None:
    result = payorch_here(
        "check-config", env=cli_environment(tmp_path, UNREACHABLE_DATABASE, config_text) | extra_env
    )
    assert result.returncode == 2
    assert result.stdout == ""
    assert len(result.stderr.splitlines()) == 1, result.stderr
    assert named in result.stderr


def test_check_config_lists_every_problem_one_line_each(tmp_path: Path) -> None:
    config = '[database]\nurl = "mysql://db.internal"\n[webhooks]\nca_bundle = "absent.pem"\n'
    env = cli_environment(tmp_path, UNREACHABLE_DATABASE, config)
    del env["PAYORCH_DATABASE__URL"]
    result = payorch_here("check-config", env=env)
    assert result.returncode == 2
    assert result.stdout == ""
    assert result.stderr.splitlines() == [
        "payorch: invalid setting database.url: must start with postgresql:// (or postgres://), or be "
        "empty for the embedded PostgreSQL",
        f"payorch: invalid setting webhooks.ca_bundle: {tmp_path / 'absent.pem'}: no such file",
    ]


def test_check_config_values_only_leaves_the_files_of_this_host_alone(tmp_path: Path) -> None:
    config = '[webhooks]\nca_bundle = "absent.pem"\n'
    result = payorch_here(
        "check-config", "--values-only", env=cli_environment(tmp_path, UNREACHABLE_DATABASE, config)
    )
    assert result.returncode == 0, result.stderr
    assert tomllib.loads(result.stdout)["webhooks"]["ca_bundle"] == str(tmp_path / "absent.pem")


def test_check_config_names_a_bad_encryption_key_by_its_place_without_echoing_it(tmp_path: Path) -> None:
    config = f'[security]\nencryption_keys = ["{CHECKED_KEY}", "bm90LWEta2V5"]\n'
    result = payorch_here("check-config", env=cli_environment(tmp_path, UNREACHABLE_DATABASE, config))
    assert result.returncode == 2
    (line,) = result.stderr.splitlines()
    assert line.startswith("payorch: invalid setting security.encryption_keys: ")
    assert "key 2 of 2" in line
    assert CHECKED_KEY not in line
    assert "bm90LWEta2V5" not in line


# payorch migrate


@pytest.fixture
def empty_database_dsn(postgres_server: str) -> Iterator[str]:
    """A database with no tables at all."""
    name = f"payorch_empty_{uuid.uuid4().hex[:12]}"
    asyncio.run(_admin(postgres_server, f"CREATE DATABASE {name}"))
    yield database_url(postgres_server, name)
    asyncio.run(_admin(postgres_server, f"DROP DATABASE IF EXISTS {name} WITH (FORCE)"))


def test_migrate_applies_every_migration_to_an_empty_database(
    tmp_path: Path, empty_database_dsn: str
) -> None:
    result = payorch("migrate", env=cli_environment(tmp_path, empty_database_dsn))
    assert result.returncode == 0, result.stderr
    in_order = sorted(available_migrations(), key=lambda migration: (migration.repeatable, migration.version))
    names = [f"{migration.version:04d}_{migration.name}" for migration in in_order]
    assert result.stdout == "applied: " + ", ".join(names) + "\n"  # the repeatable ones last


def test_second_migrate_applies_none(tmp_path: Path, empty_database_dsn: str) -> None:
    env = cli_environment(tmp_path, empty_database_dsn)
    assert payorch("migrate", env=env).returncode == 0
    result = payorch("migrate", env=env)
    assert result.returncode == 0, result.stderr
    assert result.stdout == "database is up to date\n"


# payorch invite


async def _invite_json(tmp_path: Path, database_dsn: str) -> dict[str, Any]:
    result = await payorch_async(
        "invite", "--email", "ops@merchant.example", "--json", env=cli_environment(tmp_path, database_dsn)
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.decode().splitlines()
    assert len(lines) == 1, lines
    invite = json.loads(lines[0])
    assert isinstance(invite, dict)
    return invite


async def test_invite_json_prints_token_signup_url_and_expiry(tmp_path: Path, database_dsn: str) -> None:
    invite = await _invite_json(tmp_path, database_dsn)
    assert set(invite) == {"token", "signupUrl", "expiresAt"}
    assert invite["signupUrl"] == f"{PUBLIC_BASE_URL}/api/v1/merchants/signup?token={invite['token']}"


async def test_invite_expires_after_the_configured_lifetime(tmp_path: Path, database_dsn: str) -> None:
    before = datetime.now(UTC)
    invite = await _invite_json(tmp_path, database_dsn)
    after = datetime.now(UTC)
    assert invite["expiresAt"].endswith("Z")
    expires_at = datetime.fromisoformat(invite["expiresAt"].replace("Z", "+00:00"))
    lifetime = timedelta(seconds=INVITE_TTL_S)
    assert before + lifetime - timedelta(seconds=1) <= expires_at <= after + lifetime


async def test_invite_without_json_prints_the_signup_url(tmp_path: Path, database_dsn: str) -> None:
    result = await payorch_async(
        "invite", "--email", "ops@merchant.example", env=cli_environment(tmp_path, database_dsn)
    )
    assert result.returncode == 0, result.stderr
    (line,) = result.stdout.decode().splitlines()
    assert line.startswith(f"{PUBLIC_BASE_URL}/api/v1/merchants/signup?token=")


async def test_invite_from_the_cli_signs_a_merchant_up(
    tmp_path: Path, database_dsn: str, client: Client
) -> None:
    invite = await _invite_json(tmp_path, database_dsn)
    link = urlsplit(invite["signupUrl"])
    email = "ops@merchant.example"  # the address it was made for (`_invite_json`)
    response = await client.post(f"{link.path}?{link.query}", json=signup_body(email, "REG-CLI-0001"))
    assert response.status_code == 201, await response.get_data()
    response = await client.post("/api/v1/auth/login", json={"email": email, "password": PASSWORD})
    assert response.status_code == 200


async def _invite_rows(conn: Connection) -> list[dict[str, Any]]:
    return [dict(row) for row in await conn.fetch("SELECT * FROM invites")]


async def test_invite_stores_only_a_hash_of_its_token(
    tmp_path: Path, database_dsn: str, db: Database
) -> None:
    invite = await _invite_json(tmp_path, database_dsn)
    (row,) = await db.autocommit(_invite_rows)
    assert bytes(row["token_hash"]) == hashlib.sha256(invite["token"].encode()).digest()
    assert row["email"] == "ops@merchant.example"
    stored = " ".join(f"{value!r} {value!s}" for value in row.values())
    assert invite["token"] not in stored


async def test_invite_links_to_the_running_server_whatever_port_its_own_settings_say(
    tmp_path: Path, database_dsn: str
) -> None:
    # This shell's configuration says nothing of the server's port: its own link would say 8080.
    (tmp_path / "invite").mkdir()
    env = cli_environment(tmp_path / "invite", database_dsn, config_text="")
    async with serving(database_dsn, tmp_path / "server") as (_, base_url, _):
        result = await payorch_async("invite", "--email", "ops@merchant.example", env=env)
    assert result.returncode == 0, result.stderr
    (line,) = result.stdout.decode().splitlines()
    assert line.startswith(f"{base_url}/api/v1/merchants/signup?token=")


async def test_invite_without_a_running_server_links_to_its_own_bind(
    tmp_path: Path, database_dsn: str
) -> None:
    env = cli_environment(tmp_path, database_dsn, config_text='[server]\nbind = "127.0.0.1:18081"\n')
    result = await payorch_async("invite", "--email", "ops@merchant.example", env=env)
    assert result.returncode == 0, result.stderr
    assert result.stdout.decode().startswith("http://127.0.0.1:18081/api/v1/merchants/signup?token=")


def test_invite_with_an_address_that_is_not_an_email_exits_2(tmp_path: Path) -> None:
    completed = subprocess.run(
        [sys.executable, "-m", "payorch", "invite", "--email", "not-an-email"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
        check=False,
    )
    assert completed.returncode == 2
    assert completed.stderr.strip().count("\n") == 0
    assert "--email" in completed.stderr


# payorch reset-password

RESET_TTL_S = 900


async def _reset_password(tmp_path: Path, database_dsn: str, email: str, *json_option: str) -> Any:
    config = (
        f'[server]\npublic_base_url = "{PUBLIC_BASE_URL}"\n[auth]\npassword_reset_ttl_s = {RESET_TTL_S}\n'
    )
    env = cli_environment(tmp_path, database_dsn, config_text=config)
    return await payorch_async("reset-password", "--email", email, *json_option, env=env)


async def test_reset_password_json_prints_token_reset_url_and_expiry_after_its_setting(
    tmp_path: Path, database_dsn: str, merchant: Merchant
) -> None:
    before = datetime.now(UTC)
    result = await _reset_password(tmp_path, database_dsn, merchant.email, "--json")
    after = datetime.now(UTC)
    assert result.returncode == 0, result.stderr
    (line,) = result.stdout.decode().splitlines()
    reset = json.loads(line)
    assert set(reset) == {"token", "resetUrl", "expiresAt"}
    assert reset["resetUrl"] == f"{PUBLIC_BASE_URL}/console/reset-password?token={reset['token']}"
    expires_at = datetime.fromisoformat(reset["expiresAt"].replace("Z", "+00:00"))
    lifetime = timedelta(seconds=RESET_TTL_S)
    assert before + lifetime - timedelta(seconds=1) <= expires_at <= after + lifetime


async def test_reset_password_prints_a_link_to_the_page_for_that_admin_storing_only_its_hash(
    tmp_path: Path, database_dsn: str, db: Database, app: PayorchApp, merchant: Merchant
) -> None:
    result = await _reset_password(tmp_path, database_dsn, merchant.email.upper())
    assert result.returncode == 0, result.stderr
    (line,) = result.stdout.decode().splitlines()
    link = urlsplit(line)
    token = link.query.removeprefix("token=")
    response = await app.test_client().get(f"{link.path}?{link.query}")
    assert response.status_code == 200
    assert merchant.email in await response.get_data(as_text=True)
    (row,) = await db.autocommit(_reset_rows)
    assert bytes(row["token_hash"]) == hashlib.sha256(token.encode()).digest()
    assert token not in " ".join(f"{value!r} {value!s}" for value in row.values())


async def _reset_rows(conn: Connection) -> list[dict[str, Any]]:
    return [dict(row) for row in await conn.fetch("SELECT * FROM password_resets")]


async def test_reset_password_for_an_email_no_admin_has_exits_2_with_one_line_storing_nothing(
    tmp_path: Path, database_dsn: str, db: Database
) -> None:
    result = await _reset_password(tmp_path, database_dsn, "nobody@merchant.example")
    assert result.returncode == 2
    assert result.stdout == b""
    assert result.stderr.decode().splitlines() == [
        "payorch: no admin user has the e-mail 'nobody@merchant.example'"
    ]
    assert await db.autocommit(_reset_rows) == []


@pytest.mark.parametrize("workers", ["0", "65", "many"])
def test_serve_with_workers_not_1_to_64_or_auto_exits_2_naming_the_option(
    tmp_path: Path, workers: str
) -> None:
    result = payorch_here("serve", "--workers", workers, env=cli_environment(tmp_path, UNREACHABLE_DATABASE))
    assert result.returncode == 2
    assert "argument --workers: must be a whole number of processes from 1 to 64" in result.stderr
