"""The livethink demo for product teams: a Gradio Blocks app over the livethink server's HTTP API.

    python -m apps.demo --server-url http://127.0.0.1:8000 [--port 7860] [--host 127.0.0.1]
        [--catalog artifacts/tiny/data/catalog.jsonl] [--experiment drpo_vs_rft]
        [--results-dir benchmarks/results] [--eval-report runs/tiny/eval/eval.md]

Tabs: **Live reply** (ask a question, watch arm A / arm B / both answer within a latency budget),
**Compression** (the stage-2 Pareto plot and table, the eval report), **Experiment** (the live A/B summary).
The app never loads a model: it only talks to the server (``apps/demo/client.py``). See ``docs/demo.md``.
"""

from __future__ import annotations

import argparse
import logging
import os
import socket
import sys
import threading
import time
from pathlib import Path

import gradio as gr
import uvicorn
from fastapi import FastAPI

from apps.demo.client import LivethinkClient
from apps.demo.compression import build_compression_tab
from apps.demo.experiment import build_experiment_tab
from apps.demo.inputs import load_catalog
from apps.demo.live import build_live_tab
from apps.demo.speech import PLAYER_JS, SpeechChannel, speech_router
from livethink.demo_job import QUICK_NOTICE

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_CATALOG = ROOT / "artifacts/tiny/data/catalog.jsonl"
DEFAULT_RESULTS = ROOT / "benchmarks/results"
DEFAULT_EVAL = ROOT / "runs/tiny/eval/eval.md"
CSS = """
#stats-a table, #stats-b table {font-size: 13px}
#experiment-verdict h3 {margin-top: 0}
footer {display: none !important}
"""


def theme() -> gr.themes.Base:
    """Gradio's default look with local fonts (the machine may have no internet for Google Fonts)."""
    return gr.themes.Soft(font=["ui-sans-serif", "system-ui", "sans-serif"],
                          font_mono=["ui-monospace", "Consolas", "monospace"])  # fmt: skip


def build_app(server_url: str, catalog_path: str | Path | None = DEFAULT_CATALOG, experiment: str | None = None,
              results_dir: str | Path = DEFAULT_RESULTS, eval_report: str | Path | None = DEFAULT_EVAL,
              api_key: str | None = None, admin_key: str | None = None, quick: bool = False,
              stream_report: str | Path | None = None, channel: SpeechChannel | None = None) -> gr.Blocks:  # fmt: skip
    """The demo as a ``gr.Blocks`` (not launched). ``experiment`` defaults to the server's first one; ``quick``
    shows the quick-run notice (its students check the plumbing, not quality) above the tabs; ``stream_report``
    (the simulated viewer stream's JSON) gives the Experiment tab its goodput per arm; ``channel`` carries the
    spoken sentences to the page (``serve_app`` routes it)."""
    client = LivethinkClient(server_url, api_key=api_key, admin_key=admin_key)
    catalog, warning = load_catalog(catalog_path)
    if not experiment:
        experiment = next(iter(client.experiments()), None)
    with gr.Blocks(title="livethink demo") as demo:
        gr.Markdown(
            f"## livethink — fast reasoning replies for livestream shopping\nServer: `{client.base_url}`"
        )
        if quick:
            gr.Markdown(f"⚠ **{QUICK_NOTICE}**", elem_id="quick-notice")
        with gr.Tabs():
            with gr.Tab("Live reply", id="live"):
                live = build_live_tab(client, catalog, warning, experiment,
                                      channel if channel is not None else SpeechChannel())
            with gr.Tab("Compression", id="compression"):
                comp = build_compression_tab(results_dir, eval_report)
            with gr.Tab("Experiment", id="experiment") as exp_tab:
                exp = build_experiment_tab(client, experiment, stream_report)
        # a fresh page re-reads the server's arms and the result files; the Experiment tab loads when opened
        demo.load(live["reconnect"], None, live["reconnect_outputs"])
        demo.load(comp["load"], None, comp["outputs"])
        exp_tab.select(exp["load"], [exp["name"]], exp["outputs"])
    return demo


def _free_port(host: str) -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m apps.demo", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    parser.add_argument("--server-url", default=os.environ.get("LIVETHINK_SERVER_URL", "http://127.0.0.1:8000"),
                        help="the livethink server (default: $LIVETHINK_SERVER_URL or http://127.0.0.1:8000)")  # fmt: skip
    parser.add_argument("--host", default="127.0.0.1", help="bind address of the demo (default 127.0.0.1)")
    parser.add_argument(
        "--port", type=int, default=7860, help="port of the demo (default 7860; 0 = any free port)"
    )
    parser.add_argument("--catalog", default=str(DEFAULT_CATALOG), help="product catalog JSONL")
    parser.add_argument("--experiment", help="A/B experiment name (default: the server's first experiment)")
    parser.add_argument(
        "--results-dir", default=str(DEFAULT_RESULTS), help="where compression.{md,json,png} are"
    )
    parser.add_argument("--eval-report", default=str(DEFAULT_EVAL), help="evaluation report (Markdown)")
    parser.add_argument(
        "--api-key", default=os.environ.get("LIVETHINK_API_KEY"), help="bearer token for the server"
    )
    parser.add_argument("--admin-key", default=os.environ.get("LIVETHINK_ADMIN_KEY"),
                        help="admin bearer token (the A/B summary is an admin endpoint when admin keys are set)")  # fmt: skip
    parser.add_argument("--quick", action="store_true",
                        help="say on every tab that the students come from a quick run (plumbing, not quality)")
    parser.add_argument("--stream-report", help="simulated viewer stream JSON (livethink ab simulate): goodput per arm")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)  # one line per request to the server is noise
    channel = SpeechChannel()
    demo = build_app(args.server_url, args.catalog, args.experiment, args.results_dir, args.eval_report,
                     args.api_key, args.admin_key, args.quick, args.stream_report, channel)  # fmt: skip
    port = args.port or _free_port(args.host)
    server = uvicorn.Server(uvicorn.Config(serve_app(demo, channel), host=args.host, port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, name="demo-http", daemon=True)
    thread.start()
    while not server.started and thread.is_alive():
        time.sleep(0.05)
    if not server.started:
        print(f"livethink demo: could not listen on {args.host}:{port} (taken by another process? pass --port)",
              file=sys.stderr)
        return 1
    print(f"livethink demo: http://{args.host}:{port}/ (server {args.server_url})", flush=True)
    try:
        while thread.is_alive():
            thread.join(0.5)
    except KeyboardInterrupt:
        server.should_exit = True
        thread.join(10)
    return 0


def serve_app(demo: gr.Blocks, channel: SpeechChannel) -> FastAPI:
    """The demo's HTTP app: the speech channel's routes (``apps.demo.speech``), then the Gradio app at ``/``."""
    app = FastAPI(title="livethink demo", docs_url=None, redoc_url=None, openapi_url=None)
    app.include_router(speech_router(channel))
    demo.queue(default_concurrency_limit=4)
    return gr.mount_gradio_app(app, demo, path="", theme=theme(), css=CSS, js=PLAYER_JS, ssr_mode=False,
                               footer_links=[])  # fmt: skip
