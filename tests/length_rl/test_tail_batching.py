"""Tail batching's pure selection and queue (livethink.length_rl.tail_batching), on hand-computed cases, and its
config checks."""

from __future__ import annotations

import json

import pytest
import torch

from livethink.length_rl.tail_batching import (
    TailBatchingOptions,
    TailQueue,
    deferred_groups,
    extra_groups,
    hit_limit,
    keep_order,
    plan_round,
    staleness,
)
from livethink.length_rl.tail_rollouts import completion_lengths


def test_extra_groups_round_up():
    assert extra_groups(8, 1.25) == 2  # ⌈10⌉ − 8
    assert extra_groups(4, 1.25) == 1  # ⌈5⌉ − 4
    assert extra_groups(3, 1.25) == 1  # ⌈3.75⌉ − 3
    assert extra_groups(10, 1.1) == 1  # ⌈11.000000000000002⌉ would be 12 without the tolerance
    assert extra_groups(8, 1.0) == 0


def test_plan_round():
    assert plan_round(queued=4, n_groups=4, short_cap=16, full_cap=64) == "long"
    assert plan_round(queued=3, n_groups=4, short_cap=16, full_cap=64) == "short"
    assert plan_round(queued=0, n_groups=4, short_cap=16, full_cap=16) == "plain"  # a variant cap at the short limit
    assert plan_round(queued=5, n_groups=4, short_cap=16, full_cap=8) == "long"  # the queue drains even then


def test_hit_limit_and_deferred_groups():
    # limit 5: lengths 5 and not ended = hit; ended at exactly 5 = finished; 3 = finished
    hit = hit_limit([5, 5, 3, 2, 5, 1], [False, True, True, True, False, True], 5)
    assert hit == [True, False, False, False, True, False]
    assert deferred_groups(hit, 2) == [True, False, True]
    assert deferred_groups(hit, 3) == [True, True]
    with pytest.raises(ValueError, match="groups of 4"):
        deferred_groups(hit, 4)


def test_keep_order():
    usable = [False, True, True, False, True]
    assert keep_order(usable, [True] * 5, 3) == [1, 2, 4]
    assert keep_order(usable, [True] * 5, 4) == [1, 2, 4, 0]  # one short: a deferred group fills (masked)
    # dynamic sampling: informative (preferred) usable groups first, then usable flat ones, then deferred
    assert keep_order(usable, [True, False, True, True, True], 5) == [2, 4, 1, 0, 3]


def test_staleness():
    assert staleness([3, 1, 2]) == (2.0, 3)
    assert staleness([]) == (0.0, 0)


def test_queue_defers_takes_oldest_and_reports_waits():
    q = TailQueue()
    q.defer([{"id": "a"}, {"id": "b"}], step=2)
    q.defer([{"id": "c"}], step=5)
    assert len(q) == 3
    prompts, waits = q.take_long_round(2, step=7)
    assert [p["id"] for p in prompts] == ["a", "b"] and waits == [5, 5]
    with pytest.raises(RuntimeError, match="only 1 queued"):
        q.take_long_round(2, step=8)
    q.displace([{"id": "x"}, {"id": "y"}])
    assert [p["id"] for p in q.take_displaced(1)] == ["x"]
    restored = TailQueue.from_state(json.loads(json.dumps(q.state())))  # a checkpoint round trip
    assert restored == q and [p["id"] for p in restored.take_displaced(5)] == ["y"]
    assert restored.take_long_round(1, step=9) == ([{"id": "c"}], [4])


def test_completion_lengths_through_the_first_end_token():
    pad, eos = 0, 9
    ids = torch.tensor([[5, 6, 9, 0], [5, 6, 7, 8], [9, 0, 0, 0], [5, 0, 0, 0]])
    assert completion_lengths(ids, [eos, pad], cap=4) == ([3, 4, 1, 2], [True, False, True, True])


def _options(**kw) -> TailBatchingOptions:
    opts = TailBatchingOptions(**{k: v for k, v in kw.items() if k != "max_completion_length"})
    opts.max_completion_length = kw.get("max_completion_length", 64)  # GRPOConfig's field, on the real config
    return opts


def test_options_validation_names_the_field():
    assert _options(tail_batching=True).tail_short_limit() == 32  # 0 = half of max_completion_length
    assert _options(tail_batching=True, tail_short_tokens=20).tail_short_limit() == 20
    for kw, field in [({"tail_overprovision": 0.9}, "tail_overprovision"),
                      ({"tail_overprovision": float("inf")}, "tail_overprovision"),
                      ({"tail_short_tokens": -1}, "tail_short_tokens"),
                      ({"tail_short_tokens": 64}, "tail_short_tokens")]:
        with pytest.raises(ValueError, match=field):
            _options(tail_batching=True, **kw).tail_short_limit()


def test_grpo_config_refuses_bad_tail_options():
    from livethink.length_rl.config import GRPOVariantConfig

    base = dict(output_dir="/tmp/unused-tail", use_cpu=True, bf16=False, report_to="none",
                per_device_train_batch_size=4, num_generations=2, max_completion_length=16)
    assert GRPOVariantConfig(**base).tail_batching is False
    cfg = GRPOVariantConfig(**base, tail_batching=True, tail_short_tokens=6)
    assert cfg.tail_short_limit() == 6
    with pytest.raises(ValueError, match="tail_short_tokens"):
        GRPOVariantConfig(**base, tail_batching=True, tail_short_tokens=16)
    with pytest.raises(ValueError, match="tail_overprovision"):
        GRPOVariantConfig(**base, tail_batching=True, tail_overprovision=0.5)


class _Trainer:
    """What ``TailRollouts`` reads of the trainer: one process, a step counter, numbered prompt draws."""

    def __init__(self):
        from types import SimpleNamespace

        self.accelerator = SimpleNamespace(gather=lambda t: t, device="cpu")
        self.args = SimpleNamespace(max_completion_length=64)
        self.state = SimpleNamespace(global_step=3)
        self.draws = 0

    def log_metric(self, name: str, value: float) -> None:
        pass

    def draw_prompts(self, n: int) -> list[dict]:
        self.draws += n
        return [{"id": f"d{self.draws - n + i}"} for i in range(n)]


@pytest.mark.parametrize(("queue_state", "groups", "cap"), [
    ({}, ["p0", "p1", "d0", "d1"], 8),  # a short round: fresh draws as the extras, at the short limit
    ({"displaced": [{"id": "x"}]}, ["p0", "p1", "x", "d0"], 8),  # the displaced prompt first, then a draw
    ({"deferred": [[{"id": "a"}, 1], [{"id": "b"}, 2], [{"id": "c"}, 2]]}, ["a", "b"], 64),  # a long round
])
def test_peek_plans_exactly_the_round_plan_then_runs(queue_state, groups, cap):
    """Decoupled + tail: the round prefetched one step ahead (``peek``) is the round the step generates (``plan``),
    so the prefetch serves it; a short round's cap is the short limit, a long round's the full one."""
    from livethink.length_rl.tail_rollouts import TailRollouts

    tail, trainer = TailRollouts(short_cap=8, overprovision=2.0, group_size=2), _Trainer()
    tail.queue = TailQueue.from_state(queue_state)
    inputs = [{"id": "p0"}, {"id": "p0"}, {"id": "p1"}, {"id": "p1"}]
    peeked = tail.peek(trainer, inputs)
    assert tail.peek(trainer, inputs) == peeked  # peeking again draws nothing more
    planned = tail.plan(trainer, inputs, None)
    assert (planned.inputs, planned.cap) == peeked and tail.reserved == []
    rows = planned.inputs
    assert [r["id"] for r in rows[::2]] == groups and rows[::2] == rows[1::2] and planned.cap == cap
    assert trainer.draws == sum(g.startswith("d") for g in groups)
