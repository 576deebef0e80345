"""Tiny random students and a rule judge shared by the training, eval and serve tests (built in seconds).

The serving student (``tiny_student_dir()``) is built once per test session, in the session's pytest temporary
directory (``tests/conftest.py`` hands it over with ``use_session_dir``; pytest removes it like any ``tmp_path``).
Tests reach it through the ``tiny_student_dir`` / ``liveshop_test_tasks`` fixtures or these functions.
"""

from __future__ import annotations

import functools
import shutil
from pathlib import Path
from typing import Any, NamedTuple

from livethink.data.io import write_jsonl
from livethink.rewards.judge import Verdict

CONFIGS = Path(__file__).resolve().parents[2] / "configs" / "tiny"


class RuleJudge:
    """Deterministic stand-in for the rubric judge: correct and helpful by a rule on the completion text."""

    name = "rule"

    def __init__(self, rule):
        self.rule = rule

    def score(self, task, completion):
        ok = self.rule(completion if isinstance(completion, str) else completion[-1]["content"])
        return Verdict(ok, ok, {})

    def score_many(self, items):
        return [self.score(t, c) for t, c in items]


def grpo_setup(root: Path, liveshop, tokenizer_tasks: int = 100) -> dict[str, Any]:
    """Data dir + a saved tiny random student whose generation stops on many token ids (so lengths vary)."""
    from livethink.models.student import create_student, load_student_config, save_student
    from livethink.models.tokenizer import corpus_from_tasks, train_tokenizer

    data_dir = root / "data"
    for split, tasks in liveshop.tasks.items():
        write_jsonl(tasks, data_dir / f"{split}.jsonl")
    tokenizer = train_tokenizer(corpus_from_tasks(liveshop.tasks["train"][:tokenizer_tasks]), vocab_size=600)
    config = load_student_config(CONFIGS / "student.yaml", num_hidden_layers=1, hidden_size=32, num_attention_heads=2,
                                 num_key_value_heads=1, head_dim=16, num_experts=4, moe_intermediate_size=32)
    model = create_student(config, tokenizer)
    model.generation_config.eos_token_id = [tokenizer.eos_token_id] + list(range(100, 160))  # ~10 % of the vocabulary
    student = save_student(model, tokenizer, root / "student", config)
    return {"root": root, "data": data_dir, "student": student, "tokenizer": tokenizer, "config": config}


def opens_thinking(setup: dict[str, Any], name: str) -> Path:
    """``grpo_setup``'s student with a chat template that opens the think block itself (as DeepSeek-R1's does),
    saved once under ``setup["root"] / name``: what budget-forced rollouts need."""
    out = setup["root"] / name
    if not out.exists():
        shutil.copytree(setup["student"], out)
        from transformers import AutoTokenizer

        tok = AutoTokenizer.from_pretrained(out)
        tok.chat_template = tok.chat_template.replace("{{- '<|im_start|>assistant\\n' }}{%- if enable_thinking",
                                                      "{{- '<|im_start|>assistant\\n<think>\\n' }}{%- if enable_thinking")
        assert "<think>\\n' }}{%- if enable_thinking" in tok.chat_template
        tok.save_pretrained(out)
    return out


def small_student(out: Path, liveshop) -> Path:
    """An untrained 1-layer MoE student with its tokenizer, saved to ``out``."""
    from livethink.models.student import StudentConfig, create_student, save_student
    from livethink.models.tokenizer import corpus_from_tasks, train_tokenizer

    tokenizer = train_tokenizer(corpus_from_tasks(liveshop.tasks["train"][:100]), vocab_size=400)
    config = StudentConfig(num_hidden_layers=1, hidden_size=32, head_dim=8, moe_intermediate_size=32, num_experts=4)
    save_student(create_student(config, tokenizer), tokenizer, out, config)
    return out


class ServingStudent(NamedTuple):
    path: Path
    test_tasks: list


def build_serving_student(root: Path) -> ServingStudent:
    """An untrained tiny student (real tokenizer + Qwen3-MoE weights, the default ``StudentConfig``) in ``root``."""
    from livethink.data.liveshop import generate
    from livethink.models.student import StudentConfig, create_student, save_student
    from livethink.models.tokenizer import corpus_from_tasks, train_tokenizer

    data = generate(seed=3, n_train=200, n_validation=5, n_test=40)
    tokenizer = train_tokenizer(corpus_from_tasks(data.tasks["train"]), vocab_size=1024)
    config = StudentConfig()
    path = save_student(create_student(config, tokenizer), tokenizer, root / "student", config)
    return ServingStudent(path, data.tasks["test"])


_session_dir: list[Path] = []


def use_session_dir(path: Path) -> None:
    """Where this test session builds its shared students (set by ``tests/conftest.py``, a pytest temp dir)."""
    _session_dir[:] = [path]


@functools.cache
def serving_student() -> ServingStudent:
    if not _session_dir:
        raise RuntimeError("tests.support.students needs tests/conftest.py (run the tests with pytest)")
    return build_serving_student(_session_dir[0])


def tiny_student_dir() -> Path:
    """The session's shared serving student (built on first use)."""
    return serving_student().path


def liveshop_test_tasks() -> list:
    """The LiveShop test tasks drawn with the serving student's tokenizer corpus."""
    return serving_student().test_tasks


def vllm_moe_student(root: Path, liveshop) -> tuple[Path, Path]:
    """A 2-layer tiny MoE on ``liveshop``'s tasks (written under ``root/data``) with experts scaled up so that
    they matter, as in a trained student (at init they barely move the output): ``(root, student dir)``."""
    import torch

    from livethink.data.io import write_jsonl
    from livethink.models.student import create_student, load_student_config, save_student
    from livethink.models.tokenizer import corpus_from_tasks, train_tokenizer

    for split, tasks in liveshop.tasks.items():
        write_jsonl(tasks, root / "data" / f"{split}.jsonl")
    tokenizer = train_tokenizer(corpus_from_tasks(liveshop.tasks["train"][:60]), vocab_size=600)
    config = load_student_config(CONFIGS / "student.yaml", num_hidden_layers=2)
    model = create_student(config, tokenizer)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "experts" in name:
                param.mul_(25.0)
    return root, save_student(model, tokenizer, root / "student", config)
