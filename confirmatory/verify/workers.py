"""The worker processes verify forks: how many, and how each one's result comes back.

Owns the choice (`_worker_count`: this process alone unless the run's logs
are large, the machine has cores to spare and no other thread runs, or the
caller says how many) and the fork: a child inherits its arguments as they
are, only its result is pickled back through a pipe, and a child that failed
or died is raised in the parent.
"""

from __future__ import annotations

import multiprocessing
import os
import threading
import traceback
from collections.abc import Callable
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from typing import Any

from confirmatory.records.layout import MODEL_LOG_NAMES, RunLayout, model_log

PARALLEL_MIN_BYTES = 8 << 20
"""Below this much log data a run is checked in this process: worker
processes cost more than they save."""


def _fork(fn: Callable[..., Any], *args: Any) -> tuple[BaseProcess, Connection]:
    """Run ``fn(*args)`` in a forked child (it inherits the arguments as they
    are; only its result is pickled back). Returns (process, pipe end)."""
    mp = multiprocessing.get_context("fork")
    recv, send = mp.Pipe(duplex=False)
    proc = mp.Process(target=_child, args=(send, fn, args), daemon=True)
    proc.start()
    send.close()
    return proc, recv


def _child(send: Connection, fn: Callable[..., Any], args: tuple[Any, ...]) -> None:
    try:
        result = ("ok", fn(*args))
    except BaseException:  # noqa: BLE001 - reported to the parent, which raises
        result = ("error", traceback.format_exc())
    send.send(result)
    send.close()


def _collect(child: tuple[BaseProcess, Connection]) -> Any:
    proc, recv = child
    try:
        kind, value = recv.recv()
    except EOFError:
        raise RuntimeError(f"verify worker {proc.pid} died (exit code {proc.exitcode})") from None
    finally:
        recv.close()
    proc.join()
    if kind != "ok":
        raise RuntimeError(f"verify worker failed:\n{value}")
    return value


def _worker_count(layout: RunLayout, names: list[str], workers: int | None) -> int:
    if len(names) < 2 or "fork" not in multiprocessing.get_all_start_methods():
        return 1
    if workers is not None:
        return max(1, min(workers, len(names)))
    if (os.cpu_count() or 1) < 2 or threading.active_count() > 1:
        return 1  # forking a process with other threads running is not safe
    size = 0
    for rel in ["host.jsonl", *(model_log(n, m) for n in names for m in MODEL_LOG_NAMES)]:
        try:
            size += os.path.getsize(layout.root / rel)
        except OSError:
            pass
    return len(names) if size >= PARALLEL_MIN_BYTES else 1
