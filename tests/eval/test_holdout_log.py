"""The holdout log (livethink.eval.holdout_log): one line per evaluation on ``holdout``, none for other splits."""

from __future__ import annotations

import json
import os
from pathlib import Path

from livethink.eval.holdout_log import (
    ENV_VAR,
    checkpoint_fingerprint,
    default_log_path,
    read_log,
    record_holdout_eval,
)

ROOT = Path(__file__).resolve().parents[2]


def test_only_holdout_is_logged_with_what_a_reader_needs(tmp_path):
    log = tmp_path / "log.jsonl"
    assert record_holdout_eval("validation", computed=["correctness"], path=log) is None
    assert record_holdout_eval("test", computed=["correctness"], path=log) is None
    assert not log.exists()
    model = tmp_path / "student"
    model.mkdir()
    (model / "config.json").write_text('{"model_type": "qwen3_moe"}')
    entry = record_holdout_eval("holdout", computed=["correctness", "tokens"], models=[str(model)], n_tasks=1000,
                                command="livethink eval --split holdout", extra={"benchmark": "x"}, path=log)
    assert read_log(log) == [entry]
    assert entry["command"] == "livethink eval --split holdout" and entry["split"] == "holdout"
    assert entry["n_tasks"] == 1000 and entry["computed"] == ["correctness", "tokens"] and entry["benchmark"] == "x"
    assert entry["models"] == [{"name": "student", "path": str(model), "fingerprint": checkpoint_fingerprint(model)}]
    assert entry["timestamp"].endswith("+00:00") and "commit" in entry and "dirty" in entry
    (model / "config.json").write_text('{"model_type": "qwen3_moe", "x": 1}')  # a retrained checkpoint
    assert checkpoint_fingerprint(model) != entry["models"][0]["fingerprint"]
    record_holdout_eval("holdout", computed=["goodput"], path=log)
    assert len(log.read_text().splitlines()) == 2


def test_the_tests_never_write_the_tracked_log():
    assert os.environ[ENV_VAR] and default_log_path() != ROOT / "benchmarks/results/holdout_log.jsonl"
    assert (ROOT / "benchmarks/results/holdout_log.jsonl").is_file()  # tracked, so a reader can count the looks


def test_an_eval_on_holdout_appends_exactly_one_line(small_student_dir, liveshop_small, tmp_path):
    from livethink.data.io import write_jsonl
    from livethink.eval.cli import main

    data = tmp_path / "data"
    write_jsonl(liveshop_small.tasks["holdout"][:3], data / "holdout.jsonl")
    write_jsonl(liveshop_small.tasks["validation"][:3], data / "validation.jsonl")
    log = default_log_path()
    before = read_log(log)
    args = ["--teacher", "scripted", "--tokenizer", str(small_student_dir), "--data", str(data)]
    assert main([*args, "--split", "validation", "--out", str(tmp_path / "val")]) == 0
    assert read_log(log) == before  # a validation run is not a look
    assert main([*args, "--split", "holdout", "--out", str(tmp_path / "held")]) == 0
    after = read_log(log)
    assert len(after) == len(before) + 1
    entry = after[-1]
    assert entry["n_tasks"] == 3 and entry["models"][0]["name"] == "teacher (scripted)"
    assert entry["command"].startswith("livethink eval --teacher scripted") and "--split holdout" in entry["command"]
    assert json.loads((tmp_path / "held" / "eval.json").read_text())["meta"]["split"] == "holdout"
