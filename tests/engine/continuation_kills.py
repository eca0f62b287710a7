"""The kill suite's harness for continuations: a crashed run, carried on by a
continuation that is itself killed, then carried on again.

One crashed run (``Base``) is made per test module and kept pristine; each
point restores it in place (the design names its witness by absolute path,
so the copy must stand where the original stood), runs ``continue`` under a
kill (``confirmatory.records.killpoint``: after the N-th durable write, or
after the first write a regular expression names; or a real SIGKILL at a
wall-clock time), and then checks: verify says crashed (3) or complete (0)
with no violation, ``continue`` carries it on (0), verify then says complete
(0) with every household of every draw ended, show's figures are verify's,
and every line acknowledged before each kill is kept byte for byte.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "verify"))
import procserver  # noqa: E402 - runner processes forked with litellm imported
import test_states as states  # noqa: E402 - the kill harness of a first run

SCRIPT = states.SCRIPT


def snapshot(run_dir: Path) -> dict[str, bytes]:
    return {p.relative_to(run_dir).as_posix(): p.read_bytes() for p in sorted(run_dir.rglob("*.jsonl"))}


def assert_kept(before: dict[str, bytes], run_dir: Path) -> None:
    """Every acknowledged line is there byte for byte; a torn tail is kept whole."""
    for rel, data in before.items():
        now = (run_dir / rel).read_bytes()
        complete = data[: data.rfind(b"\n") + 1]
        assert now.startswith(complete), f"{rel}: an acknowledged line changed or went missing"
        tail = data[len(complete) :]
        if tail:
            kept = [p.read_bytes() for p in sorted(run_dir.glob(rel + ".torn-*"))]
            assert tail in kept, f"{rel}: its torn tail was not kept whole"


def continue_cmd(run_dir: Path, reason: str) -> list[str]:
    return [sys.executable, str(SCRIPT), "continue", str(run_dir), "--reason", reason, "--quiet"]


def kill_env(
    *, after: int | None = None, at: str | None = None, count: int = 1, trace: Path | None = None
) -> dict[str, str]:
    """The environment of a runner process killed by killpoint."""
    env = dict(os.environ)
    for k in (
        "CONFIRMATORY_KILL_AFTER_WRITES",
        "CONFIRMATORY_KILL_AT",
        "CONFIRMATORY_KILL_AT_COUNT",
        "CONFIRMATORY_WRITE_TRACE",
    ):
        env.pop(k, None)
    if after is not None:
        env["CONFIRMATORY_KILL_AFTER_WRITES"] = str(after)
    if at is not None:
        env["CONFIRMATORY_KILL_AT"], env["CONFIRMATORY_KILL_AT_COUNT"] = at, str(count)
    if trace is not None:
        env["CONFIRMATORY_WRITE_TRACE"] = str(trace)
    return env


def _sizes(run_dir: Path) -> dict[Path, int]:
    sizes: dict[Path, int] = {}
    for p in run_dir.rglob("*.jsonl"):
        try:
            sizes[p] = p.stat().st_size
        except FileNotFoundError:  # renamed meanwhile
            pass
    return sizes


def first_write(proc: subprocess.Popen, run_dir: Path, before: dict[Path, int]) -> None:
    """Wait until ``proc`` has written its first line to ``run_dir`` (or ended)."""
    while proc.poll() is None and _sizes(run_dir) == before:
        time.sleep(0.02)


def ended(proc: subprocess.Popen, seconds: float | None, run_dir: Path | None = None) -> str:
    """Wait for ``proc`` to end, SIGKILLing it at ``seconds`` if given (counted
    from its first write to ``run_dir`` when given: a loaded machine may take
    seconds to start a process); its stderr."""
    try:
        if seconds is not None:
            if run_dir is not None:
                first_write(proc, run_dir, _sizes(run_dir))
            try:
                proc.wait(timeout=seconds)
            except subprocess.TimeoutExpired:
                os.kill(proc.pid, signal.SIGKILL)
        return proc.communicate(timeout=300)[1]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def continue_killed(
    run_dir: Path,
    reason: str,
    *,
    after: int | None = None,
    at: str | None = None,
    count: int = 1,
    seconds: float | None = None,
    trace: Path | None = None,
) -> int:
    """Run ``continue`` to its end or its kill; its exit status (-9 when killed)."""
    env = kill_env(after=after, at=at, count=count, trace=trace)
    proc = procserver.popen(
        continue_cmd(run_dir, reason), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env
    )
    err = ended(proc, seconds, run_dir)
    if proc.returncode not in (0, -signal.SIGKILL):
        raise AssertionError(f"continue exited {proc.returncode}: {err[-3000:]}")
    return proc.returncode


def household_ends(run_dir: Path) -> dict[str, dict[tuple[str, int], dict]]:
    out: dict[str, dict[tuple[str, int], dict]] = {}
    for log in states._model_logs(run_dir, "run.jsonl"):
        ends = out.setdefault(log.parent.name, {})
        for raw in log.read_bytes().splitlines():
            o = json.loads(raw)
            if o.get("event") == "household":
                ends[(o["household"], o.get("round", 0))] = o
    return out


def assert_complete(run_dir: Path, continuations: int) -> dict:
    """verify 0, every household of every draw ended (finished, or cut and run
    again to its end), show's figures are verify's."""
    rc, report = states.verify_cli(run_dir)
    assert states.violations(report) == [], states.violations(report)
    assert (rc, report["state"]) == (0, "complete"), report
    assert report["outcome"].count("continued after a crash") == continuations, report["outcome"]
    ends = household_ends(run_dir)
    for name in ends:
        draw = json.loads((run_dir / "models" / name / "manifest.json").read_bytes())["draw"]
        for h in draw:
            rounds = sorted(r for (g, r) in ends[name] if g == h)
            assert rounds == list(range(len(rounds))) and rounds, f"{name} {h}: rounds {rounds}"
            assert ends[name][(h, rounds[-1])].get("cut_by") is None, f"{name} {h} was cut and never run again"
    from confirmatory.report.show import read_run

    info = read_run(run_dir)
    for name, m in report["figures"]["models"].items():
        assert {k: info["models"][name][k] for k in m} == m, (name, info["models"][name], m)
    return report


def crashed_report(run_dir: Path) -> dict:
    """verify after a kill: crashed (3) or already complete (0), never a violation; its report."""
    rc, report = states.verify_cli(run_dir)
    assert states.violations(report) == [], states.violations(report)
    assert (rc, report["state"]) in ((3, "crashed"), (0, "complete")), (rc, report["state"])
    return report


def crashed_ok(run_dir: Path) -> str:
    """verify after a kill: crashed (3) or already complete (0), never a violation; the state."""
    return crashed_report(run_dir)["state"]


@dataclass
class Base:
    """A crashed run kept pristine, restored in place for each point."""

    work: Path  # where the run, its design and its witness stand
    pristine: Path
    trace: list[tuple[int, str, str]] = field(default_factory=list)  # (n, path in the run, label)
    duration_s: float = 0.0  # the continuation's life, uncut

    @property
    def run_dir(self) -> Path:
        return self.work / "run"

    def restore(self) -> Path:
        shutil.rmtree(self.work, ignore_errors=True)
        shutil.copytree(self.pristine, self.work, symlinks=True)
        return self.run_dir

    def write_number(self, pattern: str, nth: int = 1) -> int:
        """The number of the nth write of the uncut continuation whose path<TAB>label matches."""
        import re

        found = [n for n, path, label in self.trace if re.search(pattern, f"{path}\t{label}")]
        assert len(found) >= nth, f"the continuation never wrote {pattern!r} ({nth})"
        return found[nth - 1]


def run_killed(work: Path, *, seconds: float | None = None, **kill) -> tuple[Path, int]:
    """The kill suite's fast design (2 models, 30 households), run to its end
    or its kill (killpoint's keywords, or a SIGKILL at ``seconds``)."""
    from confirmatory.testing.designs import write_design

    hh = [{"id": f"hh-{i:03d}", "latency_s": 0.02} for i in range(30)]
    design = write_design(work / "design", households=hh, models=2, anchors={"interval_s": 0.3}, **states.FAST)
    run_dir = work / "run"
    proc = procserver.popen(
        [sys.executable, str(SCRIPT), "run", str(design), "--out", str(run_dir), "--quiet"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env=kill_env(**kill),
    )
    err = ended(proc, seconds)
    assert proc.returncode in (0, -signal.SIGKILL), err[-3000:]
    return run_dir, proc.returncode


def make_base(tmp: Path, *, torn: bool = True) -> Base:
    """Kill a run right after its 25th record (a third of the way in, a
    household under way with a record and no attempt line), plant torn tails
    in two logs (a crash can cut the last line of any log), keep it, and
    trace one continuation of it to its end."""
    work = tmp / "work"
    run_dir, code = run_killed(work, at=r"/records/.*\.json\tfile$", count=25)
    assert code == -signal.SIGKILL
    if torn:
        for rel in ("models/m0/run.jsonl", "host.jsonl"):
            with open(run_dir / rel, "ab") as fh:
                fh.write(b'{"event":"atte')
    assert crashed_ok(run_dir) == "crashed"
    pristine = tmp / "pristine"
    shutil.copytree(work, pristine, symlinks=True)
    base = Base(work, pristine)
    trace = tmp / "trace.tsv"
    started = time.monotonic()
    assert continue_killed(run_dir, "traced", trace=trace) == 0
    base.duration_s = time.monotonic() - started
    for row in trace.read_text().splitlines():
        n, path, label = row.split("\t")
        base.trace.append((int(n), Path(path).resolve().relative_to(run_dir.resolve()).as_posix(), label))
    assert_complete(run_dir, 1)
    return base


def carried_on(base: Base, kills: list[dict]) -> None:
    """From the pristine crash: one continuation per entry of ``kills`` (the
    kill's keywords for continue_killed), each checked crashed-consistent,
    then a last continuation to a complete run, every acknowledged line kept."""
    run_dir = base.restore()
    snaps = [snapshot(run_dir)]
    for k, kill in enumerate(kills, 1):
        code = continue_killed(run_dir, f"kill {k}", **kill)
        snaps.append(snapshot(run_dir))
        if crashed_ok(run_dir) == "complete":
            assert code == 0 or kill.get("seconds") is not None, "killed, yet complete"
            break
    else:
        code = continue_killed(run_dir, "last")
        assert code == 0
    for snap in snaps:
        assert_kept(snap, run_dir)
    conts = sum(1 for raw in (run_dir / "run.jsonl").read_bytes().splitlines() if b'"event":"continuation"' in raw)
    assert_complete(run_dir, conts)
