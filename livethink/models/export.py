"""Save a trained student in the two forms ``livethink serve`` takes: merged weights, or a LoRA adapter.

A stage that trained LoRA adapters writes both::

    <output_dir>/adapter/   the adapter alone (adapter_config.json + adapter_model.safetensors), over its base;
                            serve it with ``models.X: {path: <base checkpoint>, lora: <output_dir>/adapter}``
    <output_dir>/final/     the adapter merged into the base: a plain checkpoint, ``models.X: {path: <output_dir>/final}``

A full fine-tune writes ``final/`` only. The next stage always reads ``final/``.
"""

from __future__ import annotations

import logging
from pathlib import Path

from livethink.models.loading import load_model, load_tokenizer_for
from livethink.models.student import save_student

logger = logging.getLogger(__name__)

ADAPTER_DIR = "adapter"
FINAL_DIR = "final"


def is_peft_model(model) -> bool:
    from peft import PeftModel

    return isinstance(model, PeftModel)


def merge_adapter(base: str | Path, adapter: str | Path, out_dir: str | Path, dtype: str = "auto") -> Path:
    """Load ``base``, put the LoRA ``adapter`` on it, merge, and save a plain checkpoint (with the base's tokenizer,
    or the adapter's when it has one) to ``out_dir``."""
    from peft import PeftModel

    adapter = Path(adapter)
    if not (adapter / "adapter_config.json").is_file():
        raise FileNotFoundError(f"{adapter}: no adapter_config.json (not a peft adapter directory)")
    model = PeftModel.from_pretrained(load_model(base, dtype=dtype), str(adapter)).merge_and_unload()
    try:
        tokenizer = load_tokenizer_for(adapter)
    except ValueError:  # CheckpointError: the adapter was saved without a tokenizer
        tokenizer = load_tokenizer_for(base)
    return save_student(model, tokenizer, out_dir)


def save_trained(trainer, out_dir: str | Path, base: str | Path | None = None, dtype: str = "auto",
                 config=None) -> dict[str, Path]:
    """Save a TRL trainer's model under ``out_dir``: ``final/`` always, ``adapter/`` as well when it is LoRA.

    Every process calls it (``trainer.save_model`` gathers sharded weights under DeepSpeed/FSDP). The merged
    checkpoint is built by the main process from the saved adapter and ``base`` (the checkpoint LoRA was put
    on), so it does not depend on how the training weights were sharded; without ``base`` (a LoRA student
    created in memory) the unsharded model is merged in place. ``config`` (a ``StudentConfig``) is written beside
    the weights. Returns ``{"final": ..., ["adapter": ...]}``.
    """
    from livethink.models.tokenizer import save_tokenizer

    out = Path(out_dir)
    final = out / FINAL_DIR
    accelerator = trainer.accelerator
    model = accelerator.unwrap_model(trainer.model)
    paths = {"final": final}
    if not is_peft_model(model):
        trainer.save_model(str(final))
        if accelerator.is_main_process:
            save_tokenizer(trainer.processing_class, final)  # the class name older transformers/vLLM know
            if config is not None:
                config.to_yaml(final / "student.yaml")
        accelerator.wait_for_everyone()
        return paths
    adapter = out / ADAPTER_DIR
    trainer.save_model(str(adapter))
    accelerator.wait_for_everyone()
    if accelerator.is_main_process:
        if base is not None:
            merge_adapter(base, adapter, final, dtype=dtype)
        else:
            save_student(model.merge_and_unload(), trainer.processing_class, final)
        if config is not None:
            config.to_yaml(final / "student.yaml")
        logger.info("LoRA adapter saved to %s, merged checkpoint to %s", adapter, final)
    accelerator.wait_for_everyone()
    return paths | {"adapter": adapter}
