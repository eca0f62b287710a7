"""Progress a person can follow on a long run: one line per model, every few seconds.

Reads the Run's counters without taking its locks (a display may be a moment
stale; it never slows a lane). Writes to stderr so stdout stays clean.
"""

from __future__ import annotations

import sys
import threading
import time
from typing import Any, TextIO

from confirmatory.money import format_usd


class Progress:
    def __init__(self, run: Any, *, interval_s: float = 2.0, stream: TextIO | None = None) -> None:
        self.run = run
        self.interval_s = interval_s
        self.stream = stream or sys.stderr
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="progress", daemon=True)
        self._t0 = time.monotonic()

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=2)
        self.render()

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.render()

    def lines(self) -> list[str]:
        run = self.run
        out = []
        elapsed = time.monotonic() - self._t0
        for m in run.models.values():
            n = len(m.draw)
            if m.stopped:
                state = f"stopped ({m.stop_cause})"
            elif m.paused:
                state = (f"PAUSED, {m.waiting_resume} lane(s) waiting: "
                         f"confirmatory resume {run.run_dir} --model {m.name}")
            else:
                state = ""
            out.append(
                f"  {m.name:<16} households {m.decided:>3}/{n} decided, {m.households_done:>3} ended | "
                f"attempts {m.attempts:>4}, reruns {m.reruns:>3} | "
                f"{format_usd(run.spend.model_total(m.name))} of cap {format_usd(m.cap_nusd)} {state}"
            )
        waiting = " | waiting for host evidence" if getattr(run.host, "waiting", False) else ""
        head = (f"[{elapsed:7.1f}s] run spend {format_usd(run.spend.total_nusd)} of ceiling "
                f"{format_usd(run.spend.ceiling_nusd)}{waiting}")
        if run.spend.crossed.is_set():
            head += " | CEILING CROSSED"
        if run.stopped:
            head += f" | STOPPED ({run.stop_cause})"
        return [head] + out

    def render(self) -> None:
        try:
            self.stream.write("\n".join(self.lines()) + "\n")
            self.stream.flush()
        except Exception:  # noqa: BLE001 - a broken terminal must not stop a run
            pass
