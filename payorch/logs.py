"""Structured logging: one JSON object per line on stderr.

A line whose fields are all known when it is logged (the access log's, one per request) is logged
with `log_line`: a `LineRecord` goes to the configured handlers as it is, without what `Logger.info`
gathers for every call (the caller's frame, the thread and the process, none of which a line shows)
nor the copy of an `extra` dict.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from datetime import UTC, datetime
from typing import Any

from payorch import logcontext

# Attributes every LogRecord has; anything else on a record came from `extra=` and is logged.
_STANDARD = set(logging.makeLogRecord({}).__dict__) | {"message", "asctime", "taskName"}


# `LineRecord`'s attributes beyond its own, as a record made of no values has them, but for the thread
# and the process, which it does not look up.
_BLANK_RECORD: dict[str, Any] = {
    "args": (),
    "pathname": "",
    "filename": "",
    "module": "",
    "exc_info": None,
    "exc_text": None,
    "stack_info": None,
    "lineno": 0,
    "funcName": None,
    "relativeCreated": 0.0,
    "thread": None,
    "threadName": None,
    "processName": None,
    "process": None,
    "taskName": None,
}
# json.dumps(line, default=str), without building an encoder for each line.
_ENCODE_LINE = json.JSONEncoder(default=str).encode


class LineRecord(logging.LogRecord):
    """A record made of its logger's name, its level, its message and its `fields` (each an attribute,
    so a handler or a test reads them as it reads `extra`'s), stamped with the time it is made.
    Where the call came from, the thread and the process are not looked up: they read as a blank
    record's (`None`, empty, 0)."""

    def __init__(self, name: str, level: int, message: str, fields: dict[str, Any]) -> None:
        # No `super().__init__`: what it adds beyond these is what this record leaves out.
        created = time.time()
        self.__dict__.update(_BLANK_RECORD)  # a formatter reads every attribute from `__dict__`
        self.name = name
        self.msg = message
        self.levelno = level
        self.levelname = logging.getLevelName(level)
        self.created = created
        self.msecs = int((created - int(created)) * 1000) + 0.0
        self.__dict__.update(fields)


def log_line(logger: logging.Logger, level: int, message: str, fields: dict[str, Any]) -> None:
    """Log `message` with `fields` at `level` through `logger`'s filters and handlers, as
    `logger.log(level, message, extra=fields)` would, at a fraction of the cost (`LineRecord`)."""
    if logger.isEnabledFor(level):
        logger.handle(LineRecord(logger.name, level, message, fields))


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
        return _ENCODE_LINE(line)


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
