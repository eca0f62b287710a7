"""``confirmatory report RUN_DIR [--out FILE]``: write the reviewer's page of a run.

Owns what the command adds to `confirmatory.report.write_report`: the
refusals on bad input (a directory that is not a run, an output inside the
run directory, an output that cannot be written: one line on stderr each),
the line saying where the page is and how long it took, and the exit
status: 0 when the page is written, whatever the run's verdict (the
verdict is on the page).
"""

from __future__ import annotations

import sys
from pathlib import Path

from confirmatory.core.exits import EXIT_FAILED, EXIT_OK, EXIT_USAGE

RUN_FILES = ("manifest.json", "run.jsonl", "anchors.jsonl")


def report_command(
    run_dir: Path,
    out: Path | None = None,
    *,
    witness: Path | None = None,
    households: Path | None = None,
    quiet: bool = False,
) -> int:
    from confirmatory.report.page import default_out, inside, write_report  # noqa: PLC0415

    run_dir = Path(run_dir)
    if not run_dir.is_dir() or not any((run_dir / rel).exists() for rel in RUN_FILES):
        print(
            f"report: {run_dir} is not a run directory (it has no manifest.json, run.jsonl or anchors.jsonl)",
            file=sys.stderr,
        )
        return EXIT_FAILED
    target = Path(out) if out is not None else default_out(run_dir)
    if inside(target, run_dir):
        print(
            f"report: --out {target} is inside the run directory {run_dir}: the run directory stays exactly "
            "what the runner wrote; write the page beside it",
            file=sys.stderr,
        )
        return EXIT_USAGE
    if target.is_dir():
        print(f"report: --out {target} is a directory; name the page's file", file=sys.stderr)
        return EXIT_USAGE
    if not target.parent.is_dir():
        print(f"report: --out {target}: its folder {target.parent} does not exist", file=sys.stderr)
        return EXIT_FAILED
    if not quiet:  # verify runs first: seconds on a large run
        print(f"report: verifying {run_dir}, then drawing its page", file=sys.stderr)
    try:
        written, times = write_report(run_dir, target, witness=witness, households=households)
    except OSError as exc:
        print(f"report: {target}: cannot be written: {exc.strerror or exc}", file=sys.stderr)
        return EXIT_FAILED
    if not quiet:
        took = times["verify_s"] + times["read_s"] + times["render_s"]
        print(
            f"report: {written} ({times['bytes'] / 1e6:.2f} MB, built in {took:.1f} s; open it in a browser, "
            "it fetches nothing)"
        )
    return EXIT_OK
