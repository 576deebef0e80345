"""An HTTP server run as a subprocess on a free loopback port, for tests and benchmarks.

``free_port()`` asks the OS for a free TCP port; ``ServerProcess`` starts a command that serves on that port
(its stdout and stderr go to a log file), waits until a URL of it answers 200, and stops it again
(``close()``: terminate, then kill). Used by the serve / demo tests and ``benchmarks/serve_load.py``.
"""

from __future__ import annotations

import socket
import subprocess
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

import httpx

LOOPBACK = "127.0.0.1"


def free_port(host: str = LOOPBACK) -> int:
    """A TCP port free on ``host`` right now (the OS picks it; nothing holds it until the server binds it)."""
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


class ServerProcess:
    """``argv`` in a subprocess that serves HTTP on ``host:port``; the constructor returns once it is ready.

    Ready means ``GET {url}{ready_path}`` answers 200 (polled every 0.5 s). If the process exits first, or is
    not ready within ``startup_timeout_s`` (it is then stopped), ``RuntimeError`` says so with the end of the
    log. ``startup_s`` is the time from the start to ready. ``close()`` terminates it, waits
    ``stop_timeout_s``, kills it if it is still running, and closes the log.
    """

    def __init__(
        self,
        argv: Sequence[str],
        *,
        port: int,
        log_path: Path,
        ready_path: str = "/",
        host: str = LOOPBACK,
        name: str = "server",
        cwd: Path | str | None = None,
        env: Mapping[str, str] | None = None,
        startup_timeout_s: float = 120.0,
        stop_timeout_s: float = 30.0,
    ) -> None:
        self.port = port
        self.url = f"http://{host}:{port}"
        self.name = name
        self.log_path = Path(log_path)
        self.stop_timeout_s = stop_timeout_s
        self._stop_sent = False
        self.log = self.log_path.open("w")
        t0 = time.monotonic()
        self.proc = subprocess.Popen(
            list(argv),
            cwd=cwd,
            env=None if env is None else dict(env),
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )
        self._wait_ready(self.url + ready_path, t0 + startup_timeout_s, startup_timeout_s)
        self.startup_s = time.monotonic() - t0

    def _wait_ready(self, url: str, deadline: float, timeout_s: float) -> None:
        while True:
            if self.proc.poll() is not None:
                tail = self.tail()
                self.close()
                raise RuntimeError(f"{self.name} exited ({self.proc.returncode}):\n{tail}")
            try:
                if httpx.get(url, timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                self.close()
                raise RuntimeError(f"{self.name} did not answer {url} in {timeout_s:.0f} s:\n{self.tail()}")
            time.sleep(0.5)

    def tail(self, n: int = 4000) -> str:
        """The last ``n`` characters of the server's log."""
        if not self.log.closed:
            self.log.flush()
        return self.log_path.read_text()[-n:]

    def request_stop(self) -> None:
        """Send the server its SIGTERM without waiting (``close`` waits), so that several servers shut down
        together. Sent once: a second SIGTERM makes uvicorn skip its graceful shutdown."""
        if self.proc.poll() is None and not self._stop_sent:
            self.proc.terminate()
            self._stop_sent = True

    def close(self) -> None:
        """Stop the server (terminate, then kill after ``stop_timeout_s``) and close its log; idempotent."""
        if self.proc.poll() is None:
            self.request_stop()
            try:
                self.proc.wait(self.stop_timeout_s)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self.log.close()
