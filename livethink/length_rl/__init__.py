"""Stage 2: GRPO reasoning compression of the RFT student (``docs/length_rl.md``).

Pure variant math (tensors in, tensors out): ``advantages``, ``length_rewards``, ``schedules`` (SIRI), ``dot``,
``drpo``; the variant registry (``registry.VARIANTS``); ``GRPOVariantConfig`` (TRL's ``GRPOConfig`` + the variant);
``LengthRLTrainer`` (a thin ``GRPOTrainer`` subclass); ``run_grpo`` and the ``livethink grpo`` CLI.
Heavy modules (TRL, transformers) are imported lazily.
"""

from livethink.length_rl.registry import VARIANTS, VariantSpec, get_variant

__all__ = ["VARIANTS", "VariantSpec", "get_variant"]
