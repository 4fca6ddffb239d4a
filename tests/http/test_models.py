"""The request models: each builds its validator at its first use, not when payorch is imported, and
once: the routes' decorators keep it for every request after."""

from __future__ import annotations

from pydantic import BaseModel
from quart_schema import QuartSchema
from quart_trio import QuartTrio

from payorch.http import models, validation


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


class _Greeting(models.Body):
    name: str


class _GreetingQuery(models.Query):
    times: int = 1


def _greeting_app() -> QuartTrio:
    app = QuartTrio(__name__)
    QuartSchema(app)

    @app.post("/greet")
    @validation.validate_querystring(_GreetingQuery)
    @validation.validate_request(_Greeting)
    async def greet(data: _Greeting, query_args: _GreetingQuery) -> dict[str, str]:
        return {"greeting": f"hello {data.name}" * query_args.times}

    return app


async def test_a_routes_models_are_built_at_its_first_request_and_kept_for_the_next() -> None:
    """quart-schema validates through a new TypeAdapter per request: a model not built yet would be
    built again for each one. payorch's decorators build it once, at the first request."""
    client = _greeting_app().test_client()
    assert not _Greeting.__pydantic_complete__
    assert not _GreetingQuery.__pydantic_complete__

    first = await client.post("/greet?times=2", json={"name": "Ada"})
    assert first.status_code == 200, await first.get_data(as_text=True)
    assert _Greeting.__pydantic_complete__
    assert _GreetingQuery.__pydantic_complete__
    built = (_Greeting.__pydantic_validator__, _GreetingQuery.__pydantic_validator__)

    refused = await client.post("/greet", json={"name": 7})
    assert refused.status_code == 400
    again = await client.post("/greet", json={"name": "Grace"})
    assert (await again.get_json()) == {"greeting": "hello Grace"}
    assert (_Greeting.__pydantic_validator__, _GreetingQuery.__pydantic_validator__) == built
