"""An application's routing rules edited in a form rather than as JSON (`routing_form`): each rule's
name, conditions, route type, providers and weights, the default route and the objective.

    GET  /console/applications/<id>/routing/rules   the form, filled from the document in force
    POST /console/applications/<id>/routing/rules   its buttons (`do`): `store`, or a change of the
                                                    form (`add-rule`, `remove-rule-<i>`,
                                                    `add-condition-<i>`, `remove-condition-<i>-<j>`)
                                                    shown again and stored nowhere

Storing calls the operation `PUT .../routing` calls (`replace_routing_document`), on the condition
that the version the form was filled from is still in force (as `If-Match`), so the API's
validation decides, every problem is shown beside the input that holds it (400), and nothing is
stored when there is one; a version stored meanwhile is 412, the form kept.
"""

from __future__ import annotations

from typing import Any

from quart import url_for
from werkzeug.datastructures import MultiDict

from payorch.engine.routing.document import MAX_DOCUMENT_BYTES
from payorch.engine.routing.validation import OBJECTIVES, ROUTE_TYPES
from payorch.http.auth import application_for
from payorch.http.console.kit import Session, action_up_to, blueprint, page, render_page, see_other
from payorch.http.console.routing import DOCUMENT_FORM_MAX_BYTES
from payorch.http.console.routing_form import CONDITIONS, Built, RulesForm
from payorch.http.operations import routing as operations
from payorch.http.operations.routing import routing_body
from payorch.http.services import services
from payorch.jsonexact import dumps_exact
from payorch.values import errors as domain


def input_label(input_id: str) -> str:
    """Where an input of the form is, in words: `rule-0-weight-stripe` -> "rule 1, weight of stripe"."""
    if input_id == "objective":
        return "objective"
    head, _, rest = input_id.partition("-")
    if head == "rule":
        number, _, rest = rest.partition("-")
        where = f"rule {int(number) + 1}, "
    else:
        where = "default route, "
    if rest.startswith("condition-"):
        return where + f"condition {int(rest.split('-')[1]) + 1}"
    if rest.startswith("weight-"):
        return where + f"weight of {rest.removeprefix('weight-')}"
    return where + {"type": "route type", "conditions": "conditions"}.get(rest, rest)


def _placed(built: Built, problems: list[domain.FieldProblem]) -> tuple[dict[str, str], list[dict[str, Any]]]:
    """The problems by input (messages of one input joined), and the list above the form: each
    problem with its input (None: the document's fees or recovery, which the form carries)."""
    errors: dict[str, str] = {}
    listed = []
    for problem in problems:
        input_id = built.input_of(problem.field)
        if input_id is not None:
            errors[input_id] = (
                f"{errors[input_id]}; {problem.message}" if input_id in errors else problem.message
            )
        listed.append(
            {
                "input": input_id,
                "where": input_label(input_id) if input_id else problem.field,
                "message": problem.message,
            }
        )
    return errors, listed


async def _rules_page(
    session: Session,
    application_id: str,
    status: int,
    form: RulesForm | None = None,
    *,
    problems: list[domain.FieldProblem] | None = None,
    refusal: str | None = None,
) -> tuple[str, int]:
    """The form, answered with `status`: `form` as sent, else filled from the document in force;
    `problems` placed beside their inputs, `refusal` the message above them."""
    application = await application_for(session.principal, application_id)
    running = services()
    in_force = routing_body(
        await operations.read_routing_document(running, session.principal, application_id)
    )
    if form is None:
        form = RulesForm.of_document(in_force, in_force["version"])
    errors, listed = _placed(form.built(), problems or [])
    catalogue = sorted(provider.name for provider in running.context.providers)
    return await render_page(
        "console/routing_rules.html",
        session,
        status,
        title="Routing rules",
        application=application,
        form=form,
        in_force=in_force,
        errors=errors,
        problems=listed,
        refusal=refusal,
        conditions=CONDITIONS,
        route_types=ROUTE_TYPES,
        objectives=OBJECTIVES,
        providers=catalogue,
        weight_providers=lambda route: sorted(set(catalogue) | set(route.weights)),
        payment_methods=sorted(running.context.providers.all_payment_methods()),
    )


@blueprint.get("/applications/<application_id>/routing/rules")
@page
async def routing_rules(application_id: str, session: Session) -> tuple[str, int]:
    return await _rules_page(session, application_id, 200)


def _problems(built: Built) -> list[domain.FieldProblem]:
    """Every problem of the built document: the form's own, then those the API's validation finds
    (`checked_routing_document`, as `PUT .../routing` checks a document)."""
    problems = list(built.problems)
    try:
        operations.checked_routing_document(services().context.providers, built.document)
    except domain.InvalidInput as error:
        problems += error.details
    if not problems and len(dumps_exact(built.document).encode()) > MAX_DOCUMENT_BYTES:
        problems.append(
            domain.FieldProblem("body", f"a routing document takes at most {MAX_DOCUMENT_BYTES} bytes")
        )
    return problems


@blueprint.post("/applications/<application_id>/routing/rules")
@action_up_to(DOCUMENT_FORM_MAX_BYTES)
async def change_routing_rules(application_id: str, session: Session, form: MultiDict[str, str]) -> Any:
    """Store the document the form describes as the application's next version, or show the form
    again with the change its button asks for (200, nothing stored), or with every problem beside
    its input (400, nothing stored)."""
    await application_for(session.principal, application_id)  # another merchant's: 404 before anything
    sent = RulesForm.of_fields(form)
    button = form.get("do", "store")
    if button != "store":
        changed = sent.changed(button)
        if changed is None:
            raise domain.InvalidInput(f"the form has no button {button[:40]!r}")
        return await _rules_page(session, application_id, 200, changed)
    built = sent.built()
    problems = _problems(built)
    if problems:
        count = f"{len(problems)} problem{'' if len(problems) == 1 else 's'}"
        return await _rules_page(
            session,
            application_id,
            400,
            sent,
            problems=problems,
            refusal=f"invalid routing document: {count}",
        )
    based_on = sent.based_on.strip()
    try:
        await operations.replace_routing_document(
            services(),
            session.principal,
            application_id,
            built.document,
            if_version=frozenset({int(based_on)}) if based_on.isdigit() and len(based_on) <= 10 else None,
        )
    except domain.InvalidInput as error:  # what the check above found, should it find it now
        return await _rules_page(
            session, application_id, 400, sent, problems=list(error.details), refusal=error.message
        )
    except domain.PreconditionFailed as error:
        return await _rules_page(session, application_id, 412, sent, refusal=error.message)
    return see_other(url_for("console.routing", application_id=application_id, done="saved"))
