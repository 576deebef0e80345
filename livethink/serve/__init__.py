"""Latency-budgeted serving: a FastAPI server over vLLM (or transformers) engines that turns each request's deadline
into a thinking budget, with A/B hooks.

Sub-packages, bottom to top (each may import only those above it in this list, plus ``config``, ``errors`` and
``protocol``):

- ``budget``: the latency-budget controller (pure budget math, estimates, engine slots);
- ``engines``: the engine layer (vLLM ``AsyncLLM``, transformers fallback) and its supervision;
- ``telemetry``: Prometheus metrics, the refusal share, the A/B hooks;
- ``request_path``: one request's walk (job → admission → running → accounting), ``Service``;
- ``api``: the HTTP surface (FastAPI app, lifespan, responses, routing, the client's clock, OpenAPI).

Top-level modules: ``config`` (``ServeConfig``), ``errors`` (the one error shape), ``protocol`` (the HTTP API's
pydantic models, shared by the request path and the HTTP surface), ``dry_run``, ``cli``
(``livethink serve``). See docs/serving.md.
"""

from __future__ import annotations

from livethink.lazy_exports import lazy_getattr

_EXPORTS = {
    "create_app": "api.app",
    "ServeConfig": "config",
    "load_config": "config",
    "dry_run": "dry_run",
    "BudgetPolicy": "budget.plan",
    "Estimates": "budget.plan",
    "TokenBudget": "budget.plan",
    "Reject": "budget.plan",
    "plan_budget": "budget.plan",
    "BudgetController": "budget.controller",
    "Service": "request_path.service",
    "ServeHooks": "telemetry.ab_hooks",
    "ArmChoice": "telemetry.ab_hooks",
    "NoExperiment": "telemetry.ab_hooks",
    "ABTestHooks": "telemetry.ab_hooks",
}
__all__ = sorted(_EXPORTS)
__getattr__ = lazy_getattr(__name__, _EXPORTS)
