"""CPU priority of the engine processes: the front end must get the CPU when it needs it.

vLLM's engine core (and its workers) run in child processes that keep every core busy under load. The event
loop of the API process enforces the deadlines and sends the replies; when it gets a small share of the CPU,
replies leave late although generation stopped on time. Raising the engines' nice value (Linux: per thread)
gives the front end the CPU first (CFS weights: nice 0 vs nice 10 is about 1024 : 110) while the engines keep
whatever the front end leaves, so their throughput barely changes.
"""

from __future__ import annotations

import logging
import os

log = logging.getLogger(__name__)


def target_nice(own: int, increment: int) -> int:
    """The nice value engine threads get: ``own + increment`` within Linux's range [-20, 19]."""
    return max(-20, min(19, own + increment))


def deprioritize_children(increment: int, pid: int | None = None) -> int:
    """Raise the nice value of every thread of every descendant process of ``pid`` (default: this process)
    to this process's nice + ``increment``; threads already nicer stay as they are. Returns how many threads
    were changed (0 where the platform has no per-thread priorities or ``increment`` is 0)."""
    if increment <= 0 or not hasattr(os, "setpriority") or not os.path.isdir("/proc/self/task"):
        return 0
    import psutil

    me = psutil.Process(pid)
    target = target_nice(os.getpriority(os.PRIO_PROCESS, 0), increment)
    changed = 0
    for child in me.children(recursive=True):
        try:
            tids = [int(t) for t in os.listdir(f"/proc/{child.pid}/task")]
        except OSError:
            continue  # gone meanwhile
        for tid in tids:
            try:
                if os.getpriority(os.PRIO_PROCESS, tid) < target:
                    os.setpriority(os.PRIO_PROCESS, tid, target)
                    changed += 1
            except OSError:  # thread gone, or not ours to change
                continue
    if changed:
        log.info("engine processes: %d threads now at nice %d", changed, target)
    return changed
