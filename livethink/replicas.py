"""A local replica set: N ``livethink serve`` processes behind HAProxy, sharing one A/B event store.

    python -m livethink.replicas --config configs/tiny/serve.yaml --replicas 2 --port 8000 \
        --experiments configs/ab/drpo_vs_rft.yaml [--store postgresql+psycopg://user@host/db] [--dry-run]

Without ``--store`` a throwaway PostgreSQL cluster is started under ``--workdir`` (``initdb`` + ``pg_ctl`` on a
free loopback port; Debian's ``postgresql`` package). Each replica gets its own loopback port and log under
``--workdir``, and all replicas write ahead to one spool root (``<workdir>/spool``, a sub-directory per process):
a replica restarted after a crash replays what its dead predecessor had not yet stored. HAProxy
(``deploy/haproxy.cfg.tmpl``, Debian's ``haproxy`` package) balances by least connections, health-checks
``/health`` every second and sends a request to another replica when one refuses connections or answers 503
(while the request's deadline leaves time: ``haproxy_config``). Ctrl-C stops it all; SIGHUP restarts the replicas
one at a time (``ReplicaSet.rolling_restart``: each drains first). See docs/replicas.md.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from string import Template
from typing import Any

import httpx
import yaml

from livethink.cli_args import FlagParser, key_value
from livethink.serve.config import ConfigError, ServeConfig, load_config, parse_config
from livethink.serve.dry_run import dry_run, preflight, print_report
from livethink.server_process import LOOPBACK, ServerProcess, free_port

ROOT = Path(__file__).resolve().parents[1]
TEMPLATE = ROOT / "deploy" / "haproxy.cfg.tmpl"
FRONT_PORT_ATTEMPTS = 3  # a front port chosen here (no --port) is chosen again when another process took it


FRONT_ANSWER_MS = 10  # HAProxy answers a replica's silence this long before the deadline (the 503's own trip)
DEADLINE_ERRORFILE = ROOT / "deploy" / "haproxy-deadline-503.http"  # HAProxy's answer then: 503, not 504
MIN_RETRY_MS = 100  # no retry on another replica with less time than this left to the deadline


def front_deadlines(config: ServeConfig) -> dict[str, int]:
    """The deadline (ms) HAProxy gives a request of each endpoint without its own ``X-Request-Deadline``: the
    endpoint's, or the longest an arm of the config's experiments sets (an arm's own deadline must not be cut)."""
    arms: list[int] = []
    if config.experiment is not None:
        from livethink.ab_test.experiment import load_experiments

        try:
            experiments = load_experiments(config.experiment.file)
        except Exception:  # the dry-run and the replicas report a broken experiments file themselves
            experiments = {}
        arms = [a.budget.deadline_ms for e in experiments.values() for a in e.arms if a.budget and a.budget.deadline_ms]
    return {ep: max([config.deadline_ms(ep), *arms]) for ep in ("livestream", "chat")}


def haproxy_config(bind_port: int, replica_ports: list[int], config: ServeConfig | None = None) -> str:
    """HAProxy's config for ``replica_ports`` (server names r0, r1, ...), listening on 127.0.0.1:bind_port, its
    timeouts from ``config``'s deadlines (``front_deadlines``; the defaults' without a config): ``timeout server``
    is the longest deadline, and each request's time left to its ``X-Request-Deadline`` less ``FRONT_ANSWER_MS``
    bounds its wait, after which HAProxy answers 503 (``DEADLINE_ERRORFILE``); no L7 retry with less than
    ``MIN_RETRY_MS`` left."""
    deadlines = front_deadlines(config if config is not None else ServeConfig(models={"m": {"path": "m"}},
                                                                              default_model="m"))  # fmt: skip
    longest = max(deadlines.values())
    servers = "\n".join(f"    server r{i} {LOOPBACK}:{p} check" for i, p in enumerate(replica_ports))
    return Template(TEMPLATE.read_text()).substitute(
        bind=f"{LOOPBACK}:{bind_port}", servers=servers, livestream_deadline_ms=deadlines["livestream"],
        chat_deadline_ms=deadlines["chat"], answer_ms=FRONT_ANSWER_MS, min_retry_ms=MIN_RETRY_MS,
        timeout_server_ms=longest, timeout_client_ms=max(60_000, 2 * longest), deadline_errorfile=DEADLINE_ERRORFILE,
    )  # fmt: skip


class ReplicaSet:
    """Start ``n`` replicas of ``config`` (a serve config mapping) and HAProxy; ``url`` is the front.

    ``kill(i)`` sends SIGKILL to replica i, ``restart(i)`` starts it again on the same port, ``close()`` stops
    everything (replicas gracefully, so their writers flush).
    """

    def __init__(
        self,
        config: dict[str, Any],
        n: int,
        workdir: Path,
        *,
        store: str,
        port: int | None = None,
        startup_timeout_s: float = 240.0,
        env: dict[str, str] | None = None,
    ):
        if shutil.which("haproxy") is None:
            raise RuntimeError("haproxy not found: install Debian's haproxy package (`make haproxy`)")
        self.workdir = Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        cfg = dict(config)
        cfg["experiment"] = {**(cfg.get("experiment") or {}), "store": store,
                             "spool_dir": str(self.workdir / "spool")}  # fmt: skip
        self.config_path = self.workdir / "serve.yaml"
        self.config_path.write_text(yaml.safe_dump(cfg))
        self.serve_config = cfg
        self.env = {**os.environ, "TOKENIZERS_PARALLELISM": "false", **(env or {})}
        self.startup_timeout_s = startup_timeout_s
        self.ports = [free_port() for _ in range(n)]
        self.replicas: list[ServerProcess | None] = [None] * n
        self._requested_port = port
        self.front_port = port or free_port()
        self.url = f"http://{LOOPBACK}:{self.front_port}"
        self.haproxy: subprocess.Popen | None = None
        try:
            self._start_all()
        except BaseException:
            self.close()
            raise

    def _start_all(self) -> None:
        procs = [self._spawn(i) for i in range(len(self.ports))]  # start in parallel, then wait
        for i, p in enumerate(procs):
            self.replicas[i] = p
            p.wait_ready()
        for attempt in range(1, FRONT_PORT_ATTEMPTS + 1):
            if self._start_haproxy():
                return
            log = (self.workdir / "haproxy.log").read_text()
            taken = "Address already in use" in log
            if self._requested_port is not None or not taken or attempt == FRONT_PORT_ATTEMPTS:
                why = f"port {self.front_port} is in use" if taken else "see the log"
                raise RuntimeError(f"haproxy did not come up: {why} ({self.workdir / 'haproxy.log'})")
            # the port chosen for the front was free when chosen, and another process (the engines start in
            # between) bound it since: choose again
            self.front_port = free_port()
            self.url = f"http://{LOOPBACK}:{self.front_port}"

    def _start_haproxy(self) -> bool:
        """Start HAProxy on ``front_port``; True once the front answers ``/health``, False if it exits or is not
        up within 30 s (then it is stopped; its log says why)."""
        cfg = self.workdir / "haproxy.cfg"
        try:
            serve_config: ServeConfig | None = parse_config(self.serve_config)
        except ConfigError:
            serve_config = None  # the replicas say what is wrong with it
        cfg.write_text(haproxy_config(self.front_port, self.ports, serve_config))
        check = subprocess.run(["haproxy", "-c", "-q", "-f", str(cfg)], capture_output=True, text=True)
        if check.returncode != 0:
            raise RuntimeError(f"haproxy rejected {cfg}: {check.stderr}")
        self._haproxy_log = (self.workdir / "haproxy.log").open("w")
        self.haproxy = subprocess.Popen(["haproxy", "-db", "-f", str(cfg)], stdout=self._haproxy_log,
                                        stderr=subprocess.STDOUT)  # fmt: skip
        deadline = time.monotonic() + 30
        while True:
            try:
                if httpx.get(self.url + "/health", timeout=2).status_code == 200:
                    return True
            except httpx.HTTPError:
                pass
            if self.haproxy.poll() is not None or time.monotonic() > deadline:
                if self.haproxy.poll() is None:
                    self.haproxy.terminate()
                    self.haproxy.wait(10)
                self._haproxy_log.close()
                return False
            time.sleep(0.2)

    def _spawn(self, i: int) -> _LazyServer:
        argv = [sys.executable, "-m", "livethink.serve.cli", "--config", str(self.config_path),
                "--port", str(self.ports[i])]  # fmt: skip
        drain_s = float((self.serve_config.get("server") or {}).get("drain_s", 30.0))
        return _LazyServer(argv, port=self.ports[i], log_path=self.workdir / f"replica{i}.log", ready_path="/health",
                           name=f"replica {i}", cwd=ROOT, env=self.env, startup_timeout_s=self.startup_timeout_s,
                           stop_timeout_s=drain_s + 30)  # fmt: skip

    def replica_url(self, i: int) -> str:
        return f"http://{LOOPBACK}:{self.ports[i]}"

    def kill(self, i: int) -> None:
        """SIGKILL replica ``i`` (no shutdown, no flush: a crash)."""
        r = self.replicas[i]
        if r is not None:
            r.proc.send_signal(signal.SIGKILL)
            r.proc.wait(30)
            r.log.close()
            self.replicas[i] = None

    def freeze(self, i: int) -> None:
        """SIGSTOP replica ``i``'s server process: it holds its connections and answers nothing (the kernel still
        accepts new ones), as a replica stuck in a long pause would; ``thaw(i)`` resumes it."""
        self._signal(i, signal.SIGSTOP)

    def thaw(self, i: int) -> None:
        """SIGCONT replica ``i`` after ``freeze(i)``."""
        self._signal(i, signal.SIGCONT)

    def _signal(self, i: int, signum: int) -> None:
        r = self.replicas[i]
        if r is None:
            raise RuntimeError(f"replica {i} is not running")
        r.proc.send_signal(signum)

    def restart(self, i: int) -> float:
        """Start replica ``i`` again on its port; returns its startup seconds."""
        if self.replicas[i] is not None:
            raise RuntimeError(f"replica {i} is running")
        p = self._spawn(i)
        self.replicas[i] = p
        p.wait_ready()
        return p.startup_s

    def rolling_restart(self, settle_s: float = 2.0) -> list[float]:
        """Restart the replicas one at a time, each on its port: SIGTERM (it drains: its ``/health`` turns 503, so
        HAProxy takes it out within two checks, and the requests it refuses meanwhile are retried on another
        replica; those in flight finish), wait for its exit, start it, wait for ``/health`` 200, then ``settle_s``
        more for HAProxy to mark it up, and go on to the next. Returns each replica's seconds out of service."""
        times = []
        for i, r in enumerate(self.replicas):
            if r is None:
                continue
            t0 = time.monotonic()
            r.close()
            self.replicas[i] = None
            self.restart(i)
            time.sleep(settle_s)
            times.append(time.monotonic() - t0)
        return times

    def close(self) -> None:
        """Stop every replica (all at once: each waits for its engines) and HAProxy."""
        live = [r for r in self.replicas if r is not None]
        for r in live:
            r.request_stop()
        for r in live:
            r.close()
        self.replicas = [None] * len(self.ports)
        if self.haproxy is not None and self.haproxy.poll() is None:
            self.haproxy.terminate()
            self.haproxy.wait(10)
            self._haproxy_log.close()

    def __enter__(self) -> ReplicaSet:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _LazyServer(ServerProcess):
    """A ``ServerProcess`` whose readiness is awaited later (``wait_ready``), so replicas start in parallel."""

    def __init__(self, argv: list[str], *, startup_timeout_s: float, **kwargs: Any):
        self._timeout = startup_timeout_s
        self._ready_path = kwargs.pop("ready_path")
        self._t0 = time.monotonic()
        super().__init__(argv, ready_path=self._ready_path, startup_timeout_s=startup_timeout_s, **kwargs)

    def _wait_ready(self, url: str, deadline: float, timeout_s: float) -> None:
        self._ready_url, self._deadline = url, deadline

    def wait_ready(self) -> None:
        ServerProcess._wait_ready(self, self._ready_url, self._deadline, self._timeout)
        self.startup_s = time.monotonic() - self._t0


def _parser() -> FlagParser:
    ap = FlagParser(prog="python -m livethink.replicas", description=__doc__,
                    formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    ap.add_argument("--config", help="serve YAML (e.g. configs/tiny/serve.yaml); required unless --rolling-restart")
    ap.add_argument("--replicas", type=int, default=2)
    ap.add_argument("--port", type=int, default=8000, help="HAProxy's port on 127.0.0.1")
    ap.add_argument("--experiments", help="A/B experiments YAML (default: the config's experiment.file)")
    ap.add_argument("--store", help="shared A/B store URL (default: a throwaway local PostgreSQL cluster)")
    ap.add_argument("--workdir", default="runs/replicas", help="logs, spool, rendered configs, the cluster")
    ap.add_argument("--set", action="append", default=[], type=key_value, metavar="KEY=VALUE",
                    help="override a serve config field (dotted key, YAML value; repeatable)")  # fmt: skip
    ap.add_argument("--dry-run", action="store_true", help="check the replica set's config and tools, print a "
                    "JSON report (the serve --dry-run's, plus haproxy and PostgreSQL) and exit")  # fmt: skip
    ap.add_argument("--rolling-restart", action="store_true", help="restart the replicas of the set running under "
                    "--workdir one at a time (each drains first; sends it SIGHUP) and exit")  # fmt: skip
    return ap


PID_FILE = "replicas.pid"  # under --workdir while a set runs: where --rolling-restart sends its SIGHUP


def request_rolling_restart(workdir: Path) -> int:
    """SIGHUP to the replica set running under ``workdir`` (its pid file): 0 sent, 1 none is running."""
    pid_file = workdir / PID_FILE
    try:
        pid = int(pid_file.read_text())
        os.kill(pid, signal.SIGHUP)
    except (OSError, ValueError):
        print(f"livethink replicas: --rolling-restart: no replica set is running under {workdir} ({pid_file})",
              file=sys.stderr)  # fmt: skip
        return 1
    print(f"rolling restart requested (SIGHUP to {pid}); its log says when it is done", flush=True)
    return 0


def replica_config(args: argparse.Namespace) -> ServeConfig:
    """The serve config every replica runs: ``--config`` with ``--set`` and ``--experiments`` applied, the shared
    store and the workdir's spool root (``ConfigError`` names the field)."""
    overrides = dict(args.set)
    if args.experiments:
        overrides["experiment.file"] = args.experiments
    config = load_config(args.config, overrides)
    if config.experiment is None:
        raise ConfigError(f"{args.config}: experiment: the config has none (pass --experiments FILE): replicas "
                          "share the A/B store, so one is needed")  # fmt: skip
    workdir = Path(args.workdir).resolve()
    experiment = {"store": args.store or "postgresql+psycopg://", "spool_dir": str(workdir / "spool")}
    return config.model_copy(update={"experiment": config.experiment.model_copy(update=experiment)})


def dry_run_replicas(config: ServeConfig, args: argparse.Namespace) -> dict[str, Any]:
    """``livethink.serve.dry_run`` of the replicas' config, plus the tools the set starts."""
    report = dry_run(config)
    if args.store is None:
        report["experiment"]["store"] = "a throwaway PostgreSQL cluster under --workdir"
    if shutil.which("haproxy") is None:
        report["missing_here"].append("haproxy: not installed (`make haproxy`)")
    if args.store is None:
        from livethink.ab_test.pg_cluster import PostgresUnavailable, pg_bin_dir

        try:
            pg_bin_dir()
        except PostgresUnavailable as exc:
            report["missing_here"].append(f"--store: none given, and {exc}")
    report["replicas"] = args.replicas
    report["starts_here"] = report["ok"] and not report["missing_here"]
    return report


def main(argv: list[str] | None = None) -> int:
    ap = _parser()
    args = ap.parse_args(argv)
    if args.rolling_restart:
        return request_rolling_restart(Path(args.workdir).resolve())
    if not args.config:
        ap.error("--config is required (unless --rolling-restart)")
    if args.replicas < 1:
        ap.error("--replicas: must be at least 1")
    try:
        config = replica_config(args)
    except ConfigError as exc:
        print(f"livethink replicas: invalid config: {exc}", file=sys.stderr)
        return 2
    if args.dry_run:
        return print_report(dry_run_replicas(config, args), "livethink replicas")  # 2 when the config is wrong
    stop = preflight(config)  # what would stop every replica (a missing model path): one line, nothing started
    if stop is not None:
        print(f"livethink replicas: {stop[1]}", file=sys.stderr)
        return stop[0]
    workdir = Path(args.workdir).resolve()

    def _stop(signum: int, _frame: Any) -> None:
        raise KeyboardInterrupt(signal.Signals(signum).name)

    for sig in (signal.SIGINT, signal.SIGTERM):  # also when started in the background (SIGINT ignored there)
        signal.signal(sig, _stop)
    hup: list[int] = []  # SIGHUP: a rolling restart of the replicas (done by the main loop)
    signal.signal(signal.SIGHUP, lambda signum, _frame: hup.append(signum))
    pg = None
    store = args.store
    if store is None:
        from livethink.ab_test.pg_cluster import LocalPostgres

        pg = LocalPostgres(workdir / "postgres")
        store = pg.create_database("livethink_ab") if not _db_exists(pg) else pg.url("livethink_ab")
        print(f"PostgreSQL: {store} (data in {pg.data})", flush=True)
    try:
        with ReplicaSet(config.model_dump(mode="json"), args.replicas, workdir, store=store,
                        port=args.port) as rs:  # fmt: skip
            for i in range(args.replicas):
                print(f"replica {i}: {rs.replica_url(i)} (log {workdir}/replica{i}.log)", flush=True)
            (workdir / PID_FILE).write_text(str(os.getpid()))
            print(f"HAProxy front: {rs.url}  (Ctrl-C stops everything; --rolling-restart --workdir {args.workdir} or "
                  f"kill -HUP {os.getpid()} restarts the replicas one at a time)", flush=True)  # fmt: skip
            try:
                while True:
                    time.sleep(0.5)
                    if hup:
                        hup.clear()
                        print("rolling restart (SIGHUP): one replica at a time", flush=True)
                        took = rs.rolling_restart()
                        print("rolling restart done: " + ", ".join(f"replica {i} {s:.0f} s" for i, s in enumerate(took)),
                              flush=True)  # fmt: skip
            except KeyboardInterrupt:
                print("stopping", flush=True)
    finally:
        (workdir / PID_FILE).unlink(missing_ok=True)
        if pg is not None:
            pg.close()
    return 0


def _db_exists(pg: Any) -> bool:
    import psycopg

    with psycopg.connect(pg.dsn(), autocommit=True) as conn:
        return conn.execute("SELECT 1 FROM pg_database WHERE datname = 'livethink_ab'").fetchone() is not None


if __name__ == "__main__":
    raise SystemExit(main())
