"""Stage 1 end to end: data -> teacher samples -> judge (C AND H) -> SFT of the student.

Each step writes its artifacts under ``output_dir`` and is skipped on a re-run when they exist: teacher
sampling resumes its shards, training resumes its last checkpoint, a finished ``final/`` is reused.
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import Any

from livethink.data.io import read_tasks
from livethink.data.schema import Task
from livethink.rft_distill.acceptance import AcceptanceReport, JudgedSample, accept_and_select, judge_samples
from livethink.rft_distill.config import RFTConfig

logger = logging.getLogger(__name__)


def ensure_data(data_dir: str | Path, seed: int = 0) -> Path:
    """``data_dir`` with LiveShop splits, generated (default sizes) when it has no ``train.jsonl``."""
    from livethink.data.io import write_jsonl
    from livethink.data.liveshop import generate

    data_dir = Path(data_dir)
    if not (data_dir / "train.jsonl").is_file():
        logger.info("generating LiveShop data in %s", data_dir)
        data = generate(seed=seed)
        for split, tasks in data.tasks.items():
            write_jsonl(tasks, data_dir / f"{split}.jsonl")
    return data_dir


def ensure_tokenizer(tokenizer_dir: str | Path, tasks: list[Task], samples_dir: Path | None, vocab_size: int):
    """Load the tokenizer, training it first (on the prompts and the teacher's samples) if it does not exist."""
    from itertools import chain

    from livethink.models.tokenizer import corpus_from_tasks, load_tokenizer, save_tokenizer, train_tokenizer

    tokenizer_dir = Path(tokenizer_dir)
    if not (tokenizer_dir / "tokenizer.json").is_file():
        from livethink.rft_distill.sampling import read_samples

        logger.info("training a %d-token BPE tokenizer into %s", vocab_size, tokenizer_dir)
        completions = (r.get("completion") or "" for r in read_samples(samples_dir)) if samples_dir else ()
        save_tokenizer(train_tokenizer(chain(corpus_from_tasks(tasks), completions), vocab_size=vocab_size), tokenizer_dir)
    return load_tokenizer(tokenizer_dir)


def sample_teacher(cfg: RFTConfig, tasks: list[Task], samples_dir: Path) -> dict[str, Any]:
    from livethink.rft_distill.sampling import sample_to_shards
    from livethink.rft_distill.teachers.factory import make_teacher

    settings = cfg.teacher_settings
    teacher = make_teacher(settings.backend_config())
    summary = sample_to_shards(teacher, tasks, cfg.k, settings.sampling(cfg.seed), samples_dir)
    return summary.as_dict() if hasattr(summary, "as_dict") else dict(summary)


def judge_and_select(cfg: RFTConfig, tasks: list[Task], samples_dir: Path, out_dir: Path, write: bool = True):
    """Judge every sample, keep C ∧ H, pick the SFT targets; ``write``: save them and the acceptance report."""
    from livethink.rewards.judge import make_judge
    from livethink.rft_distill.sampling import read_samples

    judge_cfg = cfg.judge_settings.judge_config()
    by_id = {t.id: t for t in tasks}
    records = (r for r in read_samples(samples_dir) if r["task_id"] in by_id)
    judged = judge_samples(records, by_id, make_judge(judge_cfg))
    selected, report = accept_and_select(judged, by_id, cfg.selection, cfg.seed)
    if not write:
        return selected, report
    with (out_dir / "accepted.jsonl").open("w", encoding="utf-8") as fh:
        for s in selected:
            fh.write(json.dumps({"task_id": s.task_id, "sample_index": s.sample_index, "completion": s.completion}) + "\n")
    (out_dir / "acceptance.json").write_text(json.dumps(report.as_dict(), indent=2) + "\n")
    (out_dir / "acceptance.md").write_text(acceptance_markdown(report))
    return selected, report


def saved_selection(out_dir: Path) -> tuple[list[JudgedSample], dict[str, Any]] | None:
    """The selection a finished judge step left in ``out_dir`` (``accepted.jsonl`` + ``acceptance.json``), if any."""
    accepted, report = out_dir / "accepted.jsonl", out_dir / "acceptance.json"
    if not (accepted.is_file() and report.is_file()):
        return None
    rows = [json.loads(line) for line in accepted.read_text(encoding="utf-8").splitlines() if line.strip()]
    selected = [JudgedSample(r["task_id"], int(r["sample_index"]), r["completion"], True, True) for r in rows]
    return selected, json.loads(report.read_text())


def acceptance_markdown(report: AcceptanceReport) -> str:
    d = report.as_dict()
    lines = ["# Rejection sampling", "",
             f"{d['samples']} samples over {d['prompts']} prompts; failed {d['failed_samples']}; "
             f"correct {100 * d['correct_rate']:.1f}%, helpful {100 * d['helpful_rate']:.1f}%, "
             f"accepted (C ∧ H) {100 * d['acceptance_rate']:.1f}%; {d['selected']} SFT targets; "
             f"{len(d['unaccepted_prompts'])} prompts with no accepted sample.", "",
             "| question kind | samples | accepted | acceptance rate | prompts with none accepted |", "|---|---|---|---|---|"]
    for kind, c in d["by_kind"].items():
        lines.append(f"| {kind} | {c['samples']} | {c['accepted']} | {100 * c['acceptance_rate']:.1f}% | "
                     f"{c['prompts'] - c['prompts_with_accepted']} |")
    return "\n".join(lines) + "\n"


def run_rft(cfg: RFTConfig) -> Path:
    """Run stage 1 and return the directory of the fine-tuned student (``<output_dir>/final``).

    A LoRA student (``lora:`` in the student YAML, the default for a pretrained one) also leaves its adapter in
    ``<output_dir>/adapter`` (see ``livethink.models.export``). Both carry the reasoning format the student learnt
    (``reasoning_format.json``). Under ``accelerate launch`` the main process prepares the data, the teacher samples,
    the tokenizer and the selection first; the others then read them.
    """
    from livethink.models.export import ADAPTER_DIR, save_trained
    from livethink.models.student import build_student, load_student_config
    from livethink.rft_distill.checks import require_ok
    from livethink.rft_distill.sft import sft_dataset, student_format, train_sft

    require_ok(cfg)  # every check of --dry-run, before the teacher samples
    out_dir = Path(cfg.output_dir)
    final_dir = out_dir / "final"
    out_dir.mkdir(parents=True, exist_ok=True)
    main = cfg.process_index == 0
    timings: dict[str, float] = {}
    start = time.perf_counter()
    student_cfg = load_student_config(cfg.student_config)
    with cfg.main_process_first(local=False, desc="stage 1 data, teacher samples and selection"):
        data_dir = ensure_data(cfg.data_dir, cfg.data_seed)
        tasks = read_tasks(data_dir / "train.jsonl")
        if cfg.n_prompts:
            tasks = tasks[: cfg.n_prompts]
        timings["data_s"] = time.perf_counter() - start

        t = time.perf_counter()
        samples_dir = Path(cfg.samples_dir or out_dir / "samples")
        sampling_summary = sample_teacher(cfg, tasks, samples_dir)
        timings["teacher_sampling_s"] = time.perf_counter() - t

        t = time.perf_counter()
        tokenizer = None
        if not student_cfg.pretrained:
            tokenizer = ensure_tokenizer(cfg.tokenizer_dir, tasks, samples_dir, cfg.tokenizer_vocab_size)
        timings["tokenizer_s"] = time.perf_counter() - t

        t = time.perf_counter()
        saved_sel = saved_selection(out_dir)
        if saved_sel is not None:  # a finished judge step (e.g. a --data_only run while the endpoint was up)
            logger.info("reusing the judged selection in %s (delete accepted.jsonl to judge again)", out_dir)
            selected, acceptance = saved_sel
        else:
            selected, report = judge_and_select(cfg, tasks, samples_dir, out_dir, write=main)
            acceptance = report.as_dict()
        timings["judge_s"] = time.perf_counter() - t
    logger.info("acceptance: %s", json.dumps({k: v for k, v in acceptance.items() if k != "unaccepted_prompts"}))
    if cfg.data_only:
        logger.info("data_only: teacher samples and the judged selection are in %s; run again without it to train",
                    out_dir)
        return final_dir

    t = time.perf_counter()
    if (final_dir / "config.json").is_file():
        logger.info("reusing the fine-tuned student in %s", final_dir)
    else:
        by_id = {task.id: task for task in tasks}
        model, tokenizer = build_student(student_cfg, tokenizer)
        fmt = student_format(cfg.reasoning, tokenizer)
        logger.info("the student learns the reasoning format %s", fmt.describe())
        trainer = train_sft(model, tokenizer, sft_dataset(selected, by_id, fmt), cfg)
        saved = save_trained(trainer, out_dir, base=student_cfg.pretrained, dtype=student_cfg.dtype,
                             config=student_cfg)
        if trainer.accelerator.is_main_process:
            for path in saved.values():  # serving, eval and stage 2 read the delimiters from the checkpoint
                fmt.save(path)
        if "adapter" in saved:
            logger.info("LoRA student: adapter in %s (over %s), merged weights in %s", saved["adapter"],
                        student_cfg.pretrained, final_dir)
        timings["sft_s"] = time.perf_counter() - t
    timings["total_s"] = time.perf_counter() - start
    summary = {"final_dir": str(final_dir), "sampling": sampling_summary, "acceptance": dict(acceptance),
               "timings": {k: round(v, 1) for k, v in timings.items()}}
    if (out_dir / ADAPTER_DIR / "adapter_config.json").is_file():
        summary.update(adapter_dir=str(out_dir / ADAPTER_DIR), adapter_base=student_cfg.pretrained)
    summary["acceptance"].pop("unaccepted_prompts", None)
    if main:
        (out_dir / "rft_summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    return final_dir
