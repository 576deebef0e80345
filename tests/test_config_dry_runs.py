"""Every shipped serve and A/B config passes its check, and each known mistake is refused with the field named,
without a traceback, through the real CLI (``livethink ...`` in a subprocess, as a user runs it)."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
SERVE_CONFIGS = sorted(ROOT.glob("configs/*/serve.yaml"))
EXPERIMENT_FILES = sorted(p for p in ROOT.glob("configs/ab/*.yaml") if p.name != "simulation.yaml")
TINY = "configs/tiny/serve.yaml"


def livethink(*args: str, stdin: str = "", cwd: Path = ROOT) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    return subprocess.run([sys.executable, "-m", "livethink.cli", *args], cwd=cwd, env=env, input=stdin,
                          capture_output=True, text=True, timeout=300)  # fmt: skip


def refused(result: subprocess.CompletedProcess, *named: str) -> None:
    """A non-zero exit whose message names each of ``named``, and no traceback."""
    assert result.returncode != 0, result.stdout[-2000:]
    assert "Traceback" not in result.stderr, result.stderr[-3000:]
    for text in named:
        assert text in result.stderr, (text, result.stderr[-2000:])


def dry_run_ok(result: subprocess.CompletedProcess) -> dict:
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout)
    assert report["ok"] and not report["problems"], report["problems"]
    return report


# -- every shipped config ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("config", SERVE_CONFIGS, ids=lambda p: p.parent.name)
def test_every_serve_config_passes_the_dry_run(config):
    dry_run_ok(livethink("serve", "--config", str(config.relative_to(ROOT)), "--dry-run"))


@pytest.mark.parametrize("path", EXPERIMENT_FILES, ids=lambda p: p.stem)
def test_every_experiment_file_passes_assign_and_a_serve_dry_run(path, tmp_path):
    data = yaml.safe_load(path.read_text())
    experiments = data.get("experiments") or [data]
    variants = {arm["variant"] for e in experiments for arm in e["arms"] if arm.get("variant")}
    for exp in experiments:  # the standalone check: variants known to livethink
        result = livethink("ab", "assign", "--config", str(path), "--experiment", exp["name"], "--ids", "-",
                           stdin="viewer-1\n")  # fmt: skip
        assert result.returncode == 0 and result.stdout.startswith("viewer-1\t"), result.stderr
    # served: every arm's variant a model of the server
    sets = [f"models.{v}={{path: runs/tiny/rft/final}}" for v in sorted(variants - {"rft"})]
    sets.append(f"experiment={{file: {path}, store: sqlite:///{tmp_path / 'ab.db'}, spool_dir: {tmp_path}}}")
    report = dry_run_ok(livethink("serve", "--config", TINY, "--dry-run", *(a for s in sets for a in ("--set", s))))
    assert set(report["experiment"]["experiments"]) == {e["name"] for e in experiments}


def test_the_simulation_config_runs_offline(tmp_path):
    result = livethink("ab", "simulate", "--offline", "--experiment", "drpo_vs_rft", "--config",
                       "configs/ab/drpo_vs_rft.yaml", "--sim-config", "configs/ab/simulation.yaml",
                       "--db", str(tmp_path / "ab.db"), "--viewers", "50")  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]


def _make_replicas_command(*assignments: str) -> list[str]:
    """The command `make replicas` runs (its defaults, plus ``assignments``), read from ``make -n``."""
    out = subprocess.run(["make", "-n", "-s", "replicas", "PY=python", *assignments], cwd=ROOT,
                         capture_output=True, text=True, check=True).stdout  # fmt: skip
    joined = out.replace("\\\n", " ")
    line = next(x for x in joined.splitlines() if "-m livethink.replicas" in x)
    return shlex.split(line)[1:]  # without the interpreter


def test_make_replicas_defaults_pass_the_dry_run(tmp_path):
    argv = _make_replicas_command(f"REPLICA_ARGS=--dry-run --workdir {tmp_path}")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    result = subprocess.run([sys.executable, *argv], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    report = dry_run_ok(result)
    assert set(report["experiment"]["experiments"]["drpo_vs_rft"]) == {"rft", "drpo"}


# -- the mistakes --------------------------------------------------------------------------------------------


def test_replicas_without_the_drpo_model_are_refused(tmp_path):
    argv = _make_replicas_command("DRPO=", f"REPLICA_ARGS=--dry-run --workdir {tmp_path}")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    result = subprocess.run([sys.executable, *argv], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    refused(result, "arms.1.variant", "unknown variant 'drpo'")


def test_budget_deadline_takes_effect_where_no_endpoint_sets_its_own():
    report = dry_run_ok(livethink("serve", "--config", TINY, "--dry-run", "--set", "budget.deadline_ms=800"))
    assert report["deadlines_ms"] == {"livestream": 800, "chat": 30000}


def test_budget_deadline_that_no_endpoint_uses_is_refused():
    result = livethink("serve", "--config", TINY, "--dry-run", "--set", "endpoints.livestream.deadline_ms=1000",
                       "--set", "budget.deadline_ms=800")  # fmt: skip
    refused(result, "budget.deadline_ms", "endpoints.livestream.deadline_ms (1000)", "endpoints.chat.deadline_ms")


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["--set", "engine.restart_timeout_s=slow"], ["engine.restart_timeout_s", "valid number"]),
        (["--set", "engine.stall_kill_s=2"], ["stall_kill_s (2.0) must be larger than stall_s"]),
        (["--set", "budget.deadline"], ["--set", "KEY=VALUE"]),
        (["--set", "engine.nonsense=1"], ["engine.nonsense", "Extra inputs are not permitted"]),
        (["--set", "experiment={file: configs/ab/drpo_vs_rft.yaml}"], ["arms.1.variant", "unknown variant 'drpo'"]),
        (["--set", "experiment={file: configs/ab/drpo_vs_rft.yaml, store: 'mysql://x/y'}", "--set",
          "models.drpo={path: runs/tiny/rft/final}"], ["experiment.store", "'mysql'"]),
    ],
    ids=["timeout-not-a-number", "stall-order", "set-without-value", "unknown-key", "arm-not-served",
         "store-scheme"],
)
def test_serve_config_mistakes_are_refused(args, named):
    refused(livethink("serve", "--config", TINY, "--dry-run", *args), *named)


def test_serve_config_that_is_missing_or_a_directory_is_refused():
    refused(livethink("serve", "--config", "configs/tiny/nope.yaml", "--dry-run"), "configs/tiny/nope.yaml")
    refused(livethink("serve", "--config", "configs/tiny", "--dry-run"), "configs/tiny")


def test_ab_arms_take_every_grpo_variant(tmp_path):
    import importlib

    from livethink.ab_test.experiment import KNOWN_VARIANTS
    from livethink.length_rl.registry import ALIASES, REGISTRY

    importlib.import_module("livethink.length_rl.variants")  # registers every variant
    assert set(REGISTRY) | set(ALIASES) | {"rft", "teacher"} == KNOWN_VARIANTS
    arms = "".join(f"  - {{name: {v}, weight: {1 / len(REGISTRY)}, variant: {v}}}\n" for v in sorted(REGISTRY))
    (tmp_path / "all.yaml").write_text(f"name: all_variants\ncontrol: band\narms:\n{arms}")
    result = livethink("ab", "assign", "--config", str(tmp_path / "all.yaml"), "--ids", "-", stdin="v\n")
    assert result.returncode == 0, result.stderr


def test_experiment_is_a_name_in_every_ab_command(tmp_path):
    refused(livethink("ab", "assign", "--experiment", "configs/ab/drpo_vs_rft.yaml", "--ids", "-"),
            "--experiment", "--config configs/ab/drpo_vs_rft.yaml")  # fmt: skip
    refused(livethink("ab", "analyze", "--db", str(tmp_path / "ab.db"), "--experiment", "configs/ab/drpo_vs_rft.yaml"),
            "--experiment")  # fmt: skip


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("data")
    result = livethink("data", "generate", "--out", str(out), "--n_train", "20", "--n-validation", "5",
                       "--n-test", "5")  # fmt: skip
    assert result.returncode == 0, result.stderr[-2000:]  # --n_train: the underscore alias of --n-train
    return out


def test_data_validate_refuses_what_it_cannot_read(data_dir, tmp_path):
    refused(livethink("data", "validate", str(tmp_path / "missing.jsonl")), "missing.jsonl", "no such file")
    (tmp_path / "tasks.csv").write_text("id,question\n1,hi\n")
    refused(livethink("data", "validate", str(tmp_path / "tasks.csv")), "tasks.csv", "'.csv'")
    refused(livethink("data", "validate", str(tmp_path)), "a directory without train.jsonl", "not a saved dataset")


def test_data_validate_checks_every_split_of_a_data_dir(data_dir):
    result = livethink("data", "validate", str(data_dir))  # what docs/data.md points data_dir at
    assert result.returncode == 0, result.stderr[-2000:]
    assert f"{data_dir / 'train.jsonl'}: 20 valid, 0 invalid" in result.stdout
    assert f"{data_dir / 'test.jsonl'}: 5 valid, 0 invalid" in result.stdout


def test_data_validate_fails_on_invalid_rows(data_dir, tmp_path):
    broken = tmp_path / "broken.jsonl"
    broken.write_text((data_dir / "test.jsonl").read_text().splitlines()[0] + "\n{oops\n")
    result = livethink("data", "validate", str(broken))
    refused(result, "line 2")
    assert "1 valid, 1 invalid" in result.stdout
    assert livethink("data", "validate", str(data_dir / "test.jsonl")).returncode == 0


def test_eval_refuses_a_model_that_is_not_a_checkpoint(tmp_path):
    refused(livethink("eval", "--model", str(tmp_path / "nope"), "--max_tokens", "8"), "--model", "no such directory")
    refused(livethink("eval", "--model", str(tmp_path)), "--model", "no config.json")


def test_demo_refuses_an_unknown_step():
    refused(livethink("demo", "--only", "bogus"), "--only", "invalid choice: 'bogus'")


def test_dash_flags_take_their_underscore_alias():
    """--dry_run is --dry-run; --help shows the dashed form only."""
    dry_run_ok(livethink("serve", "--config", TINY, "--dry_run"))
    from livethink.eval.cli import build_parser

    args = build_parser().parse_args(["--max_tokens", "9", "--thinking-caps=0,8", "--teacher_opener_rate=0.5"])
    assert (args.max_tokens, args.thinking_caps, args.teacher_opener_rate) == (9, "0,8", 0.5)
    assert "--max_tokens" not in build_parser().format_help()
