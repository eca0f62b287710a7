"""`confirmatory report`: one self-contained HTML page of a run, for its reviewer.

The page (`page`) shows verify's verdict, computed by verify's own code when
it is built, and the records read as written (`data`): each model's lanes
over time, spend against the caps and the ceiling, admission, arm results
by class (verify's tallies), host evidence, anchors and pushes, and what
config.json says was and was not pinned down (`sections`, `evidence`). Its
pictures are SVG made in Python (`charts`); nothing on it is fetched.
docs/REPORT.md says what each part shows.
"""

from __future__ import annotations

from confirmatory.report.page import build_page, default_out, write_report

__all__ = ["build_page", "write_report", "default_out"]
