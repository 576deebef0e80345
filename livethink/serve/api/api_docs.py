"""How the routes document themselves in OpenAPI: request bodies, success and error responses of every route.

POST routes declare their bodies as pydantic models (FastAPI documents them; a body's ``Body(description=...)``
becomes the request body's description). A streamed response names its event model (``event_stream``), which
``openapi_schema`` adds to ``components``. Errors share one model (``ErrorResponse``, errors.py's shape).
Validation errors are 400s here, so FastAPI's default 422 entry is removed.
``python -m livethink.serve.api.openapi --out docs/openapi.json`` writes the document.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi
from fastapi.routing import APIRoute
from pydantic import BaseModel
from pydantic.json_schema import models_json_schema

from livethink.serve.protocol import ErrorResponse

REF = "#/components/schemas/{model}"
STREAM_EVENT_KEY = "x-livethink-event-model"

_MODELS: dict[str, type[BaseModel]] = {}  # the models named by event_stream, by class name

_RETRY_AFTER = {
    "Retry-After": {"description": "whole seconds to wait before retrying", "schema": {"type": "integer"}},
    "retry-after-ms": {
        "description": "the same wait in milliseconds (the header openai-python reads)", "schema": {"type": "integer"}
    },
}
_ERRORS: dict[int, tuple[str, dict[str, Any]]] = {
    400: ("invalid request: `error.param` names the field, `error.message` says why", {}),
    401: ("missing or invalid bearer token (when the server has API keys)", {
        "WWW-Authenticate": {"description": "`Bearer`", "schema": {"type": "string"}},
    }),
    403: ("a non-admin token on an admin endpoint (when the server has admin keys), or forcing an `arm` / posting "
          "an outcome without an A/B-scoped or admin token (`ab_scope_required`, when the server has keys)", {}),
    404: ("an unknown model, arm or experiment (`error.param` says which)", {}),
    409: ("an outcome `event_id` reused with different content", {}),
    413: ("the body is larger than `server.max_body_kb`", {}),
    429: ("the deadline cannot be met at the current load, or a rate limit is exceeded (`rate_limited`; `limit` "
          "names it: `limits.per_viewer_rps`, `limits.per_key_rps`); retry after `Retry-After` seconds", _RETRY_AFTER),
    500: ("an unexpected server error (logged server-side; no stack trace)", {}),
    503: ("unavailable now: the engine is down, restarting or stalled (`engine_unavailable`), or an A/B event "
          "cannot be recorded (the store is down and the spool is full), or the server is draining before it stops "
          "(`draining`: send it to another replica); retry after `Retry-After` seconds",
          _RETRY_AFTER),
}


def operation_id(route: APIRoute) -> str:
    """The route's handler name (``livestream_reply``, ``chat_completions``): the method names of generated clients."""
    return route.name


PROMPT_TOO_LONG = {
    400: "; also when the prompt the request renders is longer than the server's `max_prompt_tokens` "
    "(`code: context_length_exceeded`)",
}


def errors(*statuses: int, notes: dict[int, str] | None = None) -> dict[int | str, dict[str, Any]]:
    """``responses=`` entries for these error statuses, all with ``ErrorResponse``; 401 and 500 always.
    ``notes``: what a route adds to a status's description."""
    out: dict[int | str, dict[str, Any]] = {}
    for status in sorted({*statuses, 401, 500}):
        description, headers = _ERRORS[status]
        description += (notes or {}).get(status, "")
        entry: dict[str, Any] = {"model": ErrorResponse, "description": description}
        if headers:
            entry["headers"] = headers
        out[status] = entry
    return out


def event_stream(model: type[BaseModel], description: str) -> dict[str, Any]:
    """A ``text/event-stream`` response whose ``data:`` lines are ``model`` JSON (then ``data: [DONE]``)."""
    _MODELS[model.__name__] = model
    return {
        "schema": {"type": "string", "description": description},
        STREAM_EVENT_KEY: model.__name__,
    }


def _collect(node: Any, key: str, found: dict[str, type[BaseModel]]) -> None:
    """Pop every ``key`` (a model's name) from the document, keeping the models by name."""
    if isinstance(node, dict):
        name = node.pop(key, None)
        if name is not None:
            found[name] = _MODELS[name]
        for value in node.values():
            _collect(value, key, found)
    elif isinstance(node, list):
        for value in node:
            _collect(value, key, found)


def _component_names(models: list[tuple[type[BaseModel], str]]) -> set[str]:
    _, defs = models_json_schema(models, ref_template=REF) if models else (None, {})
    return set(defs.get("$defs", {}))


def _add_components(schemas: dict[str, Any], models: list[tuple[type[BaseModel], str]]) -> None:
    if not models:
        return
    _, defs = models_json_schema(models, ref_template=REF)
    for name, schema in defs.get("$defs", {}).items():
        if name in schemas and schemas[name] != schema:
            raise ValueError(f"OpenAPI component {name!r} has two different schemas; rename one of the models")
        schemas[name] = schema


def _request_bodies(app: FastAPI, document: dict[str, Any]) -> list[tuple[type[BaseModel], str]]:
    """Each route's request body, as its model's schema reads (pydantic's, in validation mode) and with its
    ``Body(description=...)`` on the body rather than beside the ``$ref``; the body models, for ``components``."""
    models: list[tuple[type[BaseModel], str]] = []
    for route in app.routes:
        if not isinstance(route, APIRoute) or route.body_field is None or not route.include_in_schema:
            continue
        models.append((route.body_field.field_info.annotation, "validation"))
        for method in route.methods:
            operation = document["paths"][route.path_format][method.lower()]
            body = operation["requestBody"]
            schema = body["content"]["application/json"]["schema"]
            description = schema.pop("description", None)
            if description:
                operation["requestBody"] = {"description": description, **body}
    return models


def _drop_422(document: dict[str, Any]) -> None:
    for path in document.get("paths", {}).values():
        for operation in path.values():
            operation.get("responses", {}).pop("422", None)
    schemas = document.get("components", {}).get("schemas", {})
    for name in ("HTTPValidationError", "ValidationError"):
        schemas.pop(name, None)


def openapi_schema(app: FastAPI) -> dict[str, Any]:
    """The app's OpenAPI document (cached on ``app.openapi_schema``, as FastAPI does)."""
    if app.openapi_schema is not None:
        return app.openapi_schema
    info = {"title": app.title, "version": app.version, "description": app.description}
    document = get_openapi(**info, openapi_version=app.openapi_version, routes=app.routes)
    events: dict[str, type[BaseModel]] = {}
    _collect(document, STREAM_EVENT_KEY, events)
    schemas = document.setdefault("components", {}).setdefault("schemas", {})
    requests = _request_bodies(app, document)
    for name in _component_names(requests):
        schemas.pop(name, None)  # FastAPI's rendering of a request model; pydantic's below
    _add_components(schemas, requests)
    _add_components(schemas, [(m, "serialization") for m in events.values()])
    _drop_422(document)
    document["components"]["securitySchemes"] = {"bearer": {"type": "http", "scheme": "bearer"}}
    document["security"] = [{"bearer": []}, {}]
    document["components"]["schemas"] = dict(sorted(schemas.items()))
    app.openapi_schema = document
    return document


def install(app: FastAPI) -> None:
    """Serve ``openapi_schema`` at ``/openapi.json`` (and ``/docs``) instead of FastAPI's default."""
    app.openapi = lambda: openapi_schema(app)  # type: ignore[method-assign]
