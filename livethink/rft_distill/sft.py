"""SFT of the student on accepted teacher traces with TRL's `SFTTrainer`.

The dataset is conversational prompt-completion (prompt = system+docs, history, question; completion = the
assistant turn ``<think>…</think>\n\nreply``), so TRL computes the loss on the completion only: reasoning and
reply. For MoE students TRL adds ``router_aux_loss_coef`` x the load-balancing loss (L = L_SFT + λ_aux·L_aux).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path

from datasets import Dataset
from transformers.trainer_utils import get_last_checkpoint
from trl import SFTConfig, SFTTrainer

from livethink.data.prompt import build_messages
from livethink.data.schema import Task
from livethink.rft_distill.acceptance import JudgedSample


def sft_rows(selected: Iterable[JudgedSample], tasks: Mapping[str, Task]) -> list[dict]:
    """Prompt-completion rows (TRL conversational format) for the selected samples."""
    return [
        {
            "prompt": build_messages(tasks[s.task_id]),
            "completion": [{"role": "assistant", "content": s.completion}],
            "task_id": s.task_id,
        }
        for s in selected
    ]


def sft_dataset(selected: Iterable[JudgedSample], tasks: Mapping[str, Task]) -> Dataset:
    rows = sft_rows(selected, tasks)
    if not rows:
        raise ValueError("no accepted samples to fine-tune on: check the teacher and the judge (acceptance report)")
    return Dataset.from_list(rows)


def train_sft(model, tokenizer, dataset: Dataset, args: SFTConfig, peft_config=None) -> SFTTrainer:
    """Fine-tune; resumes from the newest checkpoint in ``args.output_dir`` if there is one."""
    trainer = SFTTrainer(model=model, args=args, train_dataset=dataset, processing_class=tokenizer,
                         peft_config=peft_config)
    last = get_last_checkpoint(args.output_dir) if Path(args.output_dir).is_dir() else None
    trainer.train(resume_from_checkpoint=last)
    return trainer
