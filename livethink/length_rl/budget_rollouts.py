"""Budget-forced rollouts: stage 2 trains the student for the server's cut.

The server ends thinking at a cap set by the request's deadline, forces the reasoning end and makes the model
answer from there (``livethink.data.budget_forcing``). A rollout option any variant can turn on
(``budget_forcing: true``) does the same during training: each completion draws a thinking cap
(``budget_caps``), thinking is cut there exactly as the server cuts it (the format's forced end, the server's
reply reserve, no second think block), and the forced reply is scored by the variant's own reward columns.
Completions that end thinking before their cap are unchanged. The forced tokens are not the policy's choice: they leave the loss
(``tool_mask``), and vLLM's sampling log-probs for them become NaN (as for the calculator's digits).

Anchors: Elastic Reasoning's budget-constrained rollout (arXiv 2505.05315: thinking generated up to a budget,
``</think>`` appended when cut, the solution under its own budget, the whole rewarded) with AnytimeReasoner's
budgets drawn from a prior (arXiv 2505.13438).

Caps: ``auto`` draws uniformly from 0 to what the serving deadline holds at the measured decode speed
(``deadline_thinking_cap``); ``uniform:LO:HI`` and ``choice:A,B,C`` name the distribution; a share
``budget_uncapped_share`` of completions is not capped at all.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from transformers import LogitsProcessor, LogitsProcessorList

from livethink.calculator.processors import force
from livethink.data.budget_forcing import ForcingTokens, banned_token, forced_mask, next_forced_token
from livethink.data.reasoning_format import ReasoningFormat

REQUEST_KEY = "budget_forcing"  # SamplingParams.extra_args key read by the vLLM logits processor


def not_thinking_problem(fmt: ReasoningFormat, why: str, model: object) -> str | None:
    """Why ``model`` (reasoning format ``fmt``, resolved because ``why``) cannot take budget-forced rollouts, or
    ``None`` when it thinks: budget forcing cuts thinking."""
    if fmt.thinks:
        return None
    return (f"budget_forcing: {model} does not think (reasoning format {fmt.describe()}: {why}); budget forcing "
            "cuts thinking, so train a thinking student (stage 1's output) or set budget_forcing: false")


def deadline_thinking_cap(deadline_ms: float, tpot_ms: float, ttft_ms: float, overhead_ms: float,
                          reply_reserve: int, forced_end_tokens: int) -> int:
    """Thinking tokens a deadline holds on an idle engine: the tokens that fit after the first token and the
    server's margins, less the reply reserve and the forced end (the server's ``plan_budget`` with no queue)."""
    if tpot_ms <= 0:
        raise ValueError(f"budget_tpot_ms must be > 0, got {tpot_ms}")
    total = math.floor((deadline_ms - ttft_ms - overhead_ms) / tpot_ms)
    return max(0, total - reply_reserve - forced_end_tokens)


@dataclass(frozen=True)
class CapDistribution:
    """Thinking caps to draw from: ``caps`` with equal weight, and ``uncapped_share`` of draws with no cap."""

    caps: tuple[int, ...]
    uncapped_share: float = 0.0

    @classmethod
    def parse(cls, spec: str, auto_high: int, uncapped_share: float = 0.0) -> CapDistribution:
        """``auto`` (0..auto_high), ``uniform:LO:HI`` (every integer, both ends included) or ``choice:A,B,..``."""
        if not 0.0 <= uncapped_share < 1.0:
            raise ValueError(f"budget_uncapped_share must be in [0, 1), got {uncapped_share}")
        kind, _, rest = spec.partition(":")
        try:
            if kind == "auto" and not rest:
                caps = tuple(range(0, auto_high + 1))
            elif kind == "uniform":
                low, high = (int(x) for x in rest.split(":"))
                caps = tuple(range(low, high + 1))
            elif kind == "choice":
                caps = tuple(int(x) for x in rest.split(",") if x.strip())
            else:
                raise ValueError
        except ValueError:
            raise ValueError(f"budget_caps: expected auto, uniform:LO:HI or choice:A,B,...; got {spec!r}") from None
        if not caps or min(caps) < 0:
            raise ValueError(f"budget_caps: {spec!r} gives no non-negative cap")
        return cls(caps, uncapped_share)

    @property
    def max_cap(self) -> int:
        return max(self.caps)

    def draw(self, n: int, generator: torch.Generator, group_size: int = 1) -> list[int | None]:
        """``n`` draws (None: uncapped), one per run of ``group_size`` consecutive rows."""
        if n % group_size:
            raise ValueError(f"budget forcing: {n} rollouts do not split into groups of {group_size}")
        k = n // group_size
        picks = torch.randint(len(self.caps), (k,), generator=generator).tolist()
        free = (torch.rand(k, generator=generator) < self.uncapped_share).tolist()
        caps = [None if f else self.caps[i] for i, f in zip(picks, free, strict=True)]
        return [cap for cap in caps for _ in range(group_size)]


NO_CUT = 1 << 30
"""A thinking cap no completion reaches: the forcing rule without a cut (the served reply's reserve and the ban on a
second think block still hold)."""


@dataclass
class CapSampler:
    """Draws each rollout's cap and remembers the last draw, which the trainer reads back to mask the forced
    tokens. ``group_size``: rows that share one cap (a GRPO group: its completions are compared under one cut, so
    the advantage reflects what each did with the same budget, not which cap it drew). ``active``: the trainer turns it on around its training rollouts only (evaluation rollouts and any
    other use of the engine are not cut)."""

    distribution: CapDistribution
    tokens: ForcingTokens
    reply_reserve: int
    generator: torch.Generator
    group_size: int = 1
    active: bool = False
    last: list[int | None] = field(default_factory=list)

    drawn_active: bool = False

    def draw(self, n: int) -> list[int | None]:
        """The caps of ``n`` rollouts (None: uncut); returns ``forcing_caps()``, what the forcing rule runs with."""
        self.last = self.distribution.draw(n, self.generator, self.group_size) if self.active else [None] * n
        self.drawn_active = self.active
        return self.forcing_caps()

    def forcing_caps(self) -> list[int | None]:
        """Per row of the last draw, the cap the forcing rule runs with: a training row drawn uncut runs with
        ``NO_CUT``, so its reply is served as the server serves one (it stops ``reply_reserve`` tokens after the
        think block, and thinking is not opened twice); rows drawn while inactive are left alone (None)."""
        return [NO_CUT if cap is None and self.drawn_active else cap for cap in self.last]

    def request_args(self, cap: int) -> dict[str, Any]:
        """What one vLLM request carries in ``SamplingParams.extra_args`` (``REQUEST_KEY``)."""
        return {"cap": cap, "reply_reserve": self.reply_reserve, "tokens": self.tokens.to_json()}

    def masks(self, prompts: Sequence[Sequence[int]], completions: Sequence[Sequence[int]]) -> list[list[bool]]:
        """Per completion of the last draw, the tokens budget forcing wrote."""
        if len(self.last) != len(completions):
            raise RuntimeError(f"budget forcing: {len(self.last)} caps drawn for {len(completions)} completions")
        return [forced_mask(p, c, cap, self.tokens, self.reply_reserve)
                for p, c, cap in zip(prompts, completions, self.forcing_caps(), strict=True)]


class BudgetForcingLogitsProcessor(LogitsProcessor):
    """transformers ``LogitsProcessor`` for one ``generate`` call: row ``i`` is cut at ``caps[i]`` (None: never,
    and no ban either). The first call sees the (left-padded) prompts; what follows them is the output."""

    def __init__(self, caps: Sequence[int | None], tokens: ForcingTokens, reply_reserve: int | None):
        self.caps, self.tokens, self.reply_reserve = list(caps), tokens, reply_reserve
        self.prompt_length: int | None = None

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        if self.prompt_length is None:
            self.prompt_length = input_ids.shape[1]
        if input_ids.shape[0] != len(self.caps):
            raise RuntimeError(f"budget forcing: {len(self.caps)} caps for a batch of {input_ids.shape[0]} rows")
        for row, cap in enumerate(self.caps):
            if cap is None:
                continue
            ids = input_ids[row].tolist()
            scores[row] = forcing_step(ids[: self.prompt_length], ids[self.prompt_length:], cap, self.tokens,
                                       self.reply_reserve, scores[row])
        return scores


def forcing_step(prompt_ids: Sequence[int], output_ids: Sequence[int], cap: int, tokens: ForcingTokens,
                 reply_reserve: int | None, logits: torch.Tensor) -> torch.Tensor:
    """One row's next-token logits under the forcing rule (``livethink.data.budget_forcing``): the forced token
    where the cut writes one, else the model's own with the reasoning start banned once thinking is open."""
    token = next_forced_token(prompt_ids, output_ids, cap, tokens, reply_reserve)
    if token is not None:
        return force(logits, token)
    banned = banned_token(prompt_ids, output_ids, tokens)
    if banned is not None:
        logits[banned] = float("-inf")
    return logits


def with_budget_forcing(model: Any, sampler: CapSampler) -> Any:
    """Make ``model.generate`` budget-forced (TRL's transformers rollouts call it with a batch of prompts): each
    call draws one cap per row. Processors already passed (the calculator's) still run. Returns ``model``."""
    generate = model.generate

    def generate_with_budget(*args: Any, **kwargs: Any):
        input_ids = kwargs.get("input_ids", args[0] if args else None)
        caps = sampler.draw(int(input_ids.shape[0]))
        processors = LogitsProcessorList(kwargs.pop("logits_processor", None) or [])
        processors.append(BudgetForcingLogitsProcessor(caps, sampler.tokens, sampler.reply_reserve))
        return generate(*args, logits_processor=processors, **kwargs)

    model.generate = generate_with_budget
    return model


def request_step(args: dict[str, Any]):
    """For the vLLM processor: ``(prompt_ids, output_ids, logits) -> logits`` under the forcing rule
    (``forcing_step``) for one request, from its ``extra_args[REQUEST_KEY]`` (``CapSampler.request_args``)."""
    tokens = ForcingTokens.from_json(args["tokens"])
    cap, reserve = int(args["cap"]), args.get("reply_reserve")

    def step(prompt_ids: Sequence[int], output_ids: Sequence[int], logits: torch.Tensor) -> torch.Tensor:
        return forcing_step(prompt_ids, output_ids, cap, tokens, reserve, logits)

    return step
