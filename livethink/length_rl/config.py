"""`GRPOVariantConfig`: TRL's `GRPOConfig` plus the stage-2 variant and its hyperparameters.

Every `GRPOConfig` / `TrainingArguments` option works in the YAML and on the command line
(`livethink grpo --config configs/tiny/grpo_dot.yaml --dot_alpha 2`), parsed the TRL way with `TrlParser`.
Zeros mean "derive": ``l_ref: 0`` measures L_ref on the first rollouts, ``siri_l_max: 0`` and
``drpo_max_len: 0`` / ``length_penalty_l_max: 0`` use ``max_completion_length``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from trl import GRPOConfig

from livethink.length_rl.length_rewards import LENGTH_GATES
from livethink.length_rl.registry import VARIANTS, get_variant
from livethink.length_rl.schedules import SCHEDULES, Schedule


@dataclass
class GRPOVariantConfig(GRPOConfig):
    """Stage 2: GRPO length compression of the RFT student, one of ``VARIANTS``."""

    variant: str = field(default="baseline", metadata={"help": f"one of {', '.join(VARIANTS)}"})
    model_name_or_path: str = field(default="runs/tiny/rft/final", metadata={"help": "RFT student (HF dir)"})
    data_dir: str = field(default="artifacts/tiny/data", metadata={"help": "dir with <split>.jsonl task files"})
    train_split: str = field(default="train")
    n_prompts: int = field(default=0, metadata={"help": "train prompts used (0 = all)"})
    data_seed: int = field(default=0, metadata={"help": "seed for generating LiveShop when data_dir is empty"})
    # judge
    judge: str = field(default="rubric", metadata={"help": "rubric | llm"})
    judge_base_url: str | None = field(default=None)
    judge_model: str | None = field(default=None)
    # reward weights (TRL's reward_weights are derived from these unless given)
    w_correct: float = field(default=1.0)
    w_helpful: float = field(default=1.0)
    w_length: float = field(default=0.5, metadata={"help": "baseline: weight of the band reward r_len"})
    zero_reward_if_cut: bool = field(default=True, metadata={"help": "a completion cut by the cap (no EOS) scores C = H = 0"})
    # baseline: LiveThinking band
    l_ref: float = field(default=0.0, metadata={"help": "reference length (tokens); 0 = mean length of the first rollouts"})
    band_lambda_low: float = field(default=0.2)
    band_lambda_up: float = field(default=0.4)
    band_epsilon: float | None = field(default=None, metadata={"help": "tokens; None = 0.5·L_ref"})
    length_gate: str = field(default="none", metadata={
        "help": "baseline: where r_len counts: none (every reply, LiveThinking as written) | correct | "
                "correct_helpful (only good replies) | solved_group (every reply of a group with a good one)"})
    # length_penalty
    length_penalty_alpha: float = field(default=0.5)
    length_penalty_l_max: int = field(default=0)
    # siri
    siri_schedule: str = field(default="cosine", metadata={"help": f"one of {', '.join(SCHEDULES)}"})
    siri_l_max: int = field(default=0)
    siri_l_min: int = field(default=128)
    siri_period: int = field(default=20, metadata={"help": "steps per compression + expansion cycle (even)"})
    siri_cycles: int = field(default=1)
    siri_stair_steps: int = field(default=1)
    # dot
    dot_alpha: float = field(default=3.0)
    dot_margin: float = field(default=32.0, metadata={"help": "tokens, or a fraction of L when in (0, 1)"})
    dot_success_threshold: float = field(default=1.0)
    dot_dynamic_sampling: bool = field(default=False, metadata={"help": "predictive dynamic sampling (oversample + zero-std filter)"})
    dot_ds_window: int = field(default=20)
    dot_ds_min_factor: float = field(default=1.2)
    dot_ds_max_factor: float = field(default=5.0)
    dot_ds_initial_factor: float = field(default=1.5)
    # drpo
    drpo_lambda: float = field(default=0.1)
    drpo_tau: float = field(default=10.0)
    drpo_beta: float = field(default=1000.0)
    drpo_delta: float = field(default=1e-4)
    drpo_max_len: int = field(default=0)
    drpo_positive: str = field(default="correct_helpful", metadata={"help": "correct | correct_helpful"})
    freeze_router: bool = field(default=False, metadata={
        "help": "MoE students: no gradient to the routers in stage 2, so the experts a token is sent to stay fixed"})
    trainable_parameters: list[str] | None = field(default=None, metadata={
        "help": "regexes of the parameter names stage 2 trains, or @head (the output layer of any model; the top "
                "layer and final norm when it is tied to the embeddings) or @all; the rest stay frozen (default: all)"})
    # LoRA (peft), TRL's ModelConfig names: the documented way to train a pretrained student
    use_peft: bool = field(default=False, metadata={
        "help": "train LoRA adapters instead of the weights: <output_dir>/adapter (over model_name_or_path) and the "
                "merged <output_dir>/final are both saved"})
    lora_r: int = field(default=16)
    lora_alpha: int = field(default=32)
    lora_dropout: float = field(default=0.05)
    lora_target_modules: list[str] | None = field(default=None, metadata={
        "help": "module names LoRA wraps (default: q_proj k_proj v_proj o_proj)"})
    # rollouts
    calculator: bool = field(default=False, metadata={
        "help": "calculator-assisted rollouts (livethink.calculator): the digits after a sum's '=' are computed; "
                "transformers or colocated vLLM rollouts"})
    # rollouts on CPU
    vllm_cpu_kvcache_gb: int = field(default=1, metadata={"help": "VLLM_CPU_KVCACHE_SPACE for colocated vLLM on CPU"})
    vllm_cpu_unsafe_moe_sync: bool = field(default=False, metadata={
        "help": "allow colocated vLLM on CPU for MoE models although expert weights go stale (timing only)"})

    def __post_init__(self) -> None:
        super().__post_init__()
        spec = get_variant(self.variant)
        if self.reward_weights is None:
            self.reward_weights = spec.reward_weights(self.w_correct, self.w_helpful, self.w_length)
        if len(self.reward_weights) != len(spec.rewards):
            raise ValueError(f"variant {self.variant} has reward columns {spec.rewards}; got {len(self.reward_weights)} reward_weights")
        if self.judge not in ("rubric", "llm"):
            raise ValueError(f"judge must be 'rubric' or 'llm', got {self.judge!r}")
        if self.judge == "llm" and not (self.judge_base_url and self.judge_model):
            raise ValueError("judge_base_url and judge_model are required when judge=llm")
        if self.calculator and self.use_vllm:
            if self.vllm_mode != "colocate":
                raise ValueError("calculator: vLLM rollouts are calculator-assisted in colocate mode only (a vLLM "
                                 "server would need livethink's logits processor); set vllm_mode: colocate, "
                                 "use_vllm: false or calculator: false")
            from livethink.length_rl.vllm_calculator import calculator_generation_kwargs

            self.generation_kwargs = calculator_generation_kwargs(self.generation_kwargs)
        if self.length_gate not in LENGTH_GATES:
            raise ValueError(f"length_gate must be one of {', '.join(LENGTH_GATES)}, got {self.length_gate!r}")
        if self.drpo_positive not in ("correct", "correct_helpful"):
            raise ValueError(f"drpo_positive must be 'correct' or 'correct_helpful', got {self.drpo_positive!r}")
        local_generation = self.per_device_train_batch_size * self.steps_per_generation
        if local_generation % self.num_generations:
            raise ValueError(
                f"per_device_train_batch_size × steps_per_generation ({local_generation}) must be a multiple of "
                f"num_generations ({self.num_generations}) so that no prompt's group is split across processes")
        if spec.loss == "drpo" and self.per_device_train_batch_size % self.num_generations:
            raise ValueError(f"drpo needs whole groups in each micro-batch: per_device_train_batch_size "
                             f"({self.per_device_train_batch_size}) must be a multiple of num_generations ({self.num_generations})")
        if spec.length_cap_schedule:
            if self.siri_schedule not in SCHEDULES:
                raise ValueError(f"siri_schedule must be one of {', '.join(SCHEDULES)}, got {self.siri_schedule!r}")
            self.siri()  # validates the numbers
            if self.siri_l_max and self.siri_l_max > self.max_completion_length:
                raise ValueError(f"siri_l_max ({self.siri_l_max}) exceeds max_completion_length ({self.max_completion_length})")
        if self.dot_ds_min_factor > self.dot_ds_max_factor:
            raise ValueError("dot_ds_min_factor must be <= dot_ds_max_factor")
        if self.use_peft:
            if self.trainable_parameters and self.trainable_parameters != ["@all"]:
                raise ValueError(f"trainable_parameters {self.trainable_parameters} and use_peft exclude each other: "
                                 "LoRA trains its adapters only (pass --trainable_parameters @all to clear a YAML's)")
            self.trainable_parameters = None
            self.lora_settings()  # validates the lora_* fields

    def lora_settings(self):
        """The ``lora_*`` fields as ``LoraSettings`` (``to_peft_config`` makes the ``peft.LoraConfig``)."""
        from livethink.models.lora import ATTENTION_MODULES, LoraSettings

        return LoraSettings(r=self.lora_r, lora_alpha=self.lora_alpha, lora_dropout=self.lora_dropout,
                            target_modules=list(self.lora_target_modules or ATTENTION_MODULES))

    @property
    def spec(self):
        return get_variant(self.variant)

    def siri(self) -> Schedule:
        return Schedule(self.siri_l_max or self.max_completion_length, self.siri_l_min, self.siri_period,
                        self.siri_cycles, self.siri_stair_steps)

    @property
    def drpo_length_cap(self) -> int:
        return self.drpo_max_len or self.max_completion_length

    @property
    def penalty_l_max(self) -> int:
        return self.length_penalty_l_max or self.max_completion_length
