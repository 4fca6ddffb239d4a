"""The routing rules as a form: each rule a row of its name, its conditions (one row each: a field,
its operator and its values), its route type, providers and weights; the default route and the
objective. Pure code between the routing document's JSON and the form's fields:

- `RulesForm.of_document` fills the form from a document (as the API answers it);
- `RulesForm.of_fields` reads it back from a submitted form, `RulesForm.changed` adds or removes a
  rule or a condition (the form's buttons other than "store");
- `RulesForm.built` builds the document the form describes, with the problems the form itself can
  tell (a condition given twice, weights on a route that is not a split, text that cannot be
  stored) and where each input's problems go (`Built.input_of`), so that the document's own
  problems, found by the API's validation, are shown beside the input that holds them.

The fees and the recovery policy have no inputs: the form carries them as they were (`kept`, their
JSON) and the built document holds them unchanged, so a document read into the form and built
again is the same document.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from decimal import Decimal
from typing import Any

from payorch.engine.routing.validation import DECIMAL_TEXT, MAX_RULES, ROUTE_TYPES
from payorch.http.jsonio import loads_request_json, unstorable_text_problem
from payorch.jsonexact import dumps_exact
from payorch.values import errors as domain

# A condition's field, and what the form says of it: its field and operator.
CONDITIONS = {
    "paymentMethods": "payment method is one of",
    "currencies": "currency is one of",
    "countries": "billing country is one of",
    "amountMin": "amount is at least",
    "amountMax": "amount is at most",
}
LISTED = ("paymentMethods", "currencies", "countries")
AMOUNT_BOUNDS = {"amountMin": "min", "amountMax": "max"}
MAX_CONDITIONS = len(CONDITIONS)
_VALUES = re.compile(r"[\s,]+")
DEFAULT = "default"
KEPT_KEYS = ("fees", "recovery")  # written as JSON, not by the form: carried through it unchanged


def _words(text: str) -> list[str]:
    return [word for word in _VALUES.split(text.strip()) if word]


def _count(fields: Mapping[str, str], name: str, most: int) -> int:
    text = fields.get(name, "").strip()
    return min(int(text), most) if text.isascii() and text.isdigit() and len(text) <= 4 else 0


def _number(text: str) -> Any:
    """A bound or a weight as typed: a number when it reads as one, else the text itself, which the
    document's validation then names at its place."""
    text = text.strip()
    if DECIMAL_TEXT.fullmatch(text) and len(text) <= 40:
        return Decimal(text) if "." in text else int(text)
    return text


def _shown_number(value: Any) -> str:
    return f"{value:f}" if isinstance(value, Decimal) else str(value)


@dataclass(frozen=True)
class ConditionRow:
    """One condition of a rule: `field`, one of `CONDITIONS`, and its values as typed."""

    field: str
    value: str


@dataclass(frozen=True)
class RouteRow:
    """A route: its type, the providers of a priority or dynamic route in order (as typed), and a
    split's weight of each provider (as typed; blank: not in the split)."""

    type: str = "dynamic"
    providers: str = ""
    weights: dict[str, str] = field(default_factory=dict)

    @classmethod
    def of_json(cls, route: Mapping[str, Any]) -> RouteRow:
        weights = route.get("weights") or {}
        return cls(
            str(route.get("type", "dynamic")),
            ", ".join(route.get("providers") or ()),
            {name: _shown_number(weight) for name, weight in weights.items()},
        )

    @classmethod
    def of_fields(cls, fields: Mapping[str, str], prefix: str) -> RouteRow:
        weight_prefix = f"{prefix}-weight-"
        return cls(
            fields.get(f"{prefix}-type", "dynamic"),
            fields.get(f"{prefix}-providers", ""),
            {
                name.removeprefix(weight_prefix): value
                for name, value in fields.items()
                if name.startswith(weight_prefix)
            },
        )


@dataclass(frozen=True)
class RuleRow:
    name: str = ""
    conditions: tuple[ConditionRow, ...] = ()
    route: RouteRow = field(default_factory=RouteRow)


@dataclass
class Built:
    """The document a form describes (`document`, the JSON the API takes), the problems the form
    itself found (`problems`, placed as the document's are), and the input of each place of the
    document (`places`: `rules.0.when.currencies` -> the input holding it)."""

    document: dict[str, Any]
    problems: list[domain.FieldProblem] = field(default_factory=list)
    places: dict[str, str] = field(default_factory=dict)

    def input_of(self, place: str) -> str | None:
        """The input that holds the document's `place` (a problem's field), by its longest known
        prefix: `rules.0.route.weights.stripe` -> `rule-0-weight-stripe`; None for what the form
        has no input for (the fees and recovery it carries, the whole document)."""
        while place:
            if place in self.places:
                return self.places[place]
            place = place.rpartition(".")[0]
        return None


@dataclass(frozen=True)
class RulesForm:
    """The rules form: its rules, the default route, the objective, the fees and recovery it carries
    (`kept`, JSON) and the version it was filled from (`based_on`, to store only over that one)."""

    rules: tuple[RuleRow, ...]
    default: RouteRow
    objective: str
    kept: str
    based_on: str

    @classmethod
    def of_document(cls, document: Mapping[str, Any], version: int) -> RulesForm:
        """The form filled from `document` (the API's JSON) of `version`."""
        rules = []
        for rule in document.get("rules") or ():
            when = rule.get("when") or {}
            conditions = [ConditionRow(key, ", ".join(when[key])) for key in LISTED if key in when]
            amount = when.get("amount") or {}
            conditions += [
                ConditionRow(row, _shown_number(amount[bound]))
                for row, bound in AMOUNT_BOUNDS.items()
                if amount.get(bound) is not None
            ]
            rules.append(
                RuleRow(str(rule.get("name", "")), tuple(conditions), RouteRow.of_json(rule["route"]))
            )
        kept = {key: document[key] for key in KEPT_KEYS if document.get(key) is not None}
        return cls(
            tuple(rules),
            RouteRow.of_json(document.get("default") or {"type": "dynamic"}),
            str(document.get("objective") or "approval"),
            dumps_exact(kept),
            str(version),
        )

    @classmethod
    def of_fields(cls, fields: Mapping[str, str]) -> RulesForm:
        """The form as submitted (at most one rule more than a document takes, each with at most
        one row per condition field)."""
        rules = []
        for index in range(_count(fields, "rules", MAX_RULES + 1)):
            at = f"rule-{index}"
            conditions = tuple(
                ConditionRow(
                    fields.get(f"{at}-condition-{row}-field", ""),
                    fields.get(f"{at}-condition-{row}-value", ""),
                )
                for row in range(_count(fields, f"{at}-conditions", MAX_CONDITIONS))
            )
            rules.append(RuleRow(fields.get(f"{at}-name", ""), conditions, RouteRow.of_fields(fields, at)))
        return cls(
            tuple(rules),
            RouteRow.of_fields(fields, DEFAULT),
            fields.get("objective", "approval"),
            fields.get("kept", "{}"),
            fields.get("basedOn", ""),
        )

    def changed(self, button: str) -> RulesForm | None:
        """The form after its button `button` (`add-rule`, `remove-rule-<i>`, `add-condition-<i>`,
        `remove-condition-<i>-<j>`); None for any other."""
        rules = list(self.rules)
        parts = button.split("-")
        numbers = [int(part) for part in parts[2:] if part.isascii() and part.isdigit() and len(part) <= 4]
        if button == "add-rule":  # one more than a document takes, for the validation to name
            return replace(self, rules=(*rules, RuleRow())) if len(rules) <= MAX_RULES else self
        if parts[:2] == ["remove", "rule"] and len(numbers) == 1 and numbers[0] < len(rules):
            del rules[numbers[0]]
            return replace(self, rules=tuple(rules))
        if parts[1:2] == ["condition"] and numbers and numbers[0] < len(rules):
            rule = rules[numbers[0]]
            conditions = list(rule.conditions)
            if parts[0] == "add" and len(numbers) == 1:
                used = {row.field for row in conditions}
                unused = [key for key in CONDITIONS if key not in used]
                if len(conditions) >= MAX_CONDITIONS or not unused:
                    return self  # every condition is there
                conditions.append(ConditionRow(unused[0], ""))
            elif parts[0] == "remove" and len(numbers) == 2 and numbers[1] < len(conditions):
                del conditions[numbers[1]]
            else:
                return None
            rules[numbers[0]] = replace(rule, conditions=tuple(conditions))
            return replace(self, rules=tuple(rules))
        return None

    def built(self) -> Built:
        """The document the form describes, as the API takes it, with the problems the form itself
        finds and the input of each of the document's places."""
        built = Built({})
        rules = []
        for index, rule in enumerate(self.rules):
            at, place = f"rule-{index}", f"rules.{index}"
            built.places |= {
                place: f"{at}-name",
                f"{place}.name": f"{at}-name",
                f"{place}.when": f"{at}-conditions",
            }
            self._text(built, f"{place}.name", rule.name)
            document_rule: dict[str, Any] = {"name": rule.name.strip()}
            when = self._conditions(built, rule.conditions, at, f"{place}.when")
            if when:
                document_rule["when"] = when
            document_rule["route"] = self._route(built, rule.route, at, f"{place}.route")
            rules.append(document_rule)
        built.document["rules"] = rules
        built.places |= {DEFAULT: f"{DEFAULT}-type"}
        built.document[DEFAULT] = self._route(built, self.default, DEFAULT, DEFAULT)
        built.places["objective"] = "objective"
        built.document["objective"] = self.objective
        try:
            kept = loads_request_json(self.kept)
        except domain.InvalidInput:
            kept = None
        if not isinstance(kept, dict) or set(kept) - set(KEPT_KEYS):
            built.problems.append(
                domain.FieldProblem(
                    "body", "the fees and recovery the form carries were changed: load the page again"
                )
            )
        else:
            built.document |= kept
        return built

    @staticmethod
    def _text(built: Built, place: str, text: str) -> None:
        problem = unstorable_text_problem(text)
        if problem is not None:
            built.problems.append(domain.FieldProblem(place, problem))

    def _conditions(
        self, built: Built, rows: tuple[ConditionRow, ...], at: str, place: str
    ) -> dict[str, Any]:
        when: dict[str, Any] = {}
        seen: set[str] = set()
        for number, row in enumerate(rows):
            value_input = f"{at}-condition-{number}-value"
            row_place = f"{place}.row{number}"
            built.places[row_place] = value_input
            self._text(built, row_place, row.value)
            if row.field not in CONDITIONS:
                built.places[row_place] = f"{at}-condition-{number}-field"
                built.problems.append(
                    domain.FieldProblem(row_place, f"choose one of {', '.join(CONDITIONS)}")
                )
                continue
            if row.field in seen:
                built.problems.append(
                    domain.FieldProblem(
                        row_place, "a rule takes each condition once: list every value in the first"
                    )
                )
                continue
            seen.add(row.field)
            if not row.value.strip():
                built.problems.append(
                    domain.FieldProblem(row_place, "enter a value, or remove this condition")
                )
                continue
            if row.field in LISTED:
                built.places[f"{place}.{row.field}"] = value_input
                words = _words(row.value)
                when[row.field] = words if row.field == "paymentMethods" else [word.upper() for word in words]
            else:
                bound = AMOUNT_BOUNDS[row.field]
                built.places.setdefault(f"{place}.amount", value_input)
                built.places[f"{place}.amount.{bound}"] = value_input
                when.setdefault("amount", {})[bound] = _number(row.value)
        return when

    def _route(self, built: Built, route: RouteRow, at: str, place: str) -> dict[str, Any]:
        built.places |= {
            place: f"{at}-type",
            f"{place}.type": f"{at}-type",
            f"{place}.providers": f"{at}-providers",
            f"{place}.weights": f"{at}-weights",
        }
        document: dict[str, Any] = {"type": route.type}
        weights = {name: text for name, text in route.weights.items() if text.strip()}
        providers = _words(route.providers)
        self._text(built, f"{place}.providers", route.providers)
        if route.type == "split":
            if providers:
                built.problems.append(
                    domain.FieldProblem(
                        f"{place}.providers", "a split takes weights: leave the providers empty"
                    )
                )
            for name, text in weights.items():
                built.places[f"{place}.weights.{name}"] = f"{at}-weight-{name}"
                self._text(built, f"{place}.weights.{name}", text)
            document["weights"] = {name: _number(text) for name, text in weights.items()}
            return document
        if weights and route.type in ROUTE_TYPES:
            built.problems.append(
                domain.FieldProblem(f"{place}.weights", "weights are for a split route: leave them empty")
            )
        if providers or route.type != "dynamic":
            document["providers"] = providers
        return document
