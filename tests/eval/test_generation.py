"""The transformers fallback of the eval harness on a real (untrained) MoE student, batched with padding."""

from __future__ import annotations

import pytest

from livethink.eval.generation import TransformersGenerator, make_generator


@pytest.fixture(scope="module")
def student_dir(small_student_dir):
    return small_student_dir


def test_batched_generation_with_padding(student_dir, liveshop_small):
    tasks = liveshop_small.tasks["test"][:3]  # prompts of different lengths -> left padding
    generator = TransformersGenerator(student_dir, batch_size=3)
    generations = generator.generate(tasks, max_tokens=5)
    assert [g.task_id for g in generations] == [t.id for t in tasks]
    assert all(g.finish_reason in ("stop", "length") for g in generations)
    probes = generator.probe_latency(tasks[:1], max_tokens=3)
    assert probes[0].ttft_s > 0 and probes[0].e2e_s > 0  # not ordered: a reply that stops at once times like one token


def test_prompts_render_as_served_and_token_continuations_need_no_retokenization(student_dir, liveshop_small):
    from livethink.data.prompt import build_messages, render_prompt_ids
    from livethink.data.reasoning_format import THINK

    tasks = liveshop_small.tasks["test"][:2]
    generator = TransformersGenerator(student_dir, batch_size=1)  # no padding: greedy output per task is fixed
    assert generator.reasoning_format == THINK
    plain = generator.generate(tasks, max_tokens=6)
    for task, g in zip(tasks, plain, strict=True):
        assert list(g.prompt_ids) == render_prompt_ids(generator.tokenizer, build_messages(task), THINK, True)
        assert g.completion.startswith("<think>\n")  # the prompt opened the reasoning: the completion shows it
        assert g.completion == "<think>\n" + generator.tokenizer.decode(g.token_ids, skip_special_tokens=True)
    g = plain[0]
    assert len(g.token_ids) >= 2
    (c,) = generator.continue_from([[*g.prompt_ids, *g.token_ids[:2]]], max_tokens=4)
    assert c.token_ids == g.token_ids[2:6]  # greedy, from the same ids: the same tokens


def test_make_generator_rejects_missing_dir(tmp_path):
    with pytest.raises(FileNotFoundError, match="model dir not found"):
        make_generator(tmp_path / "nope", engine="transformers")


def test_make_generator_passes_the_batch_size_to_transformers(student_dir):
    generator = make_generator(student_dir, engine="transformers", device="cpu", batch_size=7)
    assert isinstance(generator, TransformersGenerator) and generator.batch_size == 7


def test_eval_cli_names_a_bad_batch_size(student_dir, tmp_path, capsys):
    from livethink.eval.cli import main

    code = main(["--model", str(student_dir), "--data", str(tmp_path), "--engine", "transformers",
                 "--batch-size", "0", "--out", str(tmp_path / "eval")])
    assert code == 2
    assert "--batch-size: must be >= 1, got 0" in capsys.readouterr().err


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
    assert "--teacher-opener-rate: must be in [0, 1], got 1.5" in capsys.readouterr().err
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


def test_eval_cli_default_thinking_caps_calibrate_with_the_reply_reserve(student_dir, liveshop_small, tmp_path):
    import json
    import shutil

    from livethink.data.io import write_jsonl
    from livethink.eval.cli import main
    from livethink.eval.thinking_curve import DEFAULT_CAPS, load_curve

    data = tmp_path / "data"
    write_jsonl(liveshop_small.tasks["validation"][:3], data / "validation.jsonl")
    model = tmp_path / "student"
    shutil.copytree(student_dir, model)
    out = tmp_path / "eval"
    assert main(["--model", str(model), "--data", str(data), "--split", "validation", "--engine", "transformers",
                 "--max-tokens", "24", "--latency-probes", "0", "--thinking-caps", "--reply-reserve", "8",
                 "--out", str(out)]) == 0
    curve = load_curve(model)
    assert curve.caps == DEFAULT_CAPS and curve.reply_reserve == 8 and curve.n_tasks == 3
    (row,) = json.loads((out / "eval.json").read_text())["results"]
    assert row["thinking_curve"]["caps"] == list(DEFAULT_CAPS)
    completions = (out / "completions" / "student.jsonl").read_text().splitlines()
    assert all(json.loads(line)["completion"].startswith("<think>\n") for line in completions)
    assert main(["--model", str(model), "--data", str(data), "--split", "validation", "--reply-reserve", "0",
                 "--out", str(tmp_path / "bad")]) == 2
