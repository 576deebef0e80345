"""Run ``livethink rft`` or ``livethink grpo`` under ``accelerate launch``, recording what each process trains on.

    accelerate launch --cpu --num_processes 2 tests/support/distributed_run.py {rft|grpo} OUT.jsonl -- <the stage's argv>

A test-only hook: the stage's trainer class gets a ``compute_loss`` wrapper that appends one JSON line per
micro-batch to ``OUT.<rank>.jsonl``: the process rank, the global step, the loss, and, for GRPO, the group key of
each row (a hash of its prompt tokens), so the test can check that no group is split across processes or
micro-batches. Everything else is the stage's own command-line entry point.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import time
from pathlib import Path


def prompt_keys(inputs) -> list[str]:
    """One key per row: the hash of its prompt tokens without padding (equal prompts = one GRPO group)."""
    ids, mask = inputs["prompt_ids"], inputs["prompt_mask"]
    return [hashlib.sha1(str(row[m.bool()].tolist()).encode()).hexdigest()[:12] for row, m in zip(ids, mask, strict=True)]


def instrument(trainer_cls, out: Path, grpo: bool) -> None:
    original = trainer_cls.compute_loss
    rank = int(os.environ.get("RANK", "0"))
    path = out.with_suffix(f".{rank}.jsonl")

    def compute_loss(self, model, inputs, *args, **kwargs):
        start = time.perf_counter()
        result = original(self, model, inputs, *args, **kwargs)
        loss = result[0] if isinstance(result, tuple) else result
        record = {"rank": rank, "world": self.accelerator.num_processes, "step": self.state.global_step, "t": time.time(),
                  "loss": float(loss.detach()), "loss_s": round(time.perf_counter() - start, 4)}
        if grpo:
            record["groups"] = prompt_keys(inputs)
        with path.open("a") as fh:
            fh.write(json.dumps(record) + "\n")
        return result

    trainer_cls.compute_loss = compute_loss


def main() -> int:
    stage, out, sep, *argv = sys.argv[1:]
    assert sep == "--", "usage: distributed_run.py {rft|grpo} OUT.jsonl -- <argv>"
    if stage == "rft":
        from livethink.rft_distill.cli import main as stage_main
        from livethink.rft_distill.sft import StudentSFTTrainer as trainer_cls
    else:
        from livethink.length_rl.cli import main as stage_main
        from livethink.length_rl.trainer import LengthRLTrainer as trainer_cls
    instrument(trainer_cls, Path(out), grpo=stage == "grpo")
    start = time.perf_counter()
    code = stage_main(argv)
    if int(os.environ.get("RANK", "0")) == 0:
        Path(out).with_suffix(".wall.json").write_text(json.dumps({"wall_s": time.perf_counter() - start}))
    return code


if __name__ == "__main__":
    raise SystemExit(main())
