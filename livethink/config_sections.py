"""The one config system of the training commands (``livethink rft``, ``grpo``, ``teacher``).

A command's config is a dataclass parsed by ``HfArgumentParser`` from a YAML file (``--config``, with a ``base:``
chain, ``config_files``) and the command line, which overrides it. Flags are spelt with dashes
(``--judge-json-mode``); the underscore spelling (``--judge_json_mode``) is the same flag.

Settings shared by several commands are *sections*: one dataclass each (``TeacherSettings``, ``JudgeSettings``). In
YAML a section is a nested mapping (``judge: {type: llm, base_url: ..., json_mode: schema}``); on the command line
its fields are flags with the section's name as prefix (``--judge-json-mode schema``). ``section_fields`` builds the
prefixed dataclass a command's config inherits and ``section_settings`` reads the section back.

Every mistake is a ``ConfigError`` naming the field: no usage dump, no traceback.
"""

from __future__ import annotations

import json
import os
import sys
import typing
import warnings
from argparse import ArgumentTypeError
from collections.abc import Callable
from dataclasses import MISSING, field, fields, make_dataclass
from typing import Any

from livethink.config_error import ConfigError

DRY_RUN_FLAGS = ("--dry-run", "--dry_run")


def from_options(cls: type, options: dict[str, Any], label: str) -> Any:
    """``cls(**options)`` for an options dataclass, refusing unknown keys by name (``label``: what it configures)."""
    known = {f.name for f in fields(cls)}
    unknown = sorted(set(options) - known)
    if unknown:
        raise ValueError(f"unknown {label} option(s) {unknown}; known: {sorted(known)}")
    return cls(**options)


def section_fields(settings_cls: type, prefix: str) -> type:
    """A dataclass with one ``<prefix>_<name>`` field per field of ``settings_cls`` (same types, with their range
    annotations, defaults, help)."""
    hints = typing.get_type_hints(settings_cls, include_extras=True)
    specs = []
    for f in fields(settings_cls):
        kwargs: dict[str, Any] = {"metadata": dict(f.metadata)}
        if f.default is not MISSING:
            kwargs["default"] = f.default
        elif f.default_factory is not MISSING:
            kwargs["default_factory"] = f.default_factory
        specs.append((f"{prefix}_{f.name}", hints[f.name], field(**kwargs)))
    cls = make_dataclass(f"{settings_cls.__name__}Fields", specs)
    cls.section_title = f"{prefix}: the `{prefix}:` section of the YAML"  # its --help group
    cls.__module__ = settings_cls.__module__  # where its fields (and their ranges) are declared
    return cls


def section_settings(cfg: Any, settings_cls: type, prefix: str) -> Any:
    """The ``settings_cls`` object of a parsed config's ``<prefix>_*`` fields."""
    return settings_cls(**{f.name: getattr(cfg, f"{prefix}_{f.name}") for f in fields(settings_cls)})


def flatten_sections(config: dict[str, Any], sections: dict[str, type]) -> dict[str, Any]:
    """``{"judge": {"type": "llm"}}`` → ``{"judge_type": "llm"}``, refusing unknown keys and the flat spelling."""
    out: dict[str, Any] = {}
    for key, value in config.items():
        if key in sections:
            known = [f.name for f in fields(sections[key])]
            if not isinstance(value, dict):
                raise ConfigError(f"{key}: must be a mapping of {key} settings ({', '.join(known)}), e.g. "
                                  f"{key}: {{type: {value}}}; got {value!r}")
            for name, item in value.items():
                if name not in known:
                    raise ConfigError(f"{key}.{name}: unknown {key} setting; known: {', '.join(known)}")
                out[f"{key}_{name}"] = item
            continue
        for section, cls in sections.items():
            name = key[len(section) + 1:] if key.startswith(section + "_") else None
            if name is not None and name in {f.name for f in fields(cls)}:
                raise ConfigError(f"{key}: write it in the `{section}:` section as {name} (the command-line flag "
                                  f"is --{key.replace('_', '-')})")
        out[key] = value
    return out


def _json_value(text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"not JSON: {exc}") from None


_json_value.__name__ = "JSON"  # argparse's message: "invalid JSON value: ..."


def _parser(config_classes: tuple[type, ...], prog: str | None = None):
    from transformers import HfArgumentParser

    from livethink.config_help import HelpAll, HelpFormatter, add_grouped_fields

    name = prog or "livethink"

    class Parser(HfArgumentParser):
        def error(self, message: str):  # argparse prints the usage and exits; a config mistake says what it is
            raise ConfigError(message.replace("argument ", "", 1))

        def _add_dataclass_arguments(self, dtype: type) -> None:  # livethink's options first (config_help)
            add_grouped_fields(self, dtype, name)

    parser = Parser(config_classes, prog=prog, formatter_class=HelpFormatter, usage=f"{name} --config PATH [--dry-run] [--OPTION VALUE ...]",
                    description="Options override the YAML's keys (--key-name or --key_name). Numbers are checked "
                    "against their ranges when the config loads.")
    # Read before parsing (pop_config, pop_dry_run); declared here so that --help lists them.
    parser.add_argument("--config", metavar="PATH", help="the YAML config (its base: chain is followed); flags "
                        "override its keys")
    parser.add_argument("--dry-run", "--dry_run", action="store_true", help="check the config and everything the "
                        "run would check before any expensive step; print the report and whether the run would "
                        "start here (exit 2 when the config is wrong)")
    parser.add_argument("--help-all", action=HelpAll, help="also list every inherited TRL / transformers option")
    for action in parser._actions:
        action.option_strings.sort(key=lambda flag: "_" in flag)  # --help shows the dash spelling first
        if typing.get_origin(action.type) is dict or action.type is dict:  # mappings (extra_body, ...) are JSON
            action.type = _json_value
    return parser


def _typed_yaml(parser: Any, config: dict[str, Any]) -> dict[str, Any]:
    """The YAML's scalar values converted as the same flag would be (argparse leaves defaults as they are), so
    ``k: many`` is refused as ``--k many`` is, naming the key."""
    actions = {action.dest: action for action in parser._actions}
    out = dict(config)
    for key, value in config.items():
        action = actions.get(key)
        kind = getattr(action, "type", None)
        if value is None or kind is None or isinstance(value, list | dict):
            continue
        name = getattr(kind, "__name__", "")
        number = isinstance(value, int | float) and not isinstance(value, bool)
        try:
            if kind is int and not (number and float(value).is_integer()):
                out[key] = int(value) if isinstance(value, str) else _not(value)
            elif kind is float and not number:
                out[key] = float(value) if isinstance(value, str) else _not(value)
            elif name == "string_to_bool" and not isinstance(value, bool):
                out[key] = kind(str(value))
        except (TypeError, ValueError, ArgumentTypeError):
            label = "boolean" if name == "string_to_bool" else name
            raise ConfigError(f"{key}: invalid {label} value in the config file: {value!r}") from None
    return out


def _not(value: Any) -> Any:
    raise ValueError(value)


def pop_dry_run(argv: list[str]) -> bool:
    """Remove ``--dry-run`` (or ``--dry_run``) from ``argv``; whether it was there."""
    found = any(a in DRY_RUN_FLAGS for a in argv)
    argv[:] = [a for a in argv if a not in DRY_RUN_FLAGS]
    return found


def pop_config(argv: list[str]) -> dict[str, Any]:
    """Remove ``--config PATH`` (or ``--config=PATH``) from ``argv``; the file's mapping over its ``base`` chain."""
    from livethink.length_rl.config_files import load_config_file

    for i, arg in enumerate(argv):
        if arg == "--config":
            if i + 1 >= len(argv):
                raise ConfigError("--config: needs a path")
            path = argv[i + 1]
            del argv[i:i + 2]
            return load_config_file(path)
        if arg.startswith("--config="):
            del argv[i]
            return load_config_file(arg.split("=", 1)[1])
    return {}


def parse_config(config_cls: type, argv: list[str], config: dict[str, Any], sections: dict[str, type],
                 prog: str | None = None):
    """One ``config_cls`` from the YAML mapping ``config`` (``env:`` is exported) and ``argv`` (which overrides it)."""
    config = flatten_sections(dict(config), sections)
    env = config.pop("env", None) or {}
    if not isinstance(env, dict):
        raise ConfigError("env: must be a mapping of environment variables")
    for key, value in env.items():
        os.environ[key] = str(value)
    known = {f.name for f in fields(config_cls)}
    unknown = sorted(set(config) - known)
    if unknown:
        raise ConfigError(f"unknown key(s) in the config file: {', '.join(unknown)} (see --help for the options)")
    parser = _parser((config_cls,), prog)
    parser.set_defaults(**_typed_yaml(parser, config))
    # the outputs: the config, the namespace of --config/--dry-run (read earlier; ignored), the unparsed strings
    cfg, *_, rest = parser.parse_args_into_dataclasses(args=argv, return_remaining_strings=True)
    if rest:
        raise ConfigError(f"unknown option(s): {' '.join(rest)} (see --help for the options)")
    return cfg


def load_training_config(config_cls: type, argv: list[str], sections: dict[str, type], *, cpu_override: bool,
                         prog: str | None = None):
    """``--config`` + ``argv`` → ``config_cls``; ``cpu_override``: check on the CPU (``--use_cpu true --bf16
    false`` appended) because a machine without a GPU refuses bf16. Raises ``ConfigError``/``ValueError``/``TypeError``."""
    argv = list(argv)
    config = pop_config(argv)
    if cpu_override:
        argv += ["--use_cpu", "true", "--bf16", "false"]
    return parse_config(config_cls, argv, config, sections, prog)


def training_main(command: str, argv: list[str], load: Callable[[list[str], bool], Any],
                  check: Callable[[Any], dict[str, Any]], run: Callable[[Any], int]) -> int:
    """The shape of every training command: ``load(argv, dry)`` the config, ``check`` it (the dry-run report, with
    ``problems``, ``missing_here`` and the ``ok`` / ``starts_here`` verdict), then print the report and one summary
    line (``--dry-run``: exit 0 when ok, else 2) or ``run`` it (a problem: exit 2 before anything expensive). A
    config mistake is one line on stderr, exit 2; so is a command with neither ``--config`` nor any option."""
    from livethink.run_check import print_dry_run

    quiet_trl_vllm_warning()
    argv = list(argv)
    dry = pop_dry_run(argv)
    prog = f"livethink {command}"
    if not argv:
        print(f"{prog}: nothing to {'check' if dry else 'run'}: give --config PATH (configs/ holds examples) or "
              "the run's options (--help lists them)", file=sys.stderr)
        return 2
    with warnings.catch_warnings(record=True) as caught:  # import-time warnings: shown unless it is refused
        try:
            cfg = load(argv, dry)
            report = check(cfg)
        except (ValueError, TypeError) as exc:
            print(f"{prog}: invalid config: {one_line(exc)}", file=sys.stderr)
            return 2
    if not report["problems"]:
        for w in caught:
            warnings.showwarning(w.message, w.category, w.filename, w.lineno)
    if dry:
        return print_dry_run(prog, report)
    if report["problems"]:
        print(f"{prog}: invalid config: {'; '.join(report['problems'])}", file=sys.stderr)
        return 2
    return run(cfg)


def one_line(exc: BaseException) -> str:
    """An exception's message on one line (TRL's and transformers' messages can span several)."""
    return " ".join(str(exc).split()) or type(exc).__name__


def requested_hardware(config: dict[str, Any], argv: list[str]) -> dict[str, Any]:
    """bf16 / use_cpu as the YAML and command line ask, before a GPU-less dry run overrides them."""
    values = {k: config.get(k) for k in ("bf16", "use_cpu")}
    for key in ("bf16", "use_cpu"):
        for flag in (f"--{key}", f"--{key.replace('_', '-')}"):
            if flag in argv and argv.index(flag) + 1 < len(argv):
                values[key] = argv[argv.index(flag) + 1].lower() in ("1", "true", "yes")
    return {"bf16": bool(values.get("bf16")), "use_cpu": bool(values.get("use_cpu")),
            "not_checked_here": "hardware-dependent options (bf16, GPU count) are checked when training starts"}


def quiet_trl_vllm_warning() -> None:
    """TRL warns about an untested vLLM version from five modules (and vLLM's import resets the warning filters):
    show it once per command."""
    import warnings

    show = warnings.showwarning
    if getattr(show, "livethink_once", False):
        return
    seen: list[str] = []

    def show_once(message, category, filename, lineno, file=None, line=None):
        if "TRL currently supports vLLM versions" in str(message):
            if seen:
                return
            seen.append(str(message))
        show(message, category, filename, lineno, file, line)

    show_once.livethink_once = True  # type: ignore[attr-defined]
    warnings.showwarning = show_once


def check_url(name: str, url: str | None) -> str | None:
    """A problem line when ``url`` is set and is not an http(s) URL."""
    from urllib.parse import urlparse

    if url and not (urlparse(url).scheme in ("http", "https") and urlparse(url).netloc):
        return f"{name}: not an http(s) URL: {url!r}"
    return None


__all__ = ["ConfigError", "check_url", "flatten_sections", "from_options", "load_training_config",
           "parse_config", "pop_config", "pop_dry_run", "quiet_trl_vllm_warning", "requested_hardware",
           "section_fields", "section_settings", "training_main"]
