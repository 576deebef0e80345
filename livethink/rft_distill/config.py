"""`RFTConfig`: TRL's `SFTConfig` plus the rejection-sampling stage's own options.

Every `transformers.TrainingArguments` / `SFTConfig` option works in the YAML and on the command line
(`livethink rft --config configs/tiny/rft.yaml --learning-rate 1e-3`), parsed by ``livethink.config_sections``. The
teacher and the judge are the `teacher:` and `judge:` sections (``TeacherSettings``, ``JudgeSettings``; flags
``--teacher-*``, ``--judge-*``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated

from annotated_types import Ge, Interval
from trl import SFTConfig

from livethink.config_sections import section_fields, section_settings
from livethink.option_ranges import NonNegativeInt, PositiveFloat, PositiveInt, Seed, check_ranges
from livethink.rewards.judge_settings import JudgeSettings
from livethink.rft_distill.acceptance import SELECTION_POLICIES
from livethink.rft_distill.teachers.settings import TeacherSettings

TeacherFields = section_fields(TeacherSettings, "teacher")
JudgeFields = section_fields(JudgeSettings, "judge")
SECTIONS = {"teacher": TeacherSettings, "judge": JudgeSettings}


@dataclass
class RFTConfig(TeacherFields, JudgeFields, SFTConfig):
    """Stage 1: teacher sampling -> judge (C AND H) -> SFT of the MoE student."""

    # data
    data_dir: str = field(default="artifacts/tiny/data", metadata={"help": "LiveShop (or user) data dir with train.jsonl; generated if missing"})
    data_seed: Seed = field(default=0, metadata={"help": "seed for generating LiveShop when data_dir is empty"})
    n_prompts: NonNegativeInt = field(default=2000, metadata={"help": "train prompts sent to the teacher (0 = all)"})
    k: PositiveInt = field(default=4, metadata={"help": "candidates sampled per prompt"})
    samples_dir: str | None = field(default=None, metadata={"help": "where teacher samples are streamed (default: <output_dir>/samples)"})
    # teacher (the `teacher:` section, TeacherSettings) and judge (the `judge:` section, JudgeSettings)
    selection: str = field(default="random", metadata={"help": f"which accepted samples become SFT targets: {', '.join(SELECTION_POLICIES)}"})
    data_only: bool = field(default=False, metadata={"help": "stop after teacher sampling and judging (the teacher and judge endpoints can then go); a later run without it reuses the selection and trains"})
    # student
    reasoning: str = field(default="auto", metadata={"help": "reasoning delimiters the student learns: auto (its own, else <think>/</think> as text) | think | none (replies only)"})
    student_config: str = field(default="configs/tiny/student.yaml", metadata={"help": "student YAML (architecture, or a pretrained dir + LoRA)"})
    tokenizer_dir: str | None = field(default="artifacts/tiny/tokenizer", metadata={"help": "tokenizer dir for a from-scratch student (trained on the data if missing)"})
    tokenizer_vocab_size: Annotated[int, Ge(64)] = field(default=4096, metadata={"help": "vocabulary of a from-scratch tokenizer (trained when tokenizer_dir has none)"})
    # optimizer
    muon: bool = field(default=False, metadata={"help": "Muon on the hidden 2-D matrices, AdamW (adam_* options) on the rest; one learning_rate"})
    muon_momentum: Annotated[float, Interval(ge=0, lt=1)] = field(default=0.95, metadata={"help": "Muon's Nesterov momentum"})
    trainable_parameters: list[str] | None = field(default=None, metadata={"help": "regexes of the parameter names SFT trains (e.g. 'layers\\.(2[0-9])\\.'); the rest stay frozen, and backward stops at the lowest trainable layer (default: all)"})
    grounded_token_weight: PositiveFloat = field(default=1.0, metadata={"help": "loss weight of completion tokens that also occur in the prompt's docs, history or question (1 = plain SFT)"})

    def __post_init__(self) -> None:
        check_ranges(self)  # every numeric option in its declared range, before TRL's own checks
        super().__post_init__()
        self.teacher_settings, self.judge_settings  # noqa: B018 (their checks, now)
        if self.selection not in SELECTION_POLICIES:
            raise ValueError(f"selection must be one of {SELECTION_POLICIES}, got {self.selection!r}")
        if self.reasoning not in ("auto", "think", "none"):
            raise ValueError(f"reasoning must be auto, think or none, got {self.reasoning!r}")

    @property
    def teacher_settings(self) -> TeacherSettings:
        """The ``teacher:`` section."""
        return section_settings(self, TeacherSettings, "teacher")

    @property
    def judge_settings(self) -> JudgeSettings:
        """The ``judge:`` section."""
        return section_settings(self, JudgeSettings, "judge")
