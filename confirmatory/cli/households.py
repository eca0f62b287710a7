"""The households of a continued run, each counted once, for the progress display (``cli.progress``)."""

from __future__ import annotations

import json
from typing import Any


class Households:
    """A continued run's households decided and ended, each counted once
    (as verify and ``show`` count them: households, not their lines; a
    household the crash cut short has a line of each kind before it runs
    again). Read from the model's logs as they grow, each line once."""

    def __init__(self, root: Any) -> None:
        self.root = root
        self.decided: set[str] = set()
        self.ended: set[str] = set()
        self._at = {"admission.jsonl": 0, "run.jsonl": 0}

    def read(self) -> tuple[int, int]:
        for name, event, into in (
            ("admission.jsonl", b'"event":"decision"', self.decided),
            ("run.jsonl", b'"event":"household"', self.ended),
        ):
            try:
                with open(self.root / name, "rb") as f:
                    f.seek(self._at[name])
                    data = f.read()
            except OSError:
                continue
            whole = data[: data.rfind(b"\n") + 1]  # a line being written is read next time
            self._at[name] += len(whole)
            for line in whole.splitlines():
                if event in line:
                    try:
                        into.add(str(json.loads(line).get("household")))
                    except (ValueError, AttributeError):
                        continue
        return len(self.decided), len(self.ended)
