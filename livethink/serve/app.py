"""FastAPI app: OpenAI-compatible chat completions (+ SSE), the livestream reply endpoint, health, models,
Prometheus metrics, A/B outcome/summary endpoints, admin status. A thin layer over ``service.Service``.

Deadlines and latency figures run on the client's clock (``clock.py``): from the request's first byte to the
last byte of its response; metrics, ``deadline_met`` accounting and A/B records are taken once the response
has left. The engine processes run at a lower CPU priority than this one (``engine.nice``, ``priority.py``).

Every error is JSON ``{"error": {"message", "type", "param", "code"}}``: validation errors are 400s naming the
field, bodies over ``server.max_body_kb`` 413, unknown routes 404, anything unexpected a generic 500 without a
stack trace (logged server-side). Each route declares its request and response models for the OpenAPI document
(``api_docs.py``; ``docs/openapi.json``).
Bearer auth (``auth`` in the config): when API keys are set, every endpoint except ``auth.public_paths`` needs
one; when admin keys are set, admin endpoints need one of those.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import gc
import hmac
import json
import logging
import os
import sys
import time
from collections.abc import AsyncIterator
from typing import Any

from fastapi import Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response, StreamingResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from livethink import __version__
from livethink.ab_test.serving import SIMULATED_HEADER
from livethink.serve.api_docs import errors, event_stream, install, operation_id, request_body
from livethink.serve.clock import CLOCK_KEY, Clock, RequestClock
from livethink.serve.config import ServeConfig
from livethink.serve.engines import EngineSet, EngineStartError, start_engines
from livethink.serve.errors import APIError, bad_request, not_found, validation_error
from livethink.serve.hooks import ABTestHooks, NoExperiment, ServeHooks, SpoolCollector
from livethink.serve.metrics import CONTENT_TYPE_LATEST, ServeMetrics
from livethink.serve.priority import deprioritize_children
from livethink.serve.protocol import (
    AdminStatus,
    ChatCompletion,
    ChatCompletionChunk,
    ChatCompletionRequest,
    ExperimentSummary,
    Health,
    Liveness,
    LivestreamReplyRequest,
    LivestreamReplyResponse,
    ModelList,
    OutcomeAck,
    VersionInfo,
    model_card,
)
from livethink.serve.refusals import refusing_while_idle
from livethink.serve.responses import chat_body, livestream_body, sse_chunks
from livethink.serve.service import AUTO_MODEL, Job, Result, Service
from livethink.serve.supervisor import Supervision

log = logging.getLogger(__name__)
DISCONNECT_POLL_S = 0.05
ENGINE_GAVE_UP_EXIT = 4  # the process's exit code once an engine's restart budget is spent


class ClientGone(Exception):
    """The client closed the connection before the reply was ready."""


def _auth_dependency(admin: bool):
    async def check(request: Request) -> None:
        keys, admin_keys = request.app.state.auth_keys
        if request.url.path in request.app.state.config.auth.public_paths:
            return
        required = admin_keys if (admin and admin_keys) else keys | admin_keys
        if not required:
            return
        header = request.headers.get("authorization", "")
        scheme, _, token = header.partition(" ")
        if scheme.lower() != "bearer" or not token:
            raise APIError(
                401,
                "Authorization: missing bearer token",
                "authentication_error",
                "Authorization",
                "missing_api_key",
                {"WWW-Authenticate": "Bearer"},
            )
        if not any(hmac.compare_digest(token.strip(), k) for k in required):
            if admin and admin_keys and any(hmac.compare_digest(token.strip(), k) for k in keys):
                raise APIError(
                    403,
                    "Authorization: this endpoint needs an admin token",
                    "permission_error",
                    "Authorization",
                    "admin_required",
                )
            raise APIError(
                401,
                "Authorization: invalid bearer token",
                "authentication_error",
                "Authorization",
                "invalid_api_key",
                {"WWW-Authenticate": "Bearer"},
            )

    return check


require_key = Depends(_auth_dependency(admin=False))
require_admin = Depends(_auth_dependency(admin=True))


def _install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(APIError)
    async def _api_error(_: Request, exc: APIError) -> JSONResponse:
        return exc.response()

    @app.exception_handler(RequestValidationError)
    async def _validation(_: Request, exc: RequestValidationError) -> JSONResponse:
        return validation_error(list(exc.errors())).response()

    @app.exception_handler(StarletteHTTPException)
    async def _http(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        kind = {404: "not_found_error", 405: "invalid_request_error"}.get(
            exc.status_code, "invalid_request_error"
        )
        message = "no such endpoint" if exc.status_code == 404 else str(exc.detail)
        return APIError(exc.status_code, message, kind, None, None, dict(exc.headers or {})).response()

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
        log.exception("unhandled error on %s %s", request.method, request.url.path)
        return APIError(500, "internal server error", "server_error").response()


def _guard(handler: Any) -> Any:
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
            return APIError(500, "internal server error", "server_error").response()

    return wrapper


def _too_large(limit_kb: int) -> APIError:
    return APIError(
        413,
        f"the request body is larger than this server's limit of {limit_kb} KiB (server.max_body_kb)",
        "invalid_request_error",
        None,
        "body_too_large",
    )


async def _read_body(request: Request) -> bytes:
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


async def _parse(request: Request, model: type) -> Any:
    """Read and validate a JSON body (so malformed JSON and wrong types are our 400s)."""
    raw = await _read_body(request)
    if not raw.strip():
        raise bad_request("the request body is empty (expected a JSON object)", None, "empty_body")
    try:
        data = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise bad_request(f"malformed JSON body: {exc}", None, "invalid_json") from None
    if not isinstance(data, dict):
        raise bad_request(f"the body must be a JSON object, got {type(data).__name__}", None, "invalid_type")
    from pydantic import ValidationError

    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise validation_error(list(exc.errors())) from None


async def _until_disconnect(request: Request, coro: Any) -> Any:
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


def _outcome_model() -> type:
    from livethink.ab_test.events import OutcomeIn  # the A/B stack loads only where it is documented or used

    return OutcomeIn


def _account_at_last_byte(svc: Service, job: Job, clock: Clock) -> None:
    """Metrics, deadline accounting and the A/B record of ``job`` wait for its response's last byte."""
    job.deferred = True
    clock.on_sent(lambda t: svc.finish(job, t))


def _give_up(app: FastAPI, key: str, reason: str) -> None:
    """An engine's restart budget is spent: stop serving and exit non-zero, so that the process's own supervisor
    (systemd, Kubernetes, ``livethink.replicas``) restarts it."""
    log.error("engine %s: %s; the server exits with code %d", key, reason, ENGINE_GAVE_UP_EXIT)
    app.state.exit_code = ENGINE_GAVE_UP_EXIT
    if app.state.request_exit is not None:
        app.state.request_exit()


def create_app(
    config: ServeConfig, engine_set: EngineSet | None = None, hooks: ServeHooks | None = None
) -> FastAPI:
    """The server. Engines are started in the app's lifespan (pass ``engine_set`` to inject your own)."""

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        metrics = ServeMetrics()
        es = engine_set
        t_start = time.monotonic()
        if es is None:
            try:
                es = await start_engines(config)
            except EngineStartError as exc:
                log.error("%s", exc)
                if app.state.exit_on_engine_error:  # the CLI: the reason, not a stack trace
                    print(f"livethink serve: {exc}", file=sys.stderr, flush=True)
                    os._exit(3)
                raise
        else:
            for engine in es.engines.values():
                await engine.start()
        h = hooks
        if h is None and config.experiment is not None:
            h = ABTestHooks.open(
                config.experiment.file,
                config.experiment.store,
                set(config.models),
                on_error=lambda kind: metrics.ab_errors.labels(kind).inc(),
                spool_dir=config.experiment.spool_dir,
                spool_max_mb=config.experiment.spool_max_mb,
            )
        if h is not None and hasattr(h, "health"):
            metrics.registry.register(SpoolCollector(h))
        supervision = Supervision(
            es.engines, config.engine.supervision(), metrics, enabled=config.engine.supervise,
            start_s=time.monotonic() - t_start, on_give_up=functools.partial(_give_up, app),
            on_started=lambda: deprioritize_children(config.engine.nice),
        )  # fmt: skip
        svc = Service(config, supervision.engines, es.engine_keys, es.capacities, h or NoExperiment(), metrics)
        deprioritize_children(config.engine.nice)
        if config.engine.warmup:
            await svc.warmup()
            deprioritize_children(config.engine.nice)  # threads the engines started on their first requests
        # The start-up heap (torch, transformers, the engines' clients) never becomes garbage: frozen, it leaves
        # the full collections, whose pauses stalled the event loop for ~100 ms (read as a saturated front end).
        # vLLM's engine core does the same (vllm.utils.gc_utils.freeze_gc_heap; docs.python.org/3/library/gc.html).
        gc.collect()
        gc.freeze()
        app.state.service = svc
        app.state.engine_fallback = es.fallback_reason
        app.state.started = int(time.time())
        background = [asyncio.create_task(svc.controller.loop_lag.run())]
        prober = svc.start_idle_probes()
        if prober is not None:
            background.append(asyncio.create_task(prober.run()))
        app.state.supervision = supervision
        supervision.start()
        try:
            yield
        finally:
            for task in background:
                task.cancel()
            await supervision.stop()
            for engine in es.engines.values():
                try:
                    await engine.stop()
                except Exception:
                    log.warning("engine stop failed", exc_info=True)
            if h is not None and hooks is None:
                h.close()

    app = FastAPI(
        title="livethink",
        version=__version__,
        lifespan=lifespan,
        description="Latency-budgeted livestream replies on vLLM",
        generate_unique_id_function=operation_id,
    )
    app.state.config = config
    app.state.exit_on_engine_error = False
    app.state.exit_code = 0  # ENGINE_GAVE_UP_EXIT once an engine is given up
    app.state.request_exit = None  # set by the CLI: stops the server (then it exits with app.state.exit_code)
    app.state.auth_keys = config.auth.keys()

    def loop_lag() -> float:
        svc = getattr(app.state, "service", None)
        return svc.controller.loop_lag.value if svc is not None else 0.0

    app.add_middleware(RequestClock, lag=loop_lag)
    _install_error_handlers(app)
    install(app)

    def service(request: Request) -> Service:
        return request.app.state.service

    def clock(request: Request) -> Clock:
        return request.scope[CLOCK_KEY]

    def simulated(request: Request) -> bool:
        return request.headers.get(SIMULATED_HEADER) == "1"

    def refresh_refusals(svc: Service) -> str | None:
        """Update the refusal gauges; the reason the server is degraded by refusals, or None."""
        b = config.budget
        share = svc.refusals.share()
        idle = svc.engines_idle()
        degraded = refusing_while_idle(share, idle, b.degraded_refusal_share, b.degraded_min_requests)
        svc.metrics.refused_share.set(share.share)
        svc.metrics.refusing_while_idle.set(int(degraded))
        if not degraded:
            return None
        return (
            f"refused {share.refused} of the last {share.requests} requests ({share.share:.0%}, most for "
            f"{share.top_reason}) in {b.refusal_window_s:.0f} s while the engines are idle"
        )

    @app.get(
        "/health", dependencies=[require_key], tags=["server"], responses={200: {"model": Health}, **errors(503)}
    )
    async def health(request: Request) -> dict[str, Any]:
        """Readiness (what a load balancer checks): 503 while an engine is stalled, dead or restarting."""
        svc = service(request)
        request.app.state.supervision.check_ready()
        refusing = refresh_refusals(svc)
        out = {
            "status": "ok",
            "models": svc.models,
            "engines": {k: e.kind for k, e in svc.engines.items()},
            # engine.kind auto: why vLLM is not serving (null when it is, or when transformers was asked for)
            "engine_fallback": request.app.state.engine_fallback,
            "reasoning": {m: svc.reasoning_format(m).to_dict() for m in svc.models},
            "min_thinking_tokens": {m: f.tokens for m, f in svc.floors.items()},
            "below_min_thinking": svc.below_floor_report(),
            "engine_state": request.app.state.supervision.report(),
        }
        reasons = [refusing] if refusing else []
        ab = svc.hooks.health() if hasattr(svc.hooks, "health") else None
        if ab is not None:  # the A/B write path: a failing store or a full spool degrades, never fails, health
            out["ab"] = ab
            if ab.get("degraded") or (ab.get("spool") or {}).get("full"):
                reasons.append("the A/B event store is failing or its spool is full")
        if reasons:
            out["status"], out["reason"] = "degraded", "; ".join(reasons)
        return out

    @app.get(
        "/health/live", dependencies=[require_key], tags=["server"], responses={200: {"model": Liveness}, **errors()}
    )
    async def health_live(request: Request) -> dict[str, Any]:
        """Liveness: the process is up and its event loop answers (200 whatever the engines' state)."""
        supervision = getattr(request.app.state, "supervision", None)
        return {"status": "alive", "engine_state": supervision.report() if supervision is not None else None}

    @app.get("/version", dependencies=[require_key], tags=["server"], responses={200: {"model": VersionInfo}, **errors()})
    async def version() -> dict[str, str]:
        return {"version": __version__}

    @app.get("/v1/models", dependencies=[require_key], tags=["server"], responses={200: {"model": ModelList}, **errors()})
    async def models(request: Request) -> dict[str, Any]:
        svc = service(request)
        created = request.app.state.started
        data = [
            model_card(m, created, engine=svc.engines[svc.engine_keys[m]].kind, **svc.floors[m].card())
            for m in svc.models
        ]
        data.append(
            model_card(
                AUTO_MODEL,
                created,
                root=config.default_model,
                description="A/B arm's model for the viewer (user / viewer_id), else the default",
            )
        )
        return {"object": "list", "data": data}

    @app.get(
        "/metrics",
        dependencies=[require_key],
        tags=["server"],
        response_class=Response,
        responses={
            200: {
                # the exact Content-Type (its version=) is prometheus_client's; the document stays stable
                "description": "Prometheus text exposition format (labels: endpoint, arm, model)",
                "content": {"text/plain": {"schema": {"type": "string"}}},
            },
            **errors(),
        },
    )
    async def metrics(request: Request) -> Response:
        svc = service(request)
        return Response(svc.metrics.render(lambda: refresh_refusals(svc)), media_type=CONTENT_TYPE_LATEST)

    @app.post(
        "/v1/livestream/reply",
        dependencies=[require_key],
        tags=["livestream"],
        responses={200: {"model": LivestreamReplyResponse}, **errors(400, 404, 413, 429, 503)},
        openapi_extra=request_body(LivestreamReplyRequest, "a viewer's question about the products on stream"),
    )
    @_guard
    async def livestream_reply(request: Request) -> JSONResponse:
        body: LivestreamReplyRequest = await _parse(request, LivestreamReplyRequest)
        svc = service(request)
        c = clock(request)
        job = svc.prepare_livestream(body, simulated(request), c.arrival)
        _account_at_last_byte(svc, job, c)
        svc.admit(job)
        try:
            r: Result = await _until_disconnect(request, svc.complete(job))
        except ClientGone:
            return JSONResponse(
                {"error": {"message": "client disconnected", "type": "cancelled"}}, status_code=499
            )
        return JSONResponse(livestream_body(job, body, svc.stamp(job, r)))

    @app.post(
        "/v1/chat/completions",
        dependencies=[require_key],
        tags=["openai"],
        responses={
            200: {
                "model": ChatCompletion,
                "description": "a `chat.completion`, or with `stream: true` server-sent `chat.completion.chunk`s",
                "content": {
                    "text/event-stream": event_stream(
                        ChatCompletionChunk,
                        "`data: <ChatCompletionChunk JSON>` events, then `data: [DONE]`; an error after the first "
                        "event is sent as `data: <ErrorResponse JSON>`",
                    )
                },
            },
            **errors(400, 404, 413, 429, 503),
        },
        openapi_extra=request_body(ChatCompletionRequest, "OpenAI chat completion request (+ extensions)"),
    )
    @_guard
    async def chat_completions(request: Request) -> Response:
        body: ChatCompletionRequest = await _parse(request, ChatCompletionRequest)
        svc = service(request)
        c = clock(request)
        job = svc.prepare_chat(body, simulated(request), c.arrival)
        _account_at_last_byte(svc, job, c)
        svc.admit(job)
        if body.stream:
            include_usage = bool(body.stream_options and body.stream_options.include_usage)
            return StreamingResponse(
                sse_chunks(svc, job, body.include_reasoning, include_usage),
                media_type="text/event-stream",
                headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
            )
        try:
            r = await _until_disconnect(request, svc.complete(job))
        except ClientGone:
            return JSONResponse(
                {"error": {"message": "client disconnected", "type": "cancelled"}}, status_code=499
            )
        return JSONResponse(chat_body(job, svc.stamp(job, r), body.include_reasoning))

    @app.post(
        "/v1/ab/outcomes",
        dependencies=[require_key],
        tags=["ab"],
        responses={200: {"model": OutcomeAck}, **errors(400, 404, 409, 413, 503)},
        openapi_extra=request_body(_outcome_model(), "a viewer's outcome (click, order, ...) in an experiment"),
    )
    @_guard
    async def ab_outcome(request: Request) -> dict[str, Any]:
        svc = service(request)
        if isinstance(svc.hooks, NoExperiment):
            raise not_found("experiment: no experiment is configured on this server", "experiment")
        from livethink.ab_test.events import OutcomeIn

        body = await _parse(request, OutcomeIn)
        return await svc.hooks.on_outcome(body)

    @app.get(
        "/v1/ab/experiments/{name}",
        dependencies=[require_admin],
        tags=["ab"],
        responses={200: {"model": ExperimentSummary}, **errors(403, 404)},
    )
    @_guard
    async def ab_summary(request: Request, name: str) -> dict[str, Any]:
        return await asyncio.to_thread(service(request).hooks.summary, name)

    @app.get(
        "/v1/admin/status",
        dependencies=[require_admin],
        tags=["admin"],
        responses={200: {"model": AdminStatus}, **errors(403)},
    )
    @_guard
    async def admin_status(request: Request) -> dict[str, Any]:
        svc = service(request)
        return {
            "controller": svc.controller.snapshot(),
            "engines": svc.engine_stats(),
            "experiments": svc.hooks.arms(),
            "config": config.model_dump(mode="json", exclude={"auth"}),
        }

    return app
