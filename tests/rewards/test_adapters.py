"""TRL-signature reward functions over dataset rows ``task_to_row(task) + prompt``."""

from __future__ import annotations

import pytest

from livethink.data.io import task_to_row
from livethink.data.prompt import build_messages
from livethink.rewards import (
    RubricJudge,
    Verdict,
    brevity_reward,
    composite_reward,
    correctness_reward,
    helpfulness_reward,
    make_judge,
)
from tests.rewards.test_fixtures import GIFT_BOX, PRICE_ONE, PRICE_TWO, think

GOOD = think("$76.80. Coupon: $10 off orders of $150 or more.", reasoning="a b c d e f g h i j")
BARE = think("$76.80.", reasoning="a b")
WRONG = think("$96.00.", reasoning="a b c d")


def trl_kwargs(tasks, n_gen=1, **extra):
    """What GRPOTrainer._calculate_rewards passes: every column but prompt, repeated per generation."""
    rows = [task_to_row(t) | {"prompt": build_messages(t)} for t in tasks for _ in range(n_gen)]
    columns = {k: [r[k] for r in rows] for k in rows[0] if k != "prompt"}
    return {"prompts": [r["prompt"] for r in rows], "completion_ids": [[1] * 7] * len(rows),
            "trainer_state": None, **columns, **extra}


def test_names_for_trl_logging():
    assert correctness_reward().__name__ == "correctness"
    assert helpfulness_reward().__name__ == "helpfulness"
    assert brevity_reward(l_ref=10).__name__ == "brevity"
    assert composite_reward(l_ref=10).__name__ == "composite"


def test_correctness_and_helpfulness_over_rows():
    kwargs = trl_kwargs([PRICE_ONE], n_gen=3)
    assert correctness_reward()(completions=[GOOD, BARE, WRONG], **kwargs) == [1.0, 1.0, 0.0]
    assert helpfulness_reward()(completions=[GOOD, BARE, WRONG], **kwargs) == [1.0, 0.0, 0.0]


def test_conversational_completions_and_mixed_tasks():
    kwargs = trl_kwargs([PRICE_TWO, GIFT_BOX])
    completions = [[{"role": "assistant", "content": think("$143.60.")}],
                   [{"role": "assistant", "content": think("The docs don't say. Free returns within 14 days.")}]]
    assert helpfulness_reward()(completions=completions, **kwargs) == [0.0, 1.0]
    assert correctness_reward()(completions=completions, **kwargs) == [1.0, 1.0]


def test_brevity_reward_sources_of_length_and_l_ref():
    kwargs = trl_kwargs([PRICE_ONE], n_gen=2)
    # reasoning words: 10 and 2; L_ref 20 -> band [4, 8], ε = 10: 10 -> 0.8, 2 -> 0.8
    assert brevity_reward(l_ref=20)(completions=[GOOD, BARE], **kwargs) == pytest.approx([0.8, 0.8])
    # whole completion from completion_ids (7 tokens each): L_ref 20 -> inside [4, 8]
    assert brevity_reward(l_ref=20, scope="completion")(completions=[GOOD, BARE], **kwargs) == [1.0, 1.0]
    # per-prompt L_ref from a column, and from a mapping task id -> L_ref
    assert brevity_reward(l_ref="l_ref")(completions=[GOOD], **trl_kwargs([PRICE_ONE], l_ref=[50])) == [1.0]
    assert brevity_reward(l_ref={PRICE_ONE.id: 5.0})(completions=[GOOD], **trl_kwargs([PRICE_ONE])) == [0.0]
    with pytest.raises(KeyError, match="l_ref"):
        brevity_reward(l_ref="l_ref")(completions=[GOOD], **trl_kwargs([PRICE_ONE]))


def test_composite_reward_and_component_metrics():
    logged = {}
    kwargs = trl_kwargs([PRICE_ONE], n_gen=3, log_metric=lambda name, value: logged.__setitem__(name, value))
    # reasoning words 10, 2, 4 with L_ref 25: band [5, 10], ε 12.5 -> r_len 1.0, 0.76, 0.92
    out = composite_reward(l_ref=25)(completions=[GOOD, BARE, WRONG], **kwargs)
    assert out == pytest.approx([1 + 1 + 0.5, 1 + 0 + 0.5 * 0.76, 0 + 0 + 0.5 * 0.92])
    assert logged["reward_components/correct"] == pytest.approx(2 / 3)
    assert logged["reward_components/helpful"] == pytest.approx(1 / 3)


def test_judge_failure_gives_none():
    class Broken:
        name = "broken"

        def score(self, task, completion):
            return Verdict(False, False, {"error": "endpoint down"})

        def score_many(self, items):
            return [self.score(*i) for i in items]

    kwargs = trl_kwargs([PRICE_ONE])
    assert correctness_reward(Broken())(completions=[GOOD], **kwargs) == [None]
    assert composite_reward(l_ref=10, judge=Broken())(completions=[GOOD], **kwargs) == [None]


def test_missing_task_columns_is_a_clear_error():
    with pytest.raises(KeyError, match="task columns"):
        correctness_reward()(completions=[GOOD], prompts=["x"])


def test_make_judge():
    assert isinstance(make_judge(None), RubricJudge)
    assert isinstance(make_judge({"name": "rubric"}), RubricJudge)
    with pytest.raises(ValueError, match="unknown judge"):
        make_judge({"name": "oracle"})
    with pytest.raises(ValueError, match="unknown LLM judge option"):
        make_judge({"name": "llm", "modle": "x"})
    judge = make_judge({"name": "llm", "base_url": "http://127.0.0.1:9/v1", "model": "m", "cache_path": None})
    assert judge.name == "llm"


def test_through_trl_calculate_rewards():
    """The installed TRL's own reward plumbing (GRPOTrainer._calculate_rewards) calls our functions correctly."""
    import torch
    from trl import GRPOTrainer

    tasks = [PRICE_ONE, GIFT_BOX]
    inputs = [task_to_row(t) | {"prompt": build_messages(t)} for t in tasks for _ in range(2)]
    completions = [[{"role": "assistant", "content": c}] for c in
                   (GOOD, WRONG, think("The docs don't say. Free returns within 14 days."), think("Yes."))]
    funcs = [correctness_reward(), helpfulness_reward(), brevity_reward(l_ref=20), composite_reward(l_ref=20)]
    metrics = {}

    class State:
        global_step = 0

    fake = type("FakeTrainer", (), {})()
    fake.accelerator = type("Acc", (), {"device": torch.device("cpu"), "is_main_process": True})()
    fake.args = type("Args", (), {"report_to": []})()
    fake.reward_funcs, fake.reward_processing_classes = funcs, [None] * len(funcs)
    fake.reward_func_names = [f.__name__ for f in funcs]
    fake.state, fake.environments = State(), None
    fake._log_completion_extra = lambda column, values: None
    fake._log_metric = lambda name, value: metrics.__setitem__(name, value)
    prompts = [row["prompt"] for row in inputs]
    rewards = GRPOTrainer._calculate_rewards(fake, inputs, prompts, completions, [[1, 2, 3]] * 4)
    assert fake.reward_func_names == ["correctness", "helpfulness", "brevity", "composite"]
    assert rewards[:, 0].tolist() == [1.0, 0.0, 1.0, 0.0]
    assert rewards[:, 1].tolist() == [1.0, 0.0, 1.0, 0.0]
    assert metrics["reward_components/correct"] == 0.5
