"""Quart's JSON, made exact: request bodies and responses go through `payorch.jsonexact`."""

from __future__ import annotations

from typing import Any

from flask.json.provider import JSONProvider

from payorch.jsonexact import dumps_exact, loads_exact

__all__ = ["ExactJsonProvider", "dumps_exact", "loads_exact"]


class ExactJsonProvider(JSONProvider):
    def dumps(self, obj: Any, **kwargs: Any) -> str:
        return dumps_exact(obj)

    def loads(self, s: str | bytes, **kwargs: Any) -> Any:
        return loads_exact(s)
