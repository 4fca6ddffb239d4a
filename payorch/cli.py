"""payorch serve | migrate | invite | reset-password | check-config | rotate-credentials: the
operator's commands; payorch dev-receiver: a webhook receiver for local development
(`dev_receiver`)."""

from __future__ import annotations

import argparse
import gc
import importlib.metadata
import json
import logging
import sys
import textwrap
from collections.abc import Iterator
from contextlib import contextmanager
from decimal import Decimal
from functools import partial
from pathlib import Path
from typing import Any, Literal

import trio
from pydantic import EmailStr, TypeAdapter, ValidationError

from payorch import dev_receiver
from payorch.config import (
    MAX_WORKERS,
    REDACTED,
    ConfigError,
    Settings,
    config_path_from,
    load_settings,
    redacted,
    workers_setting,
)
from payorch.config_checks import bind_in_use, check_database_settings, check_settings, load_checked_settings
from payorch.logs import configure_logging, set_log_level

# The service, the database and the engine are imported by the commands that use them, when they
# run: `--version`, `--help`, `check-config` and a configuration refused at the start then take a
# fraction of a second instead of the seconds importing the whole service takes.

_CONFIG_HELP = "configuration file (default: $PAYORCH_CONFIG or ./config.toml)"
# Each command's --help: its description and examples as written (line breaks kept).
_HELP_FORMAT = argparse.RawDescriptionHelpFormatter


def _described(text: str) -> str:
    """`text` as a command's --help shows it: wrapped, since `_HELP_FORMAT` keeps it as written."""
    return textwrap.fill(text, width=88)


def _examples(*lines: str) -> str:
    return "Example:\n" + "\n".join(f"  {line}" for line in lines)


def _version() -> str:
    """payorch's version as installed (`pip install -e .` in a checkout, as `make run` does)."""
    try:
        return importlib.metadata.version("payorch")
    except importlib.metadata.PackageNotFoundError:
        return "unknown (not installed)"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="payorch",
        description=_described(
            "payorch payment orchestration service. Every command reads config.toml (or "
            "--config) and the PAYORCH_<SECTION>__<KEY> environment variables; `payorch COMMAND --help` "
            "says more about each."
        ),
        epilog=_examples("payorch check-config && payorch serve", "payorch serve --help"),
        formatter_class=_HELP_FORMAT,
    )
    parser.add_argument("--version", action="version", version=f"payorch {_version()}")
    parser.add_argument("--config", help=_CONFIG_HELP)
    # `--config` is taken after the command too (`payorch serve --config F`); given twice, the later
    # one counts. SUPPRESS: a command given none keeps what came before it.
    takes_config = argparse.ArgumentParser(add_help=False)
    takes_config.add_argument("--config", default=argparse.SUPPRESS, help=_CONFIG_HELP)
    commands = parser.add_subparsers(dest="command", required=True)
    serve = commands.add_parser(
        "serve",
        parents=[takes_config],
        help="serve the HTTP API (migrates the database first)",
        description=_described(
            "Serve the HTTP API on server.bind until SIGTERM or SIGINT; SIGHUP reloads the "
            "configuration. First checks the configuration as check-config does (exit 2 and one line "
            "naming the key if it is bad, before anything starts), then starts the embedded PostgreSQL "
            "when database.url is empty and applies pending migrations. With --workers N (or "
            "server.workers) above 1, a parent binds server.bind once and runs N worker processes, "
            "each a whole payorch node, starting again any that dies."
        ),
        epilog=_examples(
            "payorch serve --config /etc/payorch/config.toml",
            "PAYORCH_SERVER__BIND=127.0.0.1:18080 payorch serve",
            "payorch serve --workers auto",
        ),
        formatter_class=_HELP_FORMAT,
    )
    serve.add_argument(
        "--workers",
        type=_workers,
        help=f'worker processes, 1 to {MAX_WORKERS} or "auto" (one per core); default: server.workers',
    )
    commands.add_parser(
        "migrate",
        parents=[takes_config],
        help="apply pending database migrations and exit",
        description=_described(
            "Apply the pending database migrations and exit (serve applies them too, as it "
            "starts). Safe beside running processes: migrations run under an advisory lock."
        ),
        epilog=_examples("payorch migrate --config /etc/payorch/config.toml"),
        formatter_class=_HELP_FORMAT,
    )
    invite = commands.add_parser(
        "invite",
        parents=[takes_config],
        help="make a one-time merchant signup link",
        description=_described(
            "Make a one-time signup link for one merchant, valid for signup.invite_ttl_s, "
            "and store only its token's hash. The link starts with the server.public_base_url of the "
            "`payorch serve` running on the same database; with none running, or when this "
            "command's configuration sets server.public_base_url itself, with this command's."
        ),
        epilog=_examples(
            "payorch invite --email owner@acme.example",
            "payorch invite --email owner@acme.example --json > invite.json",
        ),
        formatter_class=_HELP_FORMAT,
    )
    invite.add_argument(
        "--email", required=True, help="the merchant admin's e-mail: the link signs up this address only"
    )
    invite.add_argument("--json", action="store_true", help='print {"token", "signupUrl", "expiresAt"}')
    reset = commands.add_parser(
        "reset-password",
        parents=[takes_config],
        help="make a one-time password reset link for an admin (payorch sends no e-mail)",
        description=_described(
            "Make a one-time link that sets a new password for the admin user with this e-mail, "
            "valid for auth.password_reset_ttl_s, and store only its token's hash; a newer link ends "
            "the older. payorch sends no e-mail: hand the link on yourself. Using it ends every "
            "session of the admin. The link starts with server.public_base_url as invite's does. "
            "Exit 2 and one line when no admin has the e-mail."
        ),
        epilog=_examples(
            "payorch reset-password --email owner@acme.example",
            "payorch reset-password --email owner@acme.example --json",
        ),
        formatter_class=_HELP_FORMAT,
    )
    reset.add_argument("--email", required=True, help="the admin's e-mail, as they sign in with it")
    reset.add_argument("--json", action="store_true", help='print {"token", "resetUrl", "expiresAt"}')
    check = commands.add_parser(
        "check-config",
        parents=[takes_config],
        help="validate the configuration and print it as it takes effect, secrets redacted (starts nothing)",
        description=_described(
            "Check the configuration as serve would, without starting or writing anything: "
            "the file, every PAYORCH_* variable (each must name a section and a key), every value, and "
            "on this host what the settings name (webhooks.ca_bundle holds PEM certificates, "
            "server.state_dir can keep the generated secrets, database.url parses, server.bind is an "
            "address of this host). Prints the configuration as it takes effect, secrets redacted; "
            "exit 2 and one line per problem, each naming its key."
        ),
        epilog=_examples(
            "payorch check-config --config /etc/payorch/config.toml && kill -HUP <pid of payorch serve>",
            "payorch check-config --values-only --config deploy/config.toml   # in CI: another host's file",
        ),
        formatter_class=_HELP_FORMAT,
    )
    check.add_argument("--json", action="store_true", help="print JSON instead of TOML")
    check.add_argument(
        "--values-only",
        action="store_true",
        help="check the file, the variables and the values, not the files and addresses they name "
        "on this host",
    )
    commands.add_parser(
        "rotate-credentials",
        parents=[takes_config],
        help="re-encrypt every stored provider credential and signing secret under the first of "
        "security.encryption_keys (safe while serving; run again to resume)",
        description=_described(
            "Re-encrypt every stored provider credential and signing secret under the first "
            "of security.encryption_keys. Safe while serving; run it again to resume. Exit 1 when a "
            "stored secret opens with none of the keys, or kept changing meanwhile."
        ),
        epilog=_examples(
            'PAYORCH_SECURITY__ENCRYPTION_KEYS=\'["NEW-KEY", "OLD-KEY"]\' payorch rotate-credentials'
        ),
        formatter_class=_HELP_FORMAT,
    )
    dev_receiver.add_arguments(
        commands.add_parser(
            "dev-receiver",
            parents=[takes_config],
            help="local development: an HTTPS webhook receiver on 127.0.0.1 that payorch trusts with "
            "webhooks.allow_loopback, printing each delivery verified or rejected",
            description=_described(
                "Local development: an HTTPS webhook receiver on 127.0.0.1 (port 8787 unless --port), "
                "with a certificate from the development CA that payorch trusts when "
                "webhooks.allow_loopback is on (make run turns it on). Each delivery is verified with "
                "the endpoint's signing secret (--secret, or PAYORCH_DEV_RECEIVER_SECRET) and printed "
                "on one line; without a secret every delivery is accepted as unverified."
            ),
            epilog=_examples(
                "PAYORCH_DEV_RECEIVER_SECRET=whsec_... payorch dev-receiver",
                "payorch dev-receiver --port 9443 --bodies",
            ),
            formatter_class=_HELP_FORMAT,
        )
    )
    return parser


def _workers(value: str) -> int | Literal["auto"]:
    try:
        return workers_setting(value)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


async def _migrate(settings: Settings) -> None:
    from payorch.storage.database import database_url, open_database
    from payorch.storage.migrations import migrate

    async with open_database(await database_url(settings), min_size=1, max_size=1) as db:
        applied = await migrate(db)
    print("applied: " + ", ".join(applied) if applied else "database is up to date")


async def _invite(settings: Settings, email: str, as_json: bool) -> None:
    from payorch.engine.accounts.invites import issue_invite, signup_link_base
    from payorch.storage.database import database_url, open_database
    from payorch.storage.migrations import migrate
    from payorch.values.timefmt import iso

    async with open_database(await database_url(settings), min_size=1, max_size=1) as db:
        await migrate(db)
        # The running server's address, which this shell's settings may not know (invites.py).
        base = await signup_link_base(db, settings.server)
        invite = await issue_invite(db, settings, email, public_base_url=base)
    if as_json:
        print(
            json.dumps(
                {"token": invite.token, "signupUrl": invite.signup_url, "expiresAt": iso(invite.expires_at)}
            )
        )
    else:
        print(invite.signup_url)


async def _reset_password(settings: Settings, email: str, as_json: bool) -> int:
    from payorch.engine.accounts.invites import signup_link_base
    from payorch.engine.accounts.password_resets import NoSuchAdmin, issue_password_reset
    from payorch.storage.database import database_url, open_database
    from payorch.storage.migrations import migrate
    from payorch.values.timefmt import iso

    async with open_database(await database_url(settings), min_size=1, max_size=1) as db:
        await migrate(db)
        base = await signup_link_base(db, settings.server)  # the running server's, as invite's
        try:
            reset = await issue_password_reset(db, settings, email, public_base_url=base)
        except NoSuchAdmin:
            print(f"payorch: no admin user has the e-mail {email!r}", file=sys.stderr)
            return 2
    if as_json:
        shown = {"token": reset.token, "resetUrl": reset.reset_url, "expiresAt": iso(reset.expires_at)}
        print(json.dumps(shown))
    else:
        print(reset.reset_url)
    return 0


def _check_config(settings: Settings, path: Path, as_json: bool) -> None:
    shown = redacted(settings)
    if as_json:
        print(json.dumps(shown, indent=2, default=str))  # a Decimal (a fee's percent) as its exact text
        return
    print(f"# {path}: valid. The configuration as it takes effect (PAYORCH_* variables applied, paths")
    print(f"# resolved, an empty public_base_url following bind), every secret shown as {REDACTED}.")
    if not settings.auth.jwt_secret or not settings.security.keys:
        print("# An empty auth.jwt_secret or security.encryption_key is generated at the first start")
        print("# and kept under server.state_dir.")
    print("\n".join(_toml_lines(shown)))


def _toml_lines(table: dict[str, Any], name: str = "") -> list[str]:
    values = [(key, value) for key, value in table.items() if not isinstance(value, dict)]
    lines = [f"\n[{name}]"] if name and values else []
    lines += [f"{key} = {_toml_value(value)}" for key, value in values]
    for key, value in table.items():
        if isinstance(value, dict):
            lines += _toml_lines(value, f"{name}.{key}" if name else key)
    return lines


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, Decimal):
        return str(value)  # a TOML number, exactly as written
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(item) for item in value) + "]"
    return json.dumps("" if value is None else str(value))  # a JSON string is a TOML basic string


async def _rotate_credentials(settings: Settings) -> int:
    from payorch.engine.accounts.key_rotation import rotate_sealed_secrets
    from payorch.storage.database import database_url, open_database
    from payorch.storage.migrations import migrate
    from payorch.values.secretbox import SecretBox

    secrets = SecretBox(settings.security.keys)
    async with open_database(await database_url(settings), min_size=1, max_size=1) as db:
        await migrate(db)
        counts = await rotate_sealed_secrets(db, secrets)
    for column in counts:
        print(
            f"{column.column}: {column.reencrypted} re-encrypted, {column.current} already under the first "
            f"key, {column.unreadable} unreadable, {column.changed} changed meanwhile, {column.left} left"
        )
    logging.getLogger("payorch.cli").info(
        "stored secrets re-encrypted under the first key",
        extra={
            "keys": len(settings.security.keys),
            "columns": {column.column: vars(column) for column in counts},
        },
    )
    unreadable = sum(column.unreadable for column in counts)
    left = sum(column.left for column in counts)
    if unreadable:
        print(
            f"payorch: {unreadable} stored secrets decrypt with none of security.encryption_keys and were "
            "left as they are: is a key that sealed them missing from the list?",
            file=sys.stderr,
        )
    if left:
        print(f"payorch: {left} stored secrets kept changing meanwhile: run again", file=sys.stderr)
    return 1 if unreadable or left else 0


def _is_email(value: str) -> bool:
    try:
        TypeAdapter(EmailStr).validate_python(value)
    except ValidationError:
        return False
    return True


def _warn_if_links_point_at_this_host(settings: Settings) -> None:
    server = settings.server
    if server.public_base_url_follows_bind and not server.bind_is_loopback:
        logging.getLogger("payorch.cli").warning(
            "server.public_base_url is not set, so checkout, signup and provider event links use "
            "server.bind's address, which customers and providers may not reach: set "
            "server.public_base_url to the address they reach this service at",
            extra={"publicBaseUrl": server.public_base_url, "bind": server.bind},
        )


def _serve(settings: Settings, path: Path, workers_option: int | Literal["auto"] | None) -> int:
    try:
        return _serve_until_stopped(settings, path, workers_option)
    finally:
        _skip_the_last_collection()


def _serve_until_stopped(settings: Settings, path: Path, workers_option: int | Literal["auto"] | None) -> int:
    with _no_collections_while_importing():
        from payorch.workers import serve_as_worker, serve_workers, worker_assignment, worker_count

    # SIGHUP reads the same file and the same environment again, and checks them as here.
    reload_settings = partial(load_checked_settings, path)
    assignment = worker_assignment()
    if assignment is not None:  # one of the processes of `payorch serve --workers N`
        with _no_collections_while_importing():
            import payorch.service  # noqa: F401 - what `serve_as_worker` serves with
        trio.run(serve_as_worker, settings, reload_settings, assignment)
        return 0
    in_use = bind_in_use(settings)
    if in_use is not None:
        print(f"payorch: {in_use}", file=sys.stderr)
        return 2
    _warn_if_links_point_at_this_host(settings)
    workers = worker_count(workers_option or settings.server.workers)
    if workers > 1:  # the parent: it serves nothing, and leaves the service to its workers
        return trio.run(serve_workers, settings, path, workers)
    with _no_collections_while_importing():
        from payorch.service import serve_until_signalled

    trio.run(serve_until_signalled, settings, reload_settings)
    return 0


@contextmanager
def _no_collections_while_importing() -> Iterator[None]:
    """The garbage collector paused while the service's modules are imported, and what they made
    frozen out of its sight afterwards (`gc.freeze`). The imports leave about 100,000 objects the
    collector tracks, none of them garbage, and collections among them took about a seventh of the
    imports' CPU (0.2 of 1.6 s); with them paused and frozen, a `payorch serve` (or each of its
    workers) is ready in about 1.1 s of CPU instead of 1.4 s, and the full collections while serving
    walk the objects requests make, not the modules' too."""
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        gc.enable()


def _skip_the_last_collection() -> None:
    """The service has stopped and the process is about to exit: Python's last garbage collection at
    exit would walk the whole heap the service built, about half a second of CPU between the
    "stopped" log line and the exit. Frozen, the heap is left to the operating system; atexit
    handlers (the embedded PostgreSQL's stop, logging's flush) still run."""
    gc.disable()
    gc.freeze()


def _refused(problems: list[ConfigError], *, every: bool) -> int:
    """Exit status 2 after one line on stderr for the first of `problems`, or for `every` one."""
    shown = problems if every else problems[:1]
    lines = [f"payorch: {problem}" for problem in shown]
    if len(problems) > len(shown):
        lines[-1] += f" (and {len(problems) - len(shown)} more: `payorch check-config` lists them)"
    print("\n".join(lines), file=sys.stderr)
    return 2


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    configure_logging()
    path = config_path_from(args.config)
    try:
        # check-config leaves server.state_dir alone: it generates no secret there; dev-receiver
        # needs none (only its certificate, kept there).
        settings = load_settings(path, ensure_secrets=args.command not in ("check-config", "dev-receiver"))
    except ConfigError as exc:
        # check-config lists every problem of the reading; the other commands name the first.
        return _refused(exc.every, every=args.command == "check-config")
    # Before anything starts: what serve would fail on later (a CA bundle, the bind address...),
    # and for the commands that only reach the database, what they use of the settings.
    if args.command in ("serve", "check-config"):
        problems = [] if getattr(args, "values_only", False) else check_settings(settings)
    else:
        problems = check_database_settings(settings)
    if problems:
        return _refused(problems, every=args.command == "check-config")
    set_log_level(settings.logging.level)
    if args.command in ("invite", "reset-password") and not _is_email(args.email):
        print(f"payorch: --email {args.email!r} is not an e-mail address", file=sys.stderr)
        return 2
    try:
        if args.command == "serve":
            return _serve(settings, path, args.workers)
        elif args.command == "migrate":
            trio.run(_migrate, settings)
        elif args.command == "check-config":
            _check_config(settings, path, args.json)
        elif args.command == "rotate-credentials":
            return trio.run(_rotate_credentials, settings)
        elif args.command == "dev-receiver":
            return dev_receiver.run(settings, args)
        elif args.command == "reset-password":
            return trio.run(_reset_password, settings, args.email, args.json)
        else:
            trio.run(_invite, settings, args.email, args.json)
    except Exception:
        # Logged, so that even a crash (say, an unreachable database) is one JSON line on stderr.
        logging.getLogger("payorch.cli").exception("payorch %s failed", args.command)
        return 1
    return 0
