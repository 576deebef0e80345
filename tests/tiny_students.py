"""Tiny random students and a rule judge shared by the training and eval tests (built in seconds, on any device)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from livethink.data.io import write_jsonl
from livethink.rewards.judge import Verdict

CONFIGS = Path(__file__).resolve().parents[1] / "configs" / "tiny"


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


def small_student(out: Path, liveshop) -> Path:
    """An untrained 1-layer MoE student with its tokenizer, saved to ``out``."""
    from livethink.models.student import StudentConfig, create_student, save_student
    from livethink.models.tokenizer import corpus_from_tasks, train_tokenizer

    tokenizer = train_tokenizer(corpus_from_tasks(liveshop.tasks["train"][:100]), vocab_size=400)
    config = StudentConfig(num_hidden_layers=1, hidden_size=32, head_dim=8, moe_intermediate_size=32, num_experts=4)
    save_student(create_student(config, tokenizer), tokenizer, out, config)
    return out
