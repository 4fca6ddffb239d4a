"""Each URL rule's builder compiled once per test process, instead of once in every test's app.

Every test that starts a runtime builds a new Quart app (`payorch.http.app.create_app`: nothing is
shared between two apps), and werkzeug compiles each of its rules' URL builders as it adds the rule:
for payorch's few hundred rules, about a tenth of a second of CPU in every such test. `install()` wraps
`Rule._compile_builder` so that a rule compiled before with the same text, the same parsed parts and
the same defaults gets the function compiled the first time. That function takes the rule as its
first argument (werkzeug binds it to each rule with `__get__`) and reads the rule's converters from
it, so it builds every URL exactly as a fresh compilation would; only time is saved. Processes the
tests start (`payorch serve`) compile for real.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from werkzeug.routing.rules import Rule

_lock = threading.Lock()
_builders: dict[tuple[Any, ...], Callable[..., tuple[str, str]]] = {}


def install() -> None:
    real = Rule._compile_builder
    if getattr(real, "memoised", False):
        return

    def compile_builder(self: Rule, append_unknown: bool = True) -> Callable[..., tuple[str, str]]:
        key = (self.rule, tuple(self._trace), repr(sorted((self.defaults or {}).items())), append_unknown)
        with _lock:
            found = _builders.get(key)
        if found is None:
            found = real(self, append_unknown)
            with _lock:
                _builders[key] = found
        return found

    compile_builder.memoised = True  # type: ignore[attr-defined]
    Rule._compile_builder = compile_builder  # type: ignore[method-assign]
