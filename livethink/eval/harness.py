"""Evaluate models (and the teacher) on a split: judge every completion, count tokens, probe latency."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from livethink.data.reasoning_format import THINK, ReasoningFormat, resolve
from livethink.data.schema import Task
from livethink.eval.metrics import SampleEval, latency_summary, summarize, summarize_by_kind
from livethink.rewards.judge import Judge
from livethink.rewards.parse import parse_completion

TokenCounter = Callable[[str], int]


def token_counter(tokenizer) -> TokenCounter:
    return lambda text: len(tokenizer.encode(text, add_special_tokens=False)) if text else 0


def judge_completions(
    tasks: Sequence[Task],
    completions: Mapping[str, tuple[str, str]],
    judge: Judge,
    count_tokens: TokenCounter,
    fmt: ReasoningFormat = THINK,
) -> list[SampleEval]:
    """``completions``: task id -> (completion text, finish reason), in the model's reasoning format ``fmt``."""
    evals = []
    for task in tasks:
        text, finish = completions[task.id]
        parsed = parse_completion(text, fmt)
        if fmt != THINK:  # the judges read the <think> layout
            text = THINK.format_completion(parsed.reasoning, parsed.reply) if parsed.closed else parsed.reply
        verdict = judge.score(task, text)
        evals.append(SampleEval(task.id, task.kind, verdict.correct, verdict.helpful,
                                count_tokens(parsed.reasoning), count_tokens(parsed.reply), finish))
    return evals


def model_result(name: str, samples: Sequence[SampleEval], active_params: int | None,
                 latency: dict[str, Any] | None = None, extra: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "name": name,
        "active_params": active_params,
        "overall": summarize(samples, active_params),
        "by_kind": summarize_by_kind(samples, active_params),
        "latency": latency,
        **(extra or {}),
    }


def evaluate_model(
    model_dir: str | Path,
    tasks: Sequence[Task],
    judge: Judge,
    engine: str = "auto",
    max_tokens: int = 768,
    latency_probes: int = 16,
    name: str | None = None,
    calculator: bool = False,
    device: str = "auto",
    dtype: str = "float32",
    thinking_caps: Sequence[int] = (),
    min_thinking_ratio: float = 0.9,
) -> tuple[dict[str, Any], list[SampleEval], dict[str, tuple[str, str]]]:
    """Greedy generation on ``tasks``, judged; latency probed one request at a time on the first few tasks.
    ``calculator``: calculator-assisted decoding (see ``livethink.calculator``). ``device`` / ``dtype``: the
    transformers engine's (``make_generator``). ``thinking_caps``: also measure correctness against the thinking
    cap (budget forcing) and the minimum thinking budget (``result["thinking_curve"]``, see ``thinking_curve``)."""
    from livethink.eval.generation import make_generator, resolve_engine
    from livethink.models.loading import params_of_checkpoint

    active = params_of_checkpoint(model_dir).active
    engine = resolve_engine(engine)
    generator = make_generator(model_dir, engine, calculator=calculator, device=device, dtype=dtype)
    try:
        generations = generator.generate(tasks, max_tokens=max_tokens)
        probes = generator.probe_latency(tasks[:latency_probes], max_tokens=max_tokens) if latency_probes else []
        count = token_counter(generator.tokenizer)
        fmt, _ = resolve("auto", generator.tokenizer, model_dir)
        completions = {g.task_id: (g.completion, g.finish_reason) for g in generations}
        per_cap = thinking_curve_eval(generator, tasks, completions, judge, thinking_caps, fmt=fmt) if thinking_caps else []
    finally:
        generator.close()
    samples = judge_completions(tasks, completions, judge, count, fmt)
    latency = latency_summary([p.ttft_s for p in probes], [p.e2e_s for p in probes]) if probes else None
    result = model_result(name or Path(model_dir).name, samples, active, latency,
                          {"model": str(model_dir), "engine": engine, "calculator": calculator,
                           **({"device": str(generator.device), "dtype": dtype} if engine == "transformers" else {})})
    if per_cap:
        from livethink.eval.thinking_curve import build_curve

        def share(ss: Sequence[SampleEval], attr: str) -> float:
            return sum(getattr(s, attr) for s in ss) / len(ss) if ss else 0.0

        curve = build_curve([c for c, _ in per_cap], [share(ss, "correct") for _, ss in per_cap],
                            [share(ss, "helpful") for _, ss in per_cap], share(samples, "correct"),
                            share(samples, "helpful"), min_thinking_ratio, len(tasks))
        result["thinking_curve"] = curve.to_json()
    return result, samples, completions


def thinking_cap_completions(
    completions: Mapping[str, tuple[str, str]], tokenizer, cap: int, fmt: ReasoningFormat = THINK
) -> tuple[dict[str, str], dict[str, tuple[str, str]]]:
    """Split tasks for a thinking cap: (task id -> budget-forced start to continue from, task id -> completion
    kept as is). A completion whose think block closed within ``cap`` tokens is what a capped greedy run
    produces too; any other is cut after ``cap`` reasoning tokens and the format's forced end is appended."""
    starts, kept = {}, {}
    for task_id, (text, finish) in completions.items():
        parsed = parse_completion(text, fmt)
        ids = tokenizer.encode(parsed.reasoning, add_special_tokens=False) if parsed.reasoning else []
        if parsed.closed and len(ids) <= cap:
            kept[task_id] = (text, finish)
        else:
            prefix = tokenizer.decode(ids[:cap], skip_special_tokens=True).rstrip() if cap else ""
            starts[task_id] = f"{fmt.prefill}{prefix}{fmt.forced_end}"
    return starts, kept


def thinking_curve_eval(
    generator,
    tasks: Sequence[Task],
    completions: Mapping[str, tuple[str, str]],
    judge: Judge,
    caps: Sequence[int],
    reply_tokens: int = 64,
    fmt: ReasoningFormat = THINK,
) -> list[tuple[int, list[SampleEval]]]:
    """Judged samples per thinking cap (budget forcing on the greedy completions; see ``thinking_curve``)."""
    count = token_counter(generator.tokenizer)
    out = []
    for cap in caps:
        starts, kept = thinking_cap_completions(completions, generator.tokenizer, cap, fmt)
        redo = [t for t in tasks if t.id in starts]
        capped = dict(kept)
        if redo:
            for g in generator.generate(redo, max_tokens=reply_tokens, starts=starts):
                capped[g.task_id] = (g.completion, g.finish_reason)
        out.append((cap, judge_completions(tasks, capped, judge, count, fmt)))
    return out
