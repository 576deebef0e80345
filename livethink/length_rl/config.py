"""`GRPOVariantConfig`: TRL's `GRPOConfig` plus the stage-2 variant and its hyperparameters.

Every `GRPOConfig` / `TrainingArguments` option works in the YAML and on the command line
(`livethink grpo --config configs/tiny/grpo_dot.yaml --dot-alpha 2`), parsed by ``livethink.config_sections``; the
judge is the `judge:` section (``JudgeSettings``, flags ``--judge-*``). A variant's options are refused on another
variant's config (``Variant.check_options``).
Zeros mean "derive": ``l_ref: 0`` measures L_ref on the first rollouts, ``siri_l_max: 0`` and
``drpo_max_len: 0`` / ``length_penalty_l_max: 0`` use ``max_completion_length``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated

from annotated_types import Interval
from trl import GRPOConfig

from livethink.config_sections import section_fields, section_settings
from livethink.length_rl.decoupled import DecoupledOptions
from livethink.length_rl.registry import Variant
from livethink.length_rl.tail_batching import TailBatchingOptions
from livethink.length_rl.variants import get_variant, option_classes, variant_names
from livethink.option_ranges import (
    NonNegativeFloat,
    NonNegativeInt,
    PositiveFloat,
    PositiveInt,
    Seed,
    Share,
    check_ranges,
)
from livethink.rewards.judge_settings import JudgeSettings


def trl_default(name: str):
    """GRPOConfig's own default for the option ``name``."""
    return GRPOConfig.__dataclass_fields__[name].default


def apply_variant_trl_options(cfg: GRPOConfig, spec: Variant) -> None:
    """Set the GRPOConfig values the variant needs (``trl_settings``) where the config left TRL's default, and refuse
    a non-default value of an option the variant ignores (``ignored_trl_options``) or contradicts."""
    for name, value in spec.trl_settings.items():
        current = getattr(cfg, name)
        if current == trl_default(name):
            setattr(cfg, name, value)
        elif current != value:
            raise ValueError(f"{name}: variant {spec.name} needs {name}={value!r}, got {current!r}")
    for name in spec.ignored_trl_options:
        if getattr(cfg, name) != trl_default(name):
            raise ValueError(f"{name}: variant {spec.name} ignores this GRPOConfig option ({spec.loss} loss), so it must "
                             f"stay at TRL's default {trl_default(name)!r}; got {getattr(cfg, name)!r}")


JudgeFields = section_fields(JudgeSettings, "judge")
SECTIONS = {"judge": JudgeSettings}


@dataclass
class GRPOVariantConfig(DecoupledOptions, TailBatchingOptions, JudgeFields, *option_classes(), GRPOConfig):
    """Stage 2: GRPO length compression of the RFT student, one of the registered variants (``variants``), whose
    own options (``Variant.options``) this class inherits."""

    variant: str = field(default="band", metadata={"help": f"one of {', '.join(variant_names())}"})
    model_name_or_path: str = field(default="runs/tiny/rft/final", metadata={"help": "RFT student (HF dir)"})
    data_dir: str = field(default="artifacts/tiny/data", metadata={"help": "dir with <split>.jsonl task files"})
    train_split: str = field(default="train")
    n_prompts: NonNegativeInt = field(default=0, metadata={"help": "train prompts used (0 = all)"})
    data_seed: Seed = field(default=0, metadata={"help": "seed for generating LiveShop when data_dir is empty"})
    # the judge: the `judge:` section (JudgeSettings, flags --judge-*)
    # reward weights (TRL's reward_weights are derived from these unless given)
    w_correct: NonNegativeFloat = field(default=1.0, metadata={"help": "weight of the correctness reward C"})
    w_helpful: NonNegativeFloat = field(default=1.0, metadata={"help": "weight of the helpfulness reward H"})
    zero_reward_if_cut: bool = field(default=True, metadata={"help": "a completion cut by the cap (no EOS) scores C = H = 0"})
    l_ref: NonNegativeFloat = field(default=0.0, metadata={"help": "reference length (tokens); 0 = mean length of the first rollouts"})
    freeze_router: bool = field(default=False, metadata={
        "help": "MoE students: no gradient to the routers in stage 2, so the experts a token is sent to stay fixed"})
    trainable_parameters: list[str] | None = field(default=None, metadata={
        "help": "regexes of the parameter names stage 2 trains, or @head (the output layer of any model; the top "
                "layer and final norm when it is tied to the embeddings) or @all; the rest stay frozen (default: all)"})
    # LoRA (peft), TRL's ModelConfig names: the documented way to train a pretrained student
    use_peft: bool = field(default=False, metadata={
        "help": "train LoRA adapters instead of the weights: <output_dir>/adapter (over model_name_or_path) and the "
                "merged <output_dir>/final are both saved"})
    lora_r: PositiveInt = field(default=16, metadata={"help": "LoRA rank"})
    lora_alpha: PositiveInt = field(default=32, metadata={"help": "LoRA scale numerator (scale = lora_alpha / lora_r)"})
    lora_dropout: Annotated[float, Interval(ge=0, lt=1)] = field(default=0.05, metadata={"help": "LoRA dropout"})
    lora_target_modules: list[str] | None = field(default=None, metadata={
        "help": "module names LoRA wraps (default: q_proj k_proj v_proj o_proj)"})
    # rollouts
    calculator: bool = field(default=False, metadata={
        "help": "calculator-assisted rollouts (livethink.calculator): the digits after a sum's '=' are computed; "
                "transformers or colocated vLLM rollouts"})
    # budget-forced rollouts (livethink.length_rl.budget_rollouts): trained for the server's cut
    budget_forcing: bool = field(default=False, metadata={
        "help": "cut each rollout's thinking at a drawn cap as the server does (forced end, reply reserve); the "
                "forced reply is scored by the variant's rewards, the forced tokens leave the loss"})
    budget_caps: str = field(default="auto", metadata={
        "help": "thinking caps to draw: auto (0 to what budget_deadline_ms holds at budget_tpot_ms), "
                "uniform:LO:HI or choice:A,B,..."})
    budget_uncapped_share: Share = field(default=0.0, metadata={"help": "share of draws with no cap"})
    budget_cap_scope: str = field(default="group", metadata={
        "help": "group: a prompt's num_generations completions share one drawn cap (compared under one cut); "
                "completion: each completion draws its own"})
    budget_deadline_ms: PositiveFloat = field(default=1000.0, metadata={"help": "auto caps: the serving deadline"})
    budget_tpot_ms: PositiveFloat = field(default=4.0, metadata={
        "help": "auto caps: the served student's decode time per token (livethink eval's latency probes)"})
    budget_ttft_ms: NonNegativeFloat = field(default=50.0, metadata={"help": "auto caps: its time to first token"})
    budget_overhead_ms: NonNegativeFloat = field(default=50.0, metadata={
        "help": "auto caps: the server's margin_ms + finalize_ms"})
    budget_reply_reserve: PositiveInt = field(default=48, metadata={"help": "tokens the reply gets after the think block, cut or not (the server's "
                                                                    "budget.reply_reserve)"})
    # rollouts on CPU
    vllm_cpu_kvcache_gb: PositiveInt = field(default=1, metadata={"help": "VLLM_CPU_KVCACHE_SPACE for colocated vLLM on CPU"})
    vllm_cpu_unsafe_moe_sync: bool = field(default=False, metadata={
        "help": "allow colocated vLLM on CPU for MoE models although expert weights go stale (timing only)"})

    def __post_init__(self) -> None:
        check_ranges(self)  # every numeric option in its declared range, before TRL's own checks
        super().__post_init__()
        spec = get_variant(self.variant, self)
        self.variant = spec.name  # an alias (baseline) becomes the variant's name (band)
        spec.check_options()
        apply_variant_trl_options(self, spec)
        if self.reward_weights is None:
            self.reward_weights = spec.reward_weights()
        if len(self.reward_weights) != len(spec.rewards):
            raise ValueError(f"variant {self.variant} has reward columns {spec.rewards}; got {len(self.reward_weights)} reward_weights")
        self.judge_settings  # noqa: B018 (its checks, now)
        if self.calculator and self.use_vllm:
            if self.vllm_mode != "colocate":
                raise ValueError("calculator: vLLM rollouts are calculator-assisted in colocate mode only (a vLLM "
                                 "server would need livethink's logits processor); set vllm_mode: colocate, "
                                 "use_vllm: false or calculator: false")
            from livethink.length_rl.vllm_calculator import calculator_generation_kwargs

            self.generation_kwargs = calculator_generation_kwargs(self.generation_kwargs)
        if self.budget_forcing:
            if self.budget_cap_scope not in ("group", "completion"):
                raise ValueError(f"budget_cap_scope must be group or completion, got {self.budget_cap_scope!r}")
            self.budget_distribution(forced_end_tokens=0)  # validates; the trainer checks the exact token counts
        if self.tail_batching:  # tail batching (tail_batching.TailBatchingOptions): its fields' checks
            self.tail_short_limit()
        self.check_rollout_mode()  # rollout–train decoupling (decoupled.DecoupledOptions): its fields, its combinations
        local_generation = self.per_device_train_batch_size * self.steps_per_generation
        if local_generation % self.num_generations:
            raise ValueError(
                f"per_device_train_batch_size × steps_per_generation ({local_generation}) must be a multiple of "
                f"num_generations ({self.num_generations}) so that no prompt's group is split across processes")
        if self.use_peft:
            if self.trainable_parameters and self.trainable_parameters != ["@all"]:
                raise ValueError(f"trainable_parameters {self.trainable_parameters} and use_peft exclude each other: "
                                 "LoRA trains its adapters only (pass --trainable_parameters @all to clear a YAML's)")
            self.trainable_parameters = None
            self.lora_settings()  # validates the lora_* fields

    @property
    def judge_settings(self) -> JudgeSettings:
        """The ``judge:`` section."""
        return section_settings(self, JudgeSettings, "judge")

    def budget_distribution(self, forced_end_tokens: int):
        """The rollouts' thinking caps (``CapDistribution``); ``forced_end_tokens``: the forced end's length, for
        ``auto`` and for the check that a cut rollout's reply fits in ``max_completion_length``."""
        from livethink.length_rl.budget_rollouts import CapDistribution, deadline_thinking_cap

        high = deadline_thinking_cap(self.budget_deadline_ms, self.budget_tpot_ms, self.budget_ttft_ms,
                                     self.budget_overhead_ms, self.budget_reply_reserve, forced_end_tokens)
        dist = CapDistribution.parse(self.budget_caps, high, self.budget_uncapped_share)
        if self.budget_reply_reserve < 1:
            raise ValueError(f"budget_reply_reserve must be >= 1, got {self.budget_reply_reserve}")
        need = dist.max_cap + forced_end_tokens + self.budget_reply_reserve + 2  # + the start delimiter, EOS
        if need > self.max_completion_length:
            end = f" + the forced end ({forced_end_tokens} tokens)" if forced_end_tokens else ""
            raise ValueError(f"budget_caps: the largest cap {dist.max_cap}{end} + budget_reply_reserve "
                             f"{self.budget_reply_reserve} + the start delimiter and EOS needs max_completion_length "
                             f">= {need}, got {self.max_completion_length}")
        return dist

    def lora_settings(self):
        """The ``lora_*`` fields as ``LoraSettings`` (``to_peft_config`` makes the ``peft.LoraConfig``)."""
        from livethink.models.lora import ATTENTION_MODULES, LoraSettings

        return LoraSettings(r=self.lora_r, lora_alpha=self.lora_alpha, lora_dropout=self.lora_dropout,
                            target_modules=list(self.lora_target_modules or ATTENTION_MODULES))

    @property
    def spec(self) -> Variant:
        """The variant, bound to this config."""
        return get_variant(self.variant, self)
