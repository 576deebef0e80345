"""Freeze parts of a model for RL: the MoE routers, or everything but the parameters named.

A router is the ``gate`` of a sparse-MoE block (a module that also has ``experts``): ``mlp.gate`` in Qwen3-MoE,
``block_sparse_moe.gate`` in Mixtral. Freezing it during RL keeps the top-k expert choice of a token fixed, so a
small policy update cannot flip a discrete routing decision and jump the model's function (a known source of
MoE RL instability, which routing-replay methods address in production).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from torch import nn


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


def train_only(model: nn.Module, patterns: Sequence[str]) -> list[str]:
    """Freeze every parameter whose name matches none of the regexes ``patterns`` (``re.search``); returns the names
    left trainable. A pattern that matches nothing is an error (a typo would otherwise freeze the whole model)."""
    names = [name for name, _ in model.named_parameters()]
    unmatched = [p for p in patterns if not matching_names(names, [p])]
    if unmatched:
        raise ValueError(f"trainable_parameters {unmatched} match no parameter of the model (e.g. {names[:3]})")
    trainable = matching_names(names, patterns)
    keep = set(trainable)
    for name, param in model.named_parameters():
        param.requires_grad_(name in keep)
    return trainable
