"""Drive the demo in headless Debian Chromium (Selenium): ask a question, open each tab, save small PNGs.

    python -m apps.demo.screenshots --url http://127.0.0.1:7860 [--out docs/images]

Used by the browser test (``tests/apps/test_demo_browser.py``) and to refresh ``docs/images/`` after
``make demo``. Chromium is Debian's ``chromium`` + ``chromium-driver`` (``apt-get install -y chromium
chromium-driver``), started headless (``FLAGS``) with a fresh ``--user-data-dir``.
"""

from __future__ import annotations

import argparse
import re
import shutil
import tempfile
import time
from collections.abc import Callable
from contextlib import contextmanager
from pathlib import Path
from typing import Any

BROWSERS = ("/usr/bin/chromium", "/usr/bin/chromium-browser")
DRIVERS = ("/usr/bin/chromedriver", "/usr/lib/chromium/chromedriver")
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--disable-dev-shm-usage",
         "--autoplay-policy=no-user-gesture-required")  # fmt: skip  (the Live reply tab speaks)
PAGE_HEIGHT_JS = """
const els = [document.body, document.documentElement, ...document.querySelectorAll('.gradio-container, .main, .wrap')];
return Math.max(...els.map(e => e.scrollHeight), ...els.map(e => e.getBoundingClientRect().bottom + window.scrollY));
"""
FINAL_STAMP = re.compile(r"· (\d\d:\d\d:\d\d\.\d{3})")
TABS = {"live": "Live reply", "compression": "Compression", "experiment": "Experiment"}


def find_chromium() -> tuple[str, str] | None:
    """(browser, chromedriver) paths, or None when Chromium or its driver is not installed."""
    browser = next((p for p in BROWSERS if Path(p).is_file()), None) or shutil.which("chromium")
    driver = next((p for p in DRIVERS if Path(p).is_file()), None) or shutil.which("chromedriver")
    return (browser, driver) if browser and driver else None


@contextmanager
def chromium(width: int = 1280, height: int = 1000, page_load_timeout_s: float = 60) -> Any:
    """A headless Chromium WebDriver with a throw-away profile; always quits."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    found = find_chromium()
    if found is None:
        raise RuntimeError("chromium / chromedriver not found (apt-get install -y chromium chromium-driver)")
    browser, driver_path = found
    profile = tempfile.mkdtemp(prefix="livethink-chromium-")
    opts = webdriver.ChromeOptions()
    opts.binary_location = browser
    for flag in (*FLAGS, f"--user-data-dir={profile}", f"--window-size={width},{height}"):
        opts.add_argument(flag)
    driver = webdriver.Chrome(service=Service(driver_path), options=opts)
    driver.set_page_load_timeout(page_load_timeout_s)
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


def wait_for(driver: Any, predicate: Callable[[Any], Any], timeout_s: float, what: str) -> Any:
    """Bounded wait; the TimeoutException names what was awaited."""
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(driver, timeout_s, poll_frequency=0.2).until(
        predicate, message=f"timed out waiting for {what}"
    )


def text_of(driver: Any, css: str) -> str:
    from selenium.webdriver.common.by import By

    els = driver.find_elements(By.CSS_SELECTOR, css)
    return "\n".join(e.text for e in els)


def open_app(driver: Any, url: str, timeout_s: float = 60) -> None:
    from selenium.webdriver.common.by import By

    driver.get(url)
    wait_for(driver, lambda d: d.find_elements(By.CSS_SELECTOR, "#ask"), timeout_s, "the demo page")


def open_tab(driver: Any, tab: str) -> None:
    from selenium.webdriver.common.by import By

    name = TABS.get(tab, tab)
    xpath = f"//button[@role='tab' and contains(normalize-space(.), '{name}')]"
    button = wait_for(driver, lambda d: d.find_element(By.XPATH, xpath), 60, f"the {name} tab")
    button.click()


def ask(driver: Any, question: str, timeout_s: float = 60, budget_ms: int | None = None,
        mode: str | None = None) -> tuple[str, str]:  # fmt: skip
    """Type a question in the Live reply tab (and the latency budget; ``mode``: who answers, e.g. "Arm A"),
    press Ask, wait for arm A's numbers; returns (chat A text, stats A text)."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    open_tab(driver, "live")
    if mode is not None:
        driver.find_element(By.XPATH, f"//*[@id='mode']//label[normalize-space(.)='{mode}']").click()
    if budget_ms is not None:
        num = driver.find_element(By.CSS_SELECTOR, "#budget input[type=number]")
        num.send_keys(Keys.CONTROL, "a")
        num.send_keys(str(budget_ms), Keys.TAB)
    box = driver.find_element(By.CSS_SELECTOR, "#question textarea, #question input")
    box.clear()
    box.send_keys(question)
    before = _final_stamp(text_of(driver, "#live-status"))
    driver.find_element(By.CSS_SELECTOR, "#ask").click()

    def answered(
        d: Any,
    ) -> bool:  # a final status line with a new time stamp (not an old one under a spinner)
        stamp = _final_stamp(text_of(d, "#live-status"))
        return stamp is not None and stamp != before

    wait_for(driver, answered, timeout_s, "the reply and its latency")
    return text_of(driver, "#chat-a"), text_of(driver, "#stats-a")


FIRST_SOUND_JS = "const s = window.livethinkSpeech; return s && s.firstSound[arguments[0]] !== undefined ? s : null;"


def first_sound(driver: Any, side: str = "a", timeout_s: float = 30) -> dict[str, Any]:
    """After an Ask with **Speak it** on: the page's speech state once arm ``side``'s first sentence sounds
    (``apps.demo.speech.PLAYER_JS``: ``firstSound[side]`` ms after Ask, ``played``, ``errors``)."""
    return wait_for(driver, lambda d: d.execute_script(FIRST_SOUND_JS, side), timeout_s,
                    f"arm {side.upper()}'s first sentence to sound")


def _final_stamp(status: str) -> str | None:
    """The time stamp that ends the Live reply tab's final status line (``✓ done · 08:12:03.521``)."""
    m = FINAL_STAMP.search(status)
    return m.group(1) if m else None


def save_png(driver: Any, path: str | Path, width: int = 960) -> Path:
    """Screenshot, scaled to ``width`` px and palette-quantised (small PNGs for docs/)."""
    from io import BytesIO

    from PIL import Image

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    size = driver.get_window_size()
    try:
        for _ in range(3):  # grow the window to the whole page (the layout may grow with it)
            page = int(driver.execute_script(PAGE_HEIGHT_JS)) + 40
            chrome = size["height"] - int(driver.execute_script("return window.innerHeight"))
            want = min(max(page + chrome, size["height"]), 4000)
            if abs(driver.get_window_size()["height"] - want) < 8:
                break
            driver.set_window_size(size["width"], want)
            time.sleep(0.3)
        png = driver.get_screenshot_as_png()
    finally:
        driver.set_window_size(size["width"], size["height"])
    im = Image.open(BytesIO(png)).convert("RGB")
    if im.width > width:
        im = im.resize((width, round(im.height * width / im.width)), Image.LANCZOS)
    im.quantize(colors=128, method=Image.Quantize.MEDIANCUT).save(path, optimize=True)
    return path


def capture_tabs(
    driver: Any, out_dirs: list[Path], prefix: str = "demo", timeout_s: float = 60,
    only: set[str] | None = None,
) -> dict[str, list[Path]]:  # fmt: skip
    """Screenshots of the Compression and Experiment tabs (after Refresh), then back to Live reply."""
    from selenium.webdriver.common.by import By

    shots: dict[str, list[Path]] = {}
    if only is None or "compression" in only:
        open_tab(driver, "compression")
        wait_for(driver, lambda d: text_of(d, "#compression-table").strip(), 20, "the compression table")
        shots["compression"] = [save_png(driver, d / f"{prefix}_compression.png") for d in out_dirs]
    if only is not None and "experiment" not in only:
        open_tab(driver, "live")
        return shots
    open_tab(driver, "experiment")
    driver.find_element(By.CSS_SELECTOR, "#experiment-refresh").click()
    wait_for(driver, lambda d: "Verdict" in text_of(d, "#experiment-verdict") or "⚠" in text_of(d, "#experiment-verdict"),
             timeout_s, "the experiment verdict")  # fmt: skip
    wait_for(driver, lambda d: d.find_elements(By.CSS_SELECTOR, "#experiment-plot img, #experiment-plot svg"),
             timeout_s, "the experiment plot")  # fmt: skip
    shots["experiment"] = [save_png(driver, d / f"{prefix}_experiment.png") for d in out_dirs]
    open_tab(driver, "live")
    return shots


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m apps.demo.screenshots", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    parser.add_argument("--url", default="http://127.0.0.1:7860", help="the running demo")
    parser.add_argument("--out", default="docs/images", help="output folder")
    parser.add_argument("--question", default="How much is it right now with the livestream discount?")
    parser.add_argument("--budget", type=int, help="latency budget to set (ms; default: leave the slider)")
    parser.add_argument("--timeout", type=float, default=120, help="seconds to wait for a reply")
    parser.add_argument("--mode", choices=["Arm A", "Arm B", "A and B side by side"],
                        help="who answers (default: leave the app's choice, both side by side)")
    parser.add_argument("--tabs", default="live,compression,experiment",
                        help="which tabs to capture (comma-separated)")
    args = parser.parse_args(argv)
    out = Path(args.out)
    tabs = set(args.tabs.split(","))
    with chromium() as driver:
        open_app(driver, args.url)
        paths = []
        if "live" in tabs:
            ask(driver, args.question, args.timeout, args.budget, args.mode)
            paths.append(save_png(driver, out / "demo_live_reply.png"))
        if tabs & {"compression", "experiment"}:
            for ps in capture_tabs(driver, [out], timeout_s=args.timeout, only=tabs).values():
                paths += ps
    for p in paths:
        print(p)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
