"""The bare Quart-Trio app (`bench/bare.py`) on hypercorn's own worker processes, the baseline of
`payorch serve --workers N`:

    python -m bench.bare_server --workers N --bind 127.0.0.1:PORT --ready-dir DIR

hypercorn's parent binds once and starts N trio workers (`hypercorn.run.run`), each importing `app`
below, with payorch's own hypercorn configuration and ASGI wrapper; with `--workers 0` the process
serves alone, in its one thread (the baseline beside the in-process payorch: `bench/paired.py`).
Each worker, once its app has started, leaves an empty file named after its pid in DIR, so that the
benchmark loads it only when all N serve. SIGTERM or SIGINT stops the workers gracefully.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from hypercorn.run import run
from hypercorn.typing import ASGIFramework

from bench.bare import create_bare_app
from bench.payorch_target import bench_settings
from payorch.service import _finish_responses_uncancelled, _hypercorn_config

# How `--ready-dir` reaches the workers, which hypercorn starts by importing this module afresh.
READY_DIR_VARIABLE = "BENCH_BARE_READY_DIR"
APPLICATION_PATH = "bench.bare_server:app"


def create_app() -> ASGIFramework:
    bare = create_bare_app()

    @bare.before_serving
    async def report_ready() -> None:
        ready_dir = os.environ.get(READY_DIR_VARIABLE)
        if ready_dir:
            (Path(ready_dir) / str(os.getpid())).touch()

    return _finish_responses_uncancelled(bare)


app = create_app()  # each worker's, found by hypercorn at APPLICATION_PATH


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.bare_server", description=__doc__)
    parser.add_argument("--workers", type=int, required=True, help="hypercorn worker processes")
    parser.add_argument("--bind", required=True, help="HOST:PORT")
    parser.add_argument("--ready-dir", type=Path, required=True, help="where each worker reports it serves")
    args = parser.parse_args(argv)
    os.environ[READY_DIR_VARIABLE] = str(args.ready_dir)
    # Only the server section counts here: nothing is created under the directory given.
    config = _hypercorn_config(bench_settings(args.ready_dir, bind=args.bind))
    config.application_path = APPLICATION_PATH
    config.worker_class = "trio"
    config.workers = args.workers
    return run(config)


if __name__ == "__main__":
    raise SystemExit(main())
