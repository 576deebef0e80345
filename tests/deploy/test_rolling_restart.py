"""``python -m livethink.replicas --rolling-restart`` signals the set running under ``--workdir`` (SIGHUP to the pid
in its pid file), whose main loop then calls ``ReplicaSet.rolling_restart`` (docs/replicas.md)."""

from __future__ import annotations

import subprocess
import sys

from livethink.replicas import PID_FILE, main

# a stand-in for a running set: says when it got its SIGHUP
STAND_IN = ("import signal, sys, time\n"
            "signal.signal(signal.SIGHUP, lambda *a: (print('hup', flush=True), sys.exit(0)))\n"
            "print('ready', flush=True)\ntime.sleep(30)\n")  # fmt: skip


def test_rolling_restart_flag_signals_the_running_set(tmp_path, capsys):
    proc = subprocess.Popen([sys.executable, "-c", STAND_IN], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "ready"
        (tmp_path / PID_FILE).write_text(str(proc.pid))
        assert main(["--rolling-restart", "--workdir", str(tmp_path)]) == 0
        assert proc.stdout.readline().strip() == "hup" and proc.wait(10) == 0
    finally:
        proc.kill()
        proc.wait()
    assert main(["--rolling-restart", "--workdir", str(tmp_path / "none")]) == 1
    assert "no replica set is running" in capsys.readouterr().err
