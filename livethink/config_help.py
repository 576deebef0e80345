"""``--help`` of the training commands (``rft``, ``grpo``, ``teacher``): livethink's own options first, grouped by
where they are declared, then the inherited TRL / transformers options.

``--help`` shows the command's options (``--config``, ``--dry-run``), its own fields, its sections (``teacher``,
``judge``), the variants' and rollout modes' options, and the inherited options a run usually sets
(``COMMON_INHERITED``); ``--help-all`` adds the other inherited ones (TRL's ``SFTConfig`` / ``GRPOConfig`` and
transformers' ``TrainingArguments``: several hundred lines). Each field's group is the class that declares it.
"""

from __future__ import annotations

import argparse
import dataclasses
import typing
from typing import Any

# Inherited TRL / transformers options shown by --help (the rest: --help-all).
COMMON_INHERITED = (
    "output_dir", "learning_rate", "num_train_epochs", "max_steps", "per_device_train_batch_size",
    "gradient_accumulation_steps", "seed", "bf16", "use_cpu", "logging_steps", "save_steps", "save_strategy",
    "report_to", "max_length", "max_completion_length", "num_generations", "use_vllm", "vllm_mode", "loss_type",
    "beta", "temperature", "lr_scheduler_type", "warmup_steps",
)
INHERITED_TITLE = "inherited options (TRL, transformers)"


def declaring_class(dtype: type, name: str) -> type:
    """The most derived class of ``dtype``'s MRO whose own annotations declare the field ``name``."""
    return next(c for c in dtype.__mro__ if name in c.__dict__.get("__annotations__", {}))


def group_title(dtype: type, owner: type, prog: str) -> str:
    """The help group of a field declared by ``owner`` in the config class ``dtype``."""
    if owner is dtype:
        return f"{prog} options"
    section = getattr(owner, "section_title", None)
    if section:
        return section
    module = owner.__module__
    if not module.startswith("livethink"):
        return INHERITED_TITLE
    last = module.rsplit(".", 1)[-1]
    return f"variant {last}" if ".variants." in module else f"{last.replace('_', ' ')} options"


class HelpFormatter(argparse.HelpFormatter):
    """One spelling per option (the dashed one), its kind as metavar (``--k INT``), the range and default in the
    help text (``>= 1; default: 4``), no ``default: None``."""

    def _format_action_invocation(self, action: argparse.Action) -> str:
        if not action.option_strings:
            return super()._format_action_invocation(action)
        flag = ", ".join(o for o in action.option_strings if "_" not in o) or action.option_strings[0]
        if action.nargs == 0:
            return flag
        kind = getattr(action.type, "__name__", "")
        metavar = action.metavar or {"int": "INT", "float": "FLOAT", "string_to_bool": "BOOL"}.get(kind, "VALUE")
        return f"{flag} {metavar}{' ...' if action.nargs in ('+', '*') else ''}"

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        notes = [getattr(action, "range_text", "")]
        default = action.default
        if default is not None and default is not argparse.SUPPRESS and default is not False and default != []:
            notes.append(f"default: {action.default}")
        notes = [n for n in notes if n]
        return f"{text} ({'; '.join(notes)})" if notes else text


class HelpAll(argparse.Action):
    """``--help-all``: show the options ``--help`` leaves out, print the help and exit."""

    def __init__(self, option_strings: list[str], dest: str, **kwargs: Any) -> None:
        super().__init__(option_strings, dest=argparse.SUPPRESS, default=argparse.SUPPRESS, nargs=0,
                         help=kwargs.get("help"))

    def __call__(self, parser: argparse.ArgumentParser, namespace: Any, values: Any, option_string: Any = None) -> None:
        for action, text in getattr(parser, "hidden_help", {}).items():
            action.help = text
        parser.print_help()
        parser.exit()


def add_grouped_fields(parser: Any, dtype: type, prog: str) -> None:
    """What ``HfArgumentParser._add_dataclass_arguments`` does, with each field in the group of the class that
    declares it (livethink's groups first) and the uncommon inherited options hidden until ``--help-all``."""
    from livethink.option_ranges import declared_range, describe, numeric_fields

    hints = typing.get_type_hints(dtype)
    numeric = numeric_fields(dtype)
    mro = dtype.__mro__
    specs, rank = [], {}
    for f in dataclasses.fields(dtype):
        if f.init:
            owner = declaring_class(dtype, f.name)
            title = group_title(dtype, owner, prog)
            rank[title] = min(rank.get(title, len(mro)), len(mro) if title == INHERITED_TITLE else mro.index(owner))
            specs.append((f, title))
    titles = sorted(rank, key=rank.__getitem__)  # the command's own class, then its bases in MRO order
    hidden = sum(1 for f, t in specs if t == INHERITED_TITLE and f.name not in COMMON_INHERITED)
    groups = {t: parser.add_argument_group(t, _description(t, hidden, prog)) for t in titles}
    parser.hidden_help = {}
    for f, title in specs:
        f.type = hints[f.name]
        before = len(parser._actions)
        parser._parse_dataclass_field(groups[title], f)
        constraints = declared_range(dtype, f.name) if f.name in numeric else None
        for action in parser._actions[before:]:
            action.range_text = describe(constraints) if constraints else ""
            if title == INHERITED_TITLE and f.name not in COMMON_INHERITED:
                parser.hidden_help[action] = action.help
                action.help = argparse.SUPPRESS


def _description(title: str, hidden: int, prog: str) -> str | None:
    if title != INHERITED_TITLE:
        return None
    return f"the common ones; {hidden} more (every TrainingArguments / TRL option): {prog} --help-all"


__all__ = ["COMMON_INHERITED", "HelpAll", "HelpFormatter", "add_grouped_fields", "declaring_class", "group_title"]
