"""`livethink rft --config configs/tiny/rft.yaml [--key value ...]`: stage 1.

The YAML and the command line fill one `RFTConfig` (TRL's `SFTConfig` + the stage's options, the `teacher:` and
`judge:` sections) through ``livethink.config_sections``; command-line values override the YAML. `--dry-run` checks
everything the run checks before its first expensive step (``checks.check_rft``) without loading weights or calling
endpoints. Launch on several GPUs with
`accelerate launch --config_file configs/accelerate/zero3.yaml -m livethink.rft_distill.cli --config …`.
"""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    from livethink.config_sections import load_training_config, pop_dry_run, quiet_trl_vllm_warning

    quiet_trl_vllm_warning()
    from livethink.rft_distill.checks import check_rft, require_ok
    from livethink.rft_distill.config import SECTIONS, RFTConfig

    argv = list(sys.argv[1:] if argv is None else argv)
    dry = pop_dry_run(argv)
    try:
        # Without a GPU, TrainingArguments refuses bf16; a dry run checks everything else on the CPU.
        cfg = load_training_config(RFTConfig, argv, SECTIONS, cpu_override=dry, prog="livethink rft")
        if not dry:
            require_ok(cfg)
    except (ValueError, TypeError) as exc:
        print(f"livethink rft: invalid config: {exc}", file=sys.stderr)
        return 2
    if dry:
        report = check_rft(cfg)
        report["not_checked_here"] = "hardware-dependent options (bf16, GPU count) are checked when training starts"
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
