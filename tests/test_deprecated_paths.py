"""The 0.1 import paths a harness or a frozen design may still use keep
working for one release, each saying where the name now lives."""

from __future__ import annotations

import subprocess
import sys

import pytest

PATHS = {
    "confirmatory.llm": ("confirmatory.engine.llm", "chat"),
    "confirmatory.errors": ("confirmatory.core.errors", "UnparseableAnswer"),
    "confirmatory.pool": ("confirmatory.engine.pool", "ProcessEnginePool"),
    "confirmatory.witness": ("confirmatory.anchors.witness", "publish"),
    # the read side of the 0.1 module, which now lives apart from the push side
    "confirmatory.witness ": ("confirmatory.anchors.check", "check_witness"),
}


@pytest.mark.parametrize("old", sorted(PATHS))
def test_an_old_import_path_warns_and_gives_the_new_names(old):
    new, name = PATHS[old]
    old = old.strip()
    code = (f"import warnings\nwarnings.simplefilter('error')\n"
            f"try:\n    import {old}\nexcept DeprecationWarning as w:\n    print('warned:', w)\n"
            f"warnings.simplefilter('ignore')\nimport importlib, {new}\n"
            f"m = importlib.import_module({old!r})\nassert m.{name} is {new}.{name}\nprint('same')\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    said = ("import confirmatory.anchors.witness instead" if old == "confirmatory.witness"
            else f"import {new} instead (docs/HARNESS.md)")
    assert out.stdout.splitlines() == [f"warned: {old} is deprecated; {said}", "same"]


def test_a_frozen_designs_anchor_command_under_the_old_module_still_runs():
    out = subprocess.run([sys.executable, "-m", "confirmatory.witness", "--help"], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0
    assert "--clone" in out.stdout
    assert "python -m confirmatory.anchors.witness" in out.stderr
