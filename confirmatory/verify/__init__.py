"""`confirmatory verify`: re-check a run directory against every invariant of RECORDS.md.

The entry points are `verify_run` (the checks, a `Report`) and
`verify_command` (the command: the report printed, the exit code). Invariant
by invariant the work lives in `verification` (the order of the checks),
`workers` (the forked workers), `hostlog` (host.jsonl's lines, 2), `clocks`
(the clocks' slacks and drift), `logs` (8), `model` with `procedure`,
`attempts` and `classes` (1, 2, 3, 5, 6, 7 per household), `timeline` (4, 9,
10, the decision halves of 3 and 6), `money` (7 and the ceiling's 6, run-wide),
`study` (11), `draws` (the one draw of 3, the households file of 11);
`outcome` and `report` say what was found.

Independent of the runner by construction: it imports only pure modules
(`core`), the readers of `records`, `design` and the witness's read side
(`anchors.check`); never the Run, its lanes or writers, litellm or psutil. It
reads each log as a stream; what it keeps grows with households, not with lines.
"""

from __future__ import annotations

from confirmatory.verify.command import verify_command
from confirmatory.verify.report import INVARIANTS, Report, Status, Violation
from confirmatory.verify.verification import verify_run

__all__ = ["verify_run", "verify_command", "Report", "Status", "Violation", "INVARIANTS"]
