"""``confirmatory run``, ``continue`` and ``demo`` with the progress display:
the run's work is the library's (``confirmatory.run_command``,
``continue_command``, ``demo_command``); the command line shows it: the
progress display while it runs, the end summary (an ``EndSummary``) after."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

from confirmatory.cli.progress import Progress

if TYPE_CHECKING:
    from confirmatory import Display, EndSummary, SignalHandler


def display(run: object, table: bool) -> Display:
    """The run's progress display: a table unless ``--quiet`` (events always)."""
    return Progress(run, table=table)


def show_summary(summary: EndSummary) -> None:
    """The run's end summary, a line at a time on stderr; a terminal that
    hung up (EIO, EPIPE) must not change the exit status."""
    for line in summary.lines:
        try:
            print(line, file=sys.stderr)
        except OSError:
            pass


def run_command(
    design: Path,
    run_dir: Path,
    *,
    workers: int | None = None,
    quiet: bool = False,
    exiting: bool = False,
    restore_to: dict[int, SignalHandler] | None = None,
) -> int:
    """``confirmatory run DESIGN --out RUN_DIR``, shown with the progress display."""
    import confirmatory

    return confirmatory.run_command(
        design,
        run_dir,
        workers=workers,
        quiet=quiet,
        exiting=exiting,
        restore_to=restore_to,
        display=display,
        show_summary=show_summary,
    )


def continue_command(
    run_dir: Path, *, reason: str, design: Path | None = None, workers: int | None = None, quiet: bool = False
) -> int:
    """``confirmatory continue RUN_DIR --reason TEXT``, shown with the progress display."""
    import confirmatory

    return confirmatory.continue_command(
        run_dir, reason=reason, design=design, workers=workers, quiet=quiet, display=display, show_summary=show_summary
    )


def demo_command(run_dir: Path | None = None, design: Path | None = None, *, exiting: bool = False) -> int:
    """``confirmatory demo``, its run shown with the progress display."""
    import confirmatory

    return confirmatory.demo_command(
        run_dir=run_dir, design=design, exiting=exiting, display=display, show_summary=show_summary
    )
