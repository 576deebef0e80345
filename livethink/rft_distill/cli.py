"""`livethink rft --config configs/tiny/rft.yaml [--key value ...]`: stage 1.

The YAML and the command line fill one `RFTConfig` (TRL's `SFTConfig` + the stage's options, the `teacher:` and
`judge:` sections) through ``livethink.config_sections``; command-line values override the YAML. `--dry-run` checks
everything the run checks before its first expensive step (``checks.check_rft``) without loading weights or calling
endpoints. Launch on several GPUs with
`accelerate launch --config_file configs/accelerate/zero3.yaml -m livethink.rft_distill.cli --config …`.
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path

NOT_CHECKED = "hardware-dependent options (bf16, GPU count) are checked when training starts"


def main(argv: list[str] | None = None) -> int:
    from livethink.config_sections import load_training_config, pop_config, requested_hardware, training_main
    from livethink.rft_distill.checks import check_rft
    from livethink.rft_distill.config import SECTIONS, RFTConfig
    from livethink.run_check import Findings, check_hardware

    hardware: dict = {}

    def load(args: list[str], dry: bool) -> RFTConfig:
        # Without a GPU, TrainingArguments refuses bf16; a dry run checks everything else on the CPU.
        if dry:
            hardware.update(requested_hardware(pop_config(list(args)), args))
        return load_training_config(RFTConfig, args, SECTIONS, cpu_override=dry, prog="livethink rft")

    def check(cfg: RFTConfig) -> dict:
        found = Findings()
        check_hardware(found, hardware)
        return found.into(check_rft(cfg) | hardware | {"not_checked_here": NOT_CHECKED})

    def run(cfg: RFTConfig) -> int:
        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
        from livethink.rft_distill.pipeline import run_rft

        final = run_rft(cfg)
        print(f"RFT student saved to {final}")
        print((Path(cfg.output_dir) / "acceptance.md").read_text())
        return 0

    return training_main("rft", sys.argv[1:] if argv is None else argv, load, check, run)


if __name__ == "__main__":
    raise SystemExit(main())
