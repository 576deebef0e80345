"""The stage-2 variant registry, in the manner of verl's ``core_algos`` (``@register_adv_est("grpo")``).

A variant is a subclass of ``Variant`` in its own module under ``livethink/length_rl/variants/``, registered by name
with ``@register_variant("name")``. Its methods are the hooks the trainer calls (it never names a variant):

- config time: ``options`` (a dataclass of the variant's own fields, merged into ``GRPOVariantConfig``),
  ``trl_settings`` (GRPOConfig values the variant needs), ``ignored_trl_options`` (GRPOConfig options it does not
  use: a non-default value is an error), ``reward_weights``, ``reward_options``, ``validate``, ``describe``;
  ``check_options`` refuses another variant's options by name (``drpo_lambda`` on a ``dot`` config);
- run time (one instance per trainer): ``setup`` (callbacks), ``generation_cap`` (the length-cap schedule),
  ``oversample_factor`` (dynamic sampling), ``postprocess_rewards`` (re-scoring before the advantages),
  ``postprocess_batch`` (masks and labels of the scored batch), ``compute_loss`` (replaces TRL's),
  ``state``/``load_state`` (what a checkpoint keeps), ``on_save``.

Reward columns are plain TRL reward functions built by name (``rewards.register_reward_column``). Variants are
discovered by importing every module of the ``variants`` package, so adding one touches no other file.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import MISSING, fields
from typing import TYPE_CHECKING, Any, ClassVar

if TYPE_CHECKING:
    import torch

    from livethink.length_rl.rewards import Scored

REGISTRY: dict[str, type[Variant]] = {}
ALIASES: dict[str, str] = {}


class Variant:
    """Defaults for every hook: plain GRPO on the variant's reward columns."""

    name: ClassVar[str] = ""
    aliases: ClassVar[tuple[str, ...]] = ()
    summary: ClassVar[str] = ""
    rewards: ClassVar[tuple[str, ...]] = ()
    loss: ClassVar[str] = "grpo"  # shown by --dry-run; "grpo" means TRL's loss (its loss_type)
    options: ClassVar[type | None] = None  # dataclass of the variant's own config fields
    trl_settings: ClassVar[dict[str, Any]] = {}
    ignored_trl_options: ClassVar[tuple[str, ...]] = ()
    masks_tokens: ClassVar[bool] = False  # postprocess_batch may zero completion_mask entries
    metrics_prefix: ClassVar[str] = ""  # prefix of this variant's logged metrics ("" = its name)

    def __init__(self, cfg: Any):
        self.cfg = cfg

    @property
    def prefix(self) -> str:
        return self.metrics_prefix or self.name

    # ----- config time
    def reward_weights(self) -> list[float]:
        """TRL ``reward_weights`` for ``rewards`` (default: w_correct, w_helpful for C and H)."""
        raise NotImplementedError(f"variant {self.name} must define reward_weights")

    def reward_options(self) -> dict[str, Any]:
        """Keyword options of ``rewards.make_reward_funcs`` for this variant's columns."""
        return {}

    def validate(self) -> None:
        """Raise ``ValueError`` naming the field for a bad value of the variant's options."""

    def check_options(self) -> None:
        """Refuse another variant's option set away from its default (naming the variant it belongs to), then
        ``validate`` this variant's own."""
        for cls, owners in option_owners().items():
            if cls is self.options:
                continue
            for f in fields(cls):
                default = f.default if f.default is not MISSING else f.default_factory()  # type: ignore[misc]
                if getattr(self.cfg, f.name, default) != default:
                    names = " or ".join(repr(o) for o in owners)
                    raise ValueError(f"{f.name}: belongs to variant {names}, this config's variant is {self.name!r} "
                                     f"(got {getattr(self.cfg, f.name)!r}; remove it)")
        self.validate()

    def describe(self) -> tuple[dict[str, Any], list[str]]:
        """Extra ``--dry-run`` report entries and notes."""
        return {}, []

    # ----- run time (``trainer``: the ``LengthRLTrainer``)
    def setup(self, trainer: Any) -> None:
        """Once, at the end of the trainer's ``__init__`` (e.g. add callbacks)."""

    def generation_cap(self, trainer: Any, step: int, training: bool) -> int | None:
        """The completion cap of this generation (None: ``max_completion_length``)."""
        return None

    def oversample_factor(self, trainer: Any) -> float | None:
        """Dynamic sampling: sample this many times the prompts and keep the informative groups (None: off)."""
        return None

    def postprocess_rewards(self, trainer: Any, scored: Scored) -> torch.Tensor:
        """The (N, F) rewards of the whole generation batch, before TRL computes the advantages."""
        return scored.rewards

    def postprocess_batch(self, trainer: Any, output: dict[str, Any], n_rows: int) -> dict[str, Any]:
        """The scored local batch (``n_rows`` rows) before dynamic sampling selects from it."""
        return output

    def compute_loss(self, trainer: Any, model: Any, inputs: dict[str, Any]) -> torch.Tensor | None:
        """A loss replacing TRL's (None: TRL's own)."""
        return None

    def state(self) -> dict[str, Any]:
        return {}

    def load_state(self, state: dict[str, Any]) -> None:
        """Restore what ``state`` returned (from a checkpoint)."""

    def on_save(self, trainer: Any, step: int) -> None:
        """After a checkpoint at ``step`` was written."""


def register_variant(name: str, *, aliases: tuple[str, ...] = ()) -> Callable[[type[Variant]], type[Variant]]:
    """Class decorator: ``@register_variant("dot")`` registers a ``Variant`` subclass under ``name`` (and aliases)."""

    def decorate(cls: type[Variant]) -> type[Variant]:
        for key in (name, *aliases):
            if key in REGISTRY or key in ALIASES:
                raise ValueError(f"variant name {key!r} is registered twice")
        if not cls.rewards:
            raise ValueError(f"variant {name}: declare its reward columns (rewards = (...))")
        cls.name, cls.aliases = name, tuple(aliases)
        REGISTRY[name] = cls
        ALIASES.update({alias: name for alias in aliases})
        return cls

    return decorate


def option_owners() -> dict[type, list[str]]:
    """Each variant option dataclass → the names of the variants that take it (band's options: band, gdpo)."""
    owners: dict[type, list[str]] = {}
    for name, cls in sorted(REGISTRY.items()):
        if cls.options is not None:
            owners.setdefault(cls.options, []).append(name)
    return owners


def canonical_name(name: str) -> str:
    return ALIASES.get(name, name)


def lookup(name: str) -> type[Variant]:
    """The registered class for ``name`` or an alias (the ``variants`` package must have been imported)."""
    key = canonical_name(name)
    if key not in REGISTRY:
        names = sorted(REGISTRY) + [f"{a} (= {n})" for a, n in sorted(ALIASES.items())]
        raise ValueError(f"variant: unknown variant {name!r}: choose one of {', '.join(names)}")
    return REGISTRY[key]
