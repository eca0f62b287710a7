"""The live display under a real pseudo-terminal (tmux), read off the screen
and compared with the records on disk; and a pipe that gets no control code.

Real demo runs (`confirmatory demo`: the reference study, then the
operator-pause design), each in a tmux pane of 150 x 40 on a tmux server of
this test's own (its own socket, killed at the end). Needs tmux (.ci/run
installs it).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from confirmatory.core.money import format_usd

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "confirmatory_run.py"
PAUSE = ROOT / "confirmatory" / "demo" / "operator-pause.toml"
COLS, ROWS = 150, 40
ROW = re.compile(
    r"^  (\w+)  households (\d+)/(\d+) decided, (\d+) ended \[[#.]+\] \d+%  attempts (\d+)  reruns (\d+)"
    r"(?: \(([^)]*)\))?  \$(\d+\.\d{6}) of cap"
)

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("tmux") is None, reason="needs tmux (apt-get install tmux; .ci/run installs it)"),
]


class Pane:
    """One tmux session on a server of its own, running ``command``; every byte it writes kept in ``raw``."""

    def __init__(self, tmp: Path, command: str, cols: int = COLS) -> None:
        self.sock = f"confirmatory-test-{uuid.uuid4().hex[:8]}"
        self.raw = tmp / "pane.raw"
        env = f"PYTHONPATH={ROOT} "
        self._tmux(
            "new-session",
            "-d",
            "-s",
            "t",
            "-x",
            str(cols),
            "-y",
            str(ROWS),
            f"cd {tmp} && {env}{sys.executable} {SCRIPT} {command}; echo EXITED $?; sleep 600",
        )
        self._tmux("pipe-pane", "-o", "-t", "t", f"cat >> {self.raw}")
        self.t0 = time.monotonic()

    def _tmux(self, *args: str) -> str:
        return subprocess.run(
            ["tmux", "-L", self.sock, *args], capture_output=True, text=True, check=True, timeout=30
        ).stdout

    def screen(self) -> list[str]:
        return self._tmux("capture-pane", "-p", "-t", "t").splitlines()

    def history(self) -> int:
        return int(self._tmux("display", "-p", "-t", "t", "#{history_size}").strip())

    def wait_for(self, test, timeout: float = 120.0) -> list[str]:
        deadline = time.monotonic() + timeout
        while True:
            lines = self.screen()
            if test(lines):
                return lines
            assert time.monotonic() < deadline, "\n".join(lines)
            time.sleep(0.05)

    def close(self) -> None:
        subprocess.run(["tmux", "-L", self.sock, "kill-server"], capture_output=True, timeout=30)


def rows(screen: list[str]) -> dict[str, dict]:
    out = {}
    for line in screen:
        m = ROW.match(line)
        if m:
            by = dict((c, int(n)) for c, n in (part.rsplit(" ", 1) for part in m[7].split(", "))) if m[7] else {}
            out[m[1]] = {
                "decided": int(m[2]),
                "draw": int(m[3]),
                "ended": int(m[4]),
                "attempts": int(m[5]),
                "reruns": int(m[6]),
                "by_class": by,
                "spend": round(float(m[8]) * 1e9),
            }
    return out


def records(run_dir: Path, model: str) -> dict:
    """What the model's run.jsonl says: households ended, attempts, reruns by
    the class of the arm's attempt before, spend, pauses."""
    lines = [
        json.loads(ln) for ln in (run_dir / "models" / model / "run.jsonl").read_text().splitlines() if ln.endswith("}")
    ]
    attempts = [o for o in lines if o.get("event") == "attempt"]
    by: dict[str, int] = {}
    last: dict[tuple, str] = {}
    for a in sorted(attempts, key=lambda a: (a["pass"], a["start"])):
        key = (a["household"], a["arm"])
        if a["pass"] > 0:
            by[last[key]] = by.get(last[key], 0) + 1
        last[key] = a["class"]
    return {
        "ended": sum(o.get("event") == "household" for o in lines),
        "attempts": len(attempts),
        "reruns": sum(a["pass"] > 0 for a in attempts),
        "by_class": by,
        "spend": sum(a["cost_nusd"] for a in attempts),
        "pauses": [o for o in lines if o.get("event") == "pause"],
    }


def fits(screen: list[str]) -> None:
    """No line reaches the last column: the terminal never wrapped one (mid-word or not)."""
    assert all(len(line) < COLS for line in screen), [line for line in screen if len(line) >= COLS]


def test_the_reference_demo_is_redrawn_in_place_and_its_last_screen_is_what_the_records_say(tmp_path):
    pane = Pane(tmp_path, f"demo --out {tmp_path / 'run'}")
    try:
        # the first second: something on the screen says what is going on
        first = pane.wait_for(lambda s: any("starting:" in line for line in s), timeout=5)
        assert time.monotonic() - pane.t0 < 1.5, first
        # mid-run, a rerun on the screen
        mid = pane.wait_for(lambda s: any(r["reruns"] and not r["ended"] == r["draw"] for r in rows(s).values()))
        fits(mid)
        assert pane.history() == 0  # nothing scrolled: the region is redrawn in place
        seen = rows(mid)
        for name, row in seen.items():
            on_disk = records(tmp_path / "run", name)
            # counted once their lines are on disk: never ahead of the records read just after
            assert row["ended"] <= on_disk["ended"], (name, row, on_disk)
            assert sum(row["by_class"].values()) == row["reruns"], row
        end = pane.wait_for(lambda s: any(line.startswith("EXITED") for line in s))
        assert "EXITED 0" in "\n".join(end)
        final = rows(pane._tmux("capture-pane", "-p", "-S", "-", "-t", "t").splitlines())
        assert set(final) == {"careful", "gemini", "sloppy", "truncates"}, final
        for name, row in final.items():
            on_disk = records(tmp_path / "run", name)
            # the screen's dollars are the records' nano-dollars at the micro-dollar (format_usd)
            on_disk["spend"] = int(format_usd(on_disk["spend"]).lstrip("$").replace(".", "")) * 1000
            assert {k: row[k] for k in ("ended", "attempts", "reruns", "by_class", "spend")} == {
                k: on_disk[k] for k in ("ended", "attempts", "reruns", "by_class", "spend")
            }, (name, row, on_disk)
            assert row["decided"] == row["draw"] == 12
        raw = pane.raw.read_bytes()
        # what was drawn before the first household: the start, in words
        assert b"starting: pools, first anchor" in raw
        assert re.search(rb"\r\x1b\[\d+A", raw), "the region is redrawn by moving the cursor up"
    finally:
        pane.close()


def test_a_pause_is_on_the_screen_as_the_records_say_and_stays_in_view_until_resumed(tmp_path):
    run_dir = tmp_path / "run"
    pane = Pane(tmp_path, f"demo --design {PAUSE} --out {run_dir}")
    try:
        screen = pane.wait_for(lambda s: any("PAUSED since" in line for line in s))
        # the other models run on; the screen stays the same size while they do
        heights = set()
        for _ in range(10):
            s = pane.screen()
            fits(s)
            heights.add(sum(1 for line in s if line.strip()))
            time.sleep(0.3)
        assert pane.history() == 0 and max(heights) <= 15, heights
        screen = pane.screen()
        pauses = records(run_dir, "careful")["pauses"]
        assert len(pauses) == 1, pauses
        since = time.strftime("%H:%M:%S UTC", time.gmtime(pauses[0]["t"]))
        (row,) = [line for line in region(screen, COLS) or [] if line.startswith("  careful  households")]
        assert f"PAUSED since {since}" in row, (row, pauses)
        # the event that needs a person: kept in view, whole words, the command to resume
        text = " ".join(line.strip() for line in screen[screen.index("needs a person (latest last):") + 1 :])
        assert "careful: PAUSED for an operator:" in text and f"confirmatory resume {run_dir} --model careful" in text
        assert "AuthenticationError" in text
        subprocess.run(
            [sys.executable, str(SCRIPT), "resume", str(run_dir), "--model", "careful"],
            check=True,
            capture_output=True,
            timeout=60,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
        )
        end = pane.wait_for(lambda s: any(line.startswith("EXITED") for line in s))
        assert "EXITED 0" in "\n".join(end), "\n".join(end)
        final = rows(pane._tmux("capture-pane", "-p", "-S", "-", "-t", "t").splitlines())
        on_disk = records(run_dir, "careful")
        assert final["careful"]["ended"] == on_disk["ended"] == 12
        assert final["careful"]["by_class"] == on_disk["by_class"] and "operator" in on_disk["by_class"]
    finally:
        pane.close()


def test_a_resized_terminal_gets_the_region_redrawn_to_its_new_width(tmp_path):
    pane = Pane(tmp_path, f"demo --design {PAUSE} --out {tmp_path / 'run'}")
    try:
        pane.wait_for(lambda s: any("PAUSED since" in line for line in s))
        pane._tmux("resize-window", "-t", "t", "-x", "70", "-y", "30")
        time.sleep(1.5)
        narrow = pane.screen()
        assert all(len(line) < 70 for line in narrow), narrow
        assert sum("households" in line and "decided" in line for line in narrow) == 3, narrow
        words = " ".join(narrow).split()
        assert "--model" in words and "careful" in words  # the resume command, its words whole
    finally:
        pane.close()


def test_a_pipe_gets_plain_lines_and_no_control_code(tmp_path):
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "demo", "--out", str(tmp_path / "run")],
        cwd=tmp_path,
        capture_output=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert b"\x1b" not in done.stderr and b"\x1b" not in done.stdout
    err = done.stderr.decode()
    assert "starting: pools, first anchor" in err and "run started: 4 model(s), 8 lane(s)" in err
    # one line per change of state: each model done once, no table repeated every few seconds
    for name in ("careful", "gemini", "sloppy", "truncates"):
        assert len(re.findall(rf"\] {name}: done$", err, re.M)) == 1, err
    assert len([line for line in err.splitlines() if "households" in line and "decided" in line]) == 4, err


# -- at 80 columns ---------------------------------------------------------------------
NARROW = 80
HEAD = re.compile(r"^confirmatory run  \d+:\d\d:\d\d  (~\d+:\d\d:\d\d left at this pace|time left: [^/]+)  /")
TOTAL = re.compile(r"^households (\d+)/(\d+) ended \[[#.]+\] \d+%  spend \$\d+\.\d{6} of ceiling \$\d+\.\d{6}")


REGION_STARTS = ("confirmatory run  ", "households ", "  ", "needs a person", "waiting for the witness push")


def region(screen: list[str], width: int = 80) -> list[str] | None:
    """The live region's logical lines (continuations joined back on the two
    spaces a phrase break leaves), or None when none is on the screen."""
    starts = [k for k, line in enumerate(screen) if line.startswith("confirmatory run  ")]
    if not starts:
        return None
    out: list[str] = []
    for line in screen[starts[-1] :]:
        if not line.strip() or not line.startswith(REGION_STARTS):
            break  # what the command prints after the region (its end summary)
        assert len(line) < width, line  # the terminal never wrapped a line of the region
        indent = len(line) - len(line.lstrip(" "))
        if out and indent >= len(out[-1]) - len(out[-1].lstrip(" ")) + 4:
            out[-1] += "  " + line.strip()
        else:
            out.append(line)
    return out


def frames_until_exit(pane: Pane) -> list[list[str]]:
    frames = []
    while True:
        screen = pane.screen()  # (the lines the commands print around the region are not the display's)
        if any(line.startswith("EXITED") for line in screen):
            return frames
        frames.append(screen)
        assert time.monotonic() - pane.t0 < 300, "\n".join(screen)
        time.sleep(0.1)


def check_frame(lines: list[str], models: int) -> dict[str, dict]:
    """Each phrase whole (the head, the total and every model's row parse
    once joined), counts never above the draw, the time left in its slot."""
    assert HEAD.match(lines[0]), lines
    total = TOTAL.match(lines[1])
    assert total and int(total[1]) <= int(total[2]), lines
    seen = rows(lines)
    assert len(seen) == models, lines
    for row in seen.values():
        assert row["decided"] <= row["draw"] and row["ended"] <= row["draw"], lines
    assert not any("~0:00:00 left" in line for line in lines)
    kept = lines[lines.index("needs a person (latest last):") + 1 :] if "needs a person (latest last):" in lines else []
    assert not any("waiting for the witness push" in e for e in kept), lines
    return seen


def test_at_80_columns_the_demo_keeps_every_phrase_whole_the_time_left_in_every_frame_and_no_stale_wait(tmp_path):
    pane = Pane(tmp_path, f"demo --out {tmp_path / 'run'}", cols=NARROW)
    try:
        frames = frames_until_exit(pane)
        under_way = [r for r in map(region, frames) if r and len(r) > 2 and rows(r)]
        assert len(under_way) >= 5, frames[-1]
        for lines in under_way:
            check_frame(lines, 4)
        # the last region drawn, once the run has ended: every household, and no wait left in it
        history = pane._tmux("capture-pane", "-p", "-S", "-", "-t", "t").splitlines()
        last = region(history)
        assert last is not None
        final = check_frame(last, 4)
        assert all(r["ended"] == r["draw"] == 12 for r in final.values()), last
        assert "time left: none (every lane has ended)" in last[0]
        assert not any("waiting for the witness push" in line for line in last), last
    finally:
        pane.close()


def test_at_80_columns_a_continued_run_never_counts_more_households_than_its_draw(tmp_path):
    import signal

    from confirmatory.testing.designs import write_design

    hh = [{"id": f"hh-{i:03d}", "latency_s": 0.05} for i in range(16)]
    design = write_design(
        tmp_path / "design",
        households=hh,
        models=2,
        anchors={"interval_s": 0.3},
        engine_factory="confirmatory.testing.fakes:null_engine",
    )
    run_dir = tmp_path / "run"
    proc = subprocess.Popen(
        [sys.executable, str(SCRIPT), "run", str(design), "--out", str(run_dir), "--quiet"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    try:
        deadline = time.monotonic() + 120
        while sum(p.read_bytes().count(b'"event":"household"') for p in run_dir.glob("models/*/run.jsonl")) < 8:
            assert proc.poll() is None and time.monotonic() < deadline
            time.sleep(0.005)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    pane = Pane(tmp_path, f"continue {run_dir} --reason 'a test'", cols=NARROW)
    try:
        frames = frames_until_exit(pane)
        under_way = [r for r in map(region, frames) if r and len(r) > 2 and rows(r)]
        assert under_way, frames[-1] if frames else "no frame"
        for lines in under_way:
            check_frame(lines, 2)
        last = region(pane._tmux("capture-pane", "-p", "-S", "-", "-t", "t").splitlines())
        assert last is not None
        final = check_frame(last, 2)
        assert all(r["ended"] == r["draw"] == 16 for r in final.values()), last
    finally:
        pane.close()
