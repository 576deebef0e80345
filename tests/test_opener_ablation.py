"""The opener ablation's pure parts (benchmarks/opener_ablation.py): forced starts, the minimal-trace floor, deltas."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from livethink.rft_distill.teachers.scripted import minimal_completion

_spec = importlib.util.spec_from_file_location("opener_ablation", Path(__file__).resolve().parents[1] / "benchmarks/opener_ablation.py")
bench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench)


def first_task(tasks, kind, with_history=None):
    return next(t for t in tasks if t.kind == kind and (with_history is None or bool(t.history) == with_history))


def test_forced_starts_per_mode(liveshop_small):
    tasks = liveshop_small.tasks["test"]
    price = first_task(tasks, "price", with_history=False)
    assert bench.forced_start(price, "free") == ""
    assert bench.forced_start(price, "opener") == '<think>\nLet me think about this. The viewer wrote "'
    assert bench.forced_start(price, "goal_first") == "<think>\nThey"
    assert bench.forced_start(price, "useful_first") == "<think>\nProduct:"
    assert bench.forced_start(first_task(tasks, "unanswerable"), "goal_first") == "<think>\nI"
    assert bench.forced_start(first_task(tasks, "comparison"), "useful_first") == "<think>\nCompare:"
    dialogue = first_task(tasks, "dialogue_ref", with_history=True)
    assert bench.forced_start(dialogue, "useful_first") == "<think>\nLooking"  # the chat-history line comes first
    with pytest.raises(ValueError, match="mode must be one of"):
        bench.forced_start(price, "nope")


def test_with_opener_inserts_the_first_line():
    assert bench.with_opener("<think>\nA.\n</think>\n\nB.", "Hi.") == "<think>\nHi.\nA.\n</think>\n\nB."
    with pytest.raises(ValueError, match="does not start with"):
        bench.with_opener("A.", "Hi.")


def test_floor_counts_the_opener(liveshop_small):
    tasks = liveshop_small.tasks["test"][:2]
    words = lambda text: len(text.split())  # noqa: E731
    floor = bench.floor_tokens(tasks, words)
    bare = [words(minimal_completion(t)) for t in tasks]
    opener_words = [len(f'Let me think about this. The viewer wrote "{t.question}" and I should only use what the docs '
                        "say.".split()) for t in tasks]
    assert floor["minimal"] == round(sum(bare) / 2, 1)
    assert floor["minimal_with_opener"] == round((sum(bare) + sum(opener_words)) / 2, 1)


def test_deltas_against_the_free_row():
    rows = [{"model": "m", "mode": "free", "correctness": 0.40, "helpfulness": 0.30, "tokens": 200.0},
            {"model": "m", "mode": "opener", "correctness": 0.35, "helpfulness": 0.32, "tokens": 150.0}]
    bench.deltas(rows)
    assert (rows[1]["d_correctness_pts"], rows[1]["d_helpfulness_pts"], rows[1]["token_saving"]) == (-5.0, 2.0, 0.25)
    assert rows[0]["token_saving"] == 0.0


def test_first_token_shares_sum_to_one(tmp_path, liveshop_small):
    from livethink.models.student import StudentConfig, create_student, save_student
    from livethink.models.tokenizer import corpus_from_tasks, train_tokenizer

    tokenizer = train_tokenizer(corpus_from_tasks(liveshop_small.tasks["train"][:100]), vocab_size=400)
    config = StudentConfig(num_hidden_layers=1, hidden_size=32, head_dim=8, moe_intermediate_size=32, num_experts=4)
    save_student(create_student(config, tokenizer), tokenizer, tmp_path, config)
    shares = bench.first_token_shares(str(tmp_path), liveshop_small.tasks["test"][:3], top=4)
    assert len(shares) == 5 and "other" in shares
    assert sum(shares.values()) == pytest.approx(1.0, abs=1e-3)
    assert list(shares.values())[:4] == sorted(list(shares.values())[:4], reverse=True)
