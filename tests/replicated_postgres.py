"""A primary and its synchronous standby: two PostgreSQL servers from the embedded distribution
(pgserver's binaries), on loopback ports, for tests of a database failover.

    pair = start_replicated_pair(directory)      # blocking: run it in a thread
    pair.url("payorch")   # postgresql://postgres@127.0.0.1:P1,127.0.0.1:P2/payorch?target_session_attrs=read-write
    pair.kill_primary()   # SIGKILL to the primary's postmaster and every process it started
    pair.promote_standby()

The primary commits only once the standby has the commit (`synchronous_standby_names = '*'`, with
`synchronous_commit` at its default, `on`): what a client was told is committed survives the
primary. That setting is made on the primary once the standby streams, after the standby was copied
from it by `pg_basebackup`: the standby does not inherit it, so once promoted, with no standby of its
own, it commits alone instead of waiting for one forever. Both trust every connection from loopback (initdb's
`--auth=trust`), replication included. Run by root (containers, CI), the servers run as the system
user `pgserver`, as pgserver itself runs them.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
from pgserver import _commands as pg  # type: ignore[attr-defined]
from pgserver import utils as pg_utils  # type: ignore[attr-defined]

from tests.conftest import _memory_directory
from tests.helpers import eventually_blocking
from tests.processes import free_port

DATABASE = "payorch"
SUPERUSER = "postgres"
STANDBY_NAME = "standby"  # its application_name, as the primary's pg_stat_replication shows it
# What every server of the pair runs with. No durability is lost to a SIGKILL without fsync (the
# kernel keeps what was written); only a crash of the machine would, which the tests do not make.
_COMMON = {
    "listen_addresses": "127.0.0.1",
    "unix_socket_directories": "",
    "fsync": "off",
    "wal_level": "replica",
    "max_wal_senders": "4",
    "hot_standby": "on",
    "wal_receiver_status_interval": "1",
    "max_connections": "60",
}
_COMMAND_TIMEOUT_S = 30
_SYNC_STATE = "SELECT sync_state FROM pg_stat_replication WHERE application_name = 'standby'"


def _as_postgres_user() -> dict[str, Any]:
    """The `user` to run the server's commands as: none of our own unless we are root, who may not
    run PostgreSQL (pgserver's own user then, made and allowed to read the binaries as pgserver does)."""
    if os.geteuid() != 0:
        return {}
    pg_utils.ensure_user_exists("pgserver")
    pg_utils.ensure_prefix_permissions(pg.POSTGRES_BIN_PATH)
    pg_utils.ensure_folder_permissions(pg.POSTGRES_BIN_PATH, 0o055)
    pg_utils.ensure_folder_permissions(pg.POSTGRES_BIN_PATH.parent / "lib", 0o044)
    return {"user": "pgserver"}


def _options(settings: dict[str, str], port: int) -> str:
    return " ".join([f"-p {port}", *(f"-c {name}={value}" for name, value in settings.items())])


@dataclass
class Server:
    """One server of the pair: its data directory, port and log."""

    name: str
    data_dir: Path
    port: int
    options: str
    run_as: dict[str, Any]

    @property
    def log(self) -> Path:
        return self.data_dir.parent / f"{self.name}.log"

    def start(self) -> None:
        pg.pg_ctl(
            ["-w", "-t", str(_COMMAND_TIMEOUT_S), "-l", str(self.log), "-o", self.options, "start"],
            pgdata=self.data_dir,
            timeout=_COMMAND_TIMEOUT_S + 5,
            **self.run_as,
        )

    def postmaster_pid(self) -> int | None:
        try:
            return int((self.data_dir / "postmaster.pid").read_text().split("\n", 1)[0])
        except (OSError, ValueError):
            return None

    def _where(self, database: str) -> list[str]:
        return ["-h", "127.0.0.1", "-p", str(self.port), "-U", SUPERUSER, "-d", database]

    def psql(self, sql: str, database: str = "postgres") -> str:
        """What `sql` prints, unaligned and without headers."""
        return str(
            pg.psql(
                [*self._where(database), "-X", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-c", sql],
                timeout=_COMMAND_TIMEOUT_S,
            )
        ).strip()


@dataclass
class ReplicatedPair:
    """A primary and its synchronous standby, under `directory` (removed by `remove`)."""

    directory: Path
    primary: Server
    standby: Server

    def url(self, database: str = DATABASE) -> str:
        """A libpq-style URL naming both servers, primary first, that connects only to a writable one."""
        hosts = ",".join(f"127.0.0.1:{server.port}" for server in (self.primary, self.standby))
        return f"postgresql://{SUPERUSER}@{hosts}/{database}?target_session_attrs=read-write"

    def server_url(self, server: Server, database: str = DATABASE) -> str:
        return f"postgresql://{SUPERUSER}@127.0.0.1:{server.port}/{database}"

    def standby_is_synchronous(self) -> bool:
        states = self.primary.psql(_SYNC_STATE)
        return states == "sync"

    def kill_primary(self) -> None:
        """SIGKILL to the primary's postmaster and every process it started at once, as when its
        machine dies: no backend says goodbye to its client, nothing is flushed."""
        pid = self.primary.postmaster_pid()
        assert pid is not None, "the primary is not running"
        postmaster = psutil.Process(pid)
        doomed = [postmaster, *postmaster.children(recursive=True)]
        for process in doomed:
            with contextlib.suppress(psutil.NoSuchProcess):
                process.send_signal(signal.SIGKILL)
        psutil.wait_procs(doomed, timeout=_COMMAND_TIMEOUT_S)

    def stop_primary(self) -> None:
        """Stop the primary cleanly (`pg_ctl stop -m fast`, a planned switchover's first step): its
        sessions are ended, and it stops once the standby has received everything it wrote."""
        pg.pg_ctl(
            ["-w", "-t", str(_COMMAND_TIMEOUT_S), "-m", "fast", "stop"],
            pgdata=self.primary.data_dir,
            timeout=_COMMAND_TIMEOUT_S + 5,
            **self.primary.run_as,
        )

    def promote_standby(self) -> None:
        """Promote the standby (`pg_ctl promote`), returning once it accepts writes."""
        pg.pg_ctl(
            ["-w", "-t", str(_COMMAND_TIMEOUT_S), "promote"],
            pgdata=self.standby.data_dir,
            timeout=_COMMAND_TIMEOUT_S + 5,
            **self.standby.run_as,
        )

    def remove(self) -> None:
        """Stop whichever server still runs (immediately: nothing of theirs is kept) and delete
        their files."""
        for server in (self.primary, self.standby):
            pid = server.postmaster_pid()
            if pid is not None and psutil.pid_exists(pid):
                with contextlib.suppress(subprocess.CalledProcessError, subprocess.TimeoutExpired):
                    pg.pg_ctl(
                        ["-w", "-m", "immediate", "stop"],
                        pgdata=server.data_dir,
                        timeout=_COMMAND_TIMEOUT_S,
                        **server.run_as,
                    )
        shutil.rmtree(self.directory, ignore_errors=True)


def start_replicated_pair() -> ReplicatedPair:
    """A running primary, with the database `DATABASE`, and a standby streaming from it that the
    primary counts as synchronous. Blocking: a few seconds."""
    run_as = _as_postgres_user()
    directory = Path(tempfile.mkdtemp(prefix="payorch-failover-pg-", dir=_memory_directory()))
    if run_as:
        entry = pwd.getpwnam(run_as["user"])
        os.chown(directory, entry.pw_uid, entry.pw_gid)
    primary_port, standby_port = free_port(), free_port()
    primary = Server(
        "primary",
        directory / "primary",
        primary_port,
        _options(_COMMON, primary_port),
        run_as,
    )
    standby = Server("standby", directory / "standby", standby_port, _options(_COMMON, standby_port), run_as)
    pair = ReplicatedPair(directory, primary, standby)
    try:
        pg.initdb(
            ["--auth=trust", "--encoding=utf8", "-U", SUPERUSER, "--no-sync"],
            pgdata=primary.data_dir,
            timeout=_COMMAND_TIMEOUT_S,
            **run_as,
        )
        primary.start()
        primary.psql(f"CREATE DATABASE {DATABASE}")
        connection = f"host=127.0.0.1 port={primary_port} user={SUPERUSER} application_name={STANDBY_NAME}"
        pg.pg_basebackup(
            ["-D", str(standby.data_dir), "-d", connection, "-R", "-X", "stream", "-c", "fast", "--no-sync"],
            timeout=_COMMAND_TIMEOUT_S,
            **run_as,
        )
        standby.start()
        # Only now: a primary waiting for a synchronous standby that does not exist yet commits nothing.
        primary.psql("ALTER SYSTEM SET synchronous_standby_names = '*'")
        primary.psql("SELECT pg_reload_conf()")
        eventually_blocking(pair.standby_is_synchronous, _COMMAND_TIMEOUT_S)
    except BaseException:
        pair.remove()
        raise
    return pair
