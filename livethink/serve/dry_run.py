"""``livethink serve --dry-run``: what start-up would check, without a GPU and without loading weights.

The report separates two things. ``problems``: the config is wrong (a checkpoint without tokenizer files, an
experiment arm naming a model the config does not serve, an unsupported store URL, a thinking calibration that
does not parse, ...): ``ok`` is false. ``missing_here``: the config is right but this machine lacks what start-up
needs (a checkpoint not copied here, vLLM not installed for ``engine.kind: vllm``, fewer GPUs than
``engine.tensor_parallel_size``): ``starts_here`` is false, ``ok`` stays true. Shipped configs name checkpoints
that training writes, so they are ``ok`` everywhere and ``starts_here`` only where the weights are.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from livethink.run_check import Findings, check_path
from livethink.serve.config import ServeConfig

SCHEMES = ("sqlite", "postgresql")


class _Findings:
    def __init__(self) -> None:
        self.problems: list[str] = []
        self.missing: list[str] = []
        self.notes: list[str] = []

    def path(self, name: str, path: str, what: str) -> None:
        """A missing ``path`` as the training dry-runs classify it (``livethink.run_check``): a local path (relative,
        or under the repository) that no training config writes is a problem (a typo), a production path is
        missing here, a hub id a note."""
        found = Findings()
        check_path(found, name, path, what=what)
        self.problems += found.problems
        self.missing += found.missing_here
        self.notes += found.notes


def dry_run(config: ServeConfig) -> dict[str, Any]:
    """Check ``config`` as start-up would: models, engine, experiments, store, spool, thinking floors."""
    found = _Findings()
    report: dict[str, Any] = {
        "models": {name: _check_model(config, name, found) for name in config.models},
        "default_model": config.default_model,
        "engine_groups": config.engine_groups(),
        "engine": _check_engine(config, found),
    }
    if config.experiment is not None:
        report["experiment"] = _check_experiments(config, found)
    keys, admin = config.auth.keys()
    report["auth"] = {"enabled": bool(keys or admin), "admin_enabled": bool(admin)}
    report["deadlines_ms"] = {ep: config.deadline_ms(ep) for ep in ("livestream", "chat")}
    report["below_min_thinking"] = _thinking_floors(config, report["models"], found)
    report["missing_here"] = found.missing
    report["notes"] = found.notes
    report["problems"] = found.problems
    report["ok"] = not found.problems
    report["starts_here"] = not found.problems and not found.missing
    return report


def _check_model(config: ServeConfig, name: str, found: _Findings) -> dict[str, Any]:
    from livethink.data.reasoning_format import resolve as resolve_format
    from livethink.models.loading import CheckpointError, inspect_checkpoint, load_tokenizer_for

    spec = config.models[name]
    entry: dict[str, Any] = spec.model_dump(exclude_none=True)
    if spec.path is not None:
        if not Path(spec.path).expanduser().exists():
            found.path(f"models.{name}.path", spec.path, "the checkpoint start-up loads")
        else:
            try:
                info = inspect_checkpoint(spec.path, require_weights=False)
                entry.update(model_type=info.model_type, has_tokenizer=info.has_tokenizer)
                if not info.has_tokenizer:
                    found.problems.append(f"models.{name}.path: {spec.path} has no tokenizer files")
                else:
                    fmt, why = resolve_format(spec.reasoning, load_tokenizer_for(spec.path), spec.path)
                    entry.update(reasoning=fmt.to_dict(), reasoning_source=why)
            except (CheckpointError, ValueError) as exc:
                found.problems.append(f"models.{name}.path: {exc}")
    if spec.lora is not None:
        adapter = Path(spec.lora).expanduser()
        if not adapter.exists():
            found.path(f"models.{name}.lora", spec.lora, "the adapter start-up loads")
        elif not (adapter / "adapter_config.json").is_file():
            found.problems.append(f"models.{name}.lora: {spec.lora} has no adapter_config.json")
    return entry


def _check_engine(config: ServeConfig, found: _Findings) -> dict[str, Any]:
    from livethink.engines import kv_cache_env

    kind = config.engine.kind
    has_vllm = importlib.util.find_spec("vllm") is not None
    if kind == "vllm" and not has_vllm:
        found.missing.append("engine.kind: vllm is not installed here")
    if kind != "transformers" and has_vllm:
        try:
            kv_cache_env(config.engine.kv_cache_gib)
        except ValueError as exc:
            found.problems.append(f"engine.kv_cache_gib: {exc}")
    tp = config.engine.tensor_parallel_size
    if tp > 1:
        import torch

        if torch.cuda.device_count() < tp:
            found.missing.append(
                f"engine.tensor_parallel_size: {tp} GPUs needed, {torch.cuda.device_count()} visible here"
            )
    return {"kind": kind, "vllm_importable": has_vllm}


def _check_experiments(config: ServeConfig, found: _Findings) -> dict[str, Any]:
    from livethink.ab_test.errors import ExperimentConfigError
    from livethink.ab_test.experiment import load_experiments

    exp = config.experiment
    assert exp is not None
    out: dict[str, Any] = {"file": exp.file, "store": safe_url(exp.store)}
    scheme = (urlparse(exp.store).scheme if "://" in exp.store else "sqlite").split("+")[0]
    if scheme not in SCHEMES:
        found.problems.append(f"experiment.store: unsupported URL scheme {scheme!r} (sqlite or postgresql)")
    elif scheme == "postgresql" and importlib.util.find_spec("psycopg") is None:
        found.missing.append("experiment.store: the psycopg driver is not installed here")
    elif scheme == "sqlite":  # a URL (sqlite:///relative, sqlite:////absolute) or a bare file path
        db = urlparse(exp.store).path.removeprefix("/") if "://" in exp.store else exp.store
        if db and db != ":memory:":
            _check_writable_dir(Path(db).parent, "experiment.store", found)
    if exp.spool_dir is not None:
        _check_writable_dir(Path(exp.spool_dir), "experiment.spool_dir", found)
    try:
        experiments = load_experiments(exp.file, known_variants=set(config.models))
    except ExperimentConfigError as exc:
        found.problems.append(f"experiment.file: {exc}")
        return out
    except OSError as exc:  # a directory, a file without read permission
        found.problems.append(f"experiment.file: {exp.file}: cannot be read ({exc.strerror})")
        return out
    out["experiments"] = {
        name: {a.name: {"variant": a.variant or config.default_model, "weight": a.weight} for a in e.arms}
        for name, e in experiments.items()
    }
    return out


def _check_writable_dir(path: Path, field: str, found: _Findings) -> None:
    """Start-up creates ``path`` (or writes in it): its nearest existing ancestor must be a writable directory."""
    existing = path.expanduser().absolute()
    while not existing.exists():
        existing = existing.parent
    if not existing.is_dir():
        found.problems.append(f"{field}: {existing} is a file, so {path} cannot be a directory")
    elif not os.access(existing, os.W_OK):
        found.problems.append(f"{field}: {existing} is not writable here")


def _thinking_floors(config: ServeConfig, models: dict[str, Any], found: _Findings) -> dict[str, Any]:
    """Each model's thinking floor (configured, calibrated or none), and what a request below it gets per
    endpoint (the shape of ``/health``'s ``below_min_thinking``)."""
    from livethink.serve.request_path.quality import below_floor_report, floor_for

    floors = {}
    for name, entry in models.items():
        try:
            floors[name] = floor_for(config, name)
            entry["thinking_floor"] = floors[name].card()
        except ValueError as exc:  # a calibration file that does not parse
            found.problems.append(f"models.{name}: {exc}")
    return below_floor_report(config, floors)


def print_report(report: dict[str, Any], prog: str) -> int:
    """Print ``report`` (JSON on stdout) and one summary line on stderr (the problems, else what this machine
    lacks, else that the server would start here); the exit code: 2 when the config is wrong (as the training
    commands' ``--dry-run``), else 0."""
    print(json.dumps(report, indent=2, default=str))
    if report["problems"]:
        print(f"{prog}: invalid config: {'; '.join(report['problems'])}", file=sys.stderr)
        return 2
    if report["starts_here"]:
        print(f"{prog}: config ok; the server would start here", file=sys.stderr)
    else:
        print(f"{prog}: the config is valid; start-up on this machine would stop at: "
              + "; ".join(report["missing_here"]), file=sys.stderr)  # fmt: skip
    return 0


def preflight(config: ServeConfig) -> tuple[int, str] | None:
    """What would stop ``livethink serve`` before anything expensive runs, as ``(exit code, one line)``: a model
    or adapter path that is not there (3, as an engine that fails to start; no engine is tried on it) or an
    experiments file that does not load (2, an invalid config); None when start-up may go ahead."""
    from livethink.serve.engines import missing_model_paths

    missing = missing_model_paths(config)
    if missing:
        return 3, f"cannot start: {'; '.join(missing)}"
    if config.experiment is not None:
        from livethink.ab_test.errors import ExperimentConfigError
        from livethink.ab_test.experiment import load_experiments

        try:
            load_experiments(config.experiment.file, known_variants=set(config.models))
        except ExperimentConfigError as exc:
            return 2, f"invalid config: experiment.file: {exc}"
        except OSError as exc:  # a directory, a file without read permission
            return 2, f"invalid config: experiment.file: {config.experiment.file}: cannot be read ({exc.strerror})"
    return None


def safe_url(url: str) -> str:
    """``url`` with its password masked."""
    parsed = urlparse(url)
    if parsed.password:
        return url.replace(f":{parsed.password}@", ":***@")
    return url
