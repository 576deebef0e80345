"""`LengthRLTrainer`: TRL's `GRPOTrainer` running the hooks of one registered variant (``registry.Variant``).

The trainer never names a variant; at TRL's hook points (made public by ``trl_compat.GRPOHooks``) it calls the
variant's hooks:

- ``generate_and_score``: ``generation_cap`` sets the completion cap of the generation; ``oversample_factor``
  turns on dynamic sampling (more prompts, the informative groups kept); ``postprocess_batch`` edits the scored
  batch (masks, labels); calculator-forced digits leave the loss.
- ``calculate_rewards``: L_ref is measured on the first rollouts (if not given); ``postprocess_rewards`` may
  re-score, *before* the advantages (and any zero-std filter) are computed; a judge failure's row becomes all NaN,
  so TRL leaves it out of its group's statistics (``advantages.leave_out_failures``).
- ``compute_policy_loss``: the variant's ``compute_loss``, else TRL's.
- ``shuffle_generation_batch``: whole groups, so a prompt's group never splits across micro-batches (and, with
  ``per_device_train_batch_size × steps_per_generation`` a multiple of G, never across processes).

The math lives in pure functions (``dot``, ``drpo``, ``schedules``, ...); this class only moves tensors around.
"""

from __future__ import annotations

import json
import logging
import os
from contextlib import contextmanager
from typing import Any

import torch

from livethink.length_rl import advantages
from livethink.length_rl.callbacks import MetricsCallback
from livethink.length_rl.config import GRPOVariantConfig
from livethink.length_rl.decoupled_rollouts import decoupled_server_client
from livethink.length_rl.rewards import CORRECTNESS, HELPFULNESS, RewardContext, Scored
from livethink.length_rl.trl_compat import GRPOHooks, patch_llm_constructor

logger = logging.getLogger(__name__)
STATE_FILE = "length_rl_state.json"


def shuffle_groups(batch: dict[str, Any], group_size: int, generator: torch.Generator | None = None) -> dict[str, Any]:
    """Permute whole groups of ``group_size`` consecutive rows (tensors and lists alike; scalars untouched)."""
    n = len(next(v for v in batch.values() if v is not None and (isinstance(v, list) or v.ndim > 0)))
    order = torch.randperm(n // group_size, generator=generator)
    index = (order.unsqueeze(1) * group_size + torch.arange(group_size)).view(-1)
    return select_rows(batch, index, n)


def select_rows(batch: dict[str, Any], index: torch.Tensor, n: int) -> dict[str, Any]:
    """Rows ``index`` of every per-row entry of ``batch`` (entries whose first dimension is ``n``)."""
    out: dict[str, Any] = {}
    for key, value in batch.items():
        if isinstance(value, torch.Tensor) and value.ndim > 0 and value.size(0) == n:
            out[key] = value[index.to(value.device)]
        elif isinstance(value, list) and len(value) == n:
            out[key] = [value[i] for i in index.tolist()]
        else:
            out[key] = value
    return out


@contextmanager
def router_logits_off(model):
    """MoE router logits off during generation: transformers' load-balancing loss breaks on KV-cached decoding
    with an attention mask; TRL asks for the logits explicitly where it needs the aux loss."""
    config = getattr(getattr(model, "module", model), "config", None)
    saved = getattr(config, "output_router_logits", None)
    if saved:
        config.output_router_logits = False
    try:
        yield
    finally:
        if saved:
            config.output_router_logits = saved


@contextmanager
def colocated_logits_processors(cfg: Any):
    """While TRL builds its colocated vLLM engine, it gets the logits processors the rollouts need (calculator,
    budget forcing); each acts only on requests that ask for it."""
    processors: list[type] = []
    if getattr(cfg, "use_vllm", False) and getattr(cfg, "calculator", False):
        from livethink.calculator.vllm_processor import VLLMCalculatorLogitsProcessor

        processors.append(VLLMCalculatorLogitsProcessor)
    if getattr(cfg, "use_vllm", False) and getattr(cfg, "budget_forcing", False):
        from livethink.length_rl.vllm_budget_forcing import VLLMBudgetForcingLogitsProcessor

        processors.append(VLLMBudgetForcingLogitsProcessor)
    if not processors:
        yield
        return
    with patch_llm_constructor(logits_processors=processors):
        yield


class LengthRLTrainer(GRPOHooks):
    """GRPO with one of the registered length-compression variants (``args.variant``)."""

    def __init__(self, *args: Any, reward_context: RewardContext | None = None, **kwargs: Any):
        from livethink.length_rl.vllm_sync import check_cpu_colocate

        args_in = kwargs.get("args")
        check_cpu_colocate(args_in, kwargs.get("model"))
        with colocated_logits_processors(args_in), decoupled_server_client(args_in):
            super().__init__(*args, **kwargs)
        cfg: GRPOVariantConfig = self.args
        self.variant = cfg.spec
        self.reward_context = reward_context or RewardContext()
        self.reward_context.eos_ids = {*self.eos_token_ids, self.text_tokenizer.pad_token_id}
        self.reward_context.group_size = self.num_generations
        if cfg.l_ref:
            self.reward_context.l_ref = float(cfg.l_ref)
        self.pass_rates: list[float] = []  # dynamic sampling: share of informative groups per step
        self.final_rewards: torch.Tensor | None = None  # global (N, F) rewards of the last generation
        self._extra_rng = torch.Generator().manual_seed(cfg.seed + 7919 * self.accelerator.process_index)
        if cfg.trainable_parameters:
            from livethink.models.freezing import train_only

            logger.info("training only %s", ", ".join(train_only(self.model, cfg.trainable_parameters)))
        if cfg.freeze_router:
            from livethink.models.freezing import freeze_routers

            logger.info("froze %d router parameters", freeze_routers(self.model))
        self.budget_sampler = self._budget_sampler() if cfg.budget_forcing else None
        self.tail = None  # tail batching (tail_rollouts): short rounds, deferred prompts, long rounds
        if cfg.tail_batching:
            from livethink.length_rl.tail_rollouts import TailRollouts

            self.tail = TailRollouts(cfg.tail_short_limit(), cfg.tail_overprovision, self.num_generations)
        if cfg.calculator:
            from livethink.calculator.processors import result_char_token_ids, with_calculator
            from livethink.length_rl.vllm_calculator import patch_forced_logprobs

            self._calculator_char_ids = result_char_token_ids(self.text_tokenizer)
            if self.use_vllm:  # the engine got the processor above, the requests its flag (config)
                patch_forced_logprobs(self.vllm_generation, self.text_tokenizer, self._calculator_char_ids)
            else:
                with_calculator(self.model, self.text_tokenizer)
        if self.use_vllm and self.vllm_mode == "colocate" and self.accelerator.device.type == "cpu":
            from livethink.length_rl.vllm_sync import patch_cpu_weight_sync

            patch_cpu_weight_sync(self.vllm_generation)
        self.decoupled = None  # rollout_mode: decoupled (decoupled_rollouts): next window generated while training
        if cfg.rollout_mode == "decoupled":
            from livethink.length_rl.decoupled_rollouts import DecoupledRollouts

            self.decoupled = DecoupledRollouts(self)
            self.decoupled.install()
        # rollout/engine_busy_s: the rollout engine's generation time (rollout_timing)
        from livethink.length_rl.rollout_timing import time_engine, time_model

        self.engine_timer = time_engine(self.vllm_generation) if self.use_vllm else time_model(self.model)
        self.add_callback(MetricsCallback(self))
        self.variant.setup(self)

    def _budget_sampler(self):
        """Budget-forced rollouts: the cap sampler, hooked into this trainer's generation (vLLM or transformers)."""
        from livethink.data.budget_forcing import ForcingTokens
        from livethink.data.reasoning_format import resolve
        from livethink.length_rl.budget_rollouts import CapSampler, not_thinking_problem, with_budget_forcing

        cfg: GRPOVariantConfig = self.args
        fmt, why = resolve("auto", self.text_tokenizer, cfg.model_name_or_path)
        if problem := not_thinking_problem(fmt, why, cfg.model_name_or_path):
            raise ValueError(problem)
        tokens = ForcingTokens.of(self.text_tokenizer, fmt, eos=self.eos_token_ids[0])
        dist = cfg.budget_distribution(forced_end_tokens=len(tokens.forced_end))
        sampler = CapSampler(dist, tokens, cfg.budget_reply_reserve,
                             torch.Generator().manual_seed(cfg.seed + 104729 * self.accelerator.process_index),
                             group_size=self.num_generations if cfg.budget_cap_scope == "group" else 1)
        if self.use_vllm:
            from livethink.length_rl.vllm_budget_forcing import patch_budget_requests

            patch_budget_requests(self.vllm_generation, sampler)
        else:
            with_budget_forcing(self.model, sampler)
        logger.info("budget-forced rollouts: caps %s..%s (%d values, %.0f%% uncapped, one per %s), forced end %r, "
                    "reply reserve %d", min(dist.caps), dist.max_cap, len(dist.caps), 100 * dist.uncapped_share,
                    cfg.budget_cap_scope, fmt.forced_end, cfg.budget_reply_reserve)
        return sampler

    def _mask_budget_forced_tokens(self, output: dict[str, Any]) -> None:
        """Leave the tokens budget forcing wrote out of the loss, and log how often and where rollouts were cut."""
        completion_ids, completion_mask = output["completion_ids"], output["completion_mask"]
        prompts = [output["prompt_ids"][r][output["prompt_mask"][r].bool()].tolist() for r in range(len(completion_ids))]
        completions = [completion_ids[r, : int(completion_mask[r].sum())].tolist() for r in range(len(completion_ids))]
        forced = torch.zeros_like(completion_mask)
        for row, mask in enumerate(self.budget_sampler.masks(prompts, completions)):
            forced[row, : len(mask)] = torch.tensor(mask, dtype=forced.dtype)
        keep = 1 - forced
        output["tool_mask"] = keep if "tool_mask" not in output else output["tool_mask"] * keep
        caps = [c for c in self.budget_sampler.last if c is not None]
        cut = forced.sum(dim=1) >= len(self.budget_sampler.tokens.forced_end)  # a served EOS alone is not a cut
        self.log_metric("budget/cut_share", float(cut.float().mean()))
        self.log_metric("budget/cap_mean", float(sum(caps) / len(caps)) if caps else float("nan"))

    # ----- helpers the variants use
    def column(self, name: str) -> int | None:
        """Index of the reward column ``name`` (None when the variant has none)."""
        return self.reward_func_names.index(name) if name in self.reward_func_names else None

    def local_slice(self, n_local: int) -> slice:
        """This process's rows of a gathered batch of ``n_local`` rows per process."""
        start = self.accelerator.process_index * n_local
        return slice(start, start + n_local)

    def score(self, inputs, prompts, completions, completion_ids_list) -> torch.Tensor:
        """TRL's reward computation (every reward column, gathered) for re-scoring edited completions."""
        return self.trl_calculate_rewards(inputs, prompts, completions, completion_ids_list)

    def _set_generation_cap(self, cap: int) -> None:
        if self.use_vllm:
            self.vllm_generation.max_completion_length = cap
        else:
            self.generation_config.max_new_tokens = cap

    # ----- decoupled rollouts: the epoch iterator read one window ahead, the window being generated
    def get_batch_samples(self, epoch_iterator, num_batches, device):
        if self.decoupled is not None:
            epoch_iterator = self.decoupled.wrap_iterator(epoch_iterator)
        return super().get_batch_samples(epoch_iterator, num_batches, device)

    def prepare_inputs(self, generation_batch):
        if self.decoupled is not None and self.model.training:
            self.decoupled.generation_batch = generation_batch
        return super().prepare_inputs(generation_batch)

    def train(self, *args: Any, **kwargs: Any):
        try:
            return super().train(*args, **kwargs)
        finally:
            if self.decoupled is not None:
                self.decoupled.close()

    # ----- hook: batching (groups stay whole)
    def shuffle_generation_batch(self, batch: dict[str, Any]) -> dict[str, Any]:
        return shuffle_groups(batch, self.num_generations)

    # ----- hook: rewards (L_ref, the variant's post-processing)
    def calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        lengths = torch.tensor([len(ids) for ids in completion_ids_list], device=self.accelerator.device)
        all_lengths = self.accelerator.gather(lengths)
        if self.reward_context.l_ref is None:
            self.reward_context.l_ref = float(all_lengths.float().mean())
            logger.info("L_ref measured on the first rollouts: %.1f tokens", self.reward_context.l_ref)
        rewards = self.trl_calculate_rewards(inputs, prompts, completions, completion_ids_list)
        rewards = self.variant.postprocess_rewards(
            self, Scored(inputs, prompts, completions, completion_ids_list, all_lengths.cpu(), rewards))
        judge_columns = [i for i in (self.column(CORRECTNESS), self.column(HELPFULNESS)) if i is not None]
        self.log_metric("judge/failed_share", advantages.judge_failures(rewards, judge_columns).float().mean())
        self.final_rewards = rewards = advantages.leave_out_failures(rewards, judge_columns)
        if (c := self.column(CORRECTNESS)) is not None:
            self.log_metric("accuracy", torch.nan_to_num(torch.nanmean(rewards[:, c])))
        if (h := self.column(HELPFULNESS)) is not None:
            self.log_metric("helpful_rate", torch.nan_to_num(torch.nanmean(rewards[:, h])))
        if self.reward_context.l_ref is not None:
            self.log_metric("l_ref", self.reward_context.l_ref)
        return rewards

    # ----- hook: generation + scoring (cap, dynamic sampling, the variant's batch edits)
    def generate_and_score(self, inputs):
        cfg: GRPOVariantConfig = self.args
        training = self.model.training
        cap = self.variant.generation_cap(self, self.state.global_step, training)
        n_local = len(inputs)
        tail = self.tail.plan(self, inputs, cap) if self.tail is not None and training else None
        if tail is not None:
            inputs, cap = tail.inputs, tail.cap
        if cap is not None:
            self._set_generation_cap(cap)
        factor = self.variant.oversample_factor(self) if training else None
        if factor is not None:
            inputs = list(inputs) + self._extra_prompts(n_local, factor)
        if self.budget_sampler is not None:
            self.budget_sampler.active = training  # only this trainer's own training rollouts are cut
        try:
            with router_logits_off(self.model):
                output = self.trl_generate_and_score(inputs)
        finally:
            if self.budget_sampler is not None:
                self.budget_sampler.active = False
        usable = self.tail.settle(self, tail, output, inputs) if tail is not None else None
        if tail is not None and self.decoupled is not None:
            self.tail.prefetch_next(self)  # the next round, generated on the server while this step trains
        if self.budget_sampler is not None and training:  # before any variant edit: rows still match the draw
            self._mask_budget_forced_tokens(output)
        output = self.variant.postprocess_batch(self, output, len(inputs))
        if cfg.calculator and training:
            self._mask_calculator_tokens(output)
        if factor is not None:
            output = self._keep_informative_groups(output, len(inputs), n_local, usable)
        elif usable is not None:
            output = self._keep_groups(output, len(inputs), n_local, usable, None)
        elif self.variant.masks_tokens or cfg.calculator or self.budget_sampler is not None:
            output["num_items_in_batch"] = self._count_loss_tokens(output)
        return output

    def _mask_calculator_tokens(self, output: dict[str, Any]) -> None:
        """Leave the calculator's forced digits out of the loss, as RL does with tool output: the policy did not
        choose them, and their gradient (large where the policy disagreed) would be noise on its own skills."""
        from livethink.calculator.processors import forced_mask

        completion_ids, completion_mask = output["completion_ids"], output["completion_mask"]
        forced = torch.zeros_like(completion_mask)
        for row in range(completion_ids.shape[0]):
            context = output["prompt_ids"][row][output["prompt_mask"][row].bool()].tolist()
            n = int(completion_mask[row].sum())
            forced[row, :n] = torch.tensor(
                forced_mask(self.text_tokenizer, self._calculator_char_ids, context, completion_ids[row, :n].tolist()),
                dtype=forced.dtype)
        keep = 1 - forced
        output["tool_mask"] = keep if "tool_mask" not in output else output["tool_mask"] * keep
        self.log_metric("calculator/forced_share", float((forced * completion_mask).sum() / completion_mask.sum().clamp(min=1)))

    def _count_loss_tokens(self, output: dict[str, Any]) -> torch.Tensor:
        mask = output["completion_mask"] if "tool_mask" not in output else output["completion_mask"] * output["tool_mask"]
        return self.accelerator.gather(mask.sum()).sum()

    # ----- dynamic sampling
    def _extra_prompts(self, n_local: int, factor: float) -> list[dict[str, Any]]:
        """(factor − 1)·n more rows: whole groups of prompts drawn from the train set (same count on every process)."""
        self.log_metric(f"{self.variant.prefix}/oversample_factor", factor)
        n_groups = n_local // self.num_generations
        extra_groups = max(0, round(n_groups * factor) - n_groups)
        return [dict(p) for p in self.draw_prompts(extra_groups) for _ in range(self.num_generations)]

    def draw_prompts(self, n: int) -> list[dict[str, Any]]:
        """``n`` prompts drawn from the train set (one row each, with this process's generator)."""
        picks = torch.randint(len(self.train_dataset), (n,), generator=self._extra_rng).tolist()
        return [dict(self.train_dataset[i]) for i in picks]

    def _keep_informative_groups(self, output: dict[str, Any], n_total: int, n_local: int,
                                 usable: list[bool] | None = None) -> dict[str, Any]:
        """Keep the first n_local/G groups with reward std > 0 (filling with masked-out zero-std groups); with tail
        batching, only among the ``usable`` (not deferred) groups."""
        g = self.num_generations
        flat = advantages.zero_std_groups(advantages.weighted_rewards(self.final_rewards, self.reward_weights), g).cpu()
        self.pass_rates.append(float((~flat).float().mean()))
        self.log_metric(f"{self.variant.prefix}/pass_rate", self.pass_rates[-1])
        local_flat = flat[self.local_slice(n_total // g)]
        if usable is not None:
            return self._keep_groups(output, n_total, n_local, usable, (~local_flat).tolist())
        order = torch.cat([(~local_flat).nonzero().view(-1), local_flat.nonzero().view(-1)])[: n_local // g]
        index = (order.unsqueeze(1) * g + torch.arange(g)).view(-1)
        output = select_rows(output, index, n_total)
        keep = (~local_flat[order]).repeat_interleave(g).to(output["completion_mask"].device)
        output["completion_mask"] = output["completion_mask"] * keep.unsqueeze(1).to(output["completion_mask"].dtype)
        output["num_items_in_batch"] = self._count_loss_tokens(output)
        return output

    def _keep_groups(self, output: dict[str, Any], n_total: int, n_local: int, usable: list[bool],
                     preferred: list[bool] | None) -> dict[str, Any]:
        """Tail batching: keep n_local/G of a short round's groups, complete (and ``preferred``) ones first; fillers
        (deferred or not preferred) stay masked out of the loss."""
        g = self.num_generations
        order, keep = self.tail.select(usable, preferred, n_local // g)
        self.tail.log_kept(self, order, usable)
        index = (order.unsqueeze(1) * g + torch.arange(g)).view(-1)
        output = select_rows(output, index, n_total)
        keep = keep.repeat_interleave(g).to(output["completion_mask"].device)
        output["completion_mask"] = output["completion_mask"] * keep.unsqueeze(1).to(output["completion_mask"].dtype)
        output["num_items_in_batch"] = self._count_loss_tokens(output)
        return output

    # ----- hook: loss
    def compute_policy_loss(self, model, inputs):
        loss = self.variant.compute_loss(self, model, inputs)
        return self.trl_compute_loss(model, inputs) if loss is None else loss

    # ----- checkpoints: variant state travels with the trainer state
    def on_checkpoint_saved(self, folder: str) -> None:
        if self.args.should_save:
            state = {"l_ref": self.reward_context.l_ref, "pass_rates": self.pass_rates, **self.variant.state()}
            if self.tail is not None and self.accelerator.num_processes == 1:  # (one queue per process)
                state["tail_queue"] = self.tail.state()
            with open(os.path.join(folder, STATE_FILE), "w") as fh:
                json.dump(state, fh)
        self.variant.on_save(self, self.state.global_step)

    def on_checkpoint_loaded(self, checkpoint: str | None) -> None:
        path = os.path.join(checkpoint, STATE_FILE) if checkpoint else None
        if path and os.path.exists(path):
            with open(path) as fh:
                state = json.load(fh)
            if state.get("l_ref") is not None and not self.args.l_ref:
                self.reward_context.l_ref = float(state["l_ref"])
            self.pass_rates = list(state.get("pass_rates", []))
            if self.tail is not None and "tail_queue" in state:
                self.tail.load_state(state["tail_queue"])
            elif self.tail is not None:
                logger.warning("tail batching: %s holds no deferred-prompt queue (several processes, or saved without "
                               "tail batching); the queue starts empty", checkpoint)
            self.variant.load_state(state)
