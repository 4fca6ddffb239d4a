"""An application's description as the console takes it and shows it back.

The API keeps a description as a JSON object. The console's text area takes what a person writes:

    Our web shop's checkout                  {"text": "Our web shop's checkout"}
    channel: web                             {"channel": "web", "team": "payments"}
    team: payments
    {"channel": "web", "weight": 1.5}        {"channel": "web", "weight": 1.5}, as the API parses it

Text that starts with `{` is a JSON object, parsed as the API parses a body. Otherwise, when every
line that is not blank is `key: value` (a key of letters, digits, `_`, `-` or `.`, then a colon and a
space; each key once),
the lines are an object of those texts; anything else is one text, kept whole under `text`. It is
shown back the same way: a lone `text` as the text, an object of texts as its keys and values, any
other object as its JSON (a JSON object keeps no order, so the keys are shown in theirs).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from payorch.http.jsonio import loads_request_json
from payorch.jsonexact import dumps_exact
from payorch.values import errors as domain

TEXT_KEY = "text"
FIELD = "description"
# `key: value`, a space after the colon (so that `https://shop.example` stays a text).
_KEY_VALUE = re.compile(r"([A-Za-z0-9_.-]{1,64})[ \t]*:(?:[ \t]+(.*))?")


def description_of(typed: str) -> dict[str, Any] | None:
    """The description object the text area's `typed` text stands for (see the module's docstring);
    None when it is blank. `InvalidInput` under `description` for text that starts with `{` and is
    not a JSON object the API would take."""
    text = typed.strip()
    if not text:
        return None
    if text.startswith("{"):
        return _json_object(text)
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    pairs = [_KEY_VALUE.fullmatch(line) for line in lines]
    keys = [pair.group(1) for pair in pairs if pair]
    if all(pairs) and len(set(keys)) == len(keys):
        return {pair.group(1): pair.group(2) or "" for pair in pairs if pair}
    return {TEXT_KEY: text}


def _json_object(text: str) -> dict[str, Any]:
    try:
        value = loads_request_json(text)
    except domain.InvalidInput as error:
        where = error.details[0].message if error.details else error.message
        raise domain.InvalidInput(
            "validation failed",
            [
                domain.FieldProblem(
                    FIELD,
                    f"starts with {{ so it is read as a JSON object, but it is not valid JSON ({where}). "
                    "Write plain text without a leading {, or correct the JSON.",
                )
            ],
        ) from None
    if not isinstance(value, dict):
        raise domain.InvalidInput(
            "validation failed", [domain.FieldProblem(FIELD, "starts with { but is not one JSON object")]
        )
    return value


@dataclass(frozen=True)
class Shown:
    """How a description reads on a page: one text, texts by key, or (any other object) its JSON."""

    text: str | None = None
    pairs: list[tuple[str, str]] | None = None
    json: str | None = None


def shown(description: dict[str, Any] | None) -> Shown | None:
    """`description` as the application's page shows it; None when there is none."""
    if not description:
        return None
    if set(description) == {TEXT_KEY} and isinstance(description[TEXT_KEY], str):
        return Shown(text=description[TEXT_KEY])
    if all(isinstance(value, str) for value in description.values()):
        return Shown(pairs=sorted(description.items()))  # a JSON object keeps no order: by key

    return Shown(json=dumps_exact(description, indent=2))
