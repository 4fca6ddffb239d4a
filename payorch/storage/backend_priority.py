"""The least priority for a PostgreSQL backend that does background work (a backtest's reading, a
reconciliation run's statements), so that the backends serving requests come first."""

from __future__ import annotations

import os

BACKEND_NICENESS = 19  # a background backend's, when it runs on this host as us


def lower_local_backend_priority(pid: int) -> bool:
    """Give the PostgreSQL backend `pid` the least priority (nice 19), when it is a process of this
    host that this user may lower (the embedded PostgreSQL's): a backtest's reader reads 100,000
    rows for its worker, which itself runs only on a core nobody else wants, and at the server's
    priority it took the core the serving processes and their backends need. Not the idle class:
    a backend can hold a lock that the others' backends wait for, and an idle-class process may
    wait for a core indefinitely; at nice 19 it still gets a slice every scheduling period. A
    server elsewhere (or in another process namespace) is left alone: `pid` must be a `postgres`
    process here. Whether it was lowered."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
            if not cmdline.read().startswith(b"postgres"):
                return False
        os.setpriority(os.PRIO_PROCESS, pid, BACKEND_NICENESS)
    except OSError:  # no /proc, not this host's process, or not ours to lower
        return False
    return True
