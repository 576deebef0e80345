"""`livethink ab <assign|analyze|report|simulate>`.

In every sub-command ``--experiment`` is an experiment's name and ``--config`` an experiment YAML file: ``assign``
reads the YAML (``--experiment`` picks one when it defines several), ``analyze``/``report`` read the experiment
registered in ``--db`` unless ``--config`` is given, ``simulate`` needs ``--config`` offline unless the name is
registered in ``--db``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path

from livethink.ab_test.errors import ABError
from livethink.cli_args import FlagParser

NAME_HELP = "experiment name"
CONFIG_HELP = "experiment YAML file"


def _parser() -> argparse.ArgumentParser:
    p = FlagParser(
        prog="livethink ab", description="A/B experiments: assign, analyze, report, simulate"
    )
    sub = p.add_subparsers(dest="command", required=True)

    a = sub.add_parser(
        "assign", help="print id<TAB>arm<TAB>bucket for each viewer id (arm '-' = not in experiment)"
    )
    a.add_argument("--config", type=Path, help=CONFIG_HELP + " (required)")
    a.add_argument("--experiment", help=NAME_HELP + " (needed when --config defines several)")
    a.add_argument("--ids", required=True, help="file with one viewer id per line ('-' = stdin)")

    for name, help_ in (
        ("analyze", "per-arm stats and tests"),
        ("report", "Markdown + HTML report with plots"),
    ):
        q = sub.add_parser(name, help=help_)
        q.add_argument("--db", required=True, help="SQLAlchemy URL or SQLite file path")
        q.add_argument("--experiment", required=True, help=NAME_HELP + " (registered in the DB)")
        q.add_argument("--config", type=Path, help=CONFIG_HELP + " to use instead of the registered config")
        cup = q.add_mutually_exclusive_group()
        cup.add_argument("--cuped", dest="cuped", action="store_true", default=None, help="force CUPED on")
        cup.add_argument("--no-cuped", dest="cuped", action="store_false", help="force CUPED off")
        if name == "analyze":
            q.add_argument("--json", action="store_true", help="print the full analysis as JSON")
        else:
            q.add_argument("--out", required=True, type=Path, help="output directory")

    s = sub.add_parser(
        "simulate", help="simulated viewers: against a loopback server, or --offline into a DB"
    )
    s.add_argument("--offline", action="store_true", help="no server: synthetic replies written to --db")
    s.add_argument("--base-url", default="http://127.0.0.1:8000", help="livethink server (loopback only)")
    s.add_argument("--experiment", required=True, help=NAME_HELP)
    s.add_argument("--config", type=Path, help=CONFIG_HELP + " (offline: needed unless --db has the experiment)")
    s.add_argument("--db", help="event store for --offline (SQLAlchemy URL or SQLite path)")
    s.add_argument("--sim-config", type=Path, help="YAML: outcome_model, default_arm, arms (see configs/ab)")
    s.add_argument("--requests", type=int, default=200, help="server mode: number of questions (≤ 100000)")
    s.add_argument("--viewers", type=int, help="number of viewers (default: one per request; offline: 10000)")
    s.add_argument(
        "--tasks", type=Path, help="JSONL of task records (product_docs, question, reference, ...)"
    )
    s.add_argument("--concurrency", type=int, default=4)
    s.add_argument(
        "--deadline-ms", type=int, help="server mode: deadline sent with each question (default: the server's, "
        "i.e. the experiment arm's budget.deadline_ms or the endpoint's)"
    )
    s.add_argument(
        "--duration-hours", type=float, default=6.0, help="offline: spread arrivals over this window"
    )
    s.add_argument("--seed", type=int, default=0)
    s.add_argument("--run-id", help="label of this run (part of simulated viewer ids)")
    return p


def _load_ids(spec: str) -> list[str]:
    try:
        text = sys.stdin.read() if spec == "-" else Path(spec).read_text()
    except OSError as exc:
        raise ABError(f"--ids: {spec}: {exc.strerror}") from None
    return [line.strip() for line in text.splitlines() if line.strip()]


def _store_and_experiment(args: argparse.Namespace):  # type: ignore[no-untyped-def]
    from livethink.ab_test.experiment import load_experiment
    from livethink.ab_test.store import EventStore

    store = EventStore(args.db, create=False)
    exp = load_experiment(args.config, args.experiment) if args.config else store.experiment(args.experiment)
    return store, exp


def _assign(args: argparse.Namespace) -> int:
    from livethink.ab_test.assignment import Assigner
    from livethink.ab_test.experiment import load_experiment

    exp = load_experiment(args.config, args.experiment)
    assigner = Assigner(exp)
    digits = 4 if exp.hash_version == 2 else 3
    out = sys.stdout
    for vid in _load_ids(args.ids):
        a = assigner(vid)
        bucket = "-" if a.bucket is None else f"{a.bucket:.{digits}f}"
        out.write(f"{vid}\t{a.arm or '-'}\t{bucket}\n")
    return 0


def _pct(x: float | None) -> str:
    return "–" if x is None else f"{x:.1%}"


def _analyze(args: argparse.Namespace) -> int:
    from livethink.ab_test.analysis import analyze

    store, exp = _store_and_experiment(args)
    s = analyze(store, exp, cuped=args.cuped).summary
    if args.json:
        print(json.dumps(s, indent=2))
        return 0
    primary = s["primary_metric"]
    print(
        f"experiment {s['experiment']}: {s['data']['viewers']} viewers"
        + (" (SIMULATED)" if s["data"]["simulated"] else "")
    )
    for name, a in s["arms"].items():
        v, lat, ci = a[primary], a["latency_ms"]["p50"], a["goodput_ci"]
        print(f"  {name:>12}: viewers {a['viewers']:>8}  {primary} {'–' if v is None else f'{v:.4g}'}  "
              f"requests {a['responses']}: goodput {_pct(a['goodput'])} {f'[{_pct(ci[0])}, {_pct(ci[1])}]' if ci else ''}"
              f", refused {_pct(a['refusal_rate'])}, fallback {_pct(a['fallback_rate'])}, errors {_pct(a['error_rate'])}"
              f"; latency p50 (answered) {'–' if lat is None else f'{lat:.0f} ms'}")  # fmt: skip
    print(f"  SRM p={s['srm']['p_value']:.3g}{'  (FLAGGED)' if s['srm']['flagged'] else ''}"
          + (f" over {len(s['phases'])} phases (each against its weights)" if len(s["phases"]) > 1 else ""))
    print(f"verdict: {s['verdict']['line']}")
    return 0


def _report(args: argparse.Namespace) -> int:
    from livethink.ab_test.analysis import analyze
    from livethink.ab_test.report import write_report

    store, exp = _store_and_experiment(args)
    analysis = analyze(store, exp, cuped=args.cuped)
    paths = write_report(analysis, args.out)
    print(f"verdict: {analysis.summary['verdict']['line']}")
    for p in paths.values():
        print(p)
    return 0


def _simulate(args: argparse.Namespace) -> int:
    from livethink.ab_test.simulate import load_simulation_config, load_tasks, simulate_http, simulate_offline

    sim_cfg = load_simulation_config(args.sim_config)
    if args.offline:
        from livethink.ab_test.experiment import load_experiment
        from livethink.ab_test.store import EventStore

        if not args.db:
            raise ABError("--db: required with --offline")
        store = EventStore(args.db)
        exp = load_experiment(args.config, args.experiment) if args.config else store.experiment(args.experiment)
        result = simulate_offline(
            exp, store, viewers=args.viewers or 10_000, seed=args.seed, config=sim_cfg,
            duration_s=args.duration_hours * 3600, run_id=args.run_id,
        )  # fmt: skip
    else:
        name = args.experiment
        if args.config:
            from livethink.ab_test.experiment import load_experiment

            load_experiment(args.config, name)  # the name must be in the file
        result = asyncio.run(
            simulate_http(
                args.base_url,
                name,
                requests=args.requests,
                viewers=args.viewers,
                tasks=load_tasks(args.tasks),
                config=sim_cfg,
                seed=args.seed,
                concurrency=args.concurrency,
                deadline_ms=args.deadline_ms,
                run_id=args.run_id,
            )  # fmt: skip
        )
    print(json.dumps(result, indent=2))
    if not args.offline:
        from livethink.ab_test.simulate import stream_summary

        for line in stream_summary(result):
            print(line, file=sys.stderr)
    return 0


def _check_experiment_name(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    name = args.experiment
    if name is not None and (name.endswith((".yaml", ".yml")) or Path(name).is_file()):
        parser.error(f"--experiment: {name!r} is a file; --experiment takes an experiment name, and the YAML "
                     f"file goes in --config (livethink ab {args.command} --config {name} ...)")  # fmt: skip
    if args.command == "assign" and args.config is None:
        parser.error("--config: required (the experiment YAML file)")


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    _check_experiment_name(parser, args)
    handler = {"assign": _assign, "analyze": _analyze, "report": _report, "simulate": _simulate}[args.command]
    try:
        return handler(args)
    except (ABError, ValueError, FileNotFoundError) as exc:
        print(f"livethink ab {args.command}: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
