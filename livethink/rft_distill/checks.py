"""What ``livethink rft`` checks before any expensive step: ``--dry-run`` prints it, ``run_rft`` refuses on a problem.

No weights are loaded and no endpoint is called: the teacher and judge settings, the teacher backend's options,
the student YAML (its size counted on the meta device, a local checkpoint's ``config.json`` compared with the
fields the YAML states), the LoRA / ``trainable_parameters`` rule and the parameter patterns.
"""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path
from typing import Any

from livethink.config_sections import ConfigError


def pattern_problems(patterns: list[str] | None) -> list[str]:
    """``trainable_parameters`` entries that are neither a keyword nor a valid regex."""
    from livethink.models.freezing import KEYWORDS

    problems = []
    for pattern in patterns or []:
        if pattern.startswith("@"):
            if pattern not in KEYWORDS:
                problems.append(f"trainable_parameters: unknown keyword {pattern!r} (known: {', '.join(KEYWORDS)})")
            continue
        try:
            re.compile(pattern)
        except re.error as exc:
            problems.append(f"trainable_parameters: {pattern!r} is not a valid regex ({exc})")
    return problems


def _scratch_vocab(cfg: Any, student: Any) -> int:
    """The vocabulary a from-scratch student will have: its tokenizer's (trained first, to ``tokenizer_vocab_size``)."""
    size = cfg.tokenizer_vocab_size
    tokenizer_dir = Path(cfg.tokenizer_dir or "")
    if cfg.tokenizer_dir and (tokenizer_dir / "tokenizer.json").is_file():
        from livethink.models.tokenizer import load_tokenizer

        size = len(load_tokenizer(tokenizer_dir))
    m = student.pad_vocab_to_multiple_of
    return -(-size // m) * m


def check_student(cfg: Any, problems: list[str]) -> dict[str, Any]:
    """The student YAML's summary; its problems appended to ``problems``."""
    from livethink.models.student import load_student_config, validate_student_config

    path = cfg.student_config
    if not Path(path).is_file():
        problems.append(f"student_config: file not found: {path}")
        return {}
    try:
        student = load_student_config(path)
    except ValueError as exc:
        problems.append(f"student_config: {exc}")
        return {}
    if cfg.trainable_parameters and student.lora:
        problems.append(f"trainable_parameters: {cfg.trainable_parameters} and the LoRA student of {path} exclude "
                        "each other (LoRA trains its adapters only): drop trainable_parameters, or set lora: null "
                        "in the student YAML")
    on_disk = bool(student.pretrained) and Path(student.pretrained).is_dir()
    if student.pretrained and not on_disk:
        return {"pretrained": student.pretrained, "path_checked": False, "lora": bool(student.lora),
                "note": f"checkpoint {student.pretrained} is not on this machine (needed at run time)"}
    if not student.pretrained and student.vocab_size is None:
        student = replace(student, vocab_size=_scratch_vocab(cfg, student))
    try:
        summary = validate_student_config(student, check_path=on_disk)
    except ValueError as exc:  # CheckpointError included
        problems.append(f"student_config: {exc}")
        return {"pretrained": student.pretrained, "path_checked": on_disk}
    return summary | {"lora": bool(student.lora)}


def check_rft(cfg: Any) -> dict[str, Any]:
    """The dry-run report of an ``RFTConfig`` (``problems`` empty and ``ok`` true when the run can start)."""
    problems: list[str] = []
    teacher, judge = cfg.teacher_settings, cfg.judge_settings
    report: dict[str, Any] = {"teacher": teacher.describe(), "k": cfg.k, "judge": judge.describe(),
                              "selection": cfg.selection, "output_dir": cfg.output_dir}
    try:
        teacher.check_backend()
    except ConfigError as exc:
        problems.append(str(exc))
    problems += pattern_problems(cfg.trainable_parameters)
    report["student"] = check_student(cfg, problems)
    return check_paths(cfg, report, problems)


def check_paths(cfg: Any, report: dict[str, Any], problems: list[str]) -> dict[str, Any]:
    """The report with the paths the run reads (the data, a pretrained student) classified
    (``livethink.run_check``: a missing local path is a problem) and the ``ok`` / ``starts_here`` verdict."""
    from livethink.run_check import Findings, check_path

    found = Findings(problems)
    check_path(found, "data_dir", cfg.data_dir, what="the task data",
               generated=f"the run generates LiveShop there (data_seed {cfg.data_seed})")
    student = report["student"]
    if student.get("pretrained") and not student.get("path_checked"):
        student.pop("note", None)
        check_path(found, f"student_config ({cfg.student_config}): pretrained", student["pretrained"],
                   what="the pretrained student")
    return found.into(report)  # a local teacher's checkpoint: the backend's own check (teacher.check_backend)


def require_ok(cfg: Any) -> dict[str, Any]:
    """``check_rft``, raising ``ConfigError`` with every problem when there is one (before any expensive step)."""
    report = check_rft(cfg)
    if report["problems"]:
        raise ConfigError("; ".join(report["problems"]))
    return report
