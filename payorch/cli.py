"""payorch serve | migrate | invite: the operator's commands."""

from __future__ import annotations

import argparse
import json
import logging
import sys

import trio
from pydantic import EmailStr, TypeAdapter, ValidationError

from payorch.config import ConfigError, Settings, config_path_from, load_settings
from payorch.engine.invites import issue_invite
from payorch.logs import configure_logging
from payorch.service import database_url, serve_until_signalled
from payorch.storage.database import open_database
from payorch.storage.migrations import migrate
from payorch.values.timefmt import iso

_CONFIG_HELP = "configuration file (default: $PAYORCH_CONFIG or ./config.toml)"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="payorch", description="payorch payment orchestration service")
    parser.add_argument("--config", help=_CONFIG_HELP)
    # `--config` is taken after the command too (`payorch serve --config F`); given twice, the later
    # one counts. SUPPRESS: a command given none keeps what came before it.
    takes_config = argparse.ArgumentParser(add_help=False)
    takes_config.add_argument("--config", default=argparse.SUPPRESS, help=_CONFIG_HELP)
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser(
        "serve", parents=[takes_config], help="serve the HTTP API (migrates the database first)"
    )
    commands.add_parser("migrate", parents=[takes_config], help="apply pending database migrations and exit")
    invite = commands.add_parser(
        "invite", parents=[takes_config], help="make a one-time merchant signup link"
    )
    invite.add_argument("--email", required=True, help="the merchant contact the link is for")
    invite.add_argument("--json", action="store_true", help='print {"token", "signupUrl", "expiresAt"}')
    return parser


async def _migrate(settings: Settings) -> None:
    async with open_database(await database_url(settings), min_size=1, max_size=1) as db:
        applied = await migrate(db)
    print("applied: " + ", ".join(applied) if applied else "database is up to date")


async def _invite(settings: Settings, email: str, as_json: bool) -> None:
    async with open_database(await database_url(settings), min_size=1, max_size=1) as db:
        await migrate(db)
        invite = await issue_invite(db, settings, email)
    if as_json:
        print(
            json.dumps(
                {"token": invite.token, "signupUrl": invite.signup_url, "expiresAt": iso(invite.expires_at)}
            )
        )
    else:
        print(invite.signup_url)


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


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    configure_logging()
    try:
        settings = load_settings(config_path_from(args.config))
    except ConfigError as exc:
        print(f"payorch: {exc}", file=sys.stderr)
        return 2
    if args.command == "invite" and not _is_email(args.email):
        print(f"payorch: --email {args.email!r} is not an e-mail address", file=sys.stderr)
        return 2
    try:
        if args.command == "serve":
            _warn_if_links_point_at_this_host(settings)
            trio.run(serve_until_signalled, settings)
        elif args.command == "migrate":
            trio.run(_migrate, settings)
        else:
            trio.run(_invite, settings, args.email, args.json)
    except Exception:
        # Logged, so that even a crash (say, an unreachable database) is one JSON line on stderr.
        logging.getLogger("payorch.cli").exception("payorch %s failed", args.command)
        return 1
    return 0
