"""Stage 2: GRPO reasoning compression of the RFT student (``docs/length_rl.md``).

Pure variant math (tensors in, tensors out): ``advantages``, ``length_rewards``, ``schedules`` (SIRI), ``dot``,
``drpo``; the variant registry (``registry``: ``Variant``, ``register_variant``) and the registered variants, one
module each (``variants``); ``GRPOVariantConfig`` (TRL's ``GRPOConfig`` + the variants' options); ``LengthRLTrainer``
(a thin ``GRPOTrainer`` subclass running the variant's hooks); every touch of TRL's private API (``trl_compat``);
``run_grpo`` and the ``livethink grpo`` CLI. Import the submodules you need: this package imports nothing heavy.
"""
