"""A model's engine pool: real worker processes that serve a harness's tool calls.

The pool owns the worker processes of one model, started once and kept for
the whole run. A call carries everything the engine needs in its frame,
``(op, payload, features)``: the pool has no features of its own, so two
arms that share one pool cannot leak their features into each other.

Failure is a value the runner can see, not a hang: a worker that dies (killed,
crashed, out of memory) breaks the whole pool. ``alive()`` then answers false,
and every call in flight or later raises ``PoolFailure`` promptly, because a
caller waits on its worker's pipe *and* the worker's process sentinel at once.
The runner turns that into a stop with cause ``pool``.

Threading: any number of threads may call one pool. A call borrows one idle
worker for its duration (a connection is never shared by two threads), so
calls run in parallel up to the number of workers and queue beyond it.
"""

from __future__ import annotations

import importlib
import multiprocessing
import multiprocessing.connection
import os
import pickle
import queue
import signal
import threading
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, cast

if TYPE_CHECKING:
    from multiprocessing.context import ForkServerContext, SpawnContext

# How often a caller waiting for an idle worker re-checks that the pool is
# still usable: bounds how long a queued call can outlive a dead pool.
_POLL_S = 0.1
# How long close() waits for a worker to exit after its sentinel before
# terminating it: an engine call should never take this long.
_JOIN_S = 5.0
# How long the constructor waits for every worker to import its target.
_READY_S = 60.0


POOL_METHODS = ("call", "alive", "close")


def not_a_pool(pool: Any, factory: str) -> str | None:
    """Why what an engine factory returned is not an engine pool, or None."""
    lacking = [name for name in POOL_METHODS if not callable(getattr(pool, name, None))]
    if not lacking:
        return None
    return (
        f"the engine factory {factory} returned {type(pool).__name__}, which has no {', '.join(lacking)} "
        "(an engine pool has call, alive and close: docs/HARNESS.md)"
    )


class PoolFailure(Exception):
    """The engine pool is broken or closed: a worker died or never started."""


class EngineCallError(Exception):
    """The engine raised an exception that could not be sent back as itself."""


def resolve_target(target: str) -> Callable[[str, Any, Mapping[str, Any]], Any]:
    """Import ``"package.module:function"`` and return the function."""
    module_name, sep, attr = target.partition(":")
    if not sep or not module_name or not attr:
        raise ValueError(f"engine target must look like 'module:function', got {target!r}")
    fn = importlib.import_module(module_name)
    for part in attr.split("."):
        fn = getattr(fn, part)
    if not callable(fn):
        raise ValueError(f"engine target {target!r} is not callable")
    return fn


# The status a worker ends with when the runner died under it.
ORPHANED_EXIT = 70


def _watch_parent() -> None:
    """End this worker as soon as the runner is gone, even in the middle of a
    call that would run for minutes: a runner killed with SIGKILL (the OOM
    killer) leaves no engine computing for nobody. The spawn start method
    hands every worker a sentinel that becomes ready when its parent dies."""
    parent = multiprocessing.parent_process()
    if parent is None:
        return

    def watch() -> None:
        multiprocessing.connection.wait([parent.sentinel])
        os._exit(ORPHANED_EXIT)

    threading.Thread(target=watch, name="parent-watch", daemon=True).start()


def _worker_main(target: str, conn: multiprocessing.connection.Connection) -> None:
    """The loop each worker process runs: receive a frame, run it, send the outcome."""
    # Ctrl-C (and a closed terminal's SIGHUP) reach the whole process group;
    # the runner, not the worker, decides when engines stop (it closes the
    # pool after its lanes settle): a worker that died first would make a
    # lane record cause `pool` instead of `interrupt`.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if hasattr(signal, "SIGHUP"):
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
    _watch_parent()
    try:
        fn = resolve_target(target)
    except BaseException as exc:  # reported to the parent, which refuses to start
        conn.send(("failed", f"{type(exc).__name__}: {exc}"))
        return
    conn.send(("ready", None))
    while True:
        try:
            frame = conn.recv()
        except (EOFError, OSError):  # the parent went away: nothing left to serve
            return
        if frame is None:  # close() sentinel
            return
        op, payload, features = frame
        try:
            outcome: tuple[str, Any] = ("ok", fn(op, payload, features))
        except Exception as exc:
            outcome = ("raise", exc)
        try:
            data = pickle.dumps(outcome)
            if outcome[0] == "raise":
                pickle.loads(data)  # an exception class with a custom __init__ may not unpickle
        except Exception as exc:  # an unpicklable result or exception still gets an answer
            kind = "an exception" if outcome[0] == "raise" else "a result"
            detail = repr(outcome[1])[:500]
            data = pickle.dumps(
                ("raise", EngineCallError(f"engine returned {kind} that cannot be sent: {detail} ({exc})"))
            )
        conn.send_bytes(data)


class _Worker:
    __slots__ = ("index", "process", "conn")

    def __init__(self, index: int, process: Any, conn: multiprocessing.connection.Connection) -> None:
        self.index = index
        self.process = process
        self.conn = conn


class ProcessEnginePool:
    """``workers`` processes running ``target(op, payload, features)``; see the module docstring."""

    def __init__(self, target: str, workers: int, start_method: str = "spawn") -> None:
        if workers < 1:
            raise ValueError("an engine pool needs at least one worker")
        if start_method not in ("spawn", "forkserver"):
            # fork would copy the runner's threads and locks mid-state into the child.
            raise ValueError(f"start_method must be 'spawn' or 'forkserver', got {start_method!r}")
        self.target = target
        self.workers = workers
        # (a spawn or forkserver context: checked above)
        self._ctx = cast("SpawnContext | ForkServerContext", multiprocessing.get_context(start_method))
        self._lock = threading.Lock()
        self._closed = False
        self._broken: str | None = None
        self._idle: queue.Queue[_Worker] = queue.Queue()
        self._all: list[_Worker] = []
        try:
            for i in range(workers):
                parent_end, child_end = self._ctx.Pipe(duplex=True)
                proc = self._ctx.Process(target=_worker_main, args=(target, child_end), name=f"engine-{i}", daemon=True)
                proc.start()
                child_end.close()  # so the parent sees EOF when the child dies
                self._all.append(_Worker(i, proc, parent_end))
            for w in self._all:
                status, detail = self._await_ready(w)
                if status != "ready":
                    raise PoolFailure(f"engine worker {w.index} did not start: {detail}")
                self._idle.put(w)
        except BaseException:
            self._shutdown()
            raise

    def _await_ready(self, w: _Worker) -> tuple[str, Any]:
        ready = multiprocessing.connection.wait([w.conn, w.process.sentinel], timeout=_READY_S)
        if w.conn in ready:
            try:
                return cast("tuple[str, Any]", w.conn.recv())
            except (EOFError, OSError):
                pass
        if not ready:
            return ("failed", f"no answer within {_READY_S:.0f} s")
        return ("failed", f"process exited with code {w.process.exitcode}")

    # --- queries -------------------------------------------------------------

    def alive(self) -> bool:
        """True while the pool is open and every worker process is running."""
        with self._lock:
            if self._closed or self._broken is not None:
                return False
        dead = [w for w in self._all if not w.process.is_alive()]
        if dead:
            self._mark_broken(f"engine worker {dead[0].index} died (exit code {dead[0].process.exitcode})")
            return False
        return True

    def _mark_broken(self, why: str) -> None:
        with self._lock:
            if self._broken is None:
                self._broken = why

    def _check_usable(self) -> None:
        with self._lock:
            if self._closed:
                raise PoolFailure("engine pool is closed")
            if self._broken is not None:
                raise PoolFailure(f"engine pool is broken: {self._broken}")

    # --- calls ---------------------------------------------------------------

    def call(self, op: str, payload: Any, features: Mapping[str, Any]) -> Any:
        """Run ``target(op, payload, features)`` in a worker and return its result.

        The engine's own exceptions are raised here as themselves. A dead or
        closed pool raises ``PoolFailure``.
        """
        frame = (op, payload, dict(features))
        worker = self._borrow()
        returned = False
        try:
            try:
                worker.conn.send(frame)
            except (OSError, EOFError, BrokenPipeError) as exc:
                raise self._died(worker) from exc
            except Exception:  # the frame itself could not be pickled: the caller's bug
                self._idle.put(worker)
                returned = True
                raise
            status, value = self._receive(worker)
            self._idle.put(worker)
            returned = True
        finally:
            if not returned and self._broken is None and not self._closed:
                # An exception we did not expect left the worker's pipe in an
                # unknown state; no later call may read a stale answer from it.
                self._mark_broken(f"engine worker {worker.index} left mid-call")
        if status == "raise":
            raise value
        return value

    def _borrow(self) -> _Worker:
        while True:
            self._check_usable()
            if not self.alive():
                self._check_usable()  # raises with the reason alive() recorded
            try:
                return self._idle.get(timeout=_POLL_S)
            except queue.Empty:
                continue

    def _receive(self, worker: _Worker) -> tuple[str, Any]:
        while True:
            # Waiting on the process sentinel too is what makes a killed worker
            # a prompt PoolFailure instead of a caller blocked forever on recv.
            ready = multiprocessing.connection.wait([worker.conn, worker.process.sentinel], timeout=1.0)
            if worker.conn in ready:
                try:
                    return cast("tuple[str, Any]", pickle.loads(worker.conn.recv_bytes()))
                except (EOFError, OSError) as exc:
                    raise self._died(worker) from exc
            if ready:  # only the sentinel: the process ended without answering
                raise self._died(worker)
            with self._lock:
                if self._closed:
                    raise PoolFailure("engine pool was closed during a call")

    def _died(self, worker: _Worker) -> PoolFailure:
        with self._lock:
            if self._closed:
                return PoolFailure("engine pool was closed during a call")
        worker.process.join(timeout=_POLL_S)
        why = f"engine worker {worker.index} died during a call (exit code {worker.process.exitcode})"
        self._mark_broken(why)
        return PoolFailure(why)

    # --- shutdown ------------------------------------------------------------

    def close(self) -> None:
        """Stop every worker and join it. Idempotent; later calls raise PoolFailure."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self._shutdown()

    def _shutdown(self) -> None:
        # Idle workers get the sentinel; a worker that is mid-call (its pipe
        # belongs to the calling thread) is terminated instead, since its
        # caller sees _closed and stops waiting for it.
        idle: list[_Worker] = []
        while True:
            try:
                idle.append(self._idle.get_nowait())
            except queue.Empty:
                break
        for w in idle:
            try:
                w.conn.send(None)
            except (OSError, EOFError):
                pass
        for w in self._all:
            if w in idle:
                w.process.join(timeout=_JOIN_S)
            if w.process.is_alive():
                w.process.terminate()
                w.process.join(timeout=_JOIN_S)
            if w.process.is_alive():
                w.process.kill()
                w.process.join()
        # A busy worker's pipe is still being waited on by its caller, which
        # wakes on the process sentinel; only idle pipes are ours to close.
        for w in idle:
            w.conn.close()

    def __enter__(self) -> ProcessEnginePool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
