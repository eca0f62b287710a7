"""The interrupt signals of a run: which they are (``INTERRUPT_SIGNALS``),
whether the process was started ignoring one (``_inherited_ignore``: a
SIGHUP under ``nohup`` stays ignored), and ignoring them all for a process
about to exit after its run closed (``ignore_interrupts``).

The Run notes them with its own handler from ``Run.start`` on; before that
the CLI takes them with its early handler (``cli.run.take_early_interrupts``).
"""

from __future__ import annotations

import signal
import threading

# Signals that stop a run as an interrupt (SIGHUP where the platform has it).
INTERRUPT_SIGNALS = tuple(getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, name))


def ignore_interrupts() -> None:
    """For a process about to exit after its run closed: the interrupt
    signals are ignored from here to its end (SIG_IGN survives the
    interpreter's finalization, which resets Python-level handlers to the
    default; a signal then would end the process by it, not by the run's
    exit status). SIGKILL still ends it.

    The signals are blocked in this thread while the handlers change: a
    signal caught by the old handler but not yet handled when SIG_IGN is in
    place makes CPython print "Signal N ignored due to race condition".
    ``signal.signal`` handles what is pending before it changes a handler,
    and a blocked signal stays in the kernel, where SIG_IGN discards it."""
    if threading.current_thread() is threading.main_thread():
        mask = getattr(signal, "pthread_sigmask", None)  # POSIX only
        blocked = mask(signal.SIG_BLOCK, INTERRUPT_SIGNALS) if mask else None
        try:
            for s in INTERRUPT_SIGNALS:
                signal.signal(s, signal.SIG_IGN)
        finally:
            if mask:
                mask(signal.SIG_SETMASK, blocked)


def _inherited_ignore(signum: int) -> bool:
    """Whether ``signum`` is SIGHUP and the process was started ignoring it
    (``nohup``): the runner then leaves it ignored. SIGINT and SIGTERM are
    always taken: a background job of a script ignores SIGINT without asking,
    and SIGTERM is how a service manager or a person stops the run."""
    return signum == getattr(signal, "SIGHUP", None) and signal.getsignal(signum) is signal.SIG_IGN
