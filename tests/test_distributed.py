"""Distributed training in miniature: ``accelerate launch --num_processes 2`` on CPU (gloo) runs stage 1 (SFT) and
stage 2 (DRPO) on the tiny from-scratch student, through the stages' own command lines.

Checked: the losses are finite, each process trains, every GRPO group (the completions of one prompt) is seen
whole by one process and one micro-batch, and the saved checkpoint loads. DeepSpeed ZeRO-3 and FSDP take the same
path on GPUs (``configs/accelerate/``); here their configs are only validated.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
import yaml

from livethink.data.io import write_jsonl
from tests.support.students import grpo_setup

ROOT = Path(__file__).resolve().parents[1]
ACCELERATE = Path(sys.executable).with_name("accelerate")
SMALL_STUDENT = {"num_hidden_layers": 1, "hidden_size": 32, "num_attention_heads": 2, "num_key_value_heads": 1,
                 "head_dim": 16, "num_experts": 4, "moe_intermediate_size": 32}


def launch(stage: str, out: Path, argv: list[str], processes: int = 2) -> list[dict]:
    """``accelerate launch`` the stage under ``tests/support/distributed_run.py``; returns every process's records."""
    env = os.environ | {"PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1",
                        "TOKENIZERS_PARALLELISM": "false"}
    # `--multi_gpu` picks accelerate's torchrun launcher; without a GPU each process joins a gloo group on the CPU
    # (accelerate's MULTI_CPU; `--cpu` alone would start one process unless MPI is installed)
    command = [str(ACCELERATE), "launch", "--multi_gpu", "--num_processes", str(processes), "--num_machines", "1",
               "--mixed_precision", "no", "--dynamo_backend", "no", "--main_process_port", "0",
               str(ROOT / "tests/support/distributed_run.py"), stage, str(out), "--", *argv]
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert result.returncode == 0, result.stderr[-4000:]
    records = []
    for rank in range(processes):
        path = out.with_suffix(f".{rank}.jsonl")
        assert path.is_file(), f"process {rank} trained nothing"
        records += [json.loads(line) for line in path.read_text().splitlines()]
    return records


@pytest.fixture(scope="module")
def data(tmp_path_factory, liveshop_small):
    root = tmp_path_factory.mktemp("dist")
    for split, tasks in liveshop_small.tasks.items():
        write_jsonl(tasks, root / "data" / f"{split}.jsonl")
    return root


@pytest.mark.slow
def test_two_process_sft_stage1(data, tmp_path):
    from livethink.models.loading import load_student

    student_yaml = tmp_path / "student.yaml"
    student = yaml.safe_load((ROOT / "configs/tiny/student.yaml").read_text()) | SMALL_STUDENT
    student_yaml.write_text(yaml.safe_dump(student))
    out = tmp_path / "rft"
    argv = ["--config", str(ROOT / "configs/tiny/rft.yaml"), "--output_dir", str(out), "--data_dir",
            str(data / "data"), "--n_prompts", "16", "--k", "2", "--student_config", str(student_yaml),
            "--tokenizer_dir", str(tmp_path / "tokenizer"), "--tokenizer_vocab_size", "600", "--max_steps", "3",
            "--per_device_train_batch_size", "2", "--max_length", "768", "--save_strategy", "no",
            "--logging_steps", "1"]
    records = launch("rft", tmp_path / "rft_records.jsonl", argv, processes=2)
    assert {r["rank"] for r in records} == {0, 1} and {r["world"] for r in records} == {2}
    assert all(math.isfinite(r["loss"]) for r in records)
    assert max(r["step"] for r in records) == 2  # steps 0..2 (global_step before each update)
    model, tokenizer = load_student(out / "final")
    assert model.config.num_hidden_layers == 1 and (out / "final" / "student.yaml").is_file()
    assert json.loads((out / "rft_summary.json").read_text())["final_dir"] == str(out / "final")


@pytest.mark.slow
def test_two_process_drpo_keeps_groups_whole(data, tmp_path, liveshop_small):
    from livethink.models.loading import load_model

    setup = grpo_setup(tmp_path / "student", liveshop_small)
    generations = 4

    def argv(out: Path, per_device: int) -> list[str]:
        return ["--config", str(ROOT / "configs/tiny/grpo_drpo.yaml"), "--model_name_or_path", str(setup["student"]),
                "--data_dir", str(data / "data"), "--output_dir", str(out), "--n_prompts", "32", "--max_steps", "3",
                "--per_device_train_batch_size", str(per_device), "--num_generations", str(generations),
                "--max_completion_length", "16", "--use_vllm", "false", "--calculator", "false",
                "--save_strategy", "no", "--logging_steps", "1"]

    two = launch("grpo", tmp_path / "two.jsonl", argv(tmp_path / "two", per_device=8), processes=2)
    assert {r["rank"] for r in two} == {0, 1} and all(math.isfinite(r["loss"]) for r in two)
    by_step: dict[int, dict[str, set[int]]] = {}
    for r in two:
        counts = Counter(r["groups"])
        # a micro-batch holds whole groups: every prompt it sees, it sees num_generations times
        assert set(counts.values()) == {generations}, counts
        for key in counts:
            by_step.setdefault(r["step"], {}).setdefault(key, set()).add(r["rank"])
    for step, owners in by_step.items():
        split = {k: v for k, v in owners.items() if len(v) > 1}
        assert not split, f"step {step}: groups split across processes: {split}"
        assert {rank for ranks in owners.values() for rank in ranks} == {0, 1}  # both processes trained
    final = tmp_path / "two" / "final"
    assert load_model(final).config.num_hidden_layers == 1


def test_deepspeed_and_fsdp_configs_load():
    """The GPU launch configs parse as accelerate configs (dry validation: no GPU, nothing launched)."""
    from accelerate.commands.config.config_args import load_config_from_file

    for name, kind in (("zero3.yaml", "DEEPSPEED"), ("fsdp.yaml", "FSDP")):
        config = load_config_from_file(str(ROOT / "configs/accelerate" / name))
        assert config.distributed_type.value == kind, name
        assert config.num_processes >= 1 and config.mixed_precision == "bf16"
    zero3 = load_config_from_file(str(ROOT / "configs/accelerate/zero3.yaml"))
    assert zero3.deepspeed_config["zero_stage"] == 3
    fsdp = load_config_from_file(str(ROOT / "configs/accelerate/fsdp.yaml"))
    assert fsdp.fsdp_config["fsdp_sharding_strategy"] == "FULL_SHARD"

