"""Trainer callbacks: per-step metrics to ``<output_dir>/metrics.jsonl`` and the progress bar; SIRI phase saves."""

from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import Any

from transformers import TrainerCallback
from transformers.trainer_callback import ProgressCallback

# progress-bar postfix: short label -> metric key (first found wins)
POSTFIX = {
    "len": "completions/mean_length",
    "acc": "accuracy",
    "help": "helpful_rate",
    "r": "reward",
    "cap": "siri/cap",
    "trunc": "dot/truncated_share",
    "H(w)": "drpo/weight_entropy",
    "kl": "kl",
}


def _clean(value: Any) -> Any:
    if isinstance(value, float) and (math.isnan(value) or math.isinf(value)):
        return None
    return value


class MetricsCallback(TrainerCallback):
    """Appends every training log (one per ``logging_steps``) to ``metrics.jsonl``; shows key figures in the bar.

    Each record also carries ``elapsed_s`` (wall time since this process's training loop began) and, with vLLM
    rollouts, ``rollout/engine_busy_s`` (the engine's generation time so far, ``rollout_timing``). On resume the
    lines logged after the restored checkpoint's step are dropped, so the file reads as one run.
    """

    def __init__(self, trainer: Any):
        self.trainer = trainer
        self.path = Path(trainer.args.output_dir) / "metrics.jsonl"
        self.began = time.perf_counter()

    def on_train_begin(self, args, state, control, **kwargs):
        self.began = time.perf_counter()
        if not state.is_world_process_zero or not self.path.is_file():
            return
        kept = [line for line in self.path.read_text().splitlines()
                if line.strip() and json.loads(line).get("step", 0) <= state.global_step]
        self.path.write_text("".join(line + "\n" for line in kept))

    def on_log(self, args, state, control, logs=None, **kwargs):
        if not state.is_world_process_zero or not logs or "loss" not in logs and "reward" not in logs:
            return
        record = {"step": state.global_step, "epoch": state.epoch, **{k: _clean(v) for k, v in logs.items()},
                  "elapsed_s": round(time.perf_counter() - self.began, 3)}  # since the loop began (this process)
        timer = getattr(self.trainer, "engine_timer", None)
        if timer is not None:  # the rollout engine's generation time so far (rollout_timing)
            record["rollout/engine_busy_s"] = round(timer.busy_s, 3)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.path.open("a", encoding="utf-8") as fh:
            fh.write(json.dumps(record) + "\n")
        bar = next((c.training_bar for c in self.trainer.callback_handler.callbacks
                    if isinstance(c, ProgressCallback) and c.training_bar is not None), None)
        if bar is not None:
            bar.set_postfix({k: f"{logs[m]:.3g}" for k, m in POSTFIX.items() if isinstance(logs.get(m), int | float)},
                            refresh=False)


class PhaseSaveCallback(TrainerCallback):
    """Forces a checkpoint at the end of every SIRI compression and expansion phase (the trainer also copies the
    model to ``<output_dir>/phases/<phase>-<cycle>``, out of reach of checkpoint rotation)."""

    def __init__(self, boundaries: dict[int, tuple[str, int]]):
        self.boundaries = boundaries

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step in self.boundaries:
            control.should_save = True
        return control
