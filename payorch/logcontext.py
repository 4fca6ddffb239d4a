"""What every log line is about: the request and the application, carried in context variables.

The HTTP layer sets them per request; an application actor sets them for each step it runs on a
request's behalf, so a state change logged inside the actor carries the `requestId` of the request
that caused it. `JsonFormatter` adds them to every line that does not name its own.
"""

from __future__ import annotations

from contextvars import ContextVar

request_id: ContextVar[str | None] = ContextVar("payorch_request_id", default=None)
application_id: ContextVar[str | None] = ContextVar("payorch_application_id", default=None)
