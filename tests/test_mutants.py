"""Every planted fault in the runner makes its named test fail (else that test proves nothing)."""

from __future__ import annotations

import concurrent.futures
import os
import queue
import shutil
import subprocess
import sys
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


def _run_mutant(project: Path, mutant) -> subprocess.CompletedProcess:
    """The mutant's test on ``project`` with the fault planted (then taken out again)."""
    target = project / mutant.path
    original = target.read_text()
    target.write_text(original.replace(mutant.old, mutant.new, 1))
    try:
        env = dict(os.environ, PYTHONPATH=str(project), PYTHONDONTWRITEBYTECODE="1")
        args = [sys.executable, "-m", "pytest", "-q", "-x", *FAST_START, mutant.test]
        try:
            return subprocess.run(
                # Without hypothesis's pytest plugin: it imports hypothesis at
                # start-up (0.9 s of a 2 s run), and a test using hypothesis
                # imports it anyway. Every named test passes without the fault
                # and without the plugin (test_every_named_test_passes_...).
                args, cwd=project, env=env, capture_output=True, text=True, timeout=300,
            )
        except subprocess.TimeoutExpired as exc:
            # One mutant's run that never ends (a fault that leaves a thread
            # running keeps its process up) is that mutant's outcome, not every
            # mutant's: caught (1) if its test had already failed, else -9.
            out = exc.stdout.decode() if isinstance(exc.stdout, bytes) else (exc.stdout or "")
            failed = "FAILURES" in out or out.lstrip().startswith("F")
            return subprocess.CompletedProcess(args, 1 if failed else -9, out + "\n[timed out after 300 s]", "")
    finally:
        target.write_text(original)


@pytest.fixture(scope="module")
def mutant_outcomes(request, tmp_path_factory):
    """Every selected mutant's run, three at a time on two cores (each in a
    project copy of its own worker): the suite's slowest part. Each run is
    a separate process that waits on its own children part of the time (two
    at a time kept the cores 77 % busy, three 92 %)."""
    selected = [item.callspec.params["mutant"] for item in request.session.items
                if getattr(item, "originalname", None) == "test_the_named_test_catches_the_planted_fault"]
    workers = max(1, min(3, (os.cpu_count() or 1) + 1, len(selected)))
    copies = queue.Queue()
    for k in range(workers):
        copies.put(_copy_project(tmp_path_factory.mktemp(f"mutant{k}") / "project"))

    def run(mutant):
        project = copies.get()
        try:
            return _run_mutant(project, mutant)
        finally:
            copies.put(project)

    with concurrent.futures.ThreadPoolExecutor(max_workers=workers) as pool:
        futures = {m.name: pool.submit(run, m) for m in selected}
    return {name: f.result() for name, f in futures.items()}


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
    assert proc.returncode == 1, (
        f"mutant {mutant.name!r} survived {mutant.test} (rc {proc.returncode}):\n{proc.stdout[-3000:]}"
    )


def test_docs_mutants_lists_every_mutant_with_its_test():
    text = (ROOT / "docs" / "MUTANTS.md").read_text()
    for m in MUTANTS:
        test = m.test.partition("::")[2]
        assert f"| {m.name} | `{m.path}` |" in text and f"`{test}`" in text, m.name


@pytest.mark.slow
def test_every_named_test_that_uses_hypothesis_passes_without_its_plugin():
    """The mutants run without hypothesis's pytest plugin (FAST_START). A
    named test that needed it would fail for want of it, not of the fault,
    and its mutant would count as caught: each such test (of a file that
    imports hypothesis) must pass so, with no fault planted."""
    tests = sorted({m.test for m in MUTANTS if "hypothesis" in (ROOT / m.test.partition("::")[0]).read_text()})
    assert tests, "no named test uses hypothesis: FAST_START and this check can go"
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", *FAST_START, *tests], cwd=ROOT,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:]
