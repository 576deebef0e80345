"""`--dry-run` of the training commands (rft, grpo, teacher) through the real CLI in subprocesses.

Every rft/grpo/teacher config in configs/ passes it; every listed mistake is refused with its field named, a
non-zero exit, no traceback, no usage dump and no advice meant for a developer. The sweep runs the cases in one
subprocess (``livethink.cli.main`` per case, output captured per case) so the heavy imports are paid once; a few
cases also run as separate processes, exactly as a user types them.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CONFIGS = ROOT / "configs"
DIST_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "GROUP_RANK")
DRIVER = """
import contextlib, io, json, sys, traceback
from livethink.cli import main
results = []
for argv in json.loads(sys.argv[1]):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            rc = main(argv)
        except SystemExit as exc:
            rc = exc.code
        except BaseException:
            traceback.print_exc()
            rc = "raised"
    results.append({"argv": argv, "rc": rc, "out": out.getvalue(), "err": err.getvalue()})
print("@@RESULTS@@" + json.dumps(results))
"""


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in DIST_VARS} | {"OMP_NUM_THREADS": "1"}


def _sweep(cases: list[list[str]]) -> list[dict]:
    proc = subprocess.run([sys.executable, "-c", DRIVER, json.dumps(cases)], capture_output=True, text=True,
                          cwd=ROOT, timeout=600, env=_env())
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.split("@@RESULTS@@", 1)[1])


def _command(path: Path) -> str | None:
    name = path.name
    for command in ("rft", "grpo", "teacher"):
        if name.startswith(command):
            return command
    return None


def training_configs() -> list[tuple[str, Path]]:
    return [(cmd, p) for p in sorted(CONFIGS.rglob("*.yaml")) if (cmd := _command(p))]


def _assert_refused(result: dict, *names: str) -> None:
    text = result["out"] + result["err"]
    assert result["rc"] not in (0, "raised"), result
    for name in names:
        assert name in text, (name, result)
    for bad in ("Traceback", "usage:", "fail_with_unknown_args", "doesn't support bf16"):
        assert bad not in text, (bad, result)


def test_every_training_config_passes_its_dry_run():
    configs = training_configs()
    assert {cmd for cmd, _ in configs} == {"rft", "grpo", "teacher"} and len(configs) >= 25
    results = _sweep([[cmd, "--config", str(path.relative_to(ROOT)), "--dry-run"] for cmd, path in configs])
    for result in results:
        assert result["rc"] == 0, result
        assert "Traceback" not in result["err"], result
        assert json.loads(result["out"])["ok"], result


@pytest.fixture(scope="module")
def tiny_moe(tmp_path_factory) -> Path:
    """A tiny Qwen3-MoE checkpoint (random weights) to check the colocated-vLLM rule against."""
    from livethink.models.student import untrained_student

    return untrained_student(tmp_path_factory.mktemp("moe") / "student")


def test_every_listed_mistake_is_refused_with_its_field(tmp_path, tiny_moe):
    legacy = tmp_path / "legacy.yaml"
    legacy.write_text(f"base: {CONFIGS / 'tiny/rft.yaml'}\njudge_json_mode: schema\n")
    flat_teacher = tmp_path / "flat.yaml"
    flat_teacher.write_text(f"base: {CONFIGS / 'tiny/rft.yaml'}\nteacher: scripted\n")
    typo = tmp_path / "typo.yaml"
    typo.write_text(f"base: {CONFIGS / 'tiny/rft.yaml'}\nk: many\n")
    slow = tmp_path / "slow.yaml"
    slow.write_text(f"base: {CONFIGS / 'tiny/grpo_dot.yaml'}\n"
                    "judge: {type: llm, base_url: 'http://127.0.0.1:9/v1', model: m, timeout_s: slow}\n")
    old_sampling = tmp_path / "teacher.yaml"
    old_sampling.write_text("teacher: {type: scripted}\nsampling: {temperature: 0.5}\n")
    rft, dot, drpo = "configs/tiny/rft.yaml", "configs/tiny/grpo_dot.yaml", "configs/tiny/grpo_drpo.yaml"
    cases = {  # argv -> the names the refusal must mention
        ("rft", "--config", "configs/smollm2/rft_liveshop.yaml", "--trainable-parameters", "layers", "--dry-run"):
            ("trainable_parameters", "LoRA"),
        ("rft", "--config", "configs/prod/rft.yaml", "--teacher_error_rate", "0.3", "--dry-run"):
            ("teacher_error_rate", "'scripted'", "'openai'"),
        ("rft", "--config", rft, "--k", "many", "--dry-run"): ("--k", "many"),
        ("rft", "--config", rft, "--bogus", "1", "--dry-run"): ("--bogus",),
        ("rft", "--config", str(typo), "--dry-run"): ("k:", "many"),
        ("grpo", "--config", str(slow), "--dry-run"): ("judge_timeout_s", "slow"),
        ("rft", "--config", str(legacy), "--dry-run"): ("judge_json_mode", "json_mode"),
        ("rft", "--config", str(flat_teacher), "--dry-run"): ("teacher:", "mapping"),
        ("rft", "--config", rft, "--judge-json-mode", "schema", "--dry-run"): ("judge_json_mode", "'llm'"),
        ("rft", "--config", rft, "--teacher-type", "gpt", "--dry-run"): ("teacher_type", "gpt"),
        ("grpo", "--config", dot, "--drpo_lambda", "0.5", "--dry-run"): ("drpo_lambda", "'drpo'", "'dot'"),
        ("grpo", "--config", dot, "--drpo-positive", "helpful", "--dry-run"): ("drpo_positive", "'drpo'", "'dot'"),
        ("grpo", "--config", drpo, "--drpo-positive", "helpful", "--dry-run"): ("drpo_positive", "helpful"),
        ("grpo", "--config", dot, "--max_steps", "x", "--dry-run"): ("--max_steps", "'x'"),
        ("grpo", "--config", dot, "--judge-type", "llm", "--dry-run"): ("judge_base_url",),
        ("grpo", "--config", dot, "--trainable-parameters", "@bogus", "--dry-run"): ("trainable_parameters", "@bogus"),
        ("teacher", "--teacher-type", "scripted", "--teacher-base-url", "http://x", "--dry-run"):
            ("teacher_base_url", "'openai'"),
        ("teacher", "--config", str(old_sampling), "--dry-run"): ("sampling", "teacher:"),
        ("teacher", "--teacher-type", "openai", "--teacher-model", "m", "--dry-run"): ("teacher_base_url",),
    }
    import torch

    if not torch.cuda.is_available():  # the rule of colocated vLLM on CPU: an MoE's experts stay as loaded
        cases[("grpo", "--config", dot, "--model-name-or-path", str(tiny_moe), "--trainable_parameters", "@all",
               "--dry-run")] = ("trainable_parameters", "MoE")
    results = _sweep([list(argv) for argv in cases])
    for result, names in zip(results, cases.values(), strict=True):
        _assert_refused(result, *names)


@pytest.mark.parametrize("argv, names", [
    (["rft", "--config", "configs/tiny/rft.yaml", "--num_train_epochs", "two", "--dry_run"], ["--num_train_epochs"]),
    (["grpo", "--config", "configs/tiny/grpo_dot.yaml", "--drpo-lambda", "0.5", "--dry-run"], ["drpo_lambda"]),
])
def test_a_user_sees_one_line_and_one_vllm_warning(argv, names):
    proc = subprocess.run([sys.executable, "-m", "livethink.cli", *argv], capture_output=True, text=True, cwd=ROOT,
                          timeout=300, env=_env())
    _assert_refused({"rc": proc.returncode, "out": proc.stdout, "err": proc.stderr}, *names)
    assert proc.stderr.count("invalid config") == 1
    assert proc.stderr.count("TRL currently supports vLLM versions") <= 1


def test_prod_rft_dry_run_takes_the_underscore_spelling():
    proc = subprocess.run([sys.executable, "-m", "livethink.cli", "rft", "--config", "configs/prod/rft.yaml",
                           "--dry_run"], capture_output=True, text=True, cwd=ROOT, timeout=300, env=_env())
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert json.loads(proc.stdout)["ok"]
