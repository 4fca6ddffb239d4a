"""Each URL rule compiled once per test process, instead of once in every test's app.

Every test that starts a runtime builds a new Quart app (`payorch.http.app.create_app`: nothing is
shared between two apps), and werkzeug compiles each of its rules as it adds the rule: parses the
rule's text into its parts and converters, and compiles a URL builder for it. For payorch's rules
that was most of the time `create_app` takes, in every such test. `install()` wraps two of
werkzeug's methods so that a rule compiled before in this process with the same inputs gets the
same result:

- `Rule.compile`: the parsed parts and trace (immutable values) are shared, and the converters are
  copies of the first rule's, bound to the new rule's map;
- `Rule._compile_builder`: the builder function takes the rule as its first argument (werkzeug binds
  it to each rule with `__get__`) and reads the rule's converters from it, so it builds every URL
  exactly as a fresh compilation would.

Only time is saved. Processes the tests start (`payorch serve`) compile for real.
"""

from __future__ import annotations

import copy
import threading
from collections.abc import Callable
from typing import Any

from werkzeug.routing.converters import BaseConverter
from werkzeug.routing.rules import Rule, RulePart

_lock = threading.Lock()
_builders: dict[tuple[Any, ...], Callable[..., tuple[str, str]]] = {}
_compiled: dict[tuple[Any, ...], tuple[list[RulePart], list[tuple[bool, str]], dict[str, BaseConverter]]] = {}


def _compile_key(rule: Rule) -> tuple[Any, ...]:
    """Everything `Rule.compile` reads: the rule's text and where it applies, and its map's settings."""
    assert rule.map is not None
    return (
        rule.rule,
        rule.merge_slashes,
        rule.subdomain,
        rule.host,
        rule.map.host_matching,
        frozenset(rule.map.converters.items()),
    )


def _rebound(converter: BaseConverter, rule: Rule) -> BaseConverter:
    bound = copy.copy(converter)
    bound.map = rule.map
    return bound


def install() -> None:
    real_compile = Rule.compile
    real_builder = Rule._compile_builder
    if getattr(real_compile, "memoised", False):
        return

    def compile_rule(self: Rule) -> None:
        key = _compile_key(self)
        with _lock:
            found = _compiled.get(key)
        if found is None:
            real_compile(self)
            with _lock:
                _compiled[key] = (list(self._parts), list(self._trace), dict(self._converters))
            return
        parts, trace, converters = found
        self._parts = list(parts)
        self._trace = list(trace)
        self._converters = {name: _rebound(converter, self) for name, converter in converters.items()}
        self.arguments.update(self._converters)
        self._build = self._compile_builder(False).__get__(self, None)
        self._build_unknown = self._compile_builder(True).__get__(self, None)

    def compile_builder(self: Rule, append_unknown: bool = True) -> Callable[..., tuple[str, str]]:
        key = (self.rule, tuple(self._trace), repr(sorted((self.defaults or {}).items())), append_unknown)
        with _lock:
            found = _builders.get(key)
        if found is None:
            found = real_builder(self, append_unknown)
            with _lock:
                _builders[key] = found
        return found

    compile_rule.memoised = True  # type: ignore[attr-defined]
    Rule.compile = compile_rule  # type: ignore[method-assign]
    Rule._compile_builder = compile_builder  # type: ignore[method-assign]
