"""Stage 1 end to end on a few prompts with the real TRL SFTTrainer, and its re-run reuse."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml

ROOT = Path(__file__).resolve().parents[2]
# An in-process vLLM engine started by an earlier test leaves torch.distributed variables in os.environ; a
# training subprocess that inherited them would try to join that (busy) rendezvous instead of running alone.
DIST_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "GROUP_RANK")


def _rft(args: list[str]) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in DIST_VARS}
    return subprocess.run([sys.executable, "-m", "livethink.cli", "rft", *args], capture_output=True, text=True,
                          cwd=ROOT, timeout=900, env=env)


@pytest.fixture(scope="module")
def rft_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("rft")
    student = yaml.safe_load((ROOT / "configs/tiny/student.yaml").read_text())
    student.update(num_hidden_layers=1, hidden_size=64, head_dim=16, moe_intermediate_size=64, num_experts=4)
    (tmp / "student.yaml").write_text(yaml.safe_dump(student))
    subprocess.run([sys.executable, "-m", "livethink.cli", "data", "generate", "--out", str(tmp / "data"),
                    "--n-train", "40", "--n-validation", "5", "--n-test", "10"], check=True, capture_output=True)
    args = ["--config", str(ROOT / "configs/tiny/rft.yaml"), "--output_dir", str(tmp / "run"), "--data_dir", str(tmp / "data"),
            "--tokenizer_dir", str(tmp / "tok"), "--tokenizer_vocab_size", "600", "--n_prompts", "24", "--k", "2",
            "--student_config", str(tmp / "student.yaml"), "--max_steps", "3", "--per_device_train_batch_size", "4",
            "--save_steps", "2", "--logging_steps", "1"]
    first = _rft(args)
    assert first.returncode == 0, first.stderr[-3000:]
    return tmp, args, first


def test_rft_produces_student_and_acceptance_report(rft_run):
    tmp, _, first = rft_run
    run = tmp / "run"
    assert (run / "final" / "config.json").is_file() and (run / "final" / "tokenizer.json").is_file()
    acceptance = json.loads((run / "acceptance.json").read_text())
    assert acceptance["samples"] == 48 and acceptance["prompts"] == 24
    assert 0 < acceptance["accepted"] < 48  # the scripted teacher makes mistakes that the judge rejects
    assert acceptance["selected"] == acceptance["prompts_with_accepted"]  # selection: random = one per prompt
    accepted_lines = (run / "accepted.jsonl").read_text().splitlines()
    assert len(accepted_lines) == acceptance["selected"]
    summary = json.loads((run / "rft_summary.json").read_text())
    assert summary["sampling"]["samples"] == 48
    assert "question kind" in first.stdout  # acceptance table printed


def test_rft_trains_with_muon_and_a_wsd_schedule(rft_run):
    """configs/tiny/rft.yaml: the checkpoint holds MuonAdamW's two halves; the LR warms up, then holds its peak
    (a cosine schedule would already be decaying at step 3 of 3; WSD decays only over the last quarter)."""
    tmp, _, _ = rft_run
    checkpoint = tmp / "run" / "checkpoint-3"
    optimizer = torch.load(checkpoint / "optimizer.pt", weights_only=False)
    assert set(optimizer) == {"muon", "adamw"} and optimizer["muon"]["state"] and optimizer["adamw"]["state"]
    lrs = [e["learning_rate"] for e in json.loads((checkpoint / "trainer_state.json").read_text())["log_history"]
           if "learning_rate" in e]
    assert lrs == pytest.approx([0.0, 4e-3, 4e-3]), lrs


def test_rft_rerun_reuses_samples_and_student(rft_run):
    tmp, args, _ = rft_run
    final = tmp / "run" / "final" / "model.safetensors"
    before = final.stat().st_mtime_ns
    again = _rft(args)
    assert again.returncode == 0, again.stderr[-3000:]
    assert final.stat().st_mtime_ns == before  # not retrained
    summary = json.loads((tmp / "run" / "rft_summary.json").read_text())
    assert summary["sampling"]["tasks_skipped_resume"] == 24 and summary["sampling"]["tasks_written"] == 0


def test_rft_rejects_bad_config(tmp_path):
    bad = _rft(["--config", str(ROOT / "configs/tiny/rft.yaml"), "--output_dir", str(tmp_path), "--selection", "best"])
    assert bad.returncode == 2 and "selection must be one of" in bad.stderr


def test_prod_rft_config_dry_run():
    out = _rft(["--config", str(ROOT / "configs/prod/rft.yaml"), "--dry-run"])
    assert out.returncode == 0, out.stderr[-3000:]
    report = json.loads(out.stdout)
    assert report["ok"] and report["teacher"]["type"] == "openai" and report["k"] == 8


def test_smollm2_rft_config_dry_run_without_the_checkpoint(tmp_path):
    """configs/smollm2/rft_liveshop.yaml parses; a pretrained student not yet converted is a note, not a crash."""
    env = {k: v for k, v in os.environ.items() if k not in DIST_VARS} | {"HOME": str(tmp_path)}
    out = subprocess.run([sys.executable, "-m", "livethink.cli", "rft", "--config",
                          str(ROOT / "configs/smollm2/rft_liveshop.yaml"), "--dry-run"],
                         capture_output=True, text=True, cwd=ROOT, timeout=300, env=env)
    assert out.returncode == 0, out.stderr[-3000:]
    report = json.loads(out.stdout)
    assert report["ok"] and not report["starts_here"]
    assert any("not on this machine" in m and "pretrained" in m for m in report["missing_here"])
    assert "would not start here" in out.stderr.splitlines()[-1]
