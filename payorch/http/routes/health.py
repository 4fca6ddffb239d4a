"""Liveness and readiness probes for orchestrators and load balancers."""

from __future__ import annotations

from quart import Blueprint, Response, jsonify
from quart_schema import document_response, security_scheme, tag_blueprint

from payorch.http import openapi as api
from payorch.http import representations as bodies
from payorch.http.services import services

blueprint = Blueprint("health", __name__)
tag_blueprint(blueprint, ["Operations"])


@blueprint.get("/healthz")
@security_scheme(api.NO_CREDENTIALS)
@document_response(bodies.Health, 200)
async def healthz() -> Response:
    """The process is up and serving HTTP."""
    body: bodies.Health = {"status": "ok"}
    return jsonify(body)


@blueprint.get("/readyz")
@security_scheme(api.NO_CREDENTIALS)
@document_response(bodies.Readiness, 200)
@document_response(bodies.Readiness, 503)
async def readyz() -> tuple[Response, int]:
    """The database answers and takes writes (the pool is on a primary, not on a standby nor a
    server fenced read-only: during a failover, 503 until a primary is found), every supervisor
    runs, and this process holds its node identity (so the work it claims is its own): the service
    can do useful work."""
    checks: bodies.ReadinessChecks = {
        "database": await services().context.db.ping(),
        "supervisors": services().supervisors.all_running(),
        "node": services().context.node.id is not None,
    }
    ready = all(checks.values())
    body: bodies.Readiness = {"status": "ok" if ready else "unavailable", "checks": checks}
    return jsonify(body), 200 if ready else 503
