"""What a loaded configuration holds that only the world around it can refute: the files it names
exist and parse, the addresses it gives are ones payorch can use.

`load_settings` checks every value on its own (types, ranges, the formats of keys and URLs);
`check_settings` checks what `payorch serve` would otherwise find only as it builds its parts,
after it started PostgreSQL and migrated: a CA bundle that is missing or holds no certificate, a
state directory the secrets cannot be kept in, a database URL asyncpg cannot parse, a bind address
this host does not have. `payorch check-config` and every other command run it before anything
starts, so each problem is one line naming its key, never a traceback.
"""

from __future__ import annotations

import errno
import os
import socket
import ssl
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

from payorch.config import KEPT_SECRET_FILES, ConfigError, Settings, load_settings, others_may

_DATABASE_SCHEMES = ("postgresql", "postgres")  # what asyncpg accepts
_SSL_MODES = frozenset({"disable", "allow", "prefer", "require", "verify-ca", "verify-full"})


def check_settings(settings: Settings) -> list[ConfigError]:
    """Every problem of `settings` (as `load_settings` returned them) that would stop or break
    `payorch serve` later, in the order of `config.toml`: one `ConfigError` each, its one line
    naming the key and never a secret. Nothing is written; `server.bind` is bound for an instant
    (no connection can be made) to learn whether this host has that address."""
    problems = [
        *_bind_problems(settings),
        *_url_problems("server.public_base_url", settings.server.public_base_url),
        *_kept_secret_problems(settings),
        *_database_problems(settings),
        *_ca_bundle_problems(settings.webhooks.ca_bundle),
    ]
    for name in ("stripe", "mollie"):
        api_base = getattr(settings.providers, name).api_base
        if api_base:
            problems += _url_problems(f"providers.{name}.api_base", api_base)
    return problems


def check_database_settings(settings: Settings) -> list[ConfigError]:
    """The problems of `check_settings` that concern the database (`database.url`, or the embedded
    PostgreSQL's `database.data_dir`): what `migrate`, `invite` and `rotate-credentials` use, so that
    they run, say, from a machine that has not the server's CA bundle or address."""
    return _database_problems(settings)


def load_checked_settings(path: Path) -> Settings:
    """`load_settings(path)`, refused (`ConfigError`, the first problem and how many more) when
    `check_settings` finds a problem: how `payorch serve` reloads its configuration on SIGHUP."""
    settings = load_settings(path)
    problems = check_settings(settings)
    if problems:
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        raise ConfigError(f"{problems[0]}{more}", key=problems[0].key, others=problems[1:])
    return settings


def _invalid(key: str, problem: str) -> ConfigError:
    return ConfigError(f"invalid setting {key}: {problem}", key=key)


def bind_refusal(bind: str) -> OSError | None:
    """Bind a socket to `bind` (HOST:PORT) as hypercorn makes its own, and close it: what refused
    the bind, or None."""
    host, _, port = bind.rpartition(":")
    host = host.strip("[]")
    # As hypercorn makes its socket (`hypercorn.config.Config._create_sockets`).
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        with socket.socket(family, socket.SOCK_STREAM) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            probe.bind((host, int(port)))
    except OSError as error:  # socket.gaierror among them
        return error
    return None


def _bind_problems(settings: Settings) -> list[ConfigError]:
    """The host of `server.bind` is one this host can listen on, at that port. A port in use is
    not a problem of the configuration (another process, or this service before a restart):
    `serve` checks that itself before it starts anything (`bind_in_use`)."""
    bind = settings.server.bind
    error = bind_refusal(bind)
    if error is None or error.errno == errno.EADDRINUSE:
        return []
    host = bind.rpartition(":")[0].strip("[]")
    if isinstance(error, socket.gaierror):
        return [_invalid("server.bind", f"cannot resolve the host {host!r} ({error.strerror})")]
    if error.errno == errno.EADDRNOTAVAIL:
        return [_invalid("server.bind", f"{host} is not an address of this host")]
    return [_invalid("server.bind", f"cannot listen on {bind} ({error.strerror})")]


def bind_in_use(settings: Settings) -> str | None:
    """The one line `serve` exits with when another process listens on `server.bind` already, before
    it starts PostgreSQL or takes a node identity; None when the address is free."""
    error = bind_refusal(settings.server.bind)
    if error is None or error.errno != errno.EADDRINUSE:
        return None
    return (
        f"cannot serve: server.bind {settings.server.bind} is in use by another process "
        "(another payorch, or a service of this host): stop it, or set server.bind to a free address"
    )


def _url_problems(key: str, url: str) -> list[ConfigError]:
    """`url` (already known to start with http:// or https://) has a host, a numeric port if
    any, and nothing that payorch could not put paths after."""
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - reading it is the check: a port that is not a number raises
    except ValueError:
        return [_invalid(key, "is not a valid URL (its host, or its port, cannot be read)")]
    if not parts.hostname:
        return [_invalid(key, "must name a host, as in https://pay.example.com")]
    if any(character.isspace() for character in url):
        return [_invalid(key, "must not contain white space")]
    if parts.username is not None:
        return [_invalid(key, "must not hold a user name or password")]
    if parts.query or parts.fragment or url.endswith(("?", "#")):
        return [_invalid(key, "must not have a query (?) or a fragment (#): payorch adds paths to it")]
    return []


def _kept_secret_problems(settings: Settings) -> list[ConfigError]:
    """What would stop `load_settings` from generating and keeping, under `server.state_dir`, the
    secrets `settings` leaves empty; checked without writing anything. None when there are none
    to keep (both set, or `load_settings` already kept them)."""
    needed = [
        key
        for key, empty in (
            ("auth.jwt_secret", not settings.auth.jwt_secret),
            ("security.encryption_key", not settings.security.keys),
        )
        if empty
    ]
    if not needed:
        return []
    state_dir = settings.server.state_dir
    try:
        if not state_dir.exists():
            return _creatable_problems("server.state_dir", state_dir)
        if not state_dir.is_dir():
            return [_invalid("server.state_dir", f"{state_dir} is not a directory")]
        others = others_may(state_dir, 0o022, "write to", key="server.state_dir")
        if others is not None:
            return [others]
        problems = []
        for key in needed:
            problem = _kept_secret_problem(state_dir / KEPT_SECRET_FILES[key], key)
            if problem is not None:
                problems.append(problem)
        return problems
    except OSError as error:
        return [_invalid("server.state_dir", f"cannot read {state_dir} ({error.strerror})")]


def _kept_secret_problem(path: Path, key: str) -> ConfigError | None:
    if not path.exists():
        if not os.access(path.parent, os.W_OK | os.X_OK):
            return _invalid("server.state_dir", f"{path.parent}: this user may not write to it")
        return None
    problem = others_may(path, 0o077, "read or write", key=key)
    if problem is not None:
        return problem
    try:
        kept = path.read_text().strip()
    except (OSError, UnicodeDecodeError) as error:
        reason = error.strerror if isinstance(error, OSError) else "not text"
        return _invalid(key, f"cannot read {path} ({reason})")
    if not kept:
        return _invalid(key, f"{path} is empty: delete it to generate a new secret")
    return None


def _creatable_problems(key: str, directory: Path) -> list[ConfigError]:
    """`directory`, which does not exist, can be made by this user: its nearest existing ancestor
    is a directory this user may write to."""
    ancestor = next(parent for parent in directory.parents if parent.exists())
    if not ancestor.is_dir():
        return [_invalid(key, f"cannot create {directory}: {ancestor} is not a directory")]
    if not os.access(ancestor, os.W_OK | os.X_OK):
        return [_invalid(key, f"cannot create {directory}: this user may not write to {ancestor}")]
    return []


def _database_problems(settings: Settings) -> list[ConfigError]:
    """`database.url` as asyncpg will parse it; without one, the embedded PostgreSQL's
    `database.data_dir` is (or can be made) a directory of this user's."""
    url = settings.database.url
    if not url:
        data_dir = settings.database.data_dir
        try:
            if not data_dir.exists():
                return _creatable_problems("database.data_dir", data_dir)
        except OSError as error:
            return [_invalid("database.data_dir", f"cannot read {data_dir} ({error.strerror})")]
        if not data_dir.is_dir():
            return [_invalid("database.data_dir", f"{data_dir} is not a directory")]
        if not os.access(data_dir, os.W_OK | os.X_OK):
            return [_invalid("database.data_dir", f"this user may not write to {data_dir}")]
        return []
    problem = _database_url_problem(url)
    return [_invalid("database.url", problem)] if problem else []


def _database_url_problem(url: str) -> str | None:
    """What asyncpg would refuse in `url`, said without showing it (it may hold a password)."""
    if any(character.isspace() for character in url):
        return "must not contain white space"
    try:
        parts = urlsplit(url)
    except ValueError:
        return "is not a valid URL"
    if parts.scheme not in _DATABASE_SCHEMES:
        return "must start with postgresql:// (or postgres://), or be empty for the embedded PostgreSQL"
    hosts = parts.netloc.rpartition("@")[2]
    for host in hosts.split(",") if hosts else []:
        port = host.rpartition("]")[2] if host.startswith("[") else host
        if host.startswith("[") and "]" not in host:
            return "has a bracketed IPv6 host without its closing ]"
        _, colon, number = port.rpartition(":")
        if colon and not (number.isdigit() and 0 < int(number) <= 65535):
            return "has a port that is not a number from 1 to 65535"
    ssl_modes = parse_qs(parts.query).get("sslmode", [])
    if any(mode not in _SSL_MODES for mode in ssl_modes):
        return "has an sslmode that is none of " + ", ".join(sorted(_SSL_MODES))
    return None


def _ca_bundle_problems(ca_bundle: Path | None) -> list[ConfigError]:
    """`webhooks.ca_bundle`, if set, is a readable file of PEM certificates (at least one)."""
    if ca_bundle is None:
        return []
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)  # no system CAs: only the bundle is counted
    try:
        context.load_verify_locations(cafile=str(ca_bundle))
    except FileNotFoundError:
        return [_invalid("webhooks.ca_bundle", f"{ca_bundle}: no such file")]
    except ssl.SSLError as error:
        return [_invalid("webhooks.ca_bundle", f"{ca_bundle}: holds no PEM certificate ({error.reason})")]
    except OSError as error:
        return [_invalid("webhooks.ca_bundle", f"{ca_bundle}: cannot be read ({error.strerror})")]
    if not context.cert_store_stats()["x509"]:  # only revocation lists
        return [_invalid("webhooks.ca_bundle", f"{ca_bundle}: holds no PEM certificate")]
    return []
