"""SFT of the student on accepted teacher traces with TRL's `SFTTrainer`.

The dataset is conversational prompt-completion (prompt = system+docs, history, question; completion = the
assistant turn ``<think>…</think>\n\nreply``), so TRL computes the loss on the completion only: reasoning and
reply. For MoE students TRL adds ``router_aux_loss_coef`` x the load-balancing loss (L = L_SFT + λ_aux·L_aux).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from pathlib import Path

import torch
from datasets import Dataset
from transformers.trainer_utils import SchedulerType, get_last_checkpoint
from trl import SFTConfig, SFTTrainer

from livethink.data.prompt import build_messages
from livethink.data.reasoning_format import THINK, ReasoningFormat, detect, parse_setting
from livethink.data.schema import Task
from livethink.length_rl.trl_compat import ConvertedResume
from livethink.rewards.parse import split_completion
from livethink.rft_distill.acceptance import JudgedSample
from livethink.rft_distill.muon import MuonAdamW
from livethink.rft_distill.token_weights import (
    IGNORE_INDEX,
    grounded_token_weights,
    instruction_token_ids,
    weighted_nll,
)

logger = logging.getLogger(__name__)


def sft_rows(selected: Iterable[JudgedSample], tasks: Mapping[str, Task], fmt: ReasoningFormat = THINK) -> list[dict]:
    """Prompt-completion rows (TRL conversational format) for the selected samples, laid out in the student's
    reasoning format (the teacher's samples are stored in the ``<think>`` layout)."""
    def target(completion: str) -> str:
        return completion if fmt == THINK else fmt.format_completion(*split_completion(completion))

    return [
        {
            "prompt": build_messages(tasks[s.task_id]),
            "completion": [{"role": "assistant", "content": target(s.completion)}],
            "task_id": s.task_id,
        }
        for s in selected
    ]


def student_format(setting: str, tokenizer) -> ReasoningFormat:
    """The delimiters stage 1 teaches: ``auto`` keeps a student's own (Qwen3, DeepSeek-R1 distills) and gives a
    model without any ``<think>``/``</think>`` as text; ``think`` / ``none`` (replies only) as asked."""
    configured = parse_setting(setting, field="reasoning")
    if configured is not None:
        return configured
    own, _ = detect(tokenizer)
    return own if own.thinks else THINK


def sft_dataset(selected: Iterable[JudgedSample], tasks: Mapping[str, Task], fmt: ReasoningFormat = THINK) -> Dataset:
    rows = sft_rows(selected, tasks, fmt)
    if not rows:
        raise ValueError("no accepted samples to fine-tune on: check the teacher and the judge (acceptance report)")
    return Dataset.from_list(rows)


def decay_steps(lr_scheduler_kwargs: Mapping, num_training_steps: int) -> dict:
    """``num_decay_steps`` given as a fraction of training (0 < x < 1) in steps, as the WSD schedule wants."""
    kwargs = dict(lr_scheduler_kwargs)
    decay = kwargs.get("num_decay_steps")
    if isinstance(decay, float) and 0.0 < decay < 1.0:
        kwargs["num_decay_steps"] = max(1, round(decay * num_training_steps))
    return kwargs


class StudentSFTTrainer(ConvertedResume, SFTTrainer):
    """`SFTTrainer` with three options of `RFTConfig`: the Muon optimizer (``muon: true``), a
    warmup-stable-decay schedule whose decay length is a fraction of training, and a larger loss weight on the
    completion tokens copied from the prompt (``grounded_token_weight``)."""

    _instruction_ids: list[int] | None = None

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        weight = getattr(self.args, "grounded_token_weight", 1.0)
        if weight == 1.0 or not model.training:
            return super().compute_loss(model, inputs, return_outputs=return_outputs,
                                        num_items_in_batch=num_items_in_batch)
        loss, outputs = self.grounded_loss(model, inputs, weight, num_items_in_batch)
        return (loss, outputs) if return_outputs else loss

    def grounded_loss(self, model, inputs, weight: float, num_items_in_batch=None):
        """(loss, outputs): completion NLL weighted by `grounded_token_weights` (+ the MoE aux loss), normalised
        like TRL's loss, so that ``weight=1`` gives TRL's value."""
        if self._instruction_ids is None:
            self._instruction_ids = instruction_token_ids(self.processing_class)
        labels = inputs["labels"]
        forward = {k: v for k, v in inputs.items() if k != "labels"}
        outputs = model(**forward, use_cache=False, **({"output_router_logits": True} if self.aux_loss_enabled else {}))
        weights = grounded_token_weights(inputs["input_ids"], labels, inputs.get("attention_mask"),
                                         self._instruction_ids, weight)
        total, weight_sum = weighted_nll(outputs.logits, labels, weights)
        loss = total / weight_sum.clamp(min=1e-8)
        if num_items_in_batch is not None:  # this micro-batch's share of the accumulated tokens, as TRL normalises
            loss = loss * (labels[:, 1:] != IGNORE_INDEX).sum() / torch.as_tensor(num_items_in_batch).clamp(min=1)
        if self.aux_loss_enabled and outputs.aux_loss is not None:
            steps = self.current_gradient_accumulation_steps if num_items_in_batch is not None else 1
            loss = loss + self.router_aux_loss_coef * outputs.aux_loss / steps
        return loss, outputs

    def create_optimizer(self, model=None):
        if self.optimizer is None and getattr(self.args, "muon", False):
            opt_model = self.model if model is None else model
            self.optimizer = MuonAdamW(
                opt_model.named_parameters(), lr=self.args.learning_rate, weight_decay=self.args.weight_decay,
                betas=(self.args.adam_beta1, self.args.adam_beta2), eps=self.args.adam_epsilon,
                momentum=self.args.muon_momentum, decay_names=set(self.get_decay_parameter_names(opt_model)))
        return super().create_optimizer(model)

    def create_scheduler(self, num_training_steps: int, optimizer=None):
        if self.lr_scheduler is None and self.args.lr_scheduler_type == SchedulerType.WARMUP_STABLE_DECAY:
            self.args.lr_scheduler_kwargs = decay_steps(self.args.lr_scheduler_kwargs or {}, num_training_steps)
        return super().create_scheduler(num_training_steps, optimizer)


def train_sft(model, tokenizer, dataset: Dataset, args: SFTConfig, peft_config=None) -> SFTTrainer:
    """Fine-tune; resumes from the newest checkpoint in ``args.output_dir`` if there is one.

    A LoRA student (a ``peft.PeftModel``, or ``peft_config``) trains its adapters only, so it takes no
    ``trainable_parameters``."""
    if getattr(args, "trainable_parameters", None):
        from livethink.models.export import is_peft_model
        from livethink.models.freezing import train_only

        if peft_config is not None or is_peft_model(model):
            raise ValueError(f"trainable_parameters {args.trainable_parameters} and a LoRA student exclude each "
                             "other: LoRA trains its adapters only (set lora: null in the student YAML, or drop "
                             "trainable_parameters)")

        trainable = train_only(model, args.trainable_parameters)
        logger.info("training %d of %d parameter tensors", len(trainable), len(list(model.parameters())))
    trainer = StudentSFTTrainer(model=model, args=args, train_dataset=dataset, processing_class=tokenizer,
                                peft_config=peft_config)
    last = get_last_checkpoint(args.output_dir) if Path(args.output_dir).is_dir() else None
    trainer.train(resume_from_checkpoint=last)
    return trainer
