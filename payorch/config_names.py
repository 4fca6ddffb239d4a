"""Which names are settings: the sections and keys of `config.toml`, and the `PAYORCH_*` variables
that name them. For a name that names none, the nearest one that does ("did you mean").

pydantic would refuse an unknown key of a known section in its own words ("Extra inputs are not
permitted"), and pydantic-settings silently ignores a variable whose section does not exist
(`PAYORCH_WEBHOOK__ALLOW_PRIVATE_NETWORKS`): both are looked for here first, in payorch's words.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel

ENV_DELIMITER = "__"


@dataclass(frozen=True)
class UnknownName:
    """A name that is no setting. `key`: dotted as given (lower case from the environment);
    `section`: it stands where a section would (the top level, or with keys below it); `nearest`:
    the dotted setting or section it may have meant, if one is near enough."""

    key: str
    section: bool
    nearest: str | None = None

    def text(self) -> str:
        """One line: `unknown section "webhook" (did you mean "webhooks"?)`, or `unknown setting
        server.bnid (did you mean server.bind?)`."""
        if self.section:
            hint = f' (did you mean "{self.nearest}"?)' if self.nearest else ""
            return f'unknown section "{self.key}"{hint}'
        hint = f" (did you mean {self.nearest}?)" if self.nearest else ""
        return f"unknown setting {self.key}{hint}"


@dataclass(frozen=True)
class UnknownVariable:
    """A `PAYORCH_*` environment variable that names no setting, and what is wrong with it."""

    variable: str
    unknown: UnknownName
    # The variable it may have meant, when it joined a section and a key with one underscore
    # (`PAYORCH_SERVER_BIND` for `PAYORCH_SERVER__BIND`).
    meant: str | None = None

    def text(self) -> str:
        """One line naming the variable, the name it does not know and the nearest one."""
        if self.meant is not None:
            plain = UnknownName(self.unknown.key, self.unknown.section).text()
            return (
                f"{self.variable}: {plain} (did you mean {self.meant}? a section and its key are "
                "joined by two underscores)"
            )
        return f"{self.variable}: {self.unknown.text()}"


def _section_model(model: type[BaseModel], name: str) -> type[BaseModel] | None:
    """The model of `name`'s section if `name` is a section of `model`, else None (a setting)."""
    annotation = model.model_fields[name].annotation
    return annotation if isinstance(annotation, type) and issubclass(annotation, BaseModel) else None


def _every_name(model: type[BaseModel], prefix: str = "") -> Iterator[str]:
    for name in model.model_fields:
        yield f"{prefix}{name}"
        inner = _section_model(model, name)
        if inner is not None:
            yield from _every_name(inner, f"{prefix}{name}.")


def _unknown(root: type[BaseModel], model: type[BaseModel], parts: Sequence[str], depth: int) -> UnknownName:
    """`parts[depth]` is not a field of `model` (the section `parts[:depth]` of `root`)."""
    name = parts[depth]
    parent = "".join(f"{part}." for part in parts[:depth])
    fields = list(model.model_fields)
    is_section = depth < len(parts) - 1 or all(_section_model(model, field) for field in fields)
    close = difflib.get_close_matches(name, fields, n=1)
    if close:
        nearest: str | None = parent + close[0]
    else:
        # The right key in the wrong section (`server.ca_bundle` for `webhooks.ca_bundle`).
        elsewhere = [dotted for dotted in _every_name(root) if dotted.rpartition(".")[2] == name]
        nearest = elsewhere[0] if len(elsewhere) == 1 else None
    return UnknownName(key=parent + name, section=is_section, nearest=nearest)


def unknown_path(root: type[BaseModel], parts: Sequence[str]) -> UnknownName | None:
    """None if `parts` lead through the sections of `root` to a setting or to a section (a whole
    table), else the first part that names nothing there."""
    model = root
    for depth, part in enumerate(parts):
        if part not in model.model_fields:
            return _unknown(root, model, parts, depth)
        inner = _section_model(model, part)
        if inner is None:
            if depth < len(parts) - 1:  # keys below a setting: `server.bind.port`
                key = ".".join(parts)
                return UnknownName(key=key, section=False, nearest=".".join(parts[: depth + 1]))
            return None
        model = inner
    return None


def unknown_keys(root: type[BaseModel], table: Mapping[str, Any]) -> list[UnknownName]:
    """Every key of `table` (a parsed `config.toml`), at any depth, that names no section or setting
    of `root`, in the file's order. A section given something other than a table is left to the
    model's validation."""
    found: list[UnknownName] = []

    def walk(model: type[BaseModel], inner: Mapping[str, Any], parents: tuple[str, ...]) -> None:
        for name, value in inner.items():
            parts = (*parents, name)
            if name not in model.model_fields:
                found.append(_unknown(root, model, parts, len(parents)))
                continue
            section = _section_model(model, name)
            if section is not None and isinstance(value, Mapping):
                walk(section, value, parts)

    walk(root, table, ())
    return found


def unknown_variables(
    root: type[BaseModel], environ: Mapping[str, str], prefix: str, not_settings: frozenset[str]
) -> list[UnknownVariable]:
    """Every variable of `environ` whose name starts with `prefix` (in any case, as pydantic-settings
    reads them) but names no section or setting of `root` as `PREFIX<SECTION>__<KEY>`, sorted by
    name; those in `not_settings` (upper case) are not settings and never count."""
    found: list[UnknownVariable] = []
    for variable in sorted(environ):
        upper = variable.upper()
        if not upper.startswith(prefix.upper()) or upper in not_settings:
            continue
        parts = variable[len(prefix) :].lower().split(ENV_DELIMITER)
        unknown = unknown_path(root, parts)
        if unknown is not None:
            found.append(UnknownVariable(variable, unknown, _joined_by_one_underscore(root, prefix, parts)))
    return found


def _joined_by_one_underscore(root: type[BaseModel], prefix: str, parts: list[str]) -> str | None:
    """The variable `parts` would be with a section and its key joined by `__` where they are joined
    by `_` (`server_bind`: `PAYORCH_SERVER__BIND`), if that names a setting."""
    model = root
    for depth, part in enumerate(parts):
        if part not in model.model_fields:
            for field in model.model_fields:
                if part.startswith(f"{field}_") and _section_model(model, field) is not None:
                    fixed = [*parts[:depth], field, part[len(field) + 1 :], *parts[depth + 1 :]]
                    if unknown_path(root, fixed) is None:
                        return (prefix + ENV_DELIMITER.join(fixed)).upper()
            return None
        inner = _section_model(model, part)
        if inner is None:
            return None
        model = inner
    return None
