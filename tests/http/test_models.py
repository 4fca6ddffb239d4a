"""The request models: each builds its validator at its first use, not when payorch is imported."""

from __future__ import annotations

from pydantic import BaseModel

from payorch.http import models


def _request_models() -> list[type[BaseModel]]:
    return [
        value
        for value in vars(models).values()
        if isinstance(value, type) and issubclass(value, BaseModel) and value.__module__ == models.__name__
    ]


def test_every_request_model_builds_its_validator_at_its_first_use() -> None:
    found = _request_models()
    assert len(found) > 20
    assert [model.__name__ for model in found if not model.model_config.get("defer_build")] == []
