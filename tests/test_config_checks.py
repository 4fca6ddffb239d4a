"""`check_settings`: what the settings name on this host (files, directories, addresses, URLs),
checked before anything starts, one problem per `ConfigError` naming its key, nothing written."""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
import trustme

from payorch.config import ConfigError, Settings, load_settings
from payorch.config_checks import check_database_settings, check_settings, load_checked_settings

KEY = "S2vYjcy6bBtRN0mTGqkLVxr40z2HDG5cf7rjzmoAPpM="
SECRETS = f'[auth]\njwt_secret = "{"j" * 40}"\n[security]\nencryption_key = "{KEY}"\n'
DATABASE_PASSWORD = "pg-password-never-shown"


@pytest.fixture(autouse=True)
def no_payorch_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.upper().startswith("PAYORCH_"):
            monkeypatch.delenv(name)


def loaded(directory: Path, text: str) -> Settings:
    """The settings of `text` as `config.toml` in `directory`, no secret generated."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "config.toml"
    path.write_text(text)
    return load_settings(path, ensure_secrets=False)


def problems_of(settings: Settings) -> list[tuple[str | None, str]]:
    return [(problem.key, str(problem)) for problem in check_settings(settings)]


def test_a_configuration_whose_files_and_addresses_are_all_there_has_no_problem(tmp_path: Path) -> None:
    ca_bundle = tmp_path / "ca.pem"
    trustme.CA().cert_pem.write_to_path(str(ca_bundle))
    settings = loaded(tmp_path, f'{SECRETS}[webhooks]\nca_bundle = "ca.pem"\n')
    assert check_settings(settings) == []


def test_defaults_in_a_new_directory_have_no_problem(tmp_path: Path) -> None:
    assert check_settings(loaded(tmp_path, "")) == []
    assert sorted(path.name for path in tmp_path.iterdir()) == ["config.toml"]  # nothing written


# webhooks.ca_bundle


def test_a_missing_ca_bundle_is_a_problem_naming_it(tmp_path: Path) -> None:
    settings = loaded(tmp_path, f'{SECRETS}[webhooks]\nca_bundle = "absent.pem"\n')
    assert problems_of(settings) == [
        (
            "webhooks.ca_bundle",
            f"invalid setting webhooks.ca_bundle: {tmp_path / 'absent.pem'}: no such file",
        )
    ]


@pytest.mark.parametrize(
    "content",
    ["not a certificate\n", "", "-----BEGIN CERTIFICATE-----\nbm90IGEgY2VydA==\n-----END CERTIFICATE-----\n"],
    ids=["text", "empty", "broken_pem"],
)
def test_a_ca_bundle_without_a_pem_certificate_is_a_problem(tmp_path: Path, content: str) -> None:
    (tmp_path / "ca.pem").write_text(content)
    settings = loaded(tmp_path, f'{SECRETS}[webhooks]\nca_bundle = "ca.pem"\n')
    ((key, message),) = problems_of(settings)
    assert key == "webhooks.ca_bundle"
    assert message.startswith(
        f"invalid setting webhooks.ca_bundle: {tmp_path / 'ca.pem'}: holds no PEM certificate"
    )


def test_a_private_key_as_the_ca_bundle_is_a_problem(tmp_path: Path) -> None:
    trustme.CA().private_key_pem.write_to_path(str(tmp_path / "key.pem"))
    settings = loaded(tmp_path, f'{SECRETS}[webhooks]\nca_bundle = "key.pem"\n')
    ((key, message),) = problems_of(settings)
    assert key == "webhooks.ca_bundle"
    assert "holds no PEM certificate" in message
    assert "PRIVATE KEY" not in message


def test_a_directory_as_the_ca_bundle_is_a_problem(tmp_path: Path) -> None:
    (tmp_path / "certs").mkdir()
    settings = loaded(tmp_path, f'{SECRETS}[webhooks]\nca_bundle = "certs"\n')
    ((key, message),) = problems_of(settings)
    assert key == "webhooks.ca_bundle"
    assert "cannot be read" in message


# server.state_dir, where the secrets left empty are generated and kept


def test_a_state_dir_that_is_a_file_is_a_problem_when_secrets_are_to_be_kept(tmp_path: Path) -> None:
    (tmp_path / "state").write_text("")
    settings = loaded(tmp_path, '[server]\nstate_dir = "state"\n')
    assert problems_of(settings) == [
        ("server.state_dir", f"invalid setting server.state_dir: {tmp_path / 'state'} is not a directory")
    ]


def test_a_state_dir_that_cannot_be_made_is_a_problem(tmp_path: Path) -> None:
    (tmp_path / "a-file").write_text("")
    settings = loaded(tmp_path, '[server]\nstate_dir = "a-file/state"\n')
    ((key, message),) = problems_of(settings)
    assert key == "server.state_dir"
    assert f"{tmp_path / 'a-file'} is not a directory" in message


def test_with_both_secrets_set_the_state_dir_is_not_used(tmp_path: Path) -> None:
    (tmp_path / "state").write_text("")
    assert check_settings(loaded(tmp_path, SECRETS + '[server]\nstate_dir = "state"\n')) == []


def test_a_state_dir_others_may_write_to_is_a_problem_saying_how_to_fix_it(tmp_path: Path) -> None:
    state = tmp_path / "var"
    state.mkdir()
    state.chmod(0o777)
    ((key, message),) = problems_of(loaded(tmp_path, ""))
    assert key == "server.state_dir"
    assert message.endswith(f"run `chmod go-w {state}` and start again")


def test_a_kept_secret_others_may_read_is_a_problem_naming_its_setting(tmp_path: Path) -> None:
    state = tmp_path / "var"
    state.mkdir(mode=0o700)
    (state / "encryption_key").write_text(KEY + "\n")
    (state / "encryption_key").chmod(0o644)
    ((key, message),) = problems_of(loaded(tmp_path, ""))
    assert key == "security.encryption_key"
    assert message.endswith(f"run `chmod 600 {state / 'encryption_key'}` and start again")
    assert KEY not in message


def test_an_empty_kept_secret_is_a_problem_naming_its_setting(tmp_path: Path) -> None:
    state = tmp_path / "var"
    state.mkdir(mode=0o700)
    (state / "jwt_secret").write_text("")
    (state / "jwt_secret").chmod(0o600)
    assert problems_of(loaded(tmp_path, "")) == [
        (
            "auth.jwt_secret",
            f"invalid setting auth.jwt_secret: {state / 'jwt_secret'} is empty: "
            "delete it to generate a new secret",
        )
    ]


def test_secrets_kept_by_an_earlier_start_are_no_problem(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    path.write_text("")
    load_settings(path)  # generates and keeps both
    assert check_settings(load_settings(path, ensure_secrets=False)) == []


# database.url, or the embedded PostgreSQL's database.data_dir


BAD_DATABASE_URLS = {
    "another_scheme": ("mysql://payorch@db.internal/payorch", "must start with postgresql://"),
    "port_not_a_number": (
        f"postgresql://payorch:{DATABASE_PASSWORD}@db.internal:54x2/payorch",
        "has a port that is not a number",
    ),
    "port_too_high": ("postgresql://payorch@db.internal:99999/payorch", "has a port that is not a number"),
    "unknown_sslmode": (
        f"postgresql://payorch:{DATABASE_PASSWORD}@db.internal/payorch?sslmode=always",
        "has an sslmode that is none of",
    ),
    "white_space": (f"postgresql://payorch:{DATABASE_PASSWORD}@db internal/payorch", "white space"),
}


@pytest.mark.parametrize(("url", "problem"), list(BAD_DATABASE_URLS.values()), ids=list(BAD_DATABASE_URLS))
def test_a_database_url_asyncpg_would_refuse_is_a_problem_that_does_not_show_it(
    tmp_path: Path, url: str, problem: str
) -> None:
    settings = loaded(tmp_path, f'{SECRETS}[database]\nurl = "{url}"\n')
    ((key, message),) = problems_of(settings)
    assert key == "database.url"
    assert message.startswith("invalid setting database.url: ")
    assert problem in message
    assert DATABASE_PASSWORD not in message
    assert "db.internal" not in message


@pytest.mark.parametrize(
    "url",
    [
        "postgresql://payorch:secret@db.internal:5432/payorch",
        "postgres://db.internal/payorch?sslmode=verify-full",
        "postgresql://payorch@db-1:5432,db-2:5433/payorch?target_session_attrs=read-write",
        "postgresql://payorch@[::1]:5432/payorch",
        "postgresql:///payorch?host=/var/run/postgresql",
    ],
)
def test_a_database_url_asyncpg_accepts_is_no_problem(tmp_path: Path, url: str) -> None:
    assert check_settings(loaded(tmp_path, f'{SECRETS}[database]\nurl = "{url}"\n')) == []


def test_an_embedded_data_dir_that_cannot_be_made_is_a_problem(tmp_path: Path) -> None:
    (tmp_path / "a-file").write_text("")
    settings = loaded(tmp_path, f'{SECRETS}[database]\ndata_dir = "a-file/pgdata"\n')
    ((key, message),) = problems_of(settings)
    assert key == "database.data_dir"
    assert f"{tmp_path / 'a-file'} is not a directory" in message
    assert not (tmp_path / "a-file" / "pgdata").exists()


def test_with_a_database_url_the_data_dir_is_not_used(tmp_path: Path) -> None:
    (tmp_path / "a-file").write_text("")
    settings = loaded(
        tmp_path,
        f'{SECRETS}[database]\nurl = "postgresql://db.internal/payorch"\ndata_dir = "a-file/pgdata"\n',
    )
    assert check_settings(settings) == []


def test_the_database_commands_check_only_the_database(tmp_path: Path) -> None:
    settings = loaded(
        tmp_path, f'{SECRETS}[database]\nurl = "mysql://db.internal"\n[webhooks]\nca_bundle = "absent.pem"\n'
    )
    assert [problem.key for problem in check_settings(settings)] == ["database.url", "webhooks.ca_bundle"]
    assert [problem.key for problem in check_database_settings(settings)] == ["database.url"]


# server.bind, server.public_base_url and the providers' api_base


def test_a_bind_address_this_host_does_not_have_is_a_problem(tmp_path: Path) -> None:
    settings = loaded(tmp_path, f'{SECRETS}[server]\nbind = "192.0.2.1:8080"\n')  # TEST-NET-1
    assert problems_of(settings) == [
        ("server.bind", "invalid setting server.bind: 192.0.2.1 is not an address of this host")
    ]


@pytest.fixture
def port_in_use() -> Iterator[int]:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        yield listener.getsockname()[1]


def test_a_bind_port_in_use_is_no_problem_of_the_configuration(tmp_path: Path, port_in_use: int) -> None:
    # Another process, or this service itself when it reloads on SIGHUP.
    settings = loaded(tmp_path, f'{SECRETS}[server]\nbind = "127.0.0.1:{port_in_use}"\n')
    assert check_settings(settings) == []


BAD_URLS = {
    "no_host": ("http://", "must name a host"),
    "a_query": ("https://pay.example.com/?x=1", "must not have a query"),
    "a_fragment": ("https://pay.example.com/#top", "must not have a query (?) or a fragment"),
    "a_password": ("https://user:hunter2@pay.example.com", "must not hold a user name or password"),
    "port_not_a_number": ("https://pay.example.com:80a", "is not a valid URL"),
}


@pytest.mark.parametrize(("url", "problem"), list(BAD_URLS.values()), ids=list(BAD_URLS))
@pytest.mark.parametrize(
    ("section", "key"),
    [("server", "public_base_url"), ("providers.stripe", "api_base"), ("providers.mollie", "api_base")],
)
def test_a_base_url_payorch_cannot_add_paths_to_is_a_problem(
    tmp_path: Path, section: str, key: str, url: str, problem: str
) -> None:
    settings = loaded(tmp_path, f'{SECRETS}[{section}]\n{key} = "{url}"\n')
    ((named, message),) = problems_of(settings)
    assert named == f"{section}.{key}"
    assert message.startswith(f"invalid setting {section}.{key}: {problem}")
    assert "hunter2" not in message


# Every problem, in the order of config.toml; how serve reloads


def test_every_problem_is_listed_in_the_order_of_the_file(tmp_path: Path) -> None:
    settings = loaded(
        tmp_path,
        f'{SECRETS}[server]\nbind = "192.0.2.1:8080"\n[database]\nurl = "mysql://x"\n'
        '[webhooks]\nca_bundle = "absent.pem"\n[providers.stripe]\napi_base = "https://"\n',
    )
    assert [key for key, _ in problems_of(settings)] == [
        "server.bind",
        "database.url",
        "webhooks.ca_bundle",
        "providers.stripe.api_base",
    ]


def test_a_reload_is_refused_by_its_first_problem_counting_the_others(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    path.write_text(f'{SECRETS}[database]\nurl = "mysql://x"\n[webhooks]\nca_bundle = "absent.pem"\n')
    with pytest.raises(ConfigError) as refused:
        load_checked_settings(path)
    assert refused.value.key == "database.url"
    assert str(refused.value).startswith("invalid setting database.url: ")
    assert str(refused.value).endswith(" (and 1 more)")


def test_a_reload_of_a_configuration_without_problems_is_its_settings(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    path.write_text(SECRETS + "[limits]\nburst = 7\n")
    assert load_checked_settings(path).limits.burst == 7
