"""An application's routing document versions: each with when it was stored and by whom, the
difference between any two, and an earlier one restored as the next version.

    GET  /console/applications/<id>/routing/versions                    the list, newest first
    GET  /console/applications/<id>/routing/versions/diff?from=&to=     two versions' difference
    POST /console/applications/<id>/routing/versions/<n>/restore        version n stored again

The list and each version are read by the API's operations (`GET .../routing/versions` and
`.../versions/{version}`), so another merchant's application is the 404 page. Restoring is what the
API's restore is, a `PUT .../routing` of the version's document (docs/routing.md, "Restoring a
version"): checked by today's rules, counted as a change, stored as a new version (the same
document as the one in force stores nothing).
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from typing import Any, Literal

from quart import request, url_for
from werkzeug.datastructures import MultiDict

from payorch.http.auth import application_for
from payorch.http.console.kit import (
    Session,
    action,
    blueprint,
    done_notice,
    listing,
    page,
    render_page,
    see_other,
)
from payorch.http.operations import routing as operations
from payorch.http.services import services
from payorch.jsonexact import dumps_exact
from payorch.storage.routing_documents import RoutingVersion, StoredRoutingDocument
from payorch.values import errors as domain

DONE = {
    "restored": "Restored: the version's document is stored as the newest version, in force from the "
    "application's next session on.",
    "unchanged": "Nothing stored: that version's document is the one in force.",
}
DIFF_CONTEXT = 3  # unchanged lines shown around each change


@dataclass(frozen=True)
class DiffLine:
    """One line of a difference: `kind` says whether it is only in the newer version (`added`),
    only in the older (`removed`), in both (`same`), or stands for unchanged lines left out (`gap`)."""

    kind: Literal["same", "added", "removed", "gap"]
    text: str


def document_lines(stored: StoredRoutingDocument) -> list[str]:
    """A version's document as the page prints it: its JSON, indented, a line each."""
    return dumps_exact(stored.document, indent=2).splitlines()


def line_diff(older: list[str], newer: list[str]) -> list[DiffLine]:
    """The lines that differ between `older` and `newer`, with `DIFF_CONTEXT` unchanged lines around
    each change and a gap where more are left out; empty when they are the same."""
    matcher = difflib.SequenceMatcher(None, older, newer, autojunk=False)
    lines: list[DiffLine] = []
    for group in matcher.get_grouped_opcodes(DIFF_CONTEXT):
        if lines or group[0][1] > 0:
            lines.append(
                DiffLine("gap", f"unchanged lines left out; from line {group[0][1] + 1} of the older")
            )
        for tag, old_from, old_to, new_from, new_to in group:
            if tag == "equal":
                lines += [DiffLine("same", text) for text in older[old_from:old_to]]
                continue
            lines += [DiffLine("removed", text) for text in older[old_from:old_to]]
            lines += [DiffLine("added", text) for text in newer[new_from:new_to]]
    return lines


def author(version: RoutingVersion) -> str:
    """Who stored `version`, in words."""
    if version.stored_by_email:
        return version.stored_by_email
    if version.stored_by is not None:
        return f"a user since removed ({version.stored_by})"
    return "before this was recorded"


@dataclass(frozen=True)
class Restore:
    """A version whose restoring was refused, and why (the document's problems by their place)."""

    version: str
    message: str
    problems: list[domain.FieldProblem]


async def _versions_page(
    session: Session,
    application_id: str,
    status: int,
    *,
    refused: Restore | None = None,
    compare_errors: dict[str, str] | None = None,
) -> tuple[str, int]:
    application = await application_for(session.principal, application_id)
    running = services()
    versions = await listing(
        lambda page_request: operations.list_routing_versions(
            running, session.principal, application_id, page_request
        )
    )
    in_force = await operations.read_routing_document(running, session.principal, application_id)
    return await render_page(
        "console/routing_versions.html",
        session,
        status,
        title="Routing versions",
        application=application,
        versions=versions,
        in_force=0 if in_force is None else in_force.version,
        author=author,
        refused=refused,
        compare=dict(request.args.items()),
        compare_errors=compare_errors or {},
        notice=done_notice(DONE, status),
    )


@blueprint.get("/applications/<application_id>/routing/versions")
@page
async def routing_versions(application_id: str, session: Session) -> tuple[str, int]:
    return await _versions_page(session, application_id, 200)


@blueprint.get("/applications/<application_id>/routing/versions/diff")
@page
async def routing_versions_diff(application_id: str, session: Session) -> tuple[str, int]:
    """The difference between versions `from` and `to` (query): the lines of `from`'s document that
    `to`'s has not (removed) and those it has instead (added). A version the application does not
    keep is shown beside its field on the versions page (400)."""
    application = await application_for(session.principal, application_id)  # another merchant's: 404
    running = services()
    found: dict[str, StoredRoutingDocument] = {}
    errors = {}
    for name in ("from", "to"):
        number = request.args.get(name, "").strip()
        try:
            found[name] = await operations.read_routing_version(
                running, session.principal, application_id, number
            )
        except domain.NotFound:
            errors[f"compare-{name}"] = (
                f"the application keeps no version {number[:20]}" if number else "enter a version number"
            )
    if errors:
        return await _versions_page(session, application_id, 400, compare_errors=errors)
    older, newer = found["from"], found["to"]
    lines = line_diff(document_lines(older), document_lines(newer))
    return await render_page(
        "console/routing_diff.html",
        session,
        title=f"Routing versions {older.version} and {newer.version}",
        application=application,
        older=older,
        newer=newer,
        lines=lines,
        added=sum(line.kind == "added" for line in lines),
        removed=sum(line.kind == "removed" for line in lines),
    )


@blueprint.post("/applications/<application_id>/routing/versions/<version>/restore")
@action
async def restore_routing_version(
    application_id: str, version: str, session: Session, form: MultiDict[str, str]
) -> Any:
    """Store version `version`'s document as the application's next version, as a PUT of it would;
    refused by today's checks: the versions page (400) naming each problem, nothing stored."""
    running = services()
    stored = await operations.read_routing_version(running, session.principal, application_id, version)
    before = await operations.read_routing_document(running, session.principal, application_id)
    try:
        now = await operations.replace_routing_document(
            running, session.principal, application_id, stored.document
        )
    except domain.InvalidInput as error:
        refused = Restore(str(stored.version), error.message, list(error.details))
        return await _versions_page(session, application_id, 400, refused=refused)
    done = "unchanged" if before is not None and now.version == before.version else "restored"
    return see_other(url_for("console.routing_versions", application_id=application_id, done=done))
