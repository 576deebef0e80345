"""Freeze parts of a model for RL: the MoE routers, or everything but the parameters named.

A router is the ``gate`` of a sparse-MoE block (a module that also has ``experts``): ``mlp.gate`` in Qwen3-MoE,
``block_sparse_moe.gate`` in Mixtral. Freezing it during RL keeps the top-k expert choice of a token fixed, so a
small policy update cannot flip a discrete routing decision and jump the model's function (a known source of
MoE RL instability, which routing-replay methods address in production).

``trainable_parameters`` takes regexes of parameter names and two keywords that resolve on the given model, so
one config fits any architecture: ``@head`` (the output layer, found with ``get_output_embeddings()``, whatever
its name) and ``@all`` (every parameter). A model whose output layer is tied to its input embeddings (SmolLM2,
Gemma, most small chat models) has no output layer of its own: training it would move every input embedding
too, so ``@head`` then trains the last decoder layer and the final norm, and says so in the log.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence

from torch import nn

logger = logging.getLogger(__name__)

HEAD = "@head"
ALL = "@all"
KEYWORDS = (HEAD, ALL)


def router_modules(model: nn.Module) -> dict[str, nn.Module]:
    """Name → router module of every sparse-MoE block of ``model`` (empty for a dense model)."""
    return {f"{name}.gate" if name else "gate": module.gate for name, module in model.named_modules()
            if isinstance(getattr(module, "gate", None), nn.Module) and hasattr(module, "experts")}


def freeze_routers(model: nn.Module) -> int:
    """Stop gradients to every router; returns the number of parameters frozen (0 for a dense model)."""
    frozen = 0
    for router in router_modules(model).values():
        for param in router.parameters():
            param.requires_grad_(False)
            frozen += param.numel()
    return frozen


def matching_names(names: Sequence[str], patterns: Sequence[str]) -> list[str]:
    """The names that match at least one of the regexes ``patterns`` (``re.search``), in order."""
    compiled = [re.compile(p) for p in patterns]
    return [name for name in names if any(p.search(name) for p in compiled)]


def _names_of(model: nn.Module, params: Sequence[nn.Parameter]) -> list[str]:
    ids = {id(p) for p in params}
    return [name for name, p in model.named_parameters() if id(p) in ids]


def is_tied(model: nn.Module) -> bool:
    """Whether the output layer's weight is the input embedding matrix (``tie_word_embeddings``)."""
    out, inp = model.get_output_embeddings(), model.get_input_embeddings()
    return out is not None and inp is not None and out.weight is inp.weight


def decoder_layers(model: nn.Module) -> tuple[str, nn.ModuleList]:
    """``(name, layers)`` of the decoder stack: the ``nn.ModuleList`` holding the most parameters."""
    lists = [(name, m) for name, m in model.named_modules() if isinstance(m, nn.ModuleList) and len(m)]
    if not lists:
        raise ValueError(f"{type(model).__name__} has no list of decoder layers")
    return max(lists, key=lambda item: sum(p.numel() for p in item[1].parameters()))


def top_block_names(model: nn.Module) -> list[str]:
    """The parameters of the last decoder layer and of what follows it before the output layer (the final norm)."""
    _, layers = decoder_layers(model)
    embeddings = {id(p) for m in (model.get_input_embeddings(), model.get_output_embeddings()) if m is not None
                  for p in m.parameters()}
    last = set(_names_of(model, list(layers[-1].parameters())))
    names = [name for name, _ in model.named_parameters()]
    start = min(i for i, name in enumerate(names) if name in last)
    return [name for name, p in list(model.named_parameters())[start:] if id(p) not in embeddings]


def head_parameter_names(model: nn.Module) -> list[str]:
    """The names ``@head`` stands for: the output layer's parameters, or, when it is tied to the input embeddings,
    the last decoder layer and the final norm (logged as a warning, so the choice is visible)."""
    out = model.get_output_embeddings()
    if out is None:
        raise ValueError(f"trainable_parameters {HEAD}: {type(model).__name__} has no output layer "
                         "(get_output_embeddings() is None); name the parameters to train with regexes")
    if not is_tied(model):
        return _names_of(model, list(out.parameters()))
    names = top_block_names(model)
    embedding = _names_of(model, [out.weight])
    logger.warning("the output layer of %s is tied to its input embeddings (%s): %s trains the last decoder "
                   "layer and the final norm instead (%d tensors, %s ...), so the input embeddings stay as they are",
                   type(model).__name__, ", ".join(embedding), HEAD, len(names), names[0])
    return names


def resolve_patterns(model: nn.Module, patterns: Sequence[str]) -> list[str]:
    """``patterns`` with the keywords replaced by exact-name regexes for ``model`` (``@all``: ``.``)."""
    resolved: list[str] = []
    for pattern in patterns:
        if pattern == ALL:
            resolved.append(".")
        elif pattern == HEAD:
            resolved.extend(f"^{re.escape(name)}$" for name in head_parameter_names(model))
        elif pattern.startswith("@"):
            raise ValueError(f"trainable_parameters: unknown keyword {pattern!r} (known: {', '.join(KEYWORDS)})")
        else:
            try:
                re.compile(pattern)
            except re.error as exc:
                raise ValueError(f"trainable_parameters: {pattern!r} is not a valid regex ({exc})") from None
            resolved.append(pattern)
    return resolved


def train_only(model: nn.Module, patterns: Sequence[str]) -> list[str]:
    """Freeze every parameter whose name matches none of ``patterns`` (regexes, ``re.search``, or the keywords
    ``@head`` / ``@all``); returns the names left trainable. A regex that matches nothing is an error (a typo
    would otherwise freeze the whole model); the message names the model's output layer and whether it is tied."""
    names = [name for name, _ in model.named_parameters()]
    unmatched = [p for p in patterns if p not in KEYWORDS and not matching_names(names, resolve_patterns(model, [p]))]
    if unmatched:
        head = model.get_output_embeddings()
        hint = ""
        if head is not None:
            where = ", ".join(_names_of(model, [head.weight]))
            hint = (f"; its output layer is {where}" + (" (tied to the input embeddings)" if is_tied(model) else "")
                    + f", which {HEAD} resolves on any model")
        raise ValueError(f"trainable_parameters {unmatched} match no parameter of the model (e.g. {names[:3]}){hint}")
    patterns = resolve_patterns(model, patterns)
    trainable = matching_names(names, patterns)
    keep = set(trainable)
    for name, param in model.named_parameters():
        param.requires_grad_(name in keep)
    return trainable
