"""The example differential test (examples/differential) passes on the
runner as it is and fails on each of three planted runner faults: a record
hash written wrong, a close line's total off by a nano-dollar, a lane that
stops deciding after two households. Each fault is planted in a copy of the
project, and the example run there, as tests/test_mutants.py does."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = "examples/differential/test_differential.py"

FAULTS = {
    "no fault": None,
    "a record hash written wrong": (
        "confirmatory/engine/modelstate.py",
        '"record_sha256": self.record_sha256,',
        '"record_sha256": self.record_sha256[::-1],',
    ),
    "a close total off by one": (
        "confirmatory/engine/run.py",
        '"spend_total_nusd": total}',
        '"spend_total_nusd": total + 1}',
    ),
    "a lane that stops deciding": (
        "confirmatory/engine/lanes.py",
        "for k, household in enumerate(self.m.draw):",
        "for k, household in enumerate(self.m.draw[:2]):",
    ),
}


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    dest = tmp_path_factory.mktemp("differential") / "project"
    for part in ("confirmatory", "examples"):
        shutil.copytree(ROOT / part, dest / part, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", dest / "pyproject.toml")
    return dest


@pytest.mark.slow
@pytest.mark.parametrize("fault", list(FAULTS))
def test_the_example_passes_on_the_runner_and_fails_on_each_planted_fault(project, fault):
    planted = FAULTS[fault]
    target = original = None
    if planted is not None:
        path, old, new = planted
        target = project / path
        original = target.read_text()
        assert original.count(old) == 1, f"{fault}: its text is no longer in {path}"
        target.write_text(original.replace(old, new))
    try:
        env = dict(os.environ, PYTHONPATH=str(project))
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "pytest",
                "-q",
                "-p",
                "no:cacheprovider",
                "-p",
                "no:xdist",
                "--rootdir",
                str(project),
                EXAMPLE,
            ],
            cwd=project,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
    finally:
        if target is not None:
            target.write_text(original)
    expected = 0 if planted is None else 1
    assert done.returncode == expected, done.stdout[-3000:]
