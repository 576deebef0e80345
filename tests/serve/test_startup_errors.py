"""`livethink serve` refuses what cannot start in one line, before anything expensive (issue #60, items 2 and 4):
a model path that does not exist (exit 3, no engine tried), a serve config or experiments file that is not valid
YAML (file:line:column, exit 2), and a ``--dry-run`` that finds the config wrong (exit 2, as the training
commands'); ``livethink.replicas`` the same."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from livethink.server_process import free_port

ROOT = Path(__file__).resolve().parents[2]
TINY = "configs/tiny/serve.yaml"


def _env() -> dict[str, str]:
    return {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}


def _one_line(stderr: str) -> str:
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr[-3000:]
    assert "Traceback" not in stderr
    return lines[0]


@pytest.mark.timing
def test_a_missing_model_path_stops_serve_in_one_line_without_an_engine():
    t0 = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "livethink.cli", "serve", "--config", TINY, "--set", "models.rft.path=/nonexistent",
         "--port", str(free_port())],
        cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    elapsed = time.monotonic() - t0
    assert done.returncode == 3, done.stderr[-3000:]
    line = _one_line(done.stderr)
    assert line == "livethink serve: cannot start: models.rft.path: /nonexistent does not exist"
    assert "vllm" not in done.stderr.lower() and "transformers" not in done.stderr.lower()
    assert elapsed < 20, elapsed  # no engine start (vLLM's import alone takes longer on this machine)


def test_missing_paths_are_named_and_hub_ids_left_to_the_engine(tmp_path):
    from livethink.serve.config import parse_config
    from livethink.serve.engines import missing_model_paths

    adapter = tmp_path / "adapter"
    adapter.mkdir()
    config = parse_config({
        "models": {"a": {"path": str(tmp_path)}, "b": {"base": "a", "lora": str(tmp_path / "nope")},
                   "c": {"path": "Qwen/Qwen3-0.6B"}, "d": {"path": "runs/typo/final"}, "e": {"base": "a", "lora": str(adapter)}},
        "default_model": "a",
    })  # fmt: skip
    assert missing_model_paths(config) == [
        f"models.b.lora: {tmp_path / 'nope'} does not exist",
        "models.d.path: runs/typo/final does not exist",
    ]


def test_start_engines_tries_no_engine_on_a_missing_path(monkeypatch):
    import asyncio

    from livethink.serve import engines
    from livethink.serve.config import parse_config

    monkeypatch.setattr(engines, "build_engines", lambda *a, **k: pytest.fail("an engine was built"))
    config = parse_config({"models": {"rft": {"path": "/nonexistent"}}, "default_model": "rft"})
    with pytest.raises(engines.EngineStartError, match=r"^cannot start: models.rft.path: /nonexistent does not exist$"):
        asyncio.run(engines.start_engines(config))


# -- broken files: one line naming the file, line and column -----------------------------------------------
def test_a_yaml_syntax_error_in_the_serve_config_is_one_line(tmp_path, capsys):
    from livethink.serve.cli import main

    bad = tmp_path / "serve.yaml"
    bad.write_text("models:\n  rft: {path: x\ndefault_model: rft\n")
    for argv in (["--config", str(bad)], ["--config", str(bad), "--dry-run"]):
        assert main(argv) == 2
        err = capsys.readouterr().err
        line = _one_line(err)
        assert line.startswith(f"livethink serve: invalid config: {bad}:3:")
        assert ": not valid YAML: " in line


def _config_with_experiment(tmp_path: Path, experiment: str) -> Path:
    data = yaml.safe_load((ROOT / TINY).read_text())
    student = tmp_path / "student"
    student.mkdir()
    data["models"]["rft"]["path"] = str(student)
    data["experiment"] = {"file": experiment, "store": f"sqlite:///{tmp_path}/ab.db", "spool_dir": str(tmp_path / "spool")}
    path = tmp_path / "serve.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_a_broken_experiments_file_stops_serve_before_the_engines(tmp_path):
    from livethink.serve.config import load_config
    from livethink.serve.dry_run import preflight

    experiment = tmp_path / "ab.yaml"
    experiment.write_text("name: x\narms:\n  - {name: a, variant: rft\n")
    config = load_config(_config_with_experiment(tmp_path, str(experiment)))
    code, line = preflight(config)
    assert code == 2 and "\n" not in line
    assert line.startswith(f"invalid config: experiment.file: {experiment}:4:") and "not valid YAML" in line
    folder = tmp_path / "folder"
    folder.mkdir()
    code, line = preflight(config.model_copy(update={"experiment": config.experiment.model_copy(update={"file": str(folder)})}))
    assert code == 2 and line == f"invalid config: experiment.file: {folder}: cannot be read (Is a directory)"


def test_a_dry_run_that_finds_the_config_wrong_exits_2_with_one_line(tmp_path, capsys):
    from livethink.serve.cli import main

    experiment = tmp_path / "ab.yaml"
    experiment.write_text("name: x\narms: [{name: a, variant: rft\n")
    assert main(["--config", str(_config_with_experiment(tmp_path, str(experiment))), "--dry-run"]) == 2
    captured = capsys.readouterr()
    report = json.loads(captured.out)
    assert not report["ok"] and any(p.startswith(f"experiment.file: {experiment}:3:1: not valid YAML") for p in report["problems"])
    line = _one_line(captured.err)
    assert line.startswith("livethink serve: invalid config: ") and f"experiment.file: {experiment}:3:1: not valid YAML" in line


def test_replicas_refuse_a_wrong_config_and_a_missing_model_in_one_line(tmp_path, capsys):
    from livethink import replicas

    experiment = tmp_path / "ab.yaml"
    experiment.write_text("name: x\narms: [{name: a, variant: rft\n")
    config = _config_with_experiment(tmp_path, str(experiment))
    assert replicas.main(["--config", str(config), "--dry-run", "--workdir", str(tmp_path / "w")]) == 2
    line = _one_line(capsys.readouterr().err)
    assert line.startswith("livethink replicas: invalid config: ") and f"experiment.file: {experiment}:3:1: not valid YAML" in line
    good = tmp_path / "good.yaml"
    good.write_text(yaml.safe_dump({"name": "x", "arms": [{"name": "a", "variant": "rft"}]}))
    argv = ["--config", str(config), "--experiments", str(good), "--set", "models.rft.path=/nonexistent",
            "--workdir", str(tmp_path / "w")]  # fmt: skip
    assert replicas.main(argv) == 3  # before PostgreSQL, HAProxy or any replica starts
    assert _one_line(capsys.readouterr().err) == (
        "livethink replicas: cannot start: models.rft.path: /nonexistent does not exist")
    assert not (tmp_path / "w").exists()
