"""`make demo`'s job runner: quick settings, step commands and the reuse of finished artifacts."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

from livethink.demo_job import QUICK_NOTICE, STEPS, Settings, app_command, main, step_env
from livethink.eval.report import write_report


def _step(name: str):
    return next(step for step in STEPS if step.name == name)


def _option(command: list[str], flag: str) -> str:
    return command[command.index(flag) + 1]


def test_quick_mode_evaluates_with_transformers_and_shorter_caps(tmp_path: Path) -> None:
    quick, full = Settings.make(True, tmp_path), Settings.make(False, tmp_path)
    eval_quick, eval_full = _step("eval").command(quick), _step("eval").command(full)
    assert (_option(eval_quick, "--engine"), _option(eval_quick, "--max-tokens")) == ("transformers", "256")
    assert (_option(eval_full, "--engine"), _option(eval_full, "--max-tokens")) == ("vllm", "768")
    assert _option(_step("compress").command(quick), "--max_completion_length") == "192"
    assert _option(_step("compress").command(full), "--max_completion_length") == "384"
    # full: the configs' colocated vLLM rollouts; quick: transformers (a vLLM start-up costs more than 3 steps)
    assert (_option(_step("compress").command(quick), "--use_vllm"),
            _option(_step("compress").command(full), "--use_vllm")) == ("false", "true")
    assert quick.runs != full.runs  # quick never overwrites (or reuses) the full run's artifacts


def test_stage_2_runs_drpo_then_budget_forced_drpo_from_it_and_serves_the_second(tmp_path: Path) -> None:
    names = [step.name for step in STEPS]
    assert names.index("budget") == names.index("compress") + 1
    for settings in (Settings.make(True, tmp_path), Settings.make(False, tmp_path)):
        first, second = _step("compress").command(settings), _step("budget").command(settings)
        assert _option(first, "--config").endswith("configs/tiny/grpo_drpo.yaml")
        assert _option(first, "--model_name_or_path") == str(settings.rft / "final")
        assert _option(second, "--config").endswith("configs/tiny/grpo_drpo_then_budget64.yaml")
        assert _option(second, "--model_name_or_path") == str(settings.compressed / "final")
        assert _option(second, "--output_dir") == str(settings.served) != str(settings.compressed)
        assert "--budget_caps" not in second  # the config's caps around 64 tokens fit either mode's completions
        assert _option(second, "--max_steps") == _option(first, "--max_steps")
        evaluated = _step("eval").command(settings)
        assert [evaluated[i + 1] for i, a in enumerate(evaluated) if a == "--model"] == [
            str(settings.rft / "final"), str(settings.served / "final")]


def test_quick_steps_run_torch_on_one_thread_unless_the_caller_says_otherwise(tmp_path: Path) -> None:
    quick, full = Settings.make(True, tmp_path), Settings.make(False, tmp_path)
    assert step_env(quick, {"PATH": "/bin"}) == {"PATH": "/bin", "OMP_NUM_THREADS": "1"}
    assert step_env(quick, {"OMP_NUM_THREADS": "4"})["OMP_NUM_THREADS"] == "4"
    assert "OMP_NUM_THREADS" not in step_env(full, {"PATH": "/bin"})
    assert step_env(replace(full, torch_threads=1), {})["OMP_NUM_THREADS"] == "1"


def test_quick_run_says_it_checks_the_plumbing_not_quality(tmp_path: Path) -> None:
    quick, full = Settings.make(True, tmp_path), Settings.make(False, tmp_path)
    assert "plumbing" in QUICK_NOTICE and "not quality" in QUICK_NOTICE
    assert _option(_step("eval").command(quick), "--note") == QUICK_NOTICE
    assert "--note" not in _step("eval").command(full)
    assert "--quick" in app_command(quick, "http://127.0.0.1:8000", 7860)
    assert "--quick" not in app_command(full, "http://127.0.0.1:8000", 7860)
    # the eval report puts the note above its tables; a report without one has no note line
    noted = write_report([], tmp_path / "quick", "livethink eval", {"command": "c", "note": QUICK_NOTICE}).read_text()
    assert noted.splitlines()[2] == f"> **Note:** {QUICK_NOTICE}"
    plain = write_report([], tmp_path / "full", "livethink eval", {"command": "c"}).read_text()
    assert "Note:" not in plain


def test_data_step_runs_once_then_is_reused(tmp_path: Path, capsys) -> None:
    assert main(["--quick", "--workdir", str(tmp_path), "--only", "data"]) == 0
    manifest = tmp_path / "artifacts/quick/data/manifest.json"
    assert json.loads(manifest.read_text())["counts"] == {"train": 1000, "validation": 100, "test": 100, "holdout": 1000}
    first = manifest.stat().st_mtime_ns
    capsys.readouterr()

    assert main(["--quick", "--workdir", str(tmp_path), "--only", "data"]) == 0
    assert "data: reusing finished artifacts" in capsys.readouterr().out
    assert manifest.stat().st_mtime_ns == first


def test_calibrate_step_saves_each_students_thinking_floor_from_validation(tmp_path: Path) -> None:
    names = [step.name for step in STEPS]
    assert names.index("calibrate") == names.index("eval") + 1  # before the server reads the floors
    settings = Settings.make(False, tmp_path)
    command = _step("calibrate").command(settings)
    assert _option(command, "--split") == "validation"  # never the split the eval reports on
    assert _option(_step("eval").command(settings), "--split") == "holdout"  # the demo's figures: held out
    assert _option(command, "--thinking-caps").split(",")[0] == "0"
    models = [command[i + 1] for i, arg in enumerate(command) if arg == "--model"]
    assert models == [str(settings.rft / "final"), str(settings.served / "final")]
    assert "--calibration-out" not in command  # each calibration is saved beside its student, where serving looks
    assert not _step("calibrate").done(settings)
    for model in models:
        Path(model).mkdir(parents=True)
        (Path(model) / "thinking_calibration.json").write_text("{}")
    assert _step("calibrate").done(settings)
