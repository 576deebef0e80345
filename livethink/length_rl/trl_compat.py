"""Every use of TRL's (and the transformers ``Trainer``'s) private API in livethink, in one place.

``GRPOHooks`` turns the private methods stage 2 overrides into public ones (``generate_and_score``,
``calculate_rewards``, ``compute_policy_loss``, ``prepare_inputs``, ``on_checkpoint_saved`` ...), with TRL's own
behaviour reachable as ``trl_*``; it also gives public names to the private attributes stage 2 reads (``log_metric``,
``text_tokenizer``, ``per_token_logps``). The patches of TRL's vLLM generation (calculator logits processor, forced
log-probs, CPU weight sync) go through ``patch_llm_constructor``, ``wrap_vllm_generate``, ``replace_weight_sync`` and
``named_params_for_sync``. ``tests/length_rl/test_trl_compat.py`` proves no other module of ``livethink.length_rl``
names a TRL private.

Written against TRL ``TRL_VERSION``; on another version ``check_trl_version`` warns (or raises, with
``LIVETHINK_TRL_STRICT=1``) and lists ``RECHECK``, what to read again in TRL's source before trusting an upgrade.
"""

from __future__ import annotations

import functools
import os
import types
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch
import trl
from trl import GRPOTrainer
from trl.trainer.utils import split_pixel_values_by_grid, split_tensor_dict, unsplit_pixel_values_by_grid

TRL_VERSION = "1.16.0"
RECHECK: tuple[str, ...] = (
    "GRPOTrainer._prepare_inputs: its body is copied in GRPOHooks.prepare_inputs (buffering per steps_per_generation "
    "× num_iterations, pixel-value splitting); only the shuffle differs (whole groups)",
    "GRPOTrainer._generate_and_score_completions: returns the dict with completion_mask, tool_mask, "
    "num_items_in_batch, old_per_token_logps that the variants edit",
    "GRPOTrainer._calculate_rewards(inputs, prompts, completions, completion_ids_list): signature, and that it returns "
    "the gathered (N, F) rewards before the advantages are computed; that a row with every column NaN is left out of "
    "the group's nanmean / nanstd with advantage 0 (judge failures, advantages.leave_out_failures)",
    "GRPOTrainer._generate_and_score_completions: importance_sampling_ratio = exp(log π_old − log π_vLLM), (B, 1) in "
    "the sequence_* modes (summed over the tokens; masked to 0 or clamped at vllm_importance_sampling_clip_max, "
    "default sequence_mask with 3.0), (B, T) in the token_* modes; the drpo variant takes the (B, 1) one",
    "GRPOTrainer._compute_loss(model, inputs): signature; normalised by num_items_in_batch",
    "GRPOTrainer._get_per_token_logps_and_entropies: signature and its (logps, entropies, aux_loss) return",
    "GRPOTrainer._metrics[mode][name] lists, _tokenizer, _step, _buffered_inputs",
    "Trainer._save_checkpoint(model, trial), Trainer._get_output_dir(trial), Trainer._load_optimizer_and_scheduler",
    "Trainer._load_from_checkpoint(resume_from_checkpoint, model): still loads the saved state dict without the "
    "model's checkpoint conversion (transformers#43701)? If fixed, ConvertedResume can go",
    "trl.generation.vllm_generation.LLM (constructor patched for the calculator), VLLMGeneration.generate's 4-tuple, "
    "VLLMGeneration.sync_weights and _iter_named_params (CPU weight sync), VLLMGeneration.max_completion_length",
    "VLLMGeneration.llm and its colocate call llm.generate(prompts, sampling_params=<one SamplingParams>) "
    "(budget-forced rollouts give each prompt its own)",
    "rollout_mode: decoupled: VLLMGeneration's server-mode generate (gather, prompts[::n], broadcast, per-process "
    "slice), its sampling attributes (temperature, top_p, top_k, min_p, repetition_penalty, logprobs, "
    "structured_outputs_regex, generation_kwargs) and vllm_client; VLLMClient.init_communicator, _post, base_url; "
    "GRPOTrainer._tokenize_prompts(prompts) -> (prompt_ids, images, fields); the dataloader yielding each "
    "generation batch steps_per_generation × num_iterations times in a row; Trainer.get_batch_samples(epoch_iterator, "
    "num_batches, device)",
)


def check_trl_version(installed: str | None = None, strict: bool | None = None) -> bool:
    """True when the installed TRL is ``TRL_VERSION``; otherwise warn (raise when ``strict``) with ``RECHECK``."""
    installed = trl.__version__ if installed is None else installed
    if installed == TRL_VERSION:
        return True
    strict = os.environ.get("LIVETHINK_TRL_STRICT") == "1" if strict is None else strict
    message = (f"livethink.length_rl was written against trl {TRL_VERSION}, found trl {installed}; re-check in TRL's "
               f"source:\n- " + "\n- ".join(RECHECK))
    if strict:
        raise RuntimeError(message)
    warnings.warn(message, stacklevel=2)
    return False


class ConvertedResume:
    """Trainer mixin: resume from a checkpoint through ``from_pretrained``, which applies the model's checkpoint
    conversion. ``Trainer._load_from_checkpoint`` loads the saved state dict as is, and transformers saves a MoE's
    fused experts (``experts.gate_up_proj``) per expert (``experts.0.gate_proj.weight``): a resumed Qwen3-MoE run
    would go on with freshly initialised experts (https://github.com/huggingface/transformers/issues/43701).
    Adapters, FSDP and DeepSpeed checkpoints take the Trainer's own path."""

    def _load_from_checkpoint(self, resume_from_checkpoint: str, model=None) -> None:
        from transformers import PreTrainedModel

        model = self.model if model is None else model
        has_config = os.path.isfile(os.path.join(resume_from_checkpoint, "config.json"))
        if not isinstance(model, PreTrainedModel) or not has_config or getattr(self, "is_fsdp_enabled", False):
            return super()._load_from_checkpoint(resume_from_checkpoint, model)  # type: ignore[misc]
        loaded = type(model).from_pretrained(resume_from_checkpoint, dtype=next(model.parameters()).dtype)
        missing, unexpected = model.load_state_dict(loaded.state_dict(), strict=False)
        if missing or unexpected:
            raise RuntimeError(f"checkpoint {resume_from_checkpoint} does not match the model: missing {missing[:5]}, "
                               f"unexpected {unexpected[:5]}")
        del loaded


class GRPOHooks(ConvertedResume, GRPOTrainer):
    """TRL's ``GRPOTrainer`` with its private hook points under public names. Subclasses override the public names."""

    def __init__(self, *args: Any, **kwargs: Any):
        check_trl_version()
        super().__init__(*args, **kwargs)

    # ----- private hook points -> public methods
    def _prepare_inputs(self, generation_batch):
        return self.prepare_inputs(generation_batch)

    def _generate_and_score_completions(self, inputs):
        return self.generate_and_score(inputs)

    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        return self.calculate_rewards(inputs, prompts, completions, completion_ids_list)

    def _compute_loss(self, model, inputs):
        return self.compute_policy_loss(model, inputs)

    def _save_checkpoint(self, model, trial):
        super()._save_checkpoint(model, trial)
        folder = os.path.join(self._get_output_dir(trial=trial), f"checkpoint-{self.state.global_step}")
        self.on_checkpoint_saved(folder)

    def _load_optimizer_and_scheduler(self, checkpoint):
        super()._load_optimizer_and_scheduler(checkpoint)
        self.on_checkpoint_loaded(checkpoint)

    # ----- TRL's behaviour, public
    def trl_generate_and_score(self, inputs) -> dict[str, Any]:
        return GRPOTrainer._generate_and_score_completions(self, inputs)

    def trl_calculate_rewards(self, inputs, prompts, completions, completion_ids_list) -> torch.Tensor:
        return GRPOTrainer._calculate_rewards(self, inputs, prompts, completions, completion_ids_list)

    def trl_compute_loss(self, model, inputs) -> torch.Tensor:
        return GRPOTrainer._compute_loss(self, model, inputs)

    # ----- defaults of the public hooks: TRL's own behaviour
    def generate_and_score(self, inputs) -> dict[str, Any]:
        return self.trl_generate_and_score(inputs)

    def calculate_rewards(self, inputs, prompts, completions, completion_ids_list) -> torch.Tensor:
        return self.trl_calculate_rewards(inputs, prompts, completions, completion_ids_list)

    def compute_policy_loss(self, model, inputs) -> torch.Tensor:
        return self.trl_compute_loss(model, inputs)

    def shuffle_generation_batch(self, batch: dict[str, Any]) -> dict[str, Any]:
        """How a generation batch is shuffled before it is split into micro-batches (TRL: row by row)."""
        from trl.trainer.utils import shuffle_sequence_dict

        return shuffle_sequence_dict(batch)

    def prepare_inputs(self, generation_batch):
        """TRL 1.16's ``_prepare_inputs`` (copied), with the shuffle behind ``shuffle_generation_batch``."""
        if not self.model.training:
            return self.generate_and_score(generation_batch)
        generate_every = self.args.steps_per_generation * self.num_iterations
        if self._step % generate_every == 0 or self._buffered_inputs is None:
            batch = self.generate_and_score(generation_batch)
            batch = split_pixel_values_by_grid(batch)
            batch = self.shuffle_generation_batch(batch)
            self._buffered_inputs = [unsplit_pixel_values_by_grid(b)
                                     for b in split_tensor_dict(batch, self.args.steps_per_generation)]
        return self._buffered_inputs[self._step % self.args.steps_per_generation]

    def on_checkpoint_saved(self, folder: str) -> None:
        """After TRL saved ``checkpoint-<step>`` to ``folder``."""

    def on_checkpoint_loaded(self, checkpoint: str | None) -> None:
        """After the optimizer and scheduler were restored from ``checkpoint`` (None: a fresh start)."""

    # ----- private attributes, public
    def log_metric(self, name: str, value: float) -> None:
        """Log ``value`` under ``name`` with TRL's own metrics (averaged per logging step)."""
        self._metrics["train" if self.model.training else "eval"][name].append(float(value))

    @property
    def text_tokenizer(self):
        """The tokenizer (of the processor, for multimodal models)."""
        return self._tokenizer

    def per_token_logps(self, model, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                        logits_to_keep: int) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Per-token log-probs of the completion tokens and the MoE aux loss (when enabled)."""
        logps, _, aux_loss = self._get_per_token_logps_and_entropies(
            model, input_ids, attention_mask, logits_to_keep, compute_aux_loss=self.aux_loss_enabled)
        return logps, aux_loss


# ---------------------------------------------------------------- TRL's vLLM generation


@contextmanager
def patch_llm_constructor(**extra_kwargs: Any) -> Iterator[None]:
    """Inside the block, the vLLM ``LLM`` that TRL's ``VLLMGeneration`` builds gets ``extra_kwargs``."""
    from trl.generation import vllm_generation

    original = vllm_generation.LLM
    vllm_generation.LLM = functools.partial(original, **extra_kwargs)
    try:
        yield
    finally:
        vllm_generation.LLM = original


def wrap_vllm_generate(generation: Any, after: Callable[[tuple], tuple]) -> None:
    """``generation.generate`` (a TRL ``VLLMGeneration``) returns ``after(its 4-tuple)``: (prompt_ids,
    completion_ids, logprobs, logprob_token_ids)."""
    original = generation.generate

    def generate(self, *args: Any, **kwargs: Any) -> tuple:
        return after(original(*args, **kwargs))

    generation.generate = types.MethodType(generate, generation)


def wrap_colocated_llm_generate(generation: Any, sampling_params_for: Callable[[list, Any], Any]) -> None:
    """The colocated engine's ``llm.generate(prompts, sampling_params=...)`` (TRL calls it with one
    ``SamplingParams`` for all prompts) gets ``sampling_params_for(prompts, sampling_params)`` instead: one per
    prompt, say."""
    llm = generation.llm
    original = llm.generate

    def generate(prompts: Any, sampling_params: Any = None, *args: Any, **kwargs: Any) -> Any:
        return original(prompts, sampling_params_for(list(prompts), sampling_params), *args, **kwargs)

    llm.generate = generate


def replace_weight_sync(generation: Any, sync: Callable[[Any], None]) -> None:
    """``generation.sync_weights()`` (TRL's push of the policy into the colocated engine) calls ``sync(generation)``."""
    generation.sync_weights = types.MethodType(lambda self: sync(self), generation)


def named_params_for_sync(generation: Any) -> Iterator[tuple[str, torch.Tensor]]:
    """The (name, tensor) pairs TRL would push into the engine."""
    return generation._iter_named_params()


def replace_vllm_generate(generation: Any, generate: Callable[..., tuple]) -> None:
    """``generation.generate(prompts, images, num_generations, profiler)`` (a TRL ``VLLMGeneration``) calls
    ``generate`` instead (same arguments, same 4-tuple)."""
    generation.generate = types.MethodType(lambda self, *args, **kwargs: generate(*args, **kwargs), generation)


def tokenize_prompts(trainer: Any, prompts: list) -> list[list[int]]:
    """Token ids of ``prompts`` exactly as TRL's generation tokenizes them (chat template and all); text only."""
    prompt_ids, images, _ = trainer._tokenize_prompts(prompts)
    if images is not None and any(image is not None for image in images):
        raise ValueError("prompts with images are not supported here")
    return [list(ids) for ids in prompt_ids]


@contextmanager
def server_client_without_communicator() -> Iterator[None]:
    """Inside the block, TRL's ``VLLMClient.init_communicator`` (NCCL weight transfer, CUDA only) does nothing: the
    decoupled rollouts on CPU reload the server's weights from disk instead (``vllm_sync.reload_server_weights``)."""
    from trl.generation import vllm_client

    original = vllm_client.VLLMClient.init_communicator
    vllm_client.VLLMClient.init_communicator = lambda self, device=0: None
    try:
        yield
    finally:
        vllm_client.VLLMClient.init_communicator = original


def server_collective_rpc(client: Any, method: str, kwargs: dict[str, str]) -> Any:
    """vLLM's dev-mode ``POST /collective_rpc`` through TRL's client session (string kwargs only)."""
    return client._post(f"{client.base_url}/collective_rpc", json={"method": method, "kwargs": kwargs})
