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
    """The database answers: the service can do useful work."""
    database_ok = await services().db.ping()
    body = {"status": "ok" if database_ok else "unavailable", "checks": {"database": database_ok}}
    return jsonify(body), 200 if database_ok else 503
