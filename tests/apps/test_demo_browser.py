"""End to end, as a product team would use it: a real livethink server (the app factory with the tiny
untrained student on the transformers engine, two arms of an A/B experiment whose event store holds simulated
traffic), the Gradio demo launched as ``python -m apps.demo``, and headless Debian Chromium driven by Selenium.

Checks: a question asked in the browser gets both arms' replies with their latency numbers (and the server
counted those requests); the Compression tab says what to run; the Experiment tab shows the verdict and plots;
when the server goes down the page says so in words. Screenshots go to the test's tmp dir (and to
``docs/images/browser_test.png`` with ``LIVETHINK_SAVE_SCREENSHOTS=1``).
"""

from __future__ import annotations

import json
import os
import re
import statistics
import sys
from pathlib import Path

import httpx
import pytest

from apps.demo.screenshots import (
    ask,
    capture_tabs,
    chromium,
    find_chromium,
    first_sound,
    open_app,
    save_png,
    text_of,
)
from apps.demo.speech import espeak_path
from livethink.server_process import ServerProcess, free_port
from tests.support.serve import ROOT, ServerThread, liveshop_test_tasks, make_config, tiny_student_dir

pytestmark = [pytest.mark.browser, pytest.mark.timeout(240)]

EXPERIMENT = """
name: demo_ab
control: rft
arms:
  - {name: rft, weight: 0.5, variant: rft, budget: {deadline_ms: 1000}}
  - {name: drpo, weight: 0.5, variant: drpo, budget: {deadline_ms: 1000, thinking_budget: 16}}
primary_metric: order_rate
min_viewers_per_arm: 100
"""
QUESTION = "Is it in stock in size M?"
BUDGET_MS = 3000  # set with the slider's number box; leaves the untrained student room to think on a busy CPU
# The tracked screenshot is refreshed only on request, so CI leaves the checkout clean.
DOCS_SCREENSHOT = ROOT / "docs/images/browser_test.png" if os.environ.get("LIVETHINK_SAVE_SCREENSHOTS") else None


def _simulate(exp_file: Path, db: Path) -> None:
    """Simulated viewers (offline) in the store, so the Experiment tab has something to show."""
    from livethink.ab_test.experiment import load_experiments
    from livethink.ab_test.simulate import load_simulation_config, simulate_offline
    from livethink.ab_test.store import EventStore

    exp = load_experiments(exp_file, known_variants={"rft", "drpo"})["demo_ab"]
    store = EventStore(str(db))
    try:
        simulate_offline(
            exp,
            store,
            viewers=1500,
            seed=5,
            config=load_simulation_config(ROOT / "configs/ab/simulation.yaml"),
        )
    finally:
        store.close()


def _write_catalog(path: Path) -> None:
    seen: dict[str, dict] = {}
    for task in liveshop_test_tasks():
        for doc in task.product_docs:
            seen.setdefault(doc.product_id, {"split": "test", **doc.model_dump()})
    path.write_text("".join(json.dumps(d) + "\n" for d in list(seen.values())[:20]))


class DemoProcess(ServerProcess):
    """``python -m apps.demo`` in a subprocess on a free loopback port."""

    def __init__(self, args: list[str], log_path: Path, startup_timeout_s: float = 120):
        port = free_port()
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "GRADIO_ANALYTICS_ENABLED": "False"}
        super().__init__(
            [sys.executable, "-m", "apps.demo", "--port", str(port), *args],
            port=port,
            log_path=log_path,
            name="the demo",
            cwd=ROOT,
            env=env,
            startup_timeout_s=startup_timeout_s,
            stop_timeout_s=15,
        )


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    if find_chromium() is None:
        pytest.skip("Debian chromium / chromium-driver not installed (`make chromium` or "
                    "`apt-get install -y chromium chromium-driver`)")  # fmt: skip
    from livethink.serve.api.app import create_app

    tmp = tmp_path_factory.mktemp("demo")
    student = tiny_student_dir()
    exp_file, db = tmp / "experiment.yaml", tmp / "ab.db"
    exp_file.write_text(EXPERIMENT)
    _simulate(exp_file, db)
    catalog = tmp / "catalog.jsonl"
    _write_catalog(catalog)
    config = make_config(student, **{"models.drpo": {"path": str(student)},
                                     "experiment": {"file": str(exp_file), "store": f"sqlite:///{db}"}})  # fmt: skip
    server = ServerThread(create_app(config))
    demo = None
    try:
        demo = DemoProcess(["--server-url", server.url, "--catalog", str(catalog), "--experiment", "demo_ab",
                            "--results-dir", str(tmp / "results"), "--eval-report", str(tmp / "eval.md")],
                           tmp / "demo.log")  # fmt: skip
        with chromium() as driver:
            yield {"server": server, "demo": demo, "driver": driver, "tmp": tmp}
    finally:
        if demo is not None:
            demo.close()
        server.close()


def _served(server_url: str, arm: str) -> float:
    """Replies the server timed for ``arm`` (its end-to-end histogram's count)."""
    text = httpx.get(f"{server_url}/metrics", timeout=10).text
    pattern = re.compile(
        r'^livethink_e2e_seconds_count\{[^}]*arm="' + re.escape(arm) + r'"[^}]*\}\s+(\S+)$', re.M
    )
    return sum(float(v) for v in pattern.findall(text))


def test_question_gets_reply_and_latency_in_the_browser(stack):
    driver, server = stack["driver"], stack["server"]
    open_app(driver, stack["demo"].url)
    assert "Connected to" in text_of(driver, "#live-status")
    chat_a, stats_a = ask(driver, QUESTION, timeout_s=90, budget_ms=BUDGET_MS)
    chat_b, stats_b = text_of(driver, "#chat-b"), text_of(driver, "#stats-b")
    save_png(driver, stack["tmp"] / "live_reply.png")
    if DOCS_SCREENSHOT is not None:
        save_png(driver, DOCS_SCREENSHOT)
    for chat, stats, arm in ((chat_a, stats_a, "rft"), (chat_b, stats_b, "drpo")):
        stats = " ".join(stats.split())  # inline code elements break the text into lines
        assert QUESTION in chat
        lines = [x for x in chat.splitlines() if x.strip() and QUESTION not in x]
        assert lines, f"no reply from arm {arm}: {chat!r}"
        assert re.search(r"End-to-end latency\s+[\d,]+ ms", stats), stats
        assert re.search(r"Time to first token\s+[\d,]+ ms", stats), stats
        assert re.search(r"Tokens\s+\d+ \(thinking \d+ · reply \d+\)", stats), stats
        # spoken (the default with espeak-ng), the server's deadline is the 3,000 ms budget from the click less the
        # app's dispatch and its speech lead
        deadline = re.search(r"Deadline (?:✓ met|✗ missed) \([\d,]+ ms [≤>] ([\d,]+) ms\)", stats)
        assert deadline and 2000 <= int(deadline.group(1).replace(",", "")) <= 3000, stats
        assert re.search(r"Speech lead \(synthesis \+ page start\)\s+[\d,]+ ms", stats), stats
        assert f"Served by arm {arm} of demo_ab , model {arm}" in stats, stats
        if not re.search(r"thinking 0 ", stats):
            assert "Thinking" in chat  # the collapsible reasoning block
        assert _served(server.url, arm) >= 1
    assert "Traceback" not in driver.page_source


SPEECH_ASKS = 3
# The 1,000 ms deadline from the click bounds the first sound: the app asks the server for the first sentence its
# speech lead earlier. The bound leaves room for the other tests beside this one on 2 cores
# (benchmarks/demo_speech.py measures it alone against the 1,200 ms target).
FIRST_SOUND_BOUND_MS = 2000


@pytest.mark.skipif(espeak_path() is None, reason="espeak-ng not installed (`make espeak`)")
def test_the_reply_is_spoken_sentence_by_sentence(stack):
    """At the product's 1,000 ms: each streamed sentence arrives as audio in the page and plays; the first sound
    comes soon after the deadline that bounds the first sentence (the page's clock, Ask to the first ``playing``)."""
    driver = stack["driver"]
    open_app(driver, stack["demo"].url)
    assert driver.find_element("css selector", "#speak input").is_selected()  # on by default with espeak-ng
    first_sounds = []
    for i in range(SPEECH_ASKS):
        _, stats_a = ask(driver, QUESTION, timeout_s=90, budget_ms=1000, mode="Arm A")
        state = first_sound(driver, "a")
        assert state["errors"] == [], state["errors"]
        assert state["played"] and all(p["arm"] == "a" for p in state["played"][-1:])
        assert "First sound ready (after Ask)" in " ".join(stats_a.split()), stats_a
        first_sounds.append(state["firstSound"]["a"])
        if i == 0:
            save_png(driver, stack["tmp"] / "live_speech.png")
    median = statistics.median(first_sounds)
    print(f"first sound after Ask at 1,000 ms: {[round(x) for x in first_sounds]} ms, p50 {median:.0f} ms")
    assert median <= FIRST_SOUND_BOUND_MS, first_sounds


def test_compression_and_experiment_tabs(stack):
    driver = stack["driver"]
    shots = capture_tabs(driver, [stack["tmp"]], prefix="tab")
    assert all(p.stat().st_size > 0 for ps in shots.values() for p in ps)
    driver.find_element("xpath", "//button[@role='tab' and contains(., 'Compression')]").click()
    comp = text_of(driver, "#compression-table")
    assert "not run yet" in comp and "python benchmarks/compression.py" in comp
    driver.find_element("xpath", "//button[@role='tab' and contains(., 'Experiment')]").click()
    verdict = text_of(driver, "#experiment-verdict")
    assert "Verdict:" in verdict and "demo_ab" in verdict and "Simulated traffic" in verdict
    assert "rft" in text_of(driver, "#experiment-tables") and "drpo" in text_of(driver, "#experiment-tables")


def test_server_down_is_a_readable_message(stack):
    driver = stack["driver"]
    stack["server"].close()  # last test of the module: the fixture's close is then a no-op
    _, stats_a = ask(driver, QUESTION, timeout_s=30)
    assert "Server down" in stats_a and "cannot reach the livethink server" in stats_a
    assert "Server down" in text_of(driver, "#live-status")
    assert "Traceback" not in driver.page_source
    save_png(driver, stack["tmp"] / "server_down.png")
