"""Evaluate models (and the teacher) on a split: judge every completion, count tokens, probe latency."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from livethink.data.budget_forcing import REPLY_RESERVE, ForcingTokens, forced_continuation, served_reply_end
from livethink.data.prompt import completion_prefix
from livethink.data.reasoning_format import THINK, ReasoningFormat
from livethink.data.schema import Task
from livethink.eval.metrics import SampleEval, latency_summary, summarize, summarize_by_kind
from livethink.rewards.judge import Judge
from livethink.rewards.parse import parse_completion

if TYPE_CHECKING:
    from livethink.eval.generation import Generation

log = logging.getLogger(__name__)
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
                                count_tokens(parsed.reasoning), count_tokens(parsed.reply), finish,
                                len(verdict.details.get("claims") or ()), len(verdict.details.get("unsupported") or ())))
    return evals


def served_completions(generator, generations: Sequence[Generation], reply_reserve: int) -> dict[str, tuple[str, str]]:
    """task id -> (completion, finish reason) as the server serves it: a reply after a think block that closed on
    its own stops ``reply_reserve`` tokens after the close (``served_reply_end``; finish ``length``), as the server
    stops it; everything else as generated. A model that does not think is served as generated."""
    fmt = generator.reasoning_format
    out = {g.task_id: (g.completion, g.finish_reason) for g in generations}
    if not fmt.thinks:
        return out
    tokens = ForcingTokens.of(generator.tokenizer, fmt)
    prefix = completion_prefix(fmt, True)
    for g in generations:
        end = served_reply_end(g.prompt_ids, g.token_ids, tokens, reply_reserve)
        if end is not None:
            out[g.task_id] = (prefix + generator.tokenizer.decode(list(g.token_ids[:end]), skip_special_tokens=True),
                              "length")
    return out


class ModelEval(NamedTuple):
    """One model's evaluation: the report's entry, the judged samples as served (uncapped), the served
    completions (task id -> (text, finish reason)) and the judged samples at each thinking cap."""

    result: dict[str, Any]
    samples: list[SampleEval]
    completions: dict[str, tuple[str, str]]
    per_cap: dict[int, list[SampleEval]]


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
    batch_size: int = 16,
    thinking_caps: Sequence[int] = (),
    min_thinking_ratio: float = 0.9,
    reply_reserve: int = REPLY_RESERVE,
) -> ModelEval:
    """Greedy generation on ``tasks``, judged as served (``served_completions``: the reply capped at
    ``reply_reserve`` tokens after the think block, as the server caps it); latency probed one request at a time on the first few tasks.
    ``calculator``: calculator-assisted decoding (see ``livethink.calculator``). ``device`` / ``dtype``: the
    transformers engine's, and its prompts per ``generate`` call (``make_generator``). ``thinking_caps``: also measure correctness against the thinking
    cap (budget forcing as the server does it, the reply given ``reply_reserve`` tokens) and the minimum thinking
    budget (``result["thinking_curve"]``, see ``thinking_curve``)."""
    from livethink.eval.generation import make_generator, resolve_engine
    from livethink.models.loading import params_of_checkpoint

    active = params_of_checkpoint(model_dir).active
    engine = resolve_engine(engine)
    generator = make_generator(model_dir, engine, calculator=calculator, device=device, dtype=dtype,
                               batch_size=batch_size)
    try:
        generations = generator.generate(tasks, max_tokens=max_tokens)
        probes = generator.probe_latency(tasks[:latency_probes], max_tokens=max_tokens) if latency_probes else []
        count = token_counter(generator.tokenizer)
        fmt = generator.reasoning_format
        completions = served_completions(generator, generations, reply_reserve)
        if thinking_caps and not fmt.thinks:
            log.warning("%s does not think (reasoning format %s): no thinking-cap curve", model_dir, fmt.describe())
        per_cap = (thinking_curve_eval(generator, tasks, generations, judge, thinking_caps, reply_reserve)
                   if thinking_caps and fmt.thinks else [])
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
                            share(samples, "helpful"), min_thinking_ratio, len(tasks), reply_reserve=reply_reserve)
        result["thinking_curve"] = curve.to_json()
    return ModelEval(result, samples, completions, dict(per_cap))


def thinking_cap_prompts(
    generations: Iterable[Generation], cap: int, tokens: ForcingTokens
) -> tuple[dict[str, list[int]], list[str]]:
    """Split greedy generations for a thinking cap, in token space as the server forces it
    (``livethink.data.budget_forcing``): (task id -> the prompt to generate the reply from: prompt + thinking up to
    the cut + the forced end, task ids kept as they are). A completion whose thinking closed before the cap is
    what a capped greedy run produces too; the thinking of any other is cut at ``cap`` (the tokens after the start
    delimiter, pre-filled ones included)."""
    cut, kept = {}, []
    for g in generations:
        continuation = forced_continuation(g.prompt_ids, g.token_ids, cap, tokens)
        if continuation is None:
            kept.append(g.task_id)
        else:
            cut[g.task_id] = continuation
    return cut, kept


def thinking_curve_eval(
    generator,
    tasks: Sequence[Task],
    generations: Sequence[Generation],
    judge: Judge,
    caps: Sequence[int],
    reply_reserve: int = REPLY_RESERVE,
) -> list[tuple[int, list[SampleEval]]]:
    """Judged samples per thinking cap (see ``thinking_curve``): each cut completion is continued greedily from
    its forced continuation's token ids (``thinking_cap_prompts``) with ``reply_reserve`` reply tokens, as the
    server continues after a forced end; the completion judged is the prompt's opening, the thinking kept, the
    forced end and the reply."""
    fmt = generator.reasoning_format
    tokens = ForcingTokens.of(generator.tokenizer, fmt)
    count = token_counter(generator.tokenizer)
    prefix = completion_prefix(fmt, True)
    by_id = {g.task_id: g for g in generations}
    served = served_completions(generator, generations, reply_reserve)
    out = []
    for cap in caps:
        cut, kept = thinking_cap_prompts(generations, cap, tokens)
        capped = {task_id: served[task_id] for task_id in kept}
        if cut:
            ids = list(cut)
            replies = generator.continue_from([cut[i] for i in ids], max_tokens=reply_reserve)
            for task_id, reply in zip(ids, replies, strict=True):
                forced = cut[task_id][len(by_id[task_id].prompt_ids):]  # thinking kept + the forced end
                text = generator.tokenizer.decode([*forced, *reply.token_ids], skip_special_tokens=True)
                capped[task_id] = (prefix + text, reply.finish_reason)
        out.append((cap, judge_completions(tasks, capped, judge, count, fmt)))
    return out
