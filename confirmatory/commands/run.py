"""`confirmatory run`: refuse early, set up, execute a Run, report an exit status.

Everything that can refuse a run does so *before* the run directory exists,
so a refusal leaves nothing half-written and spends nothing: the design and
its pins, the ``--workers`` check, the harness and engine imports, the API
keys litellm needs, a model litellm cannot price, an existing run directory.
"""

from __future__ import annotations

import os
import shlex
import signal
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from types import FrameType

    from confirmatory.design.model import LoadedDesign
    from confirmatory.engine.run import Run

from confirmatory.core.exits import EXIT_CEILING, EXIT_OK, EXIT_REFUSED, EXIT_STOPPED, EXIT_WITNESS


class Display(Protocol):
    """What the command line shows while a run runs (``confirmatory.cli.progress.Progress``):
    started before the Run starts, stopped after it ends; ``live`` when it
    redraws in place (then the "run started" line is its to say)."""

    live: bool

    def start(self) -> None: ...

    def stop(self) -> None: ...


# A signal's handler, as ``signal.signal`` takes and returns it.
SignalHandler = Callable[[int, "FrameType | None"], object] | int | signal.Handlers | None

# The display a run is shown with: made from the Run and whether the table is
# drawn (``--quiet`` draws none; its events are shown whatever the flag).
DisplayFactory = Callable[["Run", bool], Display]


class EarlyInterrupt(BaseException):
    """A signal arrived before the Run took over the signals (while the design
    was checked and the run set up): nothing has been written or spent."""

    def __init__(self, signum: int) -> None:
        self.signum = signum
        super().__init__(signum)


_early_taken = False


def _raise_early(signum: int, frame: Any) -> None:
    # The first one counts: later ones, while the command unwinds, change
    # nothing. The handler stays in place and returns: setting SIG_IGN here
    # would make CPython report every other signal already pending ("Signal
    # 15 ignored due to race condition", a traceback on stderr), because
    # all the signals pending at one check are handled in one pass, lowest
    # number first, each by the handler in place when its turn comes.
    global _early_taken
    if _early_taken:
        return
    _early_taken = True
    raise EarlyInterrupt(signum)


def take_early_interrupts() -> dict[int, SignalHandler]:
    """From the command's start to ``Run.start``: an interrupt signal raises
    ``EarlyInterrupt`` (SIGTERM and SIGHUP included, which would otherwise
    kill the process without a word). A SIGHUP the process was started
    ignoring (``nohup``) stays ignored, so that ``Run.start`` sees it so.
    Signals that arrive together (pending at one check) are taken lowest
    number first: the process cannot tell which came first. Returns the
    handlers it replaced (none off the main thread), for a caller that goes
    on after the run (the demo): ``run_command(restore_to=...)``, then
    ``restore_handlers``."""
    import threading

    from confirmatory.engine.signals import INTERRUPT_SIGNALS, _inherited_ignore

    global _early_taken
    replaced: dict[int, SignalHandler] = {}
    if threading.current_thread() is threading.main_thread():
        _early_taken = False
        for s in INTERRUPT_SIGNALS:
            if not _inherited_ignore(s):
                replaced[s] = signal.signal(s, _raise_early)
    return replaced


def restore_handlers(handlers: dict[int, SignalHandler]) -> None:
    """Put back the handlers ``take_early_interrupts`` replaced."""

    for s, handler in handlers.items():
        signal.signal(s, handler)


def early_interrupt_status(exc: EarlyInterrupt, run_dir: Path) -> int:

    name = signal.Signals(exc.signum).name
    print(
        f"interrupted before the run started ({name}): {run_dir} was not created and nothing was spent", file=sys.stderr
    )
    return 128 + exc.signum


class Refused(Exception):
    """The run will not start; ``problems`` says why, one line each."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        super().__init__("\n".join(problems))


from confirmatory.engine.preflight import (  # noqa: E402 - the preflight, below the command line
    registry_path,
)
from confirmatory.engine.preflight import run_dir_problems as run_dir_problems  # noqa: E402 - demo's


def preflight(design: Path, run_dir: Path, *, workers: int | None) -> LoadedDesign:
    """Load and check everything; raise ``Refused`` naming every problem."""
    from confirmatory.design.load import load_design
    from confirmatory.design.model import DesignError
    from confirmatory.engine.preflight import preflight as problems_of

    try:
        loaded = load_design(design, workers=workers)
    except DesignError as exc:
        raise Refused([f"{design}: {p}" for p in exc.problems] + run_dir_problems(run_dir)) from None
    problems = problems_of(loaded, run_dir, design_path=design)
    if problems:
        raise Refused(problems)
    return loaded


def run_command(
    design: Path,
    run_dir: Path,
    *,
    workers: int | None = None,
    quiet: bool = False,
    exiting: bool = False,
    restore_to: dict[int, SignalHandler] | None = None,
    display: DisplayFactory | None = None,
    show_summary: SummaryShower | None = None,
    sim_invoice: Path | None = None,
) -> int:
    """``sim_invoice``: where to write the simulated provider's invoice
    (``GET /_sim/invoice``'s JSON) once the run ends, when the design has
    models on it (the demo: ``<RUN_DIR>.sim-invoice.json``).

    ``display``: how the run is shown while it runs (the command line
    passes its progress display; None: nothing shown but the lines on stderr).
    ``show_summary``: how the end summary (an ``EndSummary``: the exit
    status and its lines) is shown; None: its lines on stderr
    (``print_summary``). The command line passes its own.

    ``exiting``: the caller ends the process with the status returned (the
    CLI). The run's signal handlers then stay in place after it closes (a
    signal while the lock is released is noted like any after the first),
    and on return the interrupt signals are ignored: the interpreter's own
    end (threads joined, modules torn down: seconds with litellm loaded)
    puts back the default handlers, so a signal then would kill the process
    (rc 143, 129) or raise KeyboardInterrupt, instead of the run's status.
    SIGKILL still ends it. Otherwise (a caller in-process) the handlers are
    restored when the run closes.

    With ``exiting``, a signal before the Run takes the signals over (while
    the design is checked, the witness probed, the run set up: seconds) ends
    the command at once with 128 + its number and one line saying that no
    run directory was made; before, SIGINT gave click's "Aborted!" and exit
    1, and SIGTERM or SIGHUP killed the process without a word.

    ``restore_to``: an in-process caller that took the early interrupts
    itself (``take_early_interrupts``, the demo) gives the handlers that
    replaced; the Run puts those back as it closes, not the early handler
    it found (a signal after the run must not be named one before it), and
    an ``EarlyInterrupt`` reaches that caller."""
    design, run_dir = Path(design), Path(run_dir)
    if exiting:
        take_early_interrupts()
        try:
            return _preflight_and_execute(
                design,
                run_dir,
                workers=workers,
                quiet=quiet,
                exiting=exiting,
                display=display,
                show_summary=show_summary,
                sim_invoice=sim_invoice,
            )
        except EarlyInterrupt as exc:
            return early_interrupt_status(exc, run_dir)
        finally:
            from confirmatory.engine.signals import ignore_interrupts

            ignore_interrupts()
    return _preflight_and_execute(
        design,
        run_dir,
        workers=workers,
        quiet=quiet,
        exiting=exiting,
        restore_to=restore_to,
        display=display,
        show_summary=show_summary,
        sim_invoice=sim_invoice,
    )


def _preflight_and_execute(
    design: Path,
    run_dir: Path,
    *,
    workers: int | None,
    quiet: bool,
    exiting: bool,
    restore_to: dict[int, SignalHandler] | None = None,
    display: DisplayFactory | None = None,
    show_summary: SummaryShower | None = None,
    sim_invoice: Path | None = None,
) -> int:
    from filelock import FileLock, Timeout

    from confirmatory.records import lock as runlock

    _say(f"starting: checking {design} and its models (litellm loads in a few seconds)")
    try:
        loaded = preflight(design, run_dir, workers=workers)
    except Refused as exc:
        print("refused to start:", file=sys.stderr)
        for p in exc.problems:
            print(f"  {p}", file=sys.stderr)
        return EXIT_REFUSED
    try:
        run_dir.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        print(f"refused to start:\n  {run_dir}: cannot be created: {exc}", file=sys.stderr)
        return EXIT_REFUSED
    lock = FileLock(str(runlock.lock_path(run_dir)))
    try:
        lock.acquire(timeout=0)
    except Timeout:
        print(f"refused to start: another runner holds {run_dir}", file=sys.stderr)
        return EXIT_REFUSED
    try:
        if run_dir.exists():
            print(f"refused to start: {run_dir} appeared meanwhile", file=sys.stderr)
            return EXIT_REFUSED
        return _execute(
            loaded,
            design,
            run_dir,
            quiet=quiet,
            exiting=exiting,
            restore_to=restore_to,
            display=display,
            show_summary=show_summary,
            sim_invoice=sim_invoice,
        )
    finally:
        lock.release()  # the file stays: removing a lock file breaks the lock (runlock.held)


def _execute(
    loaded: Any,
    design: Path,
    run_dir: Path,
    *,
    quiet: bool,
    exiting: bool = False,
    restore_to: dict[int, SignalHandler] | None = None,
    continuation: dict[str, Any] | None = None,
    display: DisplayFactory | None = None,
    show_summary: SummaryShower | None = None,
    sim_invoice: Path | None = None,
) -> int:
    from confirmatory.engine import llm
    from confirmatory.engine.config import build_config
    from confirmatory.engine.run import Run

    # Before any lane thread, and before the config records the prices:
    # litellm's globals, every price the design or the simulator gives.
    llm.prepare(loaded.design.models)
    # (a continuation keeps the config.json its run wrote)
    config = None if continuation else build_config(loaded, argv=list(sys.argv), registry_path=registry_path(design))
    sim = None
    api_bases: dict[str, str] = {}
    simulated = [m for m in loaded.design.models if m.api_base == "simulator"]
    if simulated:
        from confirmatory.sim.faults import FaultPlan
        from confirmatory.sim.server import SimProvider

        sim = SimProvider(FaultPlan.from_table(loaded.design.simulator)).start()
        api_bases = {m.name: sim.url for m in simulated}
    run = Run(
        loaded,
        run_dir,
        config=config,
        api_bases=api_bases,
        restore_signals=not exiting,
        restore_to=restore_to,
        continuation=continuation,
    )
    # Events (a pause, a stop, a failed push) are shown even with --quiet:
    # an unattended run's log must say what needs a person.
    progress = (display or _NoDisplay)(run, not quiet)
    try:
        # Before the run starts: the pools and the first anchor take seconds,
        # and the display says so from the first moment.
        progress.start()
        run.start()
        if not progress.live:
            _say(f"run {'continued' if continuation else 'started'}: {run_dir}")
        result = run.wait()
    finally:
        progress.stop()
        run.close()
        if sim is not None:
            sim.stop()
            if sim_invoice is not None:
                _write_invoice(sim_invoice, sim.invoice())
    code = report(result, show_summary)
    if result.abandoned_lanes:
        # Their threads are stuck in calls that never returned; they are not
        # daemons (they wrote records), so the interpreter would wait for
        # them forever. Everything is written and anchored: leave now.
        _say(f"  {result.abandoned_lanes} lane(s) stuck in an abandoned call; exiting without them")
        for stream in (sys.stderr, sys.stdout):
            try:
                stream.flush()
            except OSError:
                pass
        os._exit(code)
    return code


def _write_invoice(path: Path, invoice: dict[str, Any]) -> None:
    """The simulator's invoice as ``GET /_sim/invoice`` serves it; a failure said, never the run's."""
    import json  # noqa: PLC0415

    try:
        path.write_text(json.dumps(invoice, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    except OSError as exc:
        _say(f"  the simulator's invoice could not be written to {path}: {exc}")


class _NoDisplay:
    """No display: the lines on stderr only (an embedding that shows its own)."""

    live = False

    def __init__(self, run: Run, table: bool) -> None:
        pass

    def start(self) -> None:
        pass

    def stop(self) -> None:
        pass


def _say(text: str) -> None:
    """A line on stderr, broken to a terminal's width there as the live
    display's lines are (core.text.fit); a terminal that hung up (EIO,
    EPIPE) must not end a run."""
    try:
        if sys.stderr.isatty():
            from confirmatory.core.text import fit  # noqa: PLC0415

            text = "\n".join(fit([text], os.get_terminal_size(sys.stderr.fileno()).columns - 1))
        print(text, file=sys.stderr)
    except OSError:
        pass


def result_lines(run_dir: Path) -> list[str]:
    """A line per model: its arm results by the class that stands (the last
    attempt of each household and arm), read back from its run.jsonl; a
    model none of whose results is an observation is said so loudly (a
    provider unreachable for the whole run still "completes": each failure
    was rerun, then kept, as the rules say).

    Only households whose household line is on disk count (verify's ended
    households): a household's attempt lines come first, so a log that
    could no longer be written (a full disk, a file-size limit) may hold
    some of them without the household line, and those are said apart, not
    counted as results. The log is read up to its first unreadable line (a
    torn tail), which is said too."""
    import json
    from collections import Counter

    from confirmatory.core.rules import OBSERVED_CLASSES
    from confirmatory.records.reader import iter_lines

    try:
        models = json.loads((run_dir / "manifest.json").read_text()).get("models") or []
    except (OSError, ValueError):
        return []
    lines = []
    for model in models:
        last: dict[tuple[Any, Any], Any] = {}
        ended: set[Any] = set()
        attempt_lines: Counter[str] = Counter()  # per household
        broken = ""
        try:
            for line in iter_lines(run_dir / "models" / str(model) / "run.jsonl"):
                obj = line.obj
                if obj.get("event") == "attempt":
                    last[(obj.get("household"), obj.get("arm"))] = obj.get("class")
                    attempt_lines[str(obj.get("household"))] += 1
                elif obj.get("event") == "household":
                    ended.add(obj.get("household"))
        except Exception as exc:  # noqa: BLE001 - a damaged log: verify reports it; count what was read
            at = getattr(exc, "offset", None)
            broken = (
                f"; its run.jsonl was read up to byte {at}, where it breaks ({type(exc).__name__})"
                if at is not None
                else f"; its run.jsonl could not be read to its end ({type(exc).__name__})"
            )
        unended = sorted({str(hh) for hh, _ in last if hh not in ended})
        unended_lines = sum(attempt_lines[hh] for hh in unended)
        last = {key: cls for key, cls in last.items() if key[0] in ended}
        note = broken
        if unended:
            note = (
                f"; {unended_lines} attempt line(s) of {len(unended)} household(s) whose household line "
                f"is not on disk, not counted ({', '.join(unended[:3])}{', ...' if len(unended) > 3 else ''})" + note
            )
        if not last:
            if note:
                lines.append(f"  {model}: no arm results on disk{note}")
            continue
        counts = Counter(str(cls) for cls in last.values())
        tally = ", ".join(f"{c} {n}" for c, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))
        if not any(counts.get(c) for c in OBSERVED_CLASSES):
            lines.append(
                f"  {model}: NO OBSERVATION: none of its {len(last)} arm results is ok or the model's "
                f"own ({tally}); see models/{model}/run.jsonl{note}"
            )
        else:
            lines.append(f"  {model}: {len(last)} arm results: {tally}{note}")
    return lines


@dataclass(frozen=True)
class EndSummary:
    """How a run ended, as ``run``, ``continue`` and ``demo`` say it: the
    exit status and the lines of the end summary (shown on stderr)."""

    status: int
    lines: tuple[str, ...]


SummaryShower = Callable[[EndSummary], None]


def print_summary(summary: EndSummary) -> None:
    """The end summary's lines on stderr (what an in-process caller gets
    when it names no shower of its own)."""
    for line in summary.lines:
        _say(line)


def report(result: Any, show: SummaryShower | None = None) -> int:
    """Show the run's end summary (``show``; default ``print_summary``); its exit status."""
    summary = end_summary(result)
    (show or print_summary)(summary)
    return summary.status


def end_summary(result: Any) -> EndSummary:
    """The end summary of a ``RunResult``: the lines and the exit status; nothing printed."""
    from confirmatory.core.money import format_usd

    lines: list[str] = []
    say = lines.append

    # Whatever the ending, the reviewer needs the witness to hold the final anchor.
    if getattr(result, "disk_failed", None):
        # a run file could not be written: the run ended as a crash does
        say(f"run stopped: {result.run_dir}")
        say(
            f"  stopped, cause runner-error: THE RUN'S FILES COULD NOT BE WRITTEN: "
            f"{result.stop_detail or result.disk_failed}"
        )
        say(
            "  nothing after the last line acknowledged was written: no close line, no final anchor; "
            "confirmatory verify says the run crashed and what the crash explains"
        )
        say(f"  spend {format_usd(result.spend_total_nusd)}")
        lines.extend(result_lines(Path(result.run_dir)))
        say(
            "  once the disk is fixed, carry the run on with: confirmatory continue "
            f"{shlex.quote(str(result.run_dir))} --reason TEXT"
        )
        return EndSummary(EXIT_STOPPED, tuple(lines))
    unwitnessed = result.final_push_rc not in (None, 0)
    retry = f"confirmatory push-anchor {shlex.quote(str(result.run_dir))}"
    if result.status == "completed" and unwitnessed and not result.write_failures:
        # exit status 6: the headline says so, not a bare "completed"
        say(f"run completed, but the witness does not hold the final anchor yet: {result.run_dir}; retry with: {retry}")
    else:
        say(f"run {result.status}: {result.run_dir}")
    say(f"  spend {format_usd(result.spend_total_nusd)}")
    lines.extend(result_lines(Path(result.run_dir)))
    if not result.final_anchor_written:
        say("  the final anchor could not be written: the records are not anchored at their end (verify reports it)")
    elif unwitnessed:
        # what anchor-pushes.jsonl records: the final push's rc, or that it never ran and why
        why = result.final_push_problem or f"push rc {result.final_push_rc}"
        say(f"  the witness does not hold the final anchor yet: {why}; retry with: {retry}")
    if result.write_failures:
        say(
            f"  NOT EVERY LINE OF THE RUN'S END COULD BE WRITTEN ({len(result.write_failures)}): "
            f"{result.write_failures[0]}"
        )
        say(
            "  everything acknowledged before that is on disk; confirmatory verify "
            f"{shlex.quote(str(result.run_dir))} says what is missing"
        )
    if result.status == "ceiling":
        say("  the spend ceiling was crossed: every lane stopped")
        return EndSummary(EXIT_CEILING, tuple(lines))
    # (a run whose final anchor failed after its close line said "completed" stops too)
    if result.status == "stopped" or result.write_failures:
        detail = f": {result.stop_detail}" if result.stop_detail else ""
        say(f"  stopped, cause {result.stop_cause or 'runner-error'}{detail} (see run.jsonl and models/*/run.jsonl)")
        return EndSummary(EXIT_STOPPED, tuple(lines))
    return EndSummary(EXIT_WITNESS if unwitnessed else EXIT_OK, tuple(lines))
