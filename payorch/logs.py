"""Structured logging: one JSON object per line on stderr."""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime
from typing import Any

from payorch import logcontext

# Attributes every LogRecord has; anything else on a record came from `extra=` and is logged.
_STANDARD = set(logging.makeLogRecord({}).__dict__) | {"message", "asctime", "taskName"}


class ContextFilter(logging.Filter):
    """Stamps each record, as it is emitted, with the request and application it is about (from
    `payorch.logcontext`), unless the record names its own."""

    def filter(self, record: logging.LogRecord) -> bool:
        for key, variable in (
            ("requestId", logcontext.request_id),
            ("applicationId", logcontext.application_id),
        ):
            if getattr(record, key, None) is None and variable.get() is not None:
                setattr(record, key, variable.get())
        return True


class WorkerFilter(logging.Filter):
    """Stamps each record with `worker`, the number of this process among the workers of one
    `payorch serve --workers N` (payorch/workers.py), unless the record names its own."""

    def __init__(self, number: int) -> None:
        super().__init__()
        self.number = number

    def filter(self, record: logging.LogRecord) -> bool:
        if getattr(record, "worker", None) is None:
            record.worker = self.number
        return True


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        line.update({key: value for key, value in record.__dict__.items() if key not in _STANDARD})
        for key, variable in (
            ("requestId", logcontext.request_id),
            ("applicationId", logcontext.application_id),
        ):
            if line.get(key) is None and variable.get() is not None:
                line[key] = variable.get()
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return json.dumps(line, default=str)


def configure_logging(level: int = logging.INFO) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter())
    handler.addFilter(ContextFilter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    # hypercorn's own access log would duplicate ours.
    logging.getLogger("hypercorn.access").disabled = True
    # pgserver narrates every start at INFO; its warnings and errors still show.
    logging.getLogger("pgserver").setLevel(logging.WARNING)
    # The Stripe SDK logs every request at INFO; ours already says what matters.
    logging.getLogger("stripe").setLevel(logging.WARNING)


def tag_worker(number: int) -> None:
    """Every line this process logs from now on carries `"worker": number`, whichever thread logs it."""
    for handler in logging.getLogger().handlers:
        handler.addFilter(WorkerFilter(number))


def set_log_level(level: str) -> None:
    """Log records of `level` ("debug", "info", "warning", "error") and above from now on
    (`logging.level`; `payorch serve` sets it at start and on each reload)."""
    logging.getLogger().setLevel(level.upper())
