"""Every planted fault in the runner makes its named test fail (else that test proves nothing)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from mutants import MUTANTS

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def project_copy(tmp_path_factory):
    dest = tmp_path_factory.mktemp("mutant") / "project"
    shutil.copytree(ROOT / "confirmatory", dest / "confirmatory",
                    ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(ROOT / "tests", dest / "tests", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", dest / "pyproject.toml")
    return dest


def test_every_mutant_still_matches_the_code():
    for m in MUTANTS:
        text = (ROOT / m.path).read_text()
        assert text.count(m.old) == 1, f"mutant {m.name!r}: its text occurs {text.count(m.old)} times in {m.path}"


@pytest.mark.slow
@pytest.mark.parametrize("mutant", MUTANTS, ids=[m.name for m in MUTANTS])
def test_the_named_test_catches_the_planted_fault(project_copy, mutant):
    target = project_copy / mutant.path
    original = target.read_text()
    target.write_text(original.replace(mutant.old, mutant.new, 1))
    try:
        env = dict(os.environ, PYTHONPATH=str(project_copy), PYTHONDONTWRITEBYTECODE="1")
        proc = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", mutant.test],
            cwd=project_copy, env=env, capture_output=True, text=True, timeout=300,
        )
    finally:
        target.write_text(original)
    assert proc.returncode == 1, (
        f"mutant {mutant.name!r} survived {mutant.test} (rc {proc.returncode}):\n{proc.stdout[-3000:]}"
    )


def test_docs_mutants_lists_every_mutant_with_its_test():
    text = (ROOT / "docs" / "MUTANTS.md").read_text()
    for m in MUTANTS:
        test = m.test.partition("::")[2]
        assert f"| {m.name} | `{m.path}` |" in text and f"`{test}`" in text, m.name
