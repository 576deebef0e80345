"""`livethink rft --config configs/tiny/rft.yaml [--key value ...]`: stage 1, TRL-style.

The YAML and the command line fill one `RFTConfig` (TRL's `SFTConfig` + the stage's options) through
`TrlParser`; command-line values override the YAML. `--dry-run` validates a config without loading weights or
calling endpoints (used for `configs/prod/`). Launch on several GPUs with
`accelerate launch --config_file configs/accelerate/zero3.yaml -m livethink.rft_distill.cli --config …`.
"""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path


def dry_run(cfg) -> dict:
    """Check a config without a GPU: fields, files, the student's config and size, endpoint URLs."""
    from urllib.parse import urlparse

    from livethink.models.student import load_student_config, validate_student_config

    problems: list[str] = []
    report: dict = {"teacher": cfg.teacher, "k": cfg.k, "judge": cfg.judge, "selection": cfg.selection,
                    "output_dir": cfg.output_dir}
    for name in ("teacher_base_url", "judge_base_url"):
        url = getattr(cfg, name)
        if url and not (urlparse(url).scheme in ("http", "https") and urlparse(url).netloc):
            problems.append(f"{name}: not an http(s) URL: {url!r}")
    if not Path(cfg.student_config).is_file():
        problems.append(f"student_config: file not found: {cfg.student_config}")
    else:
        student = load_student_config(cfg.student_config)
        on_disk = bool(student.pretrained) and Path(student.pretrained).is_dir()
        if student.pretrained and not on_disk and student.vocab_size is None:
            report["student"] = {"pretrained": student.pretrained, "path_checked": False}  # nothing to count from
        else:
            try:
                report["student"] = validate_student_config(student, check_path=on_disk)
            except ValueError as exc:  # CheckpointError included
                problems.append(f"student_config: {exc}")
                report["student"] = {"pretrained": student.pretrained, "path_checked": on_disk}
        if student.pretrained and not on_disk:
            report["student"]["note"] = f"checkpoint {student.pretrained} is not on this machine (needed at run time)"
    report["not_checked_here"] = "hardware-dependent options (bf16, GPU count) are checked when training starts"
    report["problems"] = problems
    report["ok"] = not problems
    return report


def main(argv: list[str] | None = None) -> int:
    from trl import TrlParser

    from livethink.rft_distill.config import RFTConfig

    argv = list(sys.argv[1:] if argv is None else argv)
    dry = "--dry-run" in argv
    if dry:
        # Without a GPU, TrainingArguments refuses bf16; a dry run checks everything else on the CPU.
        argv = [a for a in argv if a != "--dry-run"] + ["--use_cpu", "true", "--bf16", "false"]
    try:
        (cfg,) = TrlParser((RFTConfig,)).parse_args_and_config(argv)
    except (ValueError, TypeError) as exc:
        print(f"livethink rft: invalid config: {exc}", file=sys.stderr)
        return 2
    if dry:
        report = dry_run(cfg)
        print(json.dumps(report, indent=2, default=str))
        return 0 if report["ok"] else 1
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    from livethink.rft_distill.pipeline import run_rft

    final = run_rft(cfg)
    print(f"RFT student saved to {final}")
    print((Path(cfg.output_dir) / "acceptance.md").read_text())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
