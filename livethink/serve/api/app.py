"""FastAPI app: OpenAI-compatible chat completions (+ SSE), the livestream reply endpoint, health, models,
Prometheus metrics, A/B outcome/summary endpoints, admin status. A thin layer over ``service.Service``.

Deadlines and latency figures run on the client's clock (``clock.py``): from the request's first byte to the
last byte of its response; metrics, ``deadline_met`` accounting and A/B records are taken once the response
has left. The engine processes run at a lower CPU priority than this one (``engine.nice``, ``priority.py``).

Every error is JSON ``{"error": {"message", "type", "param", "code"}}`` (``routing.py``): validation errors are
400s naming the field, bodies over ``server.max_body_kb`` 413, unknown routes 404, anything unexpected a generic
500 without a stack trace (logged server-side). Each route declares its request body (a pydantic model, read and
validated by FastAPI) and its response models for the OpenAPI document (``api_docs.py``; ``docs/openapi.json``).
Bearer auth (``auth`` in the config): when API keys are set, every endpoint except ``auth.public_paths`` needs
one; when admin keys are set, admin endpoints need one of those.
"""

import asyncio
import logging
from collections.abc import Callable
from typing import Annotated, Any

from fastapi import Body, Depends, FastAPI, Query, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from pydantic import BaseModel

from livethink import __version__
from livethink.ab_test.serving import SIMULATED_HEADER, SummaryView
from livethink.serve.api.access import JOB_KEY, REQUEST_ID_KEY, AccessLog
from livethink.serve.api.api_docs import PROMPT_TOO_LONG, errors, event_stream, install, operation_id
from livethink.serve.api.clock import CLOCK_KEY, Clock, RequestClock
from livethink.serve.api.drain import Drain, DrainGate
from livethink.serve.api.lifespan import ENGINE_GAVE_UP_EXIT, lifespan
from livethink.serve.api.limits import admit, require_ab_key
from livethink.serve.api.livestream_stream import SSE_HEADERS, livestream_events
from livethink.serve.api.responses import body_of, chat_response, livestream_response, sse_chunks
from livethink.serve.api.routing import (
    CLIENT_GONE,
    ClientGone,
    ServeRoute,
    guard,
    install_error_handlers,
    require_admin,
    require_key,
    until_disconnect,
)
from livethink.serve.config import ServeConfig
from livethink.serve.engines import EngineSet
from livethink.serve.errors import bad_request, not_found
from livethink.serve.protocol import (
    AdminStatus,
    ChatCompletion,
    ChatCompletionChunk,
    ChatCompletionRequest,
    ExperimentSummary,
    Health,
    Liveness,
    LivestreamEvent,
    LivestreamReplyRequest,
    LivestreamReplyResponse,
    ModelList,
    OutcomeAck,
    VersionInfo,
    model_card,
)
from livethink.serve.request_path.service import AUTO_MODEL, Job, Result, Service
from livethink.serve.telemetry.ab_hooks import NoExperiment, ServeHooks
from livethink.serve.telemetry.metrics import CONTENT_TYPE_LATEST
from livethink.serve.telemetry.refusals import refusing_while_idle

__all__ = ["ENGINE_GAVE_UP_EXIT", "SIMULATED_HEADER", "create_app"]
log = logging.getLogger(__name__)


DEADLINE_HEADER = "X-Request-Deadline"  # the absolute deadline (epoch ms), as deadline_at: a proxy passes it on

LivestreamBody = Annotated[LivestreamReplyRequest, Body(description="a viewer's question about the products on stream")]
ChatBody = Annotated[ChatCompletionRequest, Body(description="OpenAI chat completion request (+ extensions)")]


def _outcome_model() -> type:
    from livethink.ab_test.events import OutcomeIn  # the A/B stack loads only where it is documented or used

    return OutcomeIn


async def _require_experiment(request: Request) -> None:
    """404 on a server without an experiment (before the body is read)."""
    if isinstance(request.app.state.service.hooks, NoExperiment):
        raise not_found("experiment: no experiment is configured on this server", "experiment")


async def _start(request: Request, body: LivestreamReplyRequest | ChatCompletionRequest) -> tuple[Service, Job]:
    """The request's job, admitted (or a 4xx); its accounting waits for the response's last byte (the client's
    clock: metrics, deadline, A/B record). The body's size (413, ``routing.read_body``) and its prompt's length in
    characters are checked first; rendering and tokenising the prompt run in a worker thread, off the event loop."""
    admit(request, body)  # forcing an arm needs the A/B scope; the viewer's rate limit (limits.py)
    svc: Service = request.app.state.service
    clock: Clock = request.scope[CLOCK_KEY]
    simulated = request.headers.get(SIMULATED_HEADER) == "1"
    header = request.headers.get(DEADLINE_HEADER)
    if header is not None and body.deadline_at is None:
        if not header.isdigit() or int(header) <= 0:
            raise bad_request(
                f"{DEADLINE_HEADER}: must be the absolute deadline in epoch milliseconds, got {header[:40]!r}",
                DEADLINE_HEADER,
            )
        body = body.model_copy(update={"deadline_at": int(header)})
    prepare = svc.prepare_livestream if isinstance(body, LivestreamReplyRequest) else svc.prepare_chat
    job = await prepare(body, simulated, clock.arrival)
    job.http_id = request.scope.get(REQUEST_ID_KEY)  # the client's X-Request-Id: on the reply and the A/B events
    request.scope[JOB_KEY]["job"] = job  # for the access line
    job.deferred = True
    clock.on_sent(lambda t: svc.finish(job, t))
    svc.admit(job)
    return svc, job


async def _answer(request: Request, svc: Service, job: Job, build: Callable[[Result], BaseModel]) -> JSONResponse:
    """The job's response once generated (stamped at the last moment), or 499 if the client left meanwhile."""
    try:
        r = await until_disconnect(request, svc.complete(job))
    except ClientGone:
        return JSONResponse(CLIENT_GONE, status_code=499)
    return JSONResponse(body_of(build(svc.stamp(job, r))))


def create_app(
    config: ServeConfig, engine_set: EngineSet | None = None, hooks: ServeHooks | None = None
) -> FastAPI:
    """The server. Engines are started in the app's lifespan (pass ``engine_set`` to inject your own)."""

    app = FastAPI(
        title="livethink",
        version=__version__,
        lifespan=lifespan(config, engine_set, hooks),
        description="Latency-budgeted livestream replies on vLLM",
        generate_unique_id_function=operation_id,
    )
    app.state.config = config
    app.state.exit_on_engine_error = False
    app.state.exit_code = 0  # ENGINE_GAVE_UP_EXIT once an engine is given up
    app.state.request_exit = None  # set by the CLI: stops the server (then it exits with app.state.exit_code)
    app.state.auth_keys = config.auth.keys()
    app.state.drain = Drain()  # begun by the CLI's server on SIGTERM (drain.py)

    def loop_lag() -> float:
        svc = getattr(app.state, "service", None)
        return svc.controller.loop_lag.value if svc is not None else 0.0

    app.add_middleware(RequestClock, lag=loop_lag)
    app.add_middleware(DrainGate, drain=app.state.drain)  # inside AccessLog: a refused request has its line too
    app.add_middleware(AccessLog)  # outermost: the request id is on every response, the line after the last byte
    app.router.route_class = ServeRoute
    install_error_handlers(app)
    install(app)

    def service(request: Request) -> Service:
        return request.app.state.service

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
        """Readiness (what a load balancer checks): 503 while an engine is stalled, dead or restarting, and
        (``status: draining``) from SIGTERM on, while the server finishes its requests in flight before it exits."""
        drain: Drain = request.app.state.drain
        if drain.draining:
            raise drain.error()
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
        responses={
            200: {
                "model": LivestreamReplyResponse,
                "description": "the reply, or with `stream: true` server-sent `plan`, `sentence` and `done` events "
                "(docs/serving.md, \"Streaming for a speaking avatar\"); with `on_refusal: filler` a refusal is a 200 "
                "with a filler line (`fallback` and `refused` true) instead of a 429",
                "content": {
                    "text/event-stream": event_stream(
                        LivestreamEvent,
                        "`event: plan|sentence|done` with `data: <LivestreamEvent JSON>`; the sentences' `text` "
                        "joined is the `done` event's `reply`; an error after the first event is `event: error` "
                        "with `data: <ErrorResponse JSON>`",
                    )
                },
            },
            **errors(400, 403, 404, 413, 429, 503, notes=PROMPT_TOO_LONG),
        },
    )
    @guard
    async def livestream_reply(
        request: Request,
        body: LivestreamBody,
    ) -> Response:
        svc, job = await _start(request, body)
        if body.stream:
            return StreamingResponse(
                livestream_events(svc, job, body), media_type="text/event-stream", headers=SSE_HEADERS
            )
        return await _answer(request, svc, job, lambda r: livestream_response(job, body, r))

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
            **errors(400, 403, 404, 413, 429, 503, notes=PROMPT_TOO_LONG),
        },
    )
    @guard
    async def chat_completions(
        request: Request,
        body: ChatBody,
    ) -> Response:
        svc, job = await _start(request, body)
        if body.stream:
            include_usage = bool(body.stream_options and body.stream_options.include_usage)
            return StreamingResponse(
                sse_chunks(svc, job, body.include_reasoning, include_usage),
                media_type="text/event-stream",
                headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
            )
        return await _answer(request, svc, job, lambda r: chat_response(job, r, body.include_reasoning))

    outcome_model = _outcome_model()

    @app.post(
        "/v1/ab/outcomes",
        dependencies=[require_key, require_ab_key, Depends(_require_experiment)],
        tags=["ab"],
        responses={200: {"model": OutcomeAck}, **errors(400, 403, 404, 409, 413, 429, 503)},
    )
    @guard
    async def ab_outcome(
        request: Request,
        body: Annotated[outcome_model, Body(description="a viewer's outcome (click, order, ...) in an experiment")],
    ) -> dict[str, Any]:
        svc = service(request)
        return await svc.hooks.on_outcome(body)

    @app.get(
        "/v1/ab/experiments/{name}",
        dependencies=[require_admin],
        tags=["ab"],
        responses={200: {"model": ExperimentSummary}, **errors(400, 403, 404)},
    )
    @guard
    async def ab_summary(
        request: Request,
        name: str,
        view: Annotated[SummaryView, Query(description="compact: per-arm headline numbers, the primary metric's "
                                           "tests, SRM, phases, verdict; full: the whole analysis (every metric, "
                                           "guardrail and phase, the over-time series)")] = "compact",
    ) -> dict[str, Any]:  # fmt: skip
        hooks = service(request).hooks
        if hasattr(hooks, "asummary"):  # computed off the serving process (livethink.ab_test.summary_worker)
            return await hooks.asummary(name, view)
        return await asyncio.to_thread(hooks.summary, name, view)

    @app.get(
        "/v1/admin/status",
        dependencies=[require_admin],
        tags=["admin"],
        responses={200: {"model": AdminStatus}, **errors(403)},
    )
    @guard
    async def admin_status(request: Request) -> dict[str, Any]:
        svc = service(request)
        return {
            "controller": svc.controller.snapshot(),
            "engines": svc.engine_stats(),
            "experiments": svc.hooks.arms(),
            "config": config.model_dump(mode="json", exclude={"auth"}),
        }

    return app
