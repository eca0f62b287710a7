"""Every planted fault in the runner makes its named test fail (else that test proves nothing)."""

from __future__ import annotations

import ast
import concurrent.futures
import json
import os
import queue
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from mutants import MUTANTS

ROOT = Path(__file__).resolve().parent.parent


def _copy_project(dest: Path) -> Path:
    shutil.copytree(ROOT / "confirmatory", dest / "confirmatory", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(ROOT / "tests", dest / "tests", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(ROOT / "scripts", dest / "scripts", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", dest / "pyproject.toml")
    return dest


FAST_START = ("-p", "no:cacheprovider", "-p", "no:hypothesispytest", "-p", "no:xdist")


MUTANT_TIMEOUT_S = 300
CONTROL_TEST = "tests/test_mutants.py::test_every_mutant_still_matches_the_code"


class _Server:
    """One fork server (tests/mutant_server.py) and the project copy it runs in."""

    def __init__(self, project: Path) -> None:
        self.project = project
        self.proc = subprocess.Popen(
            [sys.executable, str(ROOT / "tests" / "mutant_server.py")],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=dict(os.environ, PYTHONDONTWRITEBYTECODE="1", CONFIRMATORY_MUTANT_RUN="1"),
        )

    def run(self, args: list[str], out: Path, timeout: float) -> int:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        request = {"project": str(self.project), "args": args, "out": str(out), "timeout": timeout}
        self.proc.stdin.write(json.dumps(request) + "\n")
        self.proc.stdin.flush()
        reply = self.proc.stdout.readline()
        if not reply:
            raise RuntimeError(f"the mutant server ended (rc {self.proc.wait()})")
        return int(json.loads(reply)["rc"])

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        self.proc.wait(timeout=60)


def _run_mutant(server: _Server, mutant) -> subprocess.CompletedProcess:
    """The mutant's test on the server's project with the fault planted (then taken out again)."""
    target = server.project / mutant.path
    original = target.read_text()
    target.write_text(original.replace(mutant.old, mutant.new, 1))
    # Without hypothesis's pytest plugin: a test using hypothesis imports it
    # anyway. Every named test passes without the fault and without the
    # plugin (test_every_named_test_that_uses_hypothesis_passes_...).
    args = ["-q", "-x", "-rs", *FAST_START, mutant.test]
    out = server.project.parent / "out.txt"
    try:
        rc = server.run(args, out, MUTANT_TIMEOUT_S)
    finally:
        target.write_text(original)
    text = out.read_text(errors="replace") if out.exists() else ""
    if rc == -9:
        # One mutant's run that never ends (a fault that leaves a thread
        # running keeps its process up) is that mutant's outcome, not every
        # mutant's: caught (1) if its test had already failed, else -9.
        failed = "FAILURES" in text or text.lstrip().startswith("F")
        return subprocess.CompletedProcess(
            args, 1 if failed else -9, text + f"\n[timed out after {MUTANT_TIMEOUT_S} s]", ""
        )
    return subprocess.CompletedProcess(args, rc, text, "")


@pytest.fixture(scope="module")
def mutant_outcomes(request, tmp_path_factory):
    """Every selected mutant's run, three at a time on two cores (each in a
    project copy of its own, run by a fork server that has the third-party
    libraries imported already): the suite's slowest part. Each run waits
    on its own children part of the time (two at a time kept the cores 77 %
    busy, three 92 %)."""
    selected = [
        item.callspec.params["mutant"]
        for item in request.session.items
        if getattr(item, "originalname", None) == "test_the_named_test_catches_the_planted_fault"
    ]
    if not selected:
        return {}
    workers = max(1, min(3, (os.cpu_count() or 1) + 1, len(selected)))
    servers: queue.Queue[_Server] = queue.Queue()
    started = [_Server(_copy_project(tmp_path_factory.mktemp(f"mutant{k}") / "project")) for k in range(workers)]
    for server in started:
        # a control: a passing test with no fault planted passes on every
        # server (a runner that called every run failed would catch all)
        out = server.project.parent / "control.txt"
        rc = server.run(["-q", *FAST_START, CONTROL_TEST], out, MUTANT_TIMEOUT_S)
        assert rc == 0, f"{CONTROL_TEST} failed with no fault planted (rc {rc}):\n{out.read_text()[-3000:]}"
        servers.put(server)

    times: dict[str, float] = {}

    def run(mutant):
        server = servers.get()
        started = time.monotonic()
        try:
            return _run_mutant(server, mutant)
        finally:
            times[mutant.name] = time.monotonic() - started
            servers.put(server)

    try:
        with concurrent.futures.ThreadPoolExecutor(max_workers=workers) as pool:
            futures = {m.name: pool.submit(run, m) for m in selected}
        # each mutant's seconds, slowest first: where the suite's time goes
        out = tmp_path_factory.getbasetemp() / "mutant-times.tsv"
        out.write_text("".join(f"{t:.1f}\t{name}\n" for name, t in sorted(times.items(), key=lambda x: -x[1])))
        return {name: f.result() for name, f in futures.items()}
    finally:
        for server in started:
            server.close()


def test_every_mutant_still_matches_the_code():
    for m in MUTANTS:
        text = (ROOT / m.path).read_text()
        assert text.count(m.old) == 1, f"mutant {m.name!r}: its text occurs {text.count(m.old)} times in {m.path}"


# The fixture runs every selected mutant at once: under xdist the whole
# file must go to one worker (--dist loadfile), or another would run them again.
@pytest.mark.slow
@pytest.mark.parametrize("mutant", MUTANTS, ids=[m.name for m in MUTANTS])
def test_the_named_test_catches_the_planted_fault(mutant_outcomes, mutant):
    proc = mutant_outcomes[mutant.name]
    skipped = _skip_reason(proc)
    if skipped is not None:
        # (a browser, openssl or ray that this machine lacks; CI installs them)
        pytest.skip(f"its named test {mutant.test} skipped here: {skipped}")
    assert proc.returncode == 1, (
        f"mutant {mutant.name!r} survived {mutant.test} (rc {proc.returncode}):\n{proc.stdout[-3000:]}"
    )


def _skip_reason(proc: subprocess.CompletedProcess) -> str | None:
    """Why the named test skipped when its run passed nothing and skipped it (pytest -rs's line)."""
    tail = proc.stdout.strip().splitlines()[-1:] if proc.stdout.strip() else []
    if proc.returncode != 0 or not tail or "skipped" not in tail[0] or "passed" in tail[0]:
        return None
    reasons = [line.split(": ", 1)[-1] for line in proc.stdout.splitlines() if line.startswith("SKIPPED")]
    return "; ".join(reasons) or tail[0]


def test_docs_mutants_lists_every_mutant_with_its_test():
    text = (ROOT / "docs" / "MUTANTS.md").read_text()
    for m in MUTANTS:
        test = m.test.partition("::")[2]
        assert f"| {m.name} | `{m.path}` |" in text and f"`{test}`" in text, m.name


def _uses_given(test: str) -> bool:
    """Whether the named test (its function, by name) uses hypothesis's ``given``."""
    path, _, name = test.partition("::")
    name = name.split("[")[0]
    for node in ast.walk(ast.parse((ROOT / path).read_text())):
        if isinstance(node, ast.FunctionDef) and node.name == name:
            return any(isinstance(n, ast.Name | ast.Attribute) and "given" in ast.unparse(n) for n in ast.walk(node))
    raise LookupError(f"{test}: no such function in {path}")


@pytest.mark.slow
def test_every_named_test_that_uses_hypothesis_passes_without_its_plugin():
    """The mutants run without hypothesis's pytest plugin (FAST_START) and
    with the no-shrink profile (tests/conftest.py). A named test that needed
    the plugin would fail for want of it, not of the fault, and its mutant
    would count as caught: each named test that uses ``given`` (the part of
    hypothesis the plugin serves) must pass so, with no fault planted."""
    tests = sorted({m.test for m in MUTANTS if _uses_given(m.test)})
    assert tests, "no named test uses hypothesis: FAST_START and this check can go"
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", *FAST_START, *tests],
        cwd=ROOT,
        env=dict(os.environ, CONFIRMATORY_MUTANT_RUN="1"),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-3000:]
