"""The Run: owns every thread of one confirmatory run, and every stop.

Threads: per model ``lanes`` lane threads (``confirmatory.engine.lanes``), the host
sampler (``confirmatory.host.sampler``), the anchorer (``confirmatory.anchors.anchorer``);
the main thread only waits (``wait``): for lanes to finish, a noted signal,
a resume request, an attempt past its deadline, a dead engine pool, the
sampler's health. None of the record-writing threads is a daemon; each hands
its outcome to the Run; the first runner failure stops every model.

Shutdown is: set the flag under the ceiling's lock (so its instant is
ordered against attempt starts), wake every waiter, join.

Which signals interrupt a run, and ignoring them at the very end, is
``confirmatory.engine.signals``; what the Run does with an attempt past
its deadline is ``confirmatory.engine.deadlines`` (a part of the Run).
"""

from __future__ import annotations

import shutil
import signal
import threading
import time
import traceback
from pathlib import Path
from typing import TYPE_CHECKING, Any

from confirmatory.core import rules
from confirmatory.core.money import usd_to_nusd
from confirmatory.engine.config import with_backend
from confirmatory.engine.deadlines import Deadlines
from confirmatory.engine.events import Events
from confirmatory.engine.lanes import Lane
from confirmatory.engine.lines import RecordLines
from confirmatory.engine.modelstate import ModelState
from confirmatory.engine.pools import EnginePools
from confirmatory.engine.result import RunResult
from confirmatory.engine.signals import (
    INTERRUPT_SIGNALS,
    _inherited_ignore,
    ignore_interrupts,  # noqa: F401 - re-exported: cli.run imports it from here
)
from confirmatory.engine.spend import Spend
from confirmatory.records.chain import ChainError
from confirmatory.records.rundir import RunFiles, create_run_dir
from confirmatory.records.writer import Guard
from confirmatory.runtime.clock import Clock

if TYPE_CHECKING:
    from confirmatory.design.model import LoadedDesign
    from confirmatory.engine.options import RunOptions

POLL_S = 0.05


# The run stops (cause runner-error) when its disk has less free than this,
# while the stop, the close lines and the final anchor can still be written;
# `run` refuses to start below it. Looked at every DISK_CHECK_S.
DISK_FLOOR_BYTES = 64 << 20
DISK_CHECK_S = 5.0


class Run(Deadlines, Events, RecordLines):
    """One execution of a loaded design into a new run directory."""

    journal_calls = True  # the spend journal (False: benchmarks/bench_runner.py's comparison only)

    def __init__(
        self,
        loaded: LoadedDesign,
        run_dir: Path,
        *,
        options: RunOptions | None = None,
        clock: Any = None,
        host_readers: Any = None,
        config: dict[str, Any] | None = None,
        install_signals: bool = True,
        restore_signals: bool = True,
        restore_to: dict[int, Any] | None = None,
        api_bases: dict[str, str] | None = None,
        disk_floor_bytes: int | None = None,
        continuation: dict[str, Any] | None = None,
    ) -> None:
        if options is not None:  # the front door's one typed value (docs/LIBRARY.md)
            given = options.as_kwargs()
            clock, host_readers, config = given["clock"], given["host_readers"], given["config"]
            install_signals, restore_signals = given["install_signals"], given["restore_signals"]
            restore_to, api_bases = given["restore_to"], given["api_bases"]
            disk_floor_bytes = given.get("disk_floor_bytes", disk_floor_bytes)
        self.loaded = loaded
        # Carrying a crashed run on (engine.continuation): its position, the
        # operator's reason and the torn tails already moved aside.
        self.continuation = continuation
        self.design = loaded.design
        self.clock = clock or Clock()
        self.guard = Guard()  # the secret values no record may hold (redaction.Guard)
        self.run_dir = Path(run_dir)
        self.class_lists = rules.CLASS_LISTS
        self._install_signals = install_signals
        # False: close() leaves the handlers in place, for a caller that ends
        # the process next (runmain): a signal while the process joins its
        # last threads and exits is noted, never a KeyboardInterrupt or a
        # death by the signal that would replace the run's exit status. That
        # caller restores them itself (restore_signal_handlers) if it goes on.
        self._restore_signals = restore_signals
        self._old_handlers: dict[int, Any] = {}
        # The handlers to put back instead of those start() replaced: a
        # caller that took the signals over for its own set-up (runmain's
        # early handler, for the demo) and goes on after the run.
        self._restore_to = restore_to
        self._host_readers = host_readers
        self._config = config
        self._api_bases = api_bases or {}
        self.arms = {a.name: a for a in self.design.arms}
        self.households = {h.id: h for h in loaded.households}
        self.stop_event = threading.Event()
        self._wake = threading.Event()
        self._signal: int | None = None
        self.signals_received = 0  # how many interrupt signals arrived (progress says so)
        self._fatal: list[tuple[str, str]] = []
        self._fatal_lock = threading.Lock()
        self.stopped = False
        self.stop_cause: str | None = None
        self.stop_detail = ""
        self.disk_floor_bytes = DISK_FLOOR_BYTES if disk_floor_bytes is None else disk_floor_bytes
        self._next_disk_check = 0.0
        self.write_failures: list[str] = []
        self.disk_failed: str | None = None  # the first run file that could not be written (fatal)
        self.files: RunFiles | None = None
        self.models: dict[str, ModelState] = {}
        self._threads: list[threading.Thread] = []
        self._lanes: list[tuple[threading.Thread, Lane]] = []
        self._closed = False
        self._finished = False
        self._resume_seen = 0
        self.host: Any = None
        self.anchorer: Any = None
        self.harness: Any = None
        self.pools: EnginePools | None = None
        self.spend = Spend(
            ceiling_nusd=usd_to_nusd(self.design.ceiling.overall_cap_usd) + usd_to_nusd(self.design.ceiling.margin_usd),
            before_nusd=usd_to_nusd(self.design.study.spend_before_stage_usd),
            clock=self.clock,
            on_crossing=self._on_crossing,
        )

    # -- set-up ------------------------------------------------------------
    def start(self) -> None:
        from confirmatory.design.load import resolve_entry

        if self._install_signals and threading.current_thread() is threading.main_thread():
            # Before the run directory exists: a signal from here on is noted,
            # and the run then stops at once with cause interrupt, closed and
            # anchored, instead of dying half-built. SIGHUP (the terminal or
            # ssh session closed) is an interrupt too, unless the process was
            # started ignoring it: under `nohup` the run outlives its terminal.
            self._old_handlers = {
                s: signal.signal(s, self._on_signal) for s in INTERRUPT_SIGNALS if not _inherited_ignore(s)
            }
        self.harness = resolve_entry(self.design.harness.entry, self.loaded.base_dir)
        self.pools = pools = EnginePools(self.loaded)
        early = pools.early and self.continuation is None  # on a cluster: started first, to be recorded
        if early:
            pools.start_all([spec.name for spec in self.design.models])
        if self.continuation is not None:
            from confirmatory.records.rundir import open_run_dir

            self.clock.start_above(self.continuation["position"].crash_t)
            self.files = open_run_dir(self.run_dir)
        else:
            backend = pools.record()
            self.files = create_run_dir(
                self.loaded,
                self.run_dir,
                clock=self.clock,
                engine_backend=backend,
                config=with_backend(self._config, backend) if self._config else None,
            )
        for spec in self.design.models:
            mf = self.files.models[spec.name]
            if spec.name in self._api_bases:
                spec = spec.model_copy(update={"api_base": self._api_bases[spec.name]})
            self.models[spec.name] = ModelState(
                name=spec.name,
                spec=spec,
                run_log=mf.run_log,
                admission_log=mf.admission_log,
                model_dir=mf.dir,
                draw=list(mf.manifest["draw"]),
                arm_orders={k: list(v) for k, v in mf.manifest["arm_orders"].items()},
                households=self.households,
                cap_nusd=mf.manifest["cap_nusd"],
                reserve_nusd=mf.manifest["reserve_nusd"],
            )
        if self.continuation is not None:
            from confirmatory.engine.continuation import begin

            begin(
                self,
                self.continuation["position"],
                reason=self.continuation["reason"],
                torn=self.continuation["torn"],
                made=self.continuation.get("made", []),
            )
        self._start_host()
        if not early:  # a model stopped before a crash gets no pool: its lanes only end
            pools.start_all([m.name for m in self.models.values() if not (m.stopped or self.stopped)])
        pools.hand_out(self)
        self._start_anchorer()
        for m in self.models.values():
            for i in range(m.spec.lanes):
                if self.continuation and i in self.continuation["position"].models[m.name].lane_ended:
                    continue  # its lane-end line is on disk
                lane = Lane(self, m, i)
                t = threading.Thread(target=lane.run_lane, name=f"lane-{m.name}-{i}", daemon=False)
                self._threads.append(t)
                self._lanes.append((t, lane))
        for t in self._threads:
            t.start()

    def _start_host(self) -> None:
        from confirmatory.host.sampler import HostMonitor

        assert self.files is not None
        self.host = HostMonitor(
            self.files.host_log,
            self.clock,
            self.design.host,
            on_fatal=self._host_fatal,
            readers=self._host_readers,
        )
        self.host.start()

    def _start_anchorer(self) -> None:
        from confirmatory.anchors.anchorer import Anchorer
        from confirmatory.engine.evidence import study_attester

        assert self.files is not None
        f = self.files
        cmd = f.manifest["anchors"]["command"]  # placeholders expanded, as recorded
        self.anchorer = Anchorer(
            self.run_dir,
            self.clock,
            logs=f.writers(),
            external_logs={"resume.jsonl": _seed(f.manifest_sha256, "resume.jsonl")},
            manifests=f.manifest_paths(),
            anchors=f.anchors_log,
            pushes=f.pushes_log,
            interval_s=self.design.anchors.interval_s,
            command=list(cmd) if cmd else None,
            cwd=self.loaded.base_dir,
            evidence=study_attester(
                self.run_dir, self.clock, f.manifest, self.loaded, f.pushes_log, f.anchors_log.path
            ),
        )
        # The first anchor comes before the first admission decision (and a
        # continuation's is signed, stamped, cosigned and pushed before any lane starts).
        seq = self.anchorer.anchor(final=False)
        self.anchorer.start()
        if self.continuation is not None:  # its first anchor is with the witness before any attempt
            rc = self.anchorer.wait_pushed(seq, self.anchorer.push_timeout_s + 5)
            if rc != 0 and cmd:
                self.stop_run(
                    "runner-error",
                    detail=f"the witness did not take the continuation's first anchor "
                    f"({seq}): push rc {rc}; see anchor-pushes.jsonl",
                )

    # -- the main thread ------------------------------------------------------
    def wait(self) -> RunResult:
        """Wait for the lanes, acting on signals, resumes, deadlines, pools, fatal errors."""
        try:
            while any(t.is_alive() and not lane.settled for t, lane in self._lanes):
                self._wake.wait(POLL_S)
                self._wake.clear()
                self._tick()
            self._tick()
        except BaseException as exc:  # noqa: BLE001 - a runner error: settle, then stop
            self.fatal("runner-error", f"main loop: {exc!r}")
            self._tick()
            for t, lane in self._lanes:
                if not lane.settled:
                    t.join()
        return self._finish()

    def _tick(self) -> None:
        if self._signal is not None and not self.stopped:
            self.stop_run("interrupt", detail=f"signal {self._signal}")
        with self._fatal_lock:
            fatal = list(self._fatal)
        if fatal and not self.stopped:
            cause, detail = fatal[0]
            self.stop_run(cause, detail=detail)
        failure = getattr(self.anchorer, "failure", None)
        if failure is not None and not self.stopped:
            # The anchorer could not write an anchor: records would go unanchored.
            if isinstance(failure, (OSError, ChainError)) and self.disk_failed is None:
                self.disk_failed = f"anchorer: {failure!r}"
            self.stop_run("runner-error", detail=f"anchorer: {failure!r}")
        if self.host is not None and not self.stopped:
            # A memory reading that never returns stops the sampler from
            # checking itself: the main thread checks its health too.
            self.host.check_health()
        self._check_disk()
        now = time.monotonic()  # deadlines run on the monotonic clock (modelstate.Running)
        deadline = self.design.rules.attempt_deadline_s
        for m in self.models.values():
            with m.cond:
                running = list(m.running.values())
            for r in running:
                if now - r.start_mono >= deadline and r.abandoned_mono is None:
                    self._abandon(m, r)
                elif r.abandoned_mono is not None and time.monotonic() - r.abandoned_mono > self.abandon_grace_s(m):
                    self._settle(m, r)
            # Watched while a lane of the model may still call it: a pool
            # that dies once every lane has ended (an idle pool the OOM killer
            # picked while the other models run on) stops nothing, and must
            # not turn a run that completed into a stopped one.
            if m.pool is not None and not m.stopped and len(m.lane_ends) < m.spec.lanes and not m.pool.alive():
                self.stop_model(m, "pool", detail="engine pool died")
            if m.paused:
                self._check_resume()

    def _check_disk(self) -> None:
        """Stop (runner-error) before the disk is full: a full disk would
        leave the stop, the close lines and the final anchor unwritten."""
        now = time.monotonic()
        if self.stopped or now < self._next_disk_check:
            return
        self._next_disk_check = now + DISK_CHECK_S
        try:
            free = shutil.disk_usage(self.run_dir).free
        except OSError:
            return  # no answer is no reason to stop; a failed write still is
        if free < self.disk_floor_bytes:
            self.stop_run(
                "runner-error",
                detail=(
                    f"the run's disk has {free / 2**20:.1f} MiB free, below the {self.disk_floor_bytes / 2**20:g} MiB "
                    "floor: stopped while the stop, the close lines and the final anchor can still be written"
                ),
            )

    def _on_signal(self, signum: int, frame: Any) -> None:
        # Only note it: the main loop stops the lanes, within POLL_S. The
        # handler runs in the main thread between two of its bytecodes, so
        # also while that thread holds the lock of the event it waits on
        # (Event.wait and clear are Python code): setting the event here
        # would wait for that lock for good. No lock may be taken here.
        # The first signal is the one that stopped the run (its stop line
        # names it); later ones are only counted.
        if self._signal is None:
            self._signal = signum
        self.signals_received += 1

    def resume_seen(self, n: int) -> None:  # requests a crashed runner had read
        self._resume_seen = n

    def wake(self) -> None:
        self._wake.set()

    def fatal(self, cause: str, detail: str, *, disk: bool = False) -> None:
        """A runner-level failure (sampler, runner error) from any thread: stop every model.
        ``disk``: a run file could not be written: the run then ends as a crash does
        (docs/RUN.md "The disk"), to be carried on once the disk is fixed."""
        with self._fatal_lock:
            self._fatal.append((cause, detail))
            if disk and self.disk_failed is None:
                self.disk_failed = detail
        self._wake.set()

    def _host_fatal(self, cause: str, detail: str) -> None:
        from confirmatory.records.chain import ChainWriteFailed

        self.fatal(cause, detail, disk=isinstance(getattr(self.host, "outcome", None), ChainWriteFailed))

    def lane_failed(self, m: ModelState, lane: int, exc: BaseException) -> None:
        detail = "".join(traceback.format_exception_only(type(exc), exc)).strip()
        self.fatal("runner-error", f"lane {m.name}/{lane}: {detail}", disk=isinstance(exc, (OSError, ChainError)))

    def pool_failed(self, m: ModelState, exc: BaseException) -> bool:
        """True (and the model stopped, cause pool) when ``exc`` came from a dead engine pool."""
        from confirmatory.engine.pool import PoolFailure

        dead = isinstance(exc, PoolFailure) or (m.pool is not None and not m.pool.alive())
        if dead:
            self.stop_model(m, "pool", detail=f"engine pool failed: {exc!r}")
        return dead

    # -- the end -----------------------------------------------------------
    def _finish(self) -> RunResult:
        from confirmatory.anchors import anchorer as anchors

        assert self.files is not None
        if self.host is not None:
            self.host.stop()
            self.host.join()
        with self._fatal_lock:
            fatal = list(self._fatal)
        if fatal and not self.stopped:  # the sampler died, or a lane's last line failed, while the lanes ended
            self.stop_run(fatal[0][0], detail=fatal[0][1])
        total = self.spend.total_nusd
        if self.disk_failed is not None:
            return self._finish_as_crash(total)
        for m in (m for m in self.models.values() if not m.closed):  # (closed before a crash: once)
            self.append_at_end(
                m.run_log, {"event": "close", "t": self.clock.now(), "spend_nusd": self.spend.model_total(m.name)}
            )
        if self.spend.crossed.is_set():
            status = "ceiling"
        elif self.stopped or any(m.stopped for m in self.models.values()) or self.write_failures:
            status = "stopped"  # (a close line that failed just now: the records did not end complete)
        else:
            status = "completed"
        first = next((m for m in self.models.values() if m.stop_cause), None)
        cause = self.stop_cause or (first.stop_cause if first else None)
        detail = self.stop_detail if self.stop_cause else (first.stop_detail if first else "")
        self.append_at_end(
            self.files.run_log, {"event": "close", "t": self.clock.now(), "status": status, "spend_total_nusd": total}
        )
        anchored = True
        try:
            # Read when the run ends, not at import: a test lowers it.
            rc = self.anchorer.finish(anchors.FINAL_PUSH_TIMEOUT_S) if self.anchorer is not None else None
        except (ChainError, OSError) as exc:  # the final anchor could not be written
            self.write_failures.append(f"the final anchor: {exc}")
            rc, anchored = None, False
        self._finished = True
        self.close()
        stuck = sum(1 for t, lane in self._lanes if lane.settled and t.is_alive())
        problem = getattr(self.anchorer, "final_push_problem", "") if anchored else ""
        return RunResult(
            status,
            cause,
            total,
            self.run_dir,
            rc,
            stuck,
            detail,
            tuple(self.write_failures),
            final_anchor_written=anchored,
            final_push_problem=problem,
        )

    def close(self) -> None:
        """Idempotent: join what is left, close pools and writers, then restore
        the signal handlers (unless ``restore_signals=False``: the caller
        ends the process, and a signal until then is only noted)."""
        if self._closed:
            return
        self._closed = True
        if not self._finished and self.files is not None and self._lanes and not self.stopped:
            # wait() never ran (something raised between start() and it): no
            # one would end the lanes (a paused lane waits for ever). Stop the
            # run, in the records, before joining them.
            try:
                self.stop_run("runner-error", detail="the runner's main loop did not run")
            except Exception:  # noqa: BLE001 - the writers may be failed; halt the lanes anyway
                for m in self.models.values():
                    m.halt.set()
        self.stop_event.set()
        for t, lane in self._lanes:
            # A settled lane is stuck in a call that never returns: do not wait on it.
            t.join(timeout=0 if lane.settled else None)
        if self.host is not None:
            self.host.stop()
            self.host.join()
        if self.anchorer is not None and not self._finished:
            # Set-up failed after the anchorer started (or wait() never ran):
            # its threads are not daemons, so end them, with a final anchor
            # of what exists.
            from confirmatory.anchors import anchorer as anchors

            try:
                self.anchorer.finish(push_timeout=anchors.CLOSE_PUSH_TIMEOUT_S)
            except Exception:  # noqa: BLE001 - the writers may already be failed
                pass
        for m in self.models.values():
            if m.pool is not None:
                try:
                    m.pool.close()
                except Exception:  # noqa: BLE001 - closing is best effort; records are written
                    pass
        if self.pools is not None:
            self.pools.close()  # a Ray cluster started for the run stops here
        if self.files is not None:
            self.files.close()
        if self._restore_signals:
            # The very last step: until here a signal is only noted.
            self.restore_signal_handlers()

    def restore_signal_handlers(self) -> None:
        """Put back the handlers start() replaced, or the ``restore_to`` the
        Run was given (idempotent)."""
        old, self._old_handlers = self._old_handlers, {}
        if self._restore_to is not None:
            old, self._restore_to = dict(self._restore_to), {}
        for s, h in old.items():
            signal.signal(s, h)

    def execute(self) -> RunResult:
        try:
            self.start()
        except BaseException:
            self.close()
            raise
        return self.wait()


def _seed(manifest_sha: str, rel: str) -> str:
    from confirmatory.records.chain import log_seed

    return log_seed(manifest_sha, rel)
