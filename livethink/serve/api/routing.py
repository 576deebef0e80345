"""The HTTP edge of the app: bearer auth (and the per-key rate limit, ``limits.py``), the body limit, and every
error as the one JSON shape.

Routes declare their bodies as pydantic models; FastAPI reads and validates them. ``ServeRoute`` comes first:
a route's guards (auth, ...) answer before its body is read, the body is refused with 413 past
``server.max_body_kb`` before more than that is read, and it is read as JSON whatever its content type says.
A ``RequestValidationError`` becomes our 400 naming the field (``errors.validation_error``), not FastAPI's 422;
``APIError`` (raised by the service and the routes) becomes its JSON; anything else a generic 500.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import hmac
import logging
from collections.abc import Callable, Coroutine
from typing import Any

from fastapi import Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from fastapi.routing import APIRoute
from starlette.exceptions import HTTPException as StarletteHTTPException

from livethink.serve.api.limits import ab_keys, check_key_limit
from livethink.serve.errors import APIError, bad_request, validation_error

log = logging.getLogger(__name__)
DISCONNECT_POLL_S = 0.05
_JSON = (b"content-type", b"application/json")


def error_response(err: APIError) -> JSONResponse:
    return JSONResponse(err.body(), status_code=err.status, headers=err.headers)


# -- auth ---------------------------------------------------------------------------------------------------
def _auth_dependency(admin: bool) -> Callable[[Request], Coroutine[Any, Any, None]]:
    async def check(request: Request) -> None:
        authenticate(request)
        check_key_limit(request)  # a POST's per-key rate limit (limits.py), before its body is read

    def authenticate(request: Request) -> None:
        keys, admin_keys = request.app.state.auth_keys
        if request.url.path in request.app.state.config.auth.public_paths:
            return
        required = admin_keys if (admin and admin_keys) else keys | admin_keys | ab_keys(request)
        if not required:
            return
        scheme, _, token = request.headers.get("authorization", "").partition(" ")
        bearer = {"WWW-Authenticate": "Bearer"}
        if scheme.lower() != "bearer" or not token:
            message = "Authorization: missing bearer token"
            raise APIError(401, message, "authentication_error", "Authorization", "missing_api_key", bearer)
        if not any(hmac.compare_digest(token.strip(), k) for k in required):
            if admin and admin_keys and any(hmac.compare_digest(token.strip(), k) for k in keys):
                message = "Authorization: this endpoint needs an admin token"
                raise APIError(403, message, "permission_error", "Authorization", "admin_required")
            message = "Authorization: invalid bearer token"
            raise APIError(401, message, "authentication_error", "Authorization", "invalid_api_key", bearer)

    return check


require_key = Depends(_auth_dependency(admin=False))
require_admin = Depends(_auth_dependency(admin=True))


# -- the body -----------------------------------------------------------------------------------------------
def _too_large(limit_kb: int) -> APIError:
    return APIError(
        413,
        f"the request body is larger than this server's limit of {limit_kb} KiB (server.max_body_kb)",
        "invalid_request_error",
        None,
        "body_too_large",
    )


async def read_body(request: Request) -> bytes:
    """The body, refused (413) past ``server.max_body_kb`` before more than that is read."""
    limit_kb = request.app.state.config.server.max_body_kb
    limit = limit_kb * 1024
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise _too_large(limit_kb)
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise _too_large(limit_kb)
        chunks.append(chunk)
    return b"".join(chunks)


class ServeRoute(APIRoute):
    """A route whose guards run before its body is read, and whose body is read within the limit, as JSON."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()
        if self.body_field is None:
            return handler
        guards = [d.dependency for d in self.dependencies if d.dependency is not None]

        async def guarded(request: Request) -> Response:
            for guard in guards:  # run again by FastAPI as dependencies: they are cheap, idempotent checks
                await guard(request)
            body = await read_body(request)
            scope = {**request.scope, "headers": [h for h in request.scope["headers"] if h[0] != _JSON[0]] + [_JSON]}
            request = Request(scope, request.receive)
            request._body = body  # what FastAPI's request.body() returns (Starlette caches it there)
            try:
                return await handler(request)
            except StarletteHTTPException as exc:  # the one body FastAPI cannot decode: not UTF-8/16/32
                if exc.status_code == 400 and isinstance(exc.__cause__, UnicodeDecodeError):
                    raise bad_request(f"malformed JSON body: {exc.__cause__}", None, "invalid_json") from None
                raise

        return guarded


# -- errors -------------------------------------------------------------------------------------------------
def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(APIError)
    async def _api_error(_: Request, exc: APIError) -> JSONResponse:
        return error_response(exc)

    @app.exception_handler(RequestValidationError)
    async def _validation(_: Request, exc: RequestValidationError) -> JSONResponse:
        document = exc.body if isinstance(exc.body, str) else None
        return error_response(validation_error(list(exc.errors()), document))

    @app.exception_handler(StarletteHTTPException)
    async def _http(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        kind = {404: "not_found_error", 405: "invalid_request_error"}.get(exc.status_code, "invalid_request_error")
        message = "no such endpoint" if exc.status_code == 404 else str(exc.detail)
        return error_response(APIError(exc.status_code, message, kind, None, None, dict(exc.headers or {})))

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
        log.exception("unhandled error on %s %s", request.method, request.url.path)
        return error_response(APIError(500, "internal server error", "server_error"))


def guard(handler: Any) -> Any:
    """Turn an unexpected exception of an endpoint into the generic 500 JSON (logged here with its trace).

    Starlette's own catch-all re-raises after answering, which makes uvicorn drop the connection; answering
    from the endpoint keeps it a normal response.
    """

    @functools.wraps(handler)
    async def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return await handler(*args, **kwargs)
        except APIError:
            raise
        except Exception:
            log.exception("unhandled error in %s", handler.__name__)
            return error_response(APIError(500, "internal server error", "server_error"))

    return wrapper


# -- the client going away ----------------------------------------------------------------------------------
class ClientGone(Exception):
    """The client closed the connection before the reply was ready."""


CLIENT_GONE = {"error": {"message": "client disconnected", "type": "cancelled"}}  # with status 499


async def until_disconnect(request: Request, coro: Any) -> Any:
    """Run ``coro``; cancel it (aborting the engine request) if the client goes away meanwhile."""
    task = asyncio.ensure_future(coro)
    try:
        while True:
            done, _ = await asyncio.wait({task}, timeout=DISCONNECT_POLL_S)
            if done:
                return task.result()
            if await request.is_disconnected():
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
                raise ClientGone
    finally:
        if not task.done():
            task.cancel()
