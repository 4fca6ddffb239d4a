"""payorch serve | migrate | invite: the operator's commands."""

from __future__ import annotations

import argparse
import json
import sys
from datetime import timedelta

import trio
import trio_asyncio

from payorch.config import ConfigError, Settings, config_path_from, load_settings
from payorch.engine.secrets import new_invite_token, token_hash
from payorch.engine.timefmt import iso, utcnow
from payorch.logs import configure_logging
from payorch.service import database_url, serve_until_signalled
from payorch.storage import accounts
from payorch.storage.database import open_database
from payorch.storage.migrations import migrate


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="payorch", description="payorch payment orchestration service")
    parser.add_argument("--config", help="configuration file (default: $PAYORCH_CONFIG or ./config.toml)")
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("serve", help="serve the HTTP API (migrates the database first)")
    commands.add_parser("migrate", help="apply pending database migrations and exit")
    invite = commands.add_parser("invite", help="make a one-time merchant signup link")
    invite.add_argument("--email", required=True, help="the merchant contact the link is for")
    invite.add_argument("--json", action="store_true", help='print {"token", "signupUrl", "expiresAt"}')
    return parser


async def _migrate(settings: Settings) -> None:
    async with trio_asyncio.open_loop(), open_database(await database_url(settings), min_size=1, max_size=1) as db:
        applied = await migrate(db)
    print("applied: " + ", ".join(applied) if applied else "database is up to date")


async def _invite(settings: Settings, email: str, as_json: bool) -> None:
    token = new_invite_token()
    expires_at = utcnow() + timedelta(seconds=settings.signup.invite_ttl_s)
    async with trio_asyncio.open_loop(), open_database(await database_url(settings), min_size=1, max_size=1) as db:
        await migrate(db)
        await db.transaction(accounts.create_invite, token_hash=token_hash(token), email=email, expires_at=expires_at)
    signup_url = f"{settings.server.public_base_url}/api/v1/merchants/signup?token={token}"
    if as_json:
        print(json.dumps({"token": token, "signupUrl": signup_url, "expiresAt": iso(expires_at)}))
    else:
        print(signup_url)


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    configure_logging()
    try:
        settings = load_settings(config_path_from(args.config))
    except ConfigError as exc:
        print(f"payorch: {exc}", file=sys.stderr)
        return 2
    if args.command == "serve":
        trio.run(serve_until_signalled, settings)
    elif args.command == "migrate":
        trio.run(_migrate, settings)
    else:
        trio.run(_invite, settings, args.email, args.json)
    return 0
