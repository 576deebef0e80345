"""`make demo`: the main job on the embedded default, step by step, reusing finished artifacts.

data -> RFT (scripted teacher, judge, SFT of the MoE student) -> stage 2 in two GRPO runs (DRPO, then DRPO with
budget-forced rollouts from it: the student trained for the server's cut) -> eval (teacher vs RFT vs that student)
-> calibration (each student's minimum thinking budget) -> server with two A/B arms -> a short simulated viewer
stream -> Gradio app.
Every batch step checks for its output first, so a re-run only does what is missing. ``--quick`` uses small
settings. Each step runs in a child process; Ctrl-C, SIGTERM (``kill``, systemd, a container stop) and SIGHUP
(the terminal closing) stop every process the job started. A port already taken is refused up front, naming the
process that holds it.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from livethink.cli_args import FlagParser

ROOT = Path(__file__).resolve().parent.parent
THINKING_CAPS = "0,32,64,96,128,192"  # the thinking caps each student is calibrated at (validation split)
QUICK_NOTICE = ("Quick run: it checks the plumbing (data, RFT, GRPO, eval, server, A/B, app), not quality. "
                "Its students trained briefly on 300 prompts: expect wrong replies, cut at the token cap. "
                "Run `make demo` for trained students.")


@dataclass(frozen=True)
class Settings:
    artifacts: Path
    runs: Path
    n_train: int
    n_test: int
    rft_prompts: int
    rft_epochs: float
    eval_limit: int
    grpo_steps: int
    sim_requests: int
    latency_probes: int = 16  # eval: one-at-a-time latency probes per model
    eval_engine: str = "vllm"  # quick: transformers (two vLLM engine start-ups cost more than 20 tasks)
    eval_max_tokens: int = 768
    grpo_max_completion: int = 384
    grpo_use_vllm: bool = True  # colocated vLLM rollouts (the configs' default); quick: transformers (no engine start-up)
    variant: str = "drpo"  # the compressed arm (the experiment configs/ab/drpo_vs_rft.yaml names it)
    # Stage 2 in Elastic Reasoning's order (arXiv 2505.05315): DRPO from the RFT student, then DRPO with
    # budget-forced rollouts aimed at the 64-token cap from the DRPO student. Over stage-2 seeds 0-2 this beat one
    # budget-forced run from the RFT student at every mean (benchmarks/results/budget_training_methods/budget_training.md).
    grpo_config: str = "grpo_drpo.yaml"
    budget_config: str = "grpo_drpo_then_budget64.yaml"  # the served arm: trained for the server's cut
    quick: bool = False  # the eval report and the app say that a quick run checks the plumbing, not quality
    calibration_limit: int = 120  # validation tasks per thinking cap: each student's minimum thinking budget
    # torch intra-op threads of each batch step (OMP_NUM_THREADS; None: torch's default, one per core). Quick: 1.
    # OpenMP's barriers wait for every thread: with any other process on the cores, each op waits for a
    # descheduled thread (decoding and SFT steps many times slower). On idle cores the full run's SFT gains from
    # the second thread, so it keeps torch's default.
    torch_threads: int | None = None

    @classmethod
    def make(cls, quick: bool, workdir: Path) -> Settings:
        if quick:
            return cls(workdir / "artifacts/quick", workdir / "runs/quick", 1000, 100, 300, 1.0, 20, 3, 40, 4,
                       eval_engine="transformers", eval_max_tokens=256, grpo_max_completion=192,
                       grpo_use_vllm=False, quick=True, calibration_limit=10, torch_threads=1)
        # 96 GRPO steps: the compression benchmark's budget (and the tiny configs' max_steps)
        return cls(workdir / "artifacts/tiny", workdir / "runs/tiny", 5000, 500, 5000, 2.5, 200, 96, 200)

    @property
    def data(self) -> Path:
        return self.artifacts / "data"

    @property
    def tokenizer(self) -> Path:
        return self.artifacts / "tokenizer"

    @property
    def rft(self) -> Path:
        return self.runs / "rft"

    @property
    def compressed(self) -> Path:
        """The first stage-2 run (DRPO)."""
        return self.runs / "grpo" / Path(self.grpo_config).stem.removeprefix("grpo_")

    @property
    def served(self) -> Path:
        """The second stage-2 run, from the first: the treatment arm the demo serves."""
        return self.runs / "grpo" / Path(self.budget_config).stem.removeprefix("grpo_")


@dataclass(frozen=True)
class Step:
    name: str
    done: Callable[[Settings], bool]
    command: Callable[[Settings], list[str]]
    describe: Callable[[Settings], str]


def _livethink(*args: str) -> list[str]:
    return [sys.executable, "-m", "livethink.cli", *args]


def _rft_teacher_options() -> list[str]:
    """The eval's scripted teacher as the RFT config samples it (its opener rate)."""
    import yaml

    teacher = (yaml.safe_load((ROOT / "configs/tiny/rft.yaml").read_text()) or {}).get("teacher") or {}
    rate = teacher.get("opener_rate")
    return [] if rate is None else ["--teacher-opener-rate", str(rate)]


def _read_json(path: Path) -> dict:
    return json.loads(path.read_text()) if path.is_file() else {}


def _grpo(s: Settings, config: str, start: Path, out: Path) -> list[str]:
    """A stage-2 run of ``configs/tiny/<config>`` from the student at ``start``, at the mode's steps and lengths."""
    return _livethink("grpo", "--config", str(ROOT / "configs/tiny" / config), "--model_name_or_path", str(start),
                      "--data_dir", str(s.data), "--output_dir", str(out), "--max_steps", str(s.grpo_steps),
                      "--max_completion_length", str(s.grpo_max_completion), "--use_vllm", str(s.grpo_use_vllm).lower())


STEPS: list[Step] = [
    Step(
        "data",
        lambda s: (s.data / "manifest.json").is_file(),
        lambda s: _livethink("data", "generate", "--out", str(s.data), "--n-train", str(s.n_train),
                             "--n-validation", str(s.n_test), "--n-test", str(s.n_test)),
        lambda s: "LiveShop tasks {counts}, products shared train/test: {products_shared_train_test}".format(
            **_read_json(s.data / "manifest.json")),
    ),
    Step(
        "rft",
        lambda s: (s.rft / "final" / "config.json").is_file() and (s.rft / "rft_summary.json").is_file(),
        lambda s: _livethink("rft", "--config", str(ROOT / "configs/tiny/rft.yaml"), "--output_dir", str(s.rft),
                             "--data_dir", str(s.data), "--tokenizer_dir", str(s.tokenizer),
                             "--n_prompts", str(s.rft_prompts), "--num_train_epochs", str(s.rft_epochs),
                             "--student_config", str(ROOT / "configs/tiny/student.yaml")),
        lambda s: "RFT student in {final_dir}; acceptance {acc:.1%}; timings {timings}".format(
            acc=_read_json(s.rft / "rft_summary.json").get("acceptance", {}).get("acceptance_rate", 0.0),
            **_read_json(s.rft / "rft_summary.json")),
    ),
    Step(
        "compress",
        lambda s: (s.compressed / "final" / "config.json").is_file(),
        lambda s: _grpo(s, s.grpo_config, s.rft / "final", s.compressed),
        lambda s: f"{s.variant} student in {s.compressed / 'final'}",
    ),
    Step(
        "budget",
        lambda s: (s.served / "final" / "config.json").is_file(),
        lambda s: _grpo(s, s.budget_config, s.compressed / "final", s.served),
        lambda s: f"{s.variant} student trained for the server's cut in {s.served / 'final'}",
    ),
    Step(
        "eval",
        lambda s: (s.runs / "eval" / "eval.json").is_file(),
        lambda s: _livethink("eval", "--model", str(s.rft / "final"), "--name", "rft-student",
                             "--model", str(s.served / "final"), "--name", f"{s.variant}-student",
                             "--teacher", "scripted", *_rft_teacher_options(), "--data", str(s.data), "--split", "holdout",
                             "--limit", str(s.eval_limit), "--latency-probes", str(s.latency_probes),
                             "--engine", s.eval_engine, "--max-tokens", str(s.eval_max_tokens),
                             "--calculator", "--out", str(s.runs / "eval"),
                             *(["--note", QUICK_NOTICE] if s.quick else [])),
        lambda s: f"report {s.runs / 'eval' / 'eval.md'}",
    ),
    Step(
        "calibrate",
        lambda s: all((m / "thinking_calibration.json").is_file() for m in (s.rft / "final", s.served / "final")),
        lambda s: _livethink("eval", "--model", str(s.rft / "final"), "--name", "rft-student",
                             "--model", str(s.served / "final"), "--name", f"{s.variant}-student",
                             "--data", str(s.data), "--split", "validation", "--limit", str(s.calibration_limit),
                             "--thinking-caps", THINKING_CAPS, "--latency-probes", "0", "--engine", s.eval_engine,
                             "--max-tokens", str(s.eval_max_tokens), "--calculator",
                             "--out", str(s.runs / "eval_thinking_caps")),
        lambda s: "thinking floors (below them: a forced reply where the curve says one can be right): " + ", ".join(
            f"{m.parent.name}: {_read_json(m / 'thinking_calibration.json').get('min_thinking_tokens')}"
            for m in (s.rft / "final", s.served / "final")),
    ),
]


def step_env(settings: Settings, env: dict[str, str]) -> dict[str, str]:
    """A batch step's environment: ``settings.torch_threads`` as ``OMP_NUM_THREADS`` unless the caller set it."""
    if settings.torch_threads is None:
        return env
    return {"OMP_NUM_THREADS": str(settings.torch_threads), **env}


def run_step(step: Step, settings: Settings, env: dict[str, str]) -> int:
    """Run one step's command in its own process group so Ctrl-C stops everything it started."""
    proc = subprocess.Popen(step.command(settings), cwd=ROOT, env=step_env(settings, env), start_new_session=True)
    try:
        return proc.wait()
    except KeyboardInterrupt:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
        raise


def _wait_http(url: str, proc: subprocess.Popen, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{url}: the process exited with code {proc.returncode} before it was ready")
        try:
            with urllib.request.urlopen(url, timeout=2) as resp:
                if resp.status == 200:
                    return
        except OSError:
            pass
        time.sleep(1)
    raise RuntimeError(f"{url} not ready after {timeout_s:.0f}s")


def app_command(settings: Settings, server_url: str, ui_port: int) -> list[str]:
    """The Gradio app's command line (``--quick`` puts the quick-run notice on every tab)."""
    return [sys.executable, "-m", "apps.demo", "--server-url", server_url, "--host", "127.0.0.1", "--port", str(ui_port),
            "--catalog", str(settings.data / "catalog.jsonl"), "--experiment", "drpo_vs_rft",
            "--results-dir", str(ROOT / "benchmarks/results"), "--eval-report", str(settings.runs / "eval" / "eval.md"),
            "--stream-report", str(settings.runs / "simulated_stream.json"), *(["--quick"] if settings.quick else [])]


def report_stream(stdout: str, out: Path) -> None:
    """Save the simulated stream's result and print its summary (answered share, goodput per arm)."""
    from livethink.ab_test.simulate import stream_summary

    result = json.loads(stdout)
    out.write_text(json.dumps(result, indent=2))
    for line in stream_summary(result):
        print(f"[demo] simulated viewers: {line}", flush=True)
    print(f"[demo] simulated viewers: details in {out}", flush=True)


def port_holder(port: int, host: str = "127.0.0.1") -> str | None:
    """None when ``host:port`` is free to listen on; else who holds it ("pid 123 (livethink serve ...)" where the
    process can be found, psutil permitting)."""
    import socket

    with socket.socket() as sock:
        try:
            sock.bind((host, port))
            return None
        except OSError:
            pass
    try:
        import psutil

        for conn in psutil.net_connections("tcp"):
            if conn.laddr and conn.laddr.port == port and conn.status == psutil.CONN_LISTEN and conn.pid:
                cmd = " ".join(psutil.Process(conn.pid).cmdline())[:160]
                return f"pid {conn.pid} ({cmd})"
    except Exception:  # psutil missing, or not allowed to see other processes' sockets
        pass
    return "another process"


def stop_on_signals() -> None:
    """SIGTERM and SIGHUP stop the job as Ctrl-C does (a ``KeyboardInterrupt``: every step's and the server's
    ``finally`` stops the processes it started, in their own process groups)."""

    def stop(signum: int, _frame: object) -> None:
        for sig in (signal.SIGTERM, signal.SIGHUP):  # a second one must not cut the clean-up short
            signal.signal(sig, signal.SIG_IGN)
        raise KeyboardInterrupt(signal.Signals(signum).name)

    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, stop)


def serve_and_show(settings: Settings, env: dict[str, str], port: int, ui_port: int, hold: bool) -> None:
    """Start the server (two arms), stream simulated viewers through it, launch the Gradio app."""
    server_url = f"http://127.0.0.1:{port}"
    for what, p, flag in (("the server", port, "--port"), ("the Gradio app", ui_port, "--ui-port")):
        holder = port_holder(p)
        if holder is not None:
            raise RuntimeError(f"port {p} for {what} is taken by {holder}: stop it, or pass {flag} (DEMO_ARGS)")
    store = settings.runs / "ab.db"
    experiment = ROOT / "configs/ab/drpo_vs_rft.yaml"
    server = subprocess.Popen(
        _livethink("serve", "--config", str(ROOT / "configs/tiny/serve.yaml"), "--port", str(port),
                   "--set", f"models.rft.path={settings.rft / 'final'}",
                   "--set", f"models.{settings.variant}={{path: {settings.served / 'final'}}}",
                   "--set", f"experiment={{file: {experiment}, store: sqlite:///{store}}}"),
        cwd=ROOT, env=env, start_new_session=True)
    children = [server]
    try:
        _wait_http(f"{server_url}/health", server, 600)
        print(f"[demo] server: {server_url} (arms rft vs {settings.variant}, events in {store})", flush=True)
        # closed loop, one viewer per arm's engine at a time: a rate the deployment sustains on 2 cores
        sim = subprocess.run(
            _livethink("ab", "simulate", "--base-url", server_url, "--experiment", "drpo_vs_rft",
                       "--requests", str(settings.sim_requests), "--tasks", str(settings.data / "holdout.jsonl"),
                       "--concurrency", "2"), cwd=ROOT, env=env, stdout=subprocess.PIPE, text=True)
        if sim.returncode != 0:
            print(f"[demo] simulated viewers: exit code {sim.returncode} (the Experiment tab may be empty)", file=sys.stderr)
        else:
            report_stream(sim.stdout, settings.runs / "simulated_stream.json")
            from livethink.eval.holdout_log import record_holdout_eval

            record_holdout_eval("holdout", computed=["served goodput per arm (simulated viewers)"],
                                models=[str(settings.rft / "final"), str(settings.served / "final")],
                                n_tasks=settings.sim_requests, command="make demo: livethink ab simulate",
                                extra={"out": str(settings.runs / "simulated_stream.json")})
        ui = subprocess.Popen(app_command(settings, server_url, ui_port), cwd=ROOT, env=env, start_new_session=True)
        children.append(ui)
        _wait_http(f"http://127.0.0.1:{ui_port}/", ui, 180)
        print(f"[demo] Gradio demo: http://127.0.0.1:{ui_port}/   server: {server_url}/docs   metrics: {server_url}/metrics")
        if hold:
            print("[demo] Ctrl-C stops the server and the demo.", flush=True)
            while all(p.poll() is None for p in children):
                time.sleep(1)
    finally:
        for proc in reversed(children):
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        for proc in children:
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)


def main(argv: list[str] | None = None) -> int:
    parser = FlagParser(prog="livethink demo", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="small settings (a few minutes)")
    parser.add_argument("--workdir", default=str(ROOT), help="where artifacts/ and runs/ go")
    steps = [step.name for step in STEPS]
    parser.add_argument("--only", nargs="+", choices=steps, metavar="STEP",
                        help=f"run only these batch steps, of: {', '.join(steps)}")  # fmt: skip
    parser.add_argument("--no-serve", action="store_true", help="stop after the batch steps")
    parser.add_argument("--no-hold", action="store_true", help="start the server and app, check them, then exit")
    parser.add_argument("--port", type=int, default=8000, help="server port")
    parser.add_argument("--ui-port", type=int, default=7860, help="Gradio port")
    args = parser.parse_args(argv)
    settings = Settings.make(args.quick, Path(args.workdir))
    env = dict(os.environ, HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
    env.setdefault("VLLM_CPU_KVCACHE_SPACE", "2")
    timings: dict[str, float] = {}
    started = time.perf_counter()
    stop_on_signals()
    try:
        for step in STEPS:
            if args.only and step.name not in args.only:
                continue
            if step.done(settings):
                print(f"[demo] {step.name}: reusing finished artifacts — {step.describe(settings)}", flush=True)
                continue
            print(f"[demo] {step.name}: running", flush=True)
            t = time.perf_counter()
            code = run_step(step, settings, env)
            timings[step.name] = round(time.perf_counter() - t, 1)
            if code != 0:
                print(f"[demo] {step.name} failed with exit code {code}", file=sys.stderr)
                return code
            print(f"[demo] {step.name}: done in {timings[step.name]}s — {step.describe(settings)}", flush=True)
        total = round(time.perf_counter() - started, 1)
        print(f"[demo] batch steps finished in {total}s (steps run: {timings or 'none, all reused'})", flush=True)
        if settings.quick:
            print(f"[demo] {QUICK_NOTICE}", flush=True)
        if not args.no_serve and not args.only:
            serve_and_show(settings, env, args.port, args.ui_port, hold=not args.no_hold)
    except KeyboardInterrupt as exc:
        name = str(exc) if str(exc).startswith("SIG") else "Ctrl-C"
        print(f"\n[demo] stopped ({name}); every process it started was stopped", file=sys.stderr)
        return {"SIGTERM": 143, "SIGHUP": 129}.get(name, 130)
    except RuntimeError as exc:
        print(f"[demo] {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
