"""``make demo``'s job stops everything it started on SIGTERM and SIGHUP as on Ctrl-C, and a port already taken is
refused naming the process that holds it (issue #60: a quiet, complete shutdown)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time

import psutil
import pytest

from livethink.demo_job import port_holder
from tests.support.serve import ROOT

# a job whose one step starts a grandchild (its own process group, as every step's) and waits for it
JOB = """
import sys, pathlib
from livethink import demo_job as d
d.stop_on_signals()
class Step:
    name = "sleep"
    def command(self, s):
        return [sys.executable, "-c", "import subprocess, time; subprocess.Popen(['sleep', '120']); time.sleep(120)"]
try:
    d.run_step(Step(), d.Settings.make(True, pathlib.Path(sys.argv[1])), {})
except KeyboardInterrupt as exc:
    print("stopped", exc, flush=True)
    sys.exit(143)
"""


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP])
def test_a_signal_stops_every_process_of_the_job(tmp_path, sig):
    job = subprocess.Popen([sys.executable, "-c", JOB, str(tmp_path)], cwd=ROOT, stdout=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 30
    while len(psutil.Process(job.pid).children(recursive=True)) < 2:  # the step and its sleep
        assert time.monotonic() < deadline and job.poll() is None
        time.sleep(0.05)
    started = psutil.Process(job.pid).children(recursive=True)
    job.send_signal(sig)
    out, _ = job.communicate(timeout=30)
    assert job.returncode == 143 and f"stopped {sig.name}" in out
    gone, alive = psutil.wait_procs(started, timeout=15)
    assert not alive, [p.pid for p in alive]


def test_a_taken_port_names_its_holder():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        assert f"pid {os.getpid()}" in port_holder(port)
    assert port_holder(port) is None  # closed: free again
