"""The transformers fallback of the eval harness on a real (untrained) MoE student, batched with padding."""

from __future__ import annotations

import pytest
from tiny_students import small_student

from livethink.eval.generation import TransformersGenerator, make_generator


@pytest.fixture(scope="module")
def student_dir(tmp_path_factory, liveshop_small):
    return small_student(tmp_path_factory.mktemp("student"), liveshop_small)


def test_batched_generation_with_padding(student_dir, liveshop_small):
    tasks = liveshop_small.tasks["test"][:3]  # prompts of different lengths -> left padding
    generator = TransformersGenerator(student_dir, batch_size=3)
    generations = generator.generate(tasks, max_tokens=5)
    assert [g.task_id for g in generations] == [t.id for t in tasks]
    assert all(g.finish_reason in ("stop", "length") for g in generations)
    probes = generator.probe_latency(tasks[:1], max_tokens=3)
    assert probes[0].ttft_s > 0 and probes[0].e2e_s > 0  # not ordered: a reply that stops at once times like one token


def test_forced_start_begins_the_completion_of_its_task_only(student_dir, liveshop_small):
    tasks = liveshop_small.tasks["test"][:2]
    generator = TransformersGenerator(student_dir, batch_size=1)  # no padding: greedy output per task is fixed
    plain = generator.generate(tasks, max_tokens=4)
    forced = generator.generate(tasks, max_tokens=4, starts={tasks[0].id: "<think>\nProduct"})
    assert forced[0].completion.startswith("<think>\nProduct")
    assert len(forced[0].completion) > len("<think>\nProduct")  # the model went on from the forced start
    assert forced[1].completion == plain[1].completion


def test_make_generator_rejects_missing_dir(tmp_path):
    with pytest.raises(FileNotFoundError, match="model dir not found"):
        make_generator(tmp_path / "nope", engine="transformers")


def test_eval_cli_samples_the_teacher_at_the_rft_runs_opener_rate(student_dir, liveshop_small, tmp_path, capsys):
    import json

    from livethink.data.io import write_jsonl
    from livethink.eval.cli import main

    data = tmp_path / "data"
    write_jsonl(liveshop_small.tasks["test"][:20], data / "test.jsonl")

    def teacher_row(rate: str) -> dict:
        out = tmp_path / f"eval_{rate}"
        assert main(["--teacher", "scripted", "--teacher-opener-rate", rate, "--tokenizer", str(student_dir),
                     "--data", str(data), "--out", str(out)]) == 0
        (row,) = json.loads((out / "eval.json").read_text())["results"]
        return row["overall"]

    always, never = teacher_row("1.0"), teacher_row("0.0")
    # the restated question is the only difference: same answers, longer reasoning
    assert always["correctness"] == never["correctness"] and always["helpfulness"] == never["helpfulness"]
    assert always["reasoning_tokens"] > never["reasoning_tokens"] + 10

    capsys.readouterr()
    assert main(["--teacher", "scripted", "--teacher-opener-rate", "1.5", "--tokenizer", str(student_dir),
                 "--data", str(data), "--out", str(tmp_path / "bad")]) == 2
    assert "--teacher-opener-rate must be in [0, 1]" in capsys.readouterr().err
    assert not (tmp_path / "bad").exists()


def test_eval_cli_note_heads_the_report(student_dir, liveshop_small, tmp_path):
    import json

    from livethink.data.io import write_jsonl
    from livethink.demo_job import QUICK_NOTICE
    from livethink.eval.cli import main

    data = tmp_path / "data"
    write_jsonl(liveshop_small.tasks["test"][:4], data / "test.jsonl")
    out = tmp_path / "eval"
    assert main(["--teacher", "scripted", "--tokenizer", str(student_dir), "--data", str(data), "--out", str(out),
                 "--note", QUICK_NOTICE]) == 0
    assert json.loads((out / "eval.json").read_text())["meta"]["note"] == QUICK_NOTICE
    assert f"> **Note:** {QUICK_NOTICE}" in (out / "eval.md").read_text()
