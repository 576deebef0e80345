"""The traffic simulator's settings: the outcome model (a funnel whose conversion depends on reply quality and
latency) and each arm's reply profile for offline runs. See ``livethink.ab_test.simulate`` for the model."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from livethink.ab_test.errors import ExperimentConfigError


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class OutcomeModel(_Strict):
    base_click: float = Field(default=0.25, gt=0, le=1)
    base_add_to_cart: float = Field(default=0.40, gt=0, le=1)
    base_order: float = Field(default=0.50, gt=0, le=1)
    correct_effect: float = Field(default=0.40, ge=0)
    helpful_effect: float = Field(default=0.25, ge=0)
    latency_effect_per_s: float = Field(default=0.30, ge=0)
    latency_ref_ms: float = Field(default=300.0, ge=0)
    error_effect: float = Field(default=1.0, ge=0)
    gmv_median: float = Field(default=40.0, gt=0)
    gmv_sigma: float = Field(default=0.6, ge=0)
    propensity_sigma: float = Field(default=0.5, ge=0)
    pre_period_orders: float = Field(default=0.3, ge=0)
    pre_period_clicks: float = Field(default=0.5, ge=0)
    lookback_days: float = Field(default=14.0, gt=0)

    def multiplier(self, correct: Any, helpful: Any, latency_ms: Any, ok: Any) -> np.ndarray:
        """m for arrays (or scalars) of judged correctness/helpfulness (NaN = not judged), latency, success."""
        correct, helpful = np.asarray(correct, dtype=float), np.asarray(helpful, dtype=float)
        log_m = -self.correct_effect * (correct == 0) - self.helpful_effect * (helpful == 0)
        log_m = (
            log_m
            - self.latency_effect_per_s * np.maximum(0.0, np.asarray(latency_ms) - self.latency_ref_ms) / 1000
        )
        return np.where(np.asarray(ok, dtype=bool), np.exp(log_m), math.exp(-self.error_effect))

    def draw(
        self, rng: np.random.Generator, multiplier: np.ndarray, order_lift: np.ndarray | float = 0.0
    ) -> dict:
        """Funnel outcomes for n viewers: boolean arrays click/cart/order, GMV, propensity u."""
        n = len(multiplier)
        s = self.propensity_sigma
        u = np.exp(s * rng.standard_normal(n) - s * s / 2)
        click = rng.random(n) < np.minimum(1.0, self.base_click * u * multiplier)
        cart = click & (rng.random(n) < self.base_add_to_cart)
        order = cart & (rng.random(n) < np.minimum(1.0, self.base_order * (1 + np.asarray(order_lift))))
        gmv = np.round(self.gmv_median * np.exp(self.gmv_sigma * rng.standard_normal(n)), 2)
        return {"click": click, "add_to_cart": cart, "order": order, "gmv": gmv, "u": u}


class ArmProfile(_Strict):
    """Synthetic replies of one arm (offline mode) and its true order lift (for power checks)."""

    latency_ms: float = Field(default=600.0, gt=0)
    latency_sigma: float = Field(default=0.35, ge=0)
    p_correct: float = Field(default=0.85, ge=0, le=1)
    p_helpful: float = Field(default=0.70, ge=0, le=1)
    tokens: float = Field(default=300.0, gt=0)
    p_error: float = Field(default=0.0, ge=0, le=1)
    p_refused: float = Field(default=0.0, ge=0, le=1)  # 429s (answered in a few ms, no reply)
    p_fallback: float = Field(default=0.0, ge=0, le=1)  # the server's fallback reply at the deadline
    deadline_ms: float = Field(default=1000.0, gt=0)
    order_lift: float = Field(default=0.0, gt=-1)


class SimulationConfig(_Strict):
    outcome_model: OutcomeModel = OutcomeModel()
    default_arm: ArmProfile = ArmProfile()
    arms: dict[str, ArmProfile] = {}

    def profile(self, arm: str) -> ArmProfile:
        return self.arms.get(arm, self.default_arm)


def load_simulation_config(path: str | Path | None) -> SimulationConfig:
    if path is None:
        return SimulationConfig()
    try:
        return SimulationConfig.model_validate(yaml.safe_load(Path(path).read_text()) or {})
    except FileNotFoundError:
        raise ExperimentConfigError(f"{path}: file not found") from None
    except yaml.YAMLError as exc:
        from livethink.yaml_files import yaml_error_line

        raise ExperimentConfigError(yaml_error_line(path, exc)) from None
    except ValidationError as exc:
        msg = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
        raise ExperimentConfigError(f"{path}: {msg}") from None
