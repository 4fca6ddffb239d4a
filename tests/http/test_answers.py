"""How a route's answer reaches Quart: JSON's own values as they are, a model through quart-schema."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest
from pydantic import BaseModel
from quart_schema import conversion
from quart_trio import QuartTrio

from payorch.http.jsonio import ExactJsonProvider
from payorch.http.openapi import PayorchQuartSchema


class _Greeting(BaseModel):
    greeting: str


def _app() -> QuartTrio:
    app = QuartTrio(__name__)
    PayorchQuartSchema(app)
    app.json = ExactJsonProvider(app)

    @app.get("/plain")
    async def plain() -> Any:
        return {"amount": Decimal("12.50"), "lines": [1, "two"]}, 201, {"Idempotent-Replayed": "true"}

    @app.get("/model")
    async def model() -> Any:
        return _Greeting(greeting="hello")

    return app


@pytest.fixture
def dumped(monkeypatch: pytest.MonkeyPatch) -> list[object]:
    """What quart-schema converted (its `model_dump`), in order."""
    seen: list[object] = []
    real = conversion.model_dump

    def counting(raw: Any, **kwargs: Any) -> Any:
        seen.append(raw)
        return real(raw, **kwargs)

    monkeypatch.setattr(conversion, "model_dump", counting)
    return seen


async def test_an_answer_of_plain_values_reaches_quart_as_it_is(dumped: list[object]) -> None:
    response = await _app().test_client().get("/plain")
    assert response.status_code == 201
    assert await response.get_data(as_text=True) == '{"amount": 12.50, "lines": [1, "two"]}'
    assert response.headers["Idempotent-Replayed"] == "true"
    assert dumped == []


async def test_an_answer_that_is_a_model_is_still_converted_by_quart_schema(dumped: list[object]) -> None:
    response = await _app().test_client().get("/model")
    assert response.status_code == 200
    assert await response.get_json() == {"greeting": "hello"}
    assert dumped[:1] == [_Greeting(greeting="hello")]
