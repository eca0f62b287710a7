"""A model's engine pool on a Ray cluster: ``workers`` Ray actors behind the
same interface as ``ProcessEnginePool`` (``call``, ``alive``, ``close``).

ray is an optional extra (``pip install -e '.[ray]'``), imported here only
when a pool or a cluster connection is made: importing this module costs
nothing. The design chooses it with ``[engine] backend = "ray"``
(docs/ENGINE.md); the runner then connects once (``RayCluster``) and starts
one ``RayEnginePool`` per model, whose actors run the design's
``engine.target`` as ``target(op, payload, features)``.

The semantics are the process pool's:

- Each actor is started once, with no features; a call carries its arm's
  features in its frame. A call borrows one idle actor for its duration, so
  calls run in parallel up to ``workers`` and queue beyond it.
- An engine exception comes back to the caller as itself: the actor catches
  it and sends it pickled, as a process worker does (``EngineCallError`` when
  it cannot be sent), so Ray's wrapper never reaches the harness.
- An actor that dies (``ray.kill``, a crash, its node lost) breaks the pool:
  ``alive()`` answers false and every call in flight or later raises
  ``PoolFailure`` promptly. Each actor runs a *watch* call that never returns
  while the actor lives (in a concurrency group of its own, beside the engine
  calls); Ray resolves it with an error when the actor dies, as a process's
  sentinel becomes ready when it exits.
- A call whose attempt the runner has ended (abandoned past its deadline, or
  its model or the run stopped) stops waiting at once: the call is cancelled
  (``ray.cancel``; one already running in a threaded actor runs to its end),
  ``BudgetStop`` is raised to the harness, and the late result is discarded
  when it comes. The actor is lent again only after that, so no later call
  reads a stale answer.

What Ray decides and the runner only records (config.json ``not_pinned_down``):
on which node each actor is placed, and how those nodes differ.
"""

from __future__ import annotations

import os
import pickle
import queue
import signal
import sys
import threading
from collections.abc import Mapping
from typing import Any, cast
from urllib.parse import urlsplit, urlunsplit

from confirmatory.core.errors import BudgetStop
from confirmatory.engine.pool import EngineCallError, PoolFailure
from confirmatory.engine.spend import bound_attempt

# How often a waiting caller re-checks the pool, its actor's watch and its attempt.
_POLL_S = 0.1
# How long a pool waits for every actor to import its target and answer.
START_TIMEOUT_S = 300.0
# How long close() lets ray.kill and a local cluster's shutdown take.
_KILL_S = 10.0

LOCAL = "local"


def public_address(address: str) -> str:
    """A cluster address as it may be written down: no user or password."""
    parts = urlsplit(address if "//" in address else f"//{address}")
    if parts.username is None and parts.password is None:
        return address
    host = parts.hostname or ""
    netloc = f"{host}:{parts.port}" if parts.port else host
    cleaned = urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))
    return cleaned if "//" in address else cleaned.lstrip("/")


class RayCluster:
    """The runner's one connection to Ray for a run.

    ``address``: ``"local"`` starts a cluster on this machine for the run (and
    ``close`` stops it); ``"auto"`` joins the cluster this machine is part of
    (``ray start`` ran here); anything else is a cluster's address
    (``ray://head:10001`` through Ray Client, or ``head:6379``). A process
    that is already connected to Ray (a program embedding the Run, a test's
    cluster) is used as it is and left connected.
    """

    def __init__(self, address: str, *, local_cpus: float | None = None) -> None:
        import ray

        self.address = address
        self.ray_version = ray.__version__
        self.started_here = False
        self.joined = False
        if ray.is_initialized():
            return
        # ray.init sets its own SIGTERM handler in the main thread: the
        # runner's (an interrupt, stopped in order) is put back.
        saved = _signal_handlers()
        try:
            if address == LOCAL:
                kw: dict[str, Any] = {"num_cpus": local_cpus} if local_cpus is not None else {}
                ray.init(address="local", include_dashboard=False, log_to_driver=False, configure_logging=False, **kw)
                self.started_here = True
            else:
                ray.init(address=address, log_to_driver=False, configure_logging=False)
            self.joined = True
        finally:
            _restore_signal_handlers(saved)

    def describe(self) -> dict[str, Any]:
        """Ray's version, the address (no credentials), and the cluster's live nodes and CPUs."""
        import ray

        nodes = [n for n in cast(Any, ray).nodes() if n.get("Alive")]  # (Any: ray.nodes is untyped)
        try:
            gcs = ray.get_runtime_context().gcs_address
        except Exception:  # noqa: BLE001 - Ray Client has no GCS address to give
            gcs = None
        return {
            "name": "ray",
            "ray_version": self.ray_version,
            "address": public_address(self.address),
            "connected_to": public_address(gcs) if isinstance(gcs, str) else None,
            "started_for_run": self.started_here,
            "nodes": len(nodes),
            "cpus": float(sum(n.get("Resources", {}).get("CPU", 0.0) for n in nodes)),
        }

    def close(self) -> None:
        """Disconnect, which stops a cluster started for the run; a connection found open is left open."""
        if self.joined:
            import ray

            self.joined = False
            saved = _signal_handlers()
            try:
                ray.shutdown()
            finally:
                _restore_signal_handlers(saved)


def _signal_handlers() -> dict[int, Any]:
    if threading.current_thread() is not threading.main_thread():
        return {}
    return {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM, getattr(signal, "SIGHUP", None)) if s}


def _restore_signal_handlers(saved: dict[int, Any]) -> None:
    for signum, handler in saved.items():
        if handler is not None:
            signal.signal(signum, handler)


class _EngineActor:
    """What each Ray actor runs (its class is made remote in ``_actor_class``)."""

    def __init__(self, target: str, sys_path: list[str]) -> None:
        # As a process worker: the runner, not the engine, decides when
        # engines stop (Ctrl-C and a closed terminal reach the whole job).
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        if hasattr(signal, "SIGHUP"):
            signal.signal(signal.SIGHUP, signal.SIG_IGN)
        # The runner's import path (the design's directory first), as a
        # spawned process worker gets it; absent paths on another node are harmless.
        for entry in reversed(sys_path):
            if entry not in sys.path:
                sys.path.insert(0, entry)
        from confirmatory.engine.pool import resolve_target

        self._fn = resolve_target(target)  # raising here fails the actor's start: the pool refuses
        self._watching = threading.Event()

    def ready(self) -> dict[str, Any]:
        import ray

        return {"node_id": ray.get_runtime_context().get_node_id(), "pid": os.getpid()}

    def watch(self) -> None:
        """Never returns while the actor lives: Ray fails it when the actor dies."""
        self._watching.wait()

    def call(self, op: str, payload: Any, features: Mapping[str, Any]) -> bytes:
        try:
            outcome: tuple[str, Any] = ("ok", self._fn(op, payload, features))
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
        return data


_ACTOR_CLASS: Any = None
_ACTOR_LOCK = threading.Lock()


def _actor_class() -> Any:
    global _ACTOR_CLASS
    with _ACTOR_LOCK:
        if _ACTOR_CLASS is None:
            import ray

            # (Any: ray.remote's typed overloads leave concurrency_groups out)
            cls = cast(Any, ray).remote(concurrency_groups={"watch": 1, "calls": 1})(_EngineActor)
            _ACTOR_CLASS = cls
        return _ACTOR_CLASS


class _Actor:
    __slots__ = ("index", "handle", "watch", "node_id")

    def __init__(self, index: int, handle: Any) -> None:
        self.index = index
        self.handle = handle
        self.watch: Any = None
        self.node_id: str | None = None


class RayEnginePool:
    """``workers`` Ray actors running ``target(op, payload, features)``; see the module docstring.

    The process must be connected to Ray (``RayCluster``) before a pool starts.
    """

    def __init__(
        self, target: str, workers: int, *, num_cpus: float | None = None, start_timeout_s: float = START_TIMEOUT_S
    ) -> None:
        import ray

        if workers < 1:
            raise ValueError("an engine pool needs at least one worker")
        if not ray.is_initialized():
            raise PoolFailure("not connected to a Ray cluster (RayCluster first)")
        self.target = target
        self.workers = workers
        self.num_cpus = 1.0 if num_cpus is None else float(num_cpus)
        self._lock = threading.Lock()
        self._closed = False
        self._broken: str | None = None
        self._idle: queue.Queue[_Actor] = queue.Queue()
        self._late: list[tuple[Any, _Actor]] = []  # (the abandoned call, its actor): lent again once it ends
        self._all: list[_Actor] = []
        cls = _actor_class()
        try:
            for i in range(workers):
                handle = cls.options(num_cpus=self.num_cpus, max_restarts=0, max_task_retries=0, name=None).remote(
                    target, list(sys.path)
                )
                self._all.append(_Actor(i, handle))
            for a in self._all:
                a.watch = a.handle.watch.options(concurrency_group="watch").remote()
            readies = [a.handle.ready.options(concurrency_group="calls").remote() for a in self._all]
            for a, ref in zip(self._all, readies):
                try:
                    info = ray.get(ref, timeout=start_timeout_s)
                except ray.exceptions.GetTimeoutError:
                    raise PoolFailure(
                        f"engine actor {a.index} did not start: no answer within {start_timeout_s:g} s "
                        f"(does the cluster have {self.num_cpus:g} CPU free per actor?)"
                    ) from None
                except ray.exceptions.RayError as exc:
                    raise PoolFailure(f"engine actor {a.index} did not start: {_first_line(exc)}") from None
                a.node_id = info["node_id"]
                self._idle.put(a)
        except BaseException:
            self._kill_all()
            raise

    # --- what the run records ------------------------------------------------

    def placement(self) -> dict[str, Any]:
        """The nodes this pool's actors were placed on, and the CPUs it holds."""
        nodes = sorted({a.node_id for a in self._all if a.node_id})
        return {
            "actors": self.workers,
            "num_cpus_per_actor": self.num_cpus,
            "cpus": self.num_cpus * self.workers,
            "nodes": nodes,
        }

    # --- queries -------------------------------------------------------------

    def alive(self) -> bool:
        """True while the pool is open and every actor lives."""
        import ray

        with self._lock:
            if self._closed or self._broken is not None:
                return False
        try:
            done, _ = ray.wait([a.watch for a in self._all], num_returns=1, timeout=0)
        except Exception as exc:  # noqa: BLE001 - the connection to the cluster is gone: so is the pool
            self._mark_broken(f"the Ray cluster could not be asked about the actors: {_first_line(exc)}")
            return False
        if done:
            dead = next(a for a in self._all if a.watch == done[0])
            self._mark_broken(f"engine actor {dead.index} died ({_watch_error(dead.watch)})")
            return False
        self._reap_late()
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
        """Run ``target(op, payload, features)`` in an actor and return its result.

        The engine's own exceptions are raised here as themselves; a dead or
        closed pool raises ``PoolFailure``; an attempt the runner ended raises
        ``BudgetStop`` (its call cancelled, its late result discarded).
        """
        import ray

        attempt = bound_attempt()
        frame = (op, payload, dict(features))
        actor = self._borrow(attempt)
        try:
            ref = actor.handle.call.options(concurrency_group="calls").remote(*frame)
        except Exception:  # the frame itself could not be serialized: the caller's bug
            self._idle.put(actor)
            raise
        while True:
            done, _ = ray.wait([ref, actor.watch], num_returns=1, timeout=_POLL_S, fetch_local=False)
            if ref in done:
                try:
                    status, value = pickle.loads(ray.get(ref))
                except ray.exceptions.RayError as exc:
                    raise self._died(actor, exc) from None
                self._idle.put(actor)
                break
            if done:  # only the watch: the actor died without answering
                raise self._died(actor, None)
            with self._lock:
                if self._closed:
                    raise PoolFailure("engine pool was closed during a call")
            ended = _ended(attempt)
            if ended is not None:
                self._discard(ref, actor)
                raise BudgetStop(ended)
        if status == "raise":
            raise value
        return value

    def _borrow(self, attempt: Any) -> _Actor:
        while True:
            self._check_usable()
            if not self.alive():
                self._check_usable()  # raises with the reason alive() recorded
            ended = _ended(attempt)
            if ended is not None:
                raise BudgetStop(ended)
            try:
                return self._idle.get(timeout=_POLL_S)
            except queue.Empty:
                continue

    def _discard(self, ref: Any, actor: _Actor) -> None:
        """The attempt was ended: cancel its call, and lend the actor again only once the call is over."""
        import ray

        try:
            ray.cancel(ref)
        except Exception:  # noqa: BLE001 - a call that just finished cannot be cancelled; its result is dropped
            pass
        with self._lock:
            self._late.append((ref, actor))

    def _reap_late(self) -> None:
        import ray

        with self._lock:
            late = list(self._late)
        if not late:
            return
        done, _ = ray.wait([ref for ref, _ in late], num_returns=len(late), timeout=0, fetch_local=False)
        finished = set(done)
        with self._lock:
            self._late = [(ref, a) for ref, a in self._late if ref not in finished]
        for ref, actor in late:
            if ref in finished:
                self._idle.put(actor)  # its late result is never read

    def _died(self, actor: _Actor, exc: BaseException | None) -> PoolFailure:
        with self._lock:
            if self._closed:
                return PoolFailure("engine pool was closed during a call")
        why = (
            f"engine actor {actor.index} died during a call ({_first_line(exc) if exc else _watch_error(actor.watch)})"
        )
        self._mark_broken(why)
        return PoolFailure(why)

    def late_calls(self) -> int:
        """How many ended attempts' calls are still running (their results to be discarded)."""
        self._reap_late()
        with self._lock:
            return len(self._late)

    # --- shutdown ------------------------------------------------------------

    def close(self) -> None:
        """Kill every actor. Idempotent; later calls raise PoolFailure."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self._kill_all()

    def _kill_all(self) -> None:
        import ray

        for a in self._all:
            try:
                ray.kill(a.handle, no_restart=True)
            except Exception:  # noqa: BLE001 - already dead, or the cluster is gone
                pass

    def __enter__(self) -> RayEnginePool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _ended(attempt: Any) -> str | None:
    """Why the runner ended the attempt bound to this thread, or None (no attempt, or it runs on)."""
    if attempt is None:
        return None
    if attempt.abandoned:
        return "attempt abandoned past its deadline"
    return cast("str | None", attempt.stop_reason())


def _watch_error(watch: Any) -> str:
    import ray

    try:
        ray.get(watch, timeout=0)
    except ray.exceptions.RayError as exc:
        return _first_line(exc)
    except Exception as exc:  # noqa: BLE001
        return f"{type(exc).__name__}: {_first_line(exc)}"
    return "its watch call returned"


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0][:300] if text else ''}"
