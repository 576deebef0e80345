"""Latency-budgeted serving: engines (vLLM ``AsyncLLM``, transformers fallback), the budget controller, the
FastAPI app (OpenAI-compatible chat completions, ``/v1/livestream/reply``), metrics and A/B hooks.

Modules: ``budget`` (pure math), ``controller`` (estimates, queue, admission), ``engines`` (engine layer),
``reasoning`` (think/reply split), ``generation`` (one request's deadline-bounded generation), ``protocol``
(HTTP models), ``errors``, ``hooks`` (A/B adapter), ``metrics``, ``config``, ``dry_run``, ``service`` (the request path:
``jobs``, ``admission``, ``running``, ``accounting``), ``responses`` (response models, SSE), ``routing`` (the HTTP
edge), ``app``, ``lifespan``, ``cli``. See docs/serving.md.
"""

from __future__ import annotations

from livethink.lazy_exports import lazy_getattr

_EXPORTS = {
    "create_app": "app",
    "ServeConfig": "config",
    "load_config": "config",
    "dry_run": "dry_run",
    "BudgetPolicy": "budget",
    "Estimates": "budget",
    "TokenBudget": "budget",
    "Reject": "budget",
    "plan_budget": "budget",
    "BudgetController": "controller",
    "Service": "service",
    "ServeHooks": "hooks",
    "ArmChoice": "hooks",
    "NoExperiment": "hooks",
    "ABTestHooks": "hooks",
}
__all__ = sorted(_EXPORTS)
__getattr__ = lazy_getattr(__name__, _EXPORTS)
