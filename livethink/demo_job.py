"""`make demo`: the main job on the embedded default, step by step, reusing finished artifacts.

data -> tokenizer + student -> RFT (scripted teacher, judge, SFT) -> eval. Every step checks for its output
first, so a re-run only does what is missing. ``--quick`` uses small settings (minutes).
Each step runs in a child process (its own vLLM/torch state); Ctrl-C stops the child and the job.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Settings:
    artifacts: Path
    runs: Path
    n_train: int
    n_test: int
    rft_prompts: int
    rft_epochs: float
    eval_limit: int

    @classmethod
    def make(cls, quick: bool, workdir: Path) -> Settings:
        if quick:
            return cls(workdir / "artifacts/quick", workdir / "runs/quick", 1000, 100, 300, 1.0, 50)
        return cls(workdir / "artifacts/tiny", workdir / "runs/tiny", 5000, 500, 2000, 2.0, 200)

    @property
    def data(self) -> Path:
        return self.artifacts / "data"

    @property
    def tokenizer(self) -> Path:
        return self.artifacts / "tokenizer"

    @property
    def rft(self) -> Path:
        return self.runs / "rft"


@dataclass(frozen=True)
class Step:
    name: str
    done: Callable[[Settings], bool]
    command: Callable[[Settings], list[str]]
    describe: Callable[[Settings], str]


def _livethink(*args: str) -> list[str]:
    return [sys.executable, "-m", "livethink.cli", *args]


def _read_json(path: Path) -> dict:
    return json.loads(path.read_text()) if path.is_file() else {}


STEPS: list[Step] = [
    Step(
        "data",
        lambda s: (s.data / "manifest.json").is_file(),
        lambda s: _livethink("data", "generate", "--out", str(s.data), "--n-train", str(s.n_train),
                             "--n-validation", str(s.n_test), "--n-test", str(s.n_test)),
        lambda s: "LiveShop tasks {counts}, products shared train/test: {products_shared_train_test}".format(
            **_read_json(s.data / "manifest.json")),
    ),
    Step(
        "rft",
        lambda s: (s.rft / "final" / "config.json").is_file() and (s.rft / "rft_summary.json").is_file(),
        lambda s: _livethink("rft", "--config", str(ROOT / "configs/tiny/rft.yaml"), "--output_dir", str(s.rft),
                             "--data_dir", str(s.data), "--tokenizer_dir", str(s.tokenizer),
                             "--n_prompts", str(s.rft_prompts), "--num_train_epochs", str(s.rft_epochs),
                             "--student_config", str(ROOT / "configs/tiny/student.yaml")),
        lambda s: "RFT student in {final_dir}; acceptance {acc:.1%}; timings {timings}".format(
            acc=_read_json(s.rft / "rft_summary.json").get("acceptance", {}).get("acceptance_rate", 0.0),
            **_read_json(s.rft / "rft_summary.json")),
    ),
    Step(
        "eval",
        lambda s: (s.runs / "eval" / "eval.json").is_file(),
        lambda s: _livethink("eval", "--model", str(s.rft / "final"), "--name", "rft-student", "--teacher", "scripted",
                             "--data", str(s.data), "--split", "test", "--limit", str(s.eval_limit),
                             "--out", str(s.runs / "eval")),
        lambda s: f"report {s.runs / 'eval' / 'eval.md'}",
    ),
]


def run_step(step: Step, settings: Settings, env: dict[str, str]) -> int:
    """Run one step's command in its own process group so Ctrl-C stops everything it started."""
    proc = subprocess.Popen(step.command(settings), cwd=ROOT, env=env, start_new_session=True)
    try:
        return proc.wait()
    except KeyboardInterrupt:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
        raise


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="livethink demo", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="small settings (a few minutes)")
    parser.add_argument("--workdir", default=str(ROOT), help="where artifacts/ and runs/ go")
    parser.add_argument("--only", nargs="*", help="run only these steps")
    args = parser.parse_args(argv)
    settings = Settings.make(args.quick, Path(args.workdir))
    env = dict(os.environ, HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
    env.setdefault("VLLM_CPU_KVCACHE_SPACE", "2")
    timings: dict[str, float] = {}
    started = time.perf_counter()
    try:
        for step in STEPS:
            if args.only and step.name not in args.only:
                continue
            if step.done(settings):
                print(f"[demo] {step.name}: reusing finished artifacts — {step.describe(settings)}", flush=True)
                continue
            print(f"[demo] {step.name}: running", flush=True)
            t = time.perf_counter()
            code = run_step(step, settings, env)
            timings[step.name] = round(time.perf_counter() - t, 1)
            if code != 0:
                print(f"[demo] {step.name} failed with exit code {code}", file=sys.stderr)
                return code
            print(f"[demo] {step.name}: done in {timings[step.name]}s — {step.describe(settings)}", flush=True)
    except KeyboardInterrupt:
        print("\n[demo] interrupted; every process it started was stopped", file=sys.stderr)
        return 130
    total = round(time.perf_counter() - started, 1)
    print(f"[demo] finished in {total}s (steps run: {timings or 'none, all reused'})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
