"""Per-token SFT loss weights that up-weight the facts a trace copies from its prompt.

Most of a teacher trace is phrasing the student learns in a few hundred steps; the tokens that decide
correctness (product names, colours, counts, prices) are copied from the docs, history and question. A
from-scratch student learns to look those up only after a late "phase transition". Giving the completion tokens
that also occur in the prompt's variable part (not in the fixed instructions) a larger loss weight brings that
transition forward (docs/rft.md).
"""

from __future__ import annotations

from collections.abc import Iterable

import torch

from livethink.data.prompt import SYSTEM_PROMPT

IGNORE_INDEX = -100


def instruction_token_ids(tokenizer) -> list[int]:
    """Ids of the fixed prompt text (system instructions, docs header, chat markup): never "copied facts"."""
    ids = set(tokenizer(f"{SYSTEM_PROMPT}\n\n# Product docs\n", add_special_tokens=False).input_ids)
    ids.update(tokenizer.all_special_ids)
    return sorted(ids)


def grounded_token_weights(
    input_ids: torch.Tensor, labels: torch.Tensor, attention_mask: torch.Tensor | None,
    instruction_ids: Iterable[int], weight: float,
) -> torch.Tensor:
    """(batch, seq) float weights: ``weight`` on trained tokens (labels != -100) whose id occurs in the same row's
    prompt (attended positions with labels == -100) and is not an instruction token; 1.0 elsewhere."""
    if input_ids.shape != labels.shape:
        raise ValueError(f"input_ids {tuple(input_ids.shape)} and labels {tuple(labels.shape)} differ in shape")
    attended = torch.ones_like(input_ids, dtype=torch.bool) if attention_mask is None else attention_mask.bool()
    trained = labels != IGNORE_INDEX
    fixed = torch.as_tensor(list(instruction_ids), dtype=input_ids.dtype, device=input_ids.device)
    weights = torch.ones(input_ids.shape, dtype=torch.float32, device=input_ids.device)
    for row in range(input_ids.shape[0]):
        prompt = input_ids[row][attended[row] & ~trained[row]]
        facts = prompt[~torch.isin(prompt, fixed)]
        copied = trained[row] & torch.isin(input_ids[row], facts)
        weights[row][copied] = weight
    return weights


def weighted_nll(logits: torch.Tensor, labels: torch.Tensor, weights: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Next-token NLL summed with ``weights``: (weighted sum, sum of weights), both over trained positions."""
    targets = labels[:, 1:]
    nll = torch.nn.functional.cross_entropy(logits[:, :-1].transpose(1, 2).float(), targets,
                                            ignore_index=IGNORE_INDEX, reduction="none")
    w = weights[:, 1:] * (targets != IGNORE_INDEX)
    return (nll * w).sum(), w.sum()
