"""Rate limits per viewer and per API key, and the A/B scope of forcing an arm or posting outcomes.

Limits (``limits`` in the config; off by default) are token buckets (``budget.token_bucket``): a viewer
(``viewer_id``; chat: ``viewer_id``, else ``user``) over ``limits.per_viewer_rps`` (burst
``limits.per_viewer_burst``), or a bearer token over ``limits.per_key_rps`` on POST requests, gets 429 +
``Retry-After`` with code ``rate_limited``, ``param`` the field it is keyed on, and ``limit`` naming the config
field. The per-key limit is taken before the body is read (``routing.require_key``), the per-viewer one once the
body names the viewer (``admit``). A request without a viewer or a token is not limited on that key.

A/B scope: once any API key is configured (``auth``), a request that forces an arm (``arm``) and
``POST /v1/ab/outcomes`` need an A/B-scoped token (``auth.ab_keys``, ``LIVETHINK_AB_KEY``) or an admin token;
any other key gets 403 ``ab_scope_required``. Without keys (auth off) both stay open.
"""

from __future__ import annotations

import hmac
import time
from typing import Any

from fastapi import Depends, Request

from livethink.serve.budget.token_bucket import Buckets
from livethink.serve.config import LimitsConfig, ServeConfig
from livethink.serve.errors import APIError, _retry_after

LIMITED_KEY = "livethink.key_limited"  # set on the scope once the per-key token is taken (guards run twice)


class Limits:
    """The server's buckets (``app.state.limits``): per viewer and per API key, each None when off."""

    def __init__(self, config: LimitsConfig) -> None:
        def buckets(rps: float | None, burst: float | None) -> Buckets | None:
            if rps is None:
                return None
            return Buckets(rps, burst if burst is not None else max(1.0, rps), config.max_tracked)

        self.config = config
        self.viewer = buckets(config.per_viewer_rps, config.per_viewer_burst)
        self.key = buckets(config.per_key_rps, config.per_key_burst)

    def check_viewer(self, viewer: str | None, param: str, now: float | None = None) -> None:
        """Take a token from ``viewer``'s bucket, or raise the 429 naming ``limits.per_viewer_rps``."""
        if self.viewer is None or not viewer:
            return
        wait = self.viewer.take(viewer, time.monotonic() if now is None else now)
        if wait > 0:
            raise rate_limited(f"viewer {viewer[:64]!r}", "limits.per_viewer_rps", self.viewer, param, wait)

    def check_key(self, token: str, now: float | None = None) -> None:
        """Take a token from the API key's bucket, or raise the 429 naming ``limits.per_key_rps``."""
        if self.key is None or not token:
            return
        wait = self.key.take(token, time.monotonic() if now is None else now)
        if wait > 0:
            raise rate_limited("this API key", "limits.per_key_rps", self.key, "Authorization", wait)


def rate_limited(who: str, limit: str, buckets: Buckets, param: str, wait_s: float) -> APIError:
    """429 + ``Retry-After``: ``who`` is over ``limit`` (the config field)."""
    message = (
        f"rate limit: {who} is over {limit} ({buckets.rate:g} requests/s, burst {buckets.burst:g}); "
        f"retry in {wait_s:.2f} s"
    )
    extra = {"limit": limit, "retry_after_ms": int(wait_s * 1000)}
    return APIError(429, message, "rate_limit_error", param, "rate_limited", _retry_after(wait_s), extra)


def bearer(request: Request) -> str:
    """The request's bearer token ('' without one)."""
    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    return token.strip() if scheme.lower() == "bearer" else ""


def limits_of(request: Request) -> Limits:
    """The app's ``Limits`` (made from the config on first use)."""
    state = request.app.state
    limits = getattr(state, "limits", None)
    if limits is None:
        config: ServeConfig = state.config
        limits = state.limits = Limits(config.limits)
    return limits


def ab_keys(request: Request) -> frozenset[str]:
    """The A/B-scoped tokens (``auth.ab_keys`` and its variable), read once per app. They authenticate as API keys
    too (``routing.require_key``)."""
    state = request.app.state
    keys = getattr(state, "ab_keys", None)
    if keys is None:
        keys = state.ab_keys = state.config.auth.ab_scoped()
    return keys


def check_key_limit(request: Request) -> None:
    """The per-key limit of a POST request, taken once per request (``routing.require_key`` calls it)."""
    if request.method != "POST" or request.scope.get(LIMITED_KEY):
        return
    request.scope[LIMITED_KEY] = True
    limits_of(request).check_key(bearer(request))


def require_ab_scope(request: Request, what: str, param: str) -> None:
    """403 unless auth is off or the bearer token is A/B-scoped or admin (``what`` names the action)."""
    keys, admin_keys = request.app.state.auth_keys
    scoped = ab_keys(request) | admin_keys
    if not (keys or scoped):
        return
    token = bearer(request)
    if token and any(hmac.compare_digest(token, k) for k in scoped):
        return
    message = f"{param}: {what} needs an A/B-scoped token (auth.ab_keys, LIVETHINK_AB_KEY) or an admin token"
    raise APIError(403, message, "permission_error", param, "ab_scope_required")


def admit(request: Request, body: Any) -> None:
    """The checks that need the body, before any work: forcing an arm needs the A/B scope; the viewer's limit."""
    if getattr(body, "arm", None) is not None:
        require_ab_scope(request, "forcing an arm", "arm")
    viewer = getattr(body, "viewer_id", None)
    param = "viewer_id"
    if viewer is None and getattr(body, "user", None):
        viewer, param = body.user, "user"
    limits_of(request).check_viewer(viewer, param)


async def _ab_scope(request: Request) -> None:
    require_ab_scope(request, "posting outcomes", "Authorization")


require_ab_key = Depends(_ab_scope)  # POST /v1/ab/outcomes
