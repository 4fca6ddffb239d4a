"""Liveness and readiness probes for orchestrators and load balancers."""

from __future__ import annotations

from quart import Blueprint, Response, jsonify

from payorch.http.context import services

blueprint = Blueprint("health", __name__)


@blueprint.get("/healthz")
async def healthz() -> Response:
    """The process is up and serving HTTP."""
    return jsonify({"status": "ok"})


@blueprint.get("/readyz")
async def readyz() -> tuple[Response, int]:
    """The database answers and every supervisor runs: the service can do useful work."""
    checks = {"database": await services().db.ping(), "supervisors": services().supervisors.all_running()}
    ready = all(checks.values())
    return jsonify({"status": "ok" if ready else "unavailable", "checks": checks}), 200 if ready else 503
