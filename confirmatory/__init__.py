"""confirmatory: the runner for the confirmatory stage of a pre-registered LLM study.

The package is split so that what *decides* (draws, admission, classes,
actions, stop rules) is pure and importable without threads, I/O or litellm,
and what *moves* (lanes, the Run, the sampler, the anchorer) calls into it.
See docs/ARCHITECTURE.md.

The library's front door (docs/LIBRARY.md), each name imported lazily so
that importing the package stays cheap (litellm is imported only by
``confirmatory.engine.llm``, psutil only by ``confirmatory.host.sampler``)::

    design = confirmatory.load_design("design.toml")
    problems = confirmatory.preflight(design, run_dir)      # [] or one line each
    result = confirmatory.Run(design, run_dir, options=confirmatory.RunOptions(...)).execute()
    verification = confirmatory.verify_run(run_dir)          # a typed result

(``confirmatory.verify`` is the verifier's subpackage; its entry is ``verify_run``.)
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from confirmatory.core.errors import AttemptDeadline, BudgetStop
from confirmatory.core.version import VERSION as __version__

if TYPE_CHECKING:
    from confirmatory.design.load import load_design
    from confirmatory.design.model import DesignError, LoadedDesign
    from confirmatory.engine.options import RunOptions
    from confirmatory.engine.preflight import Problem, preflight
    from confirmatory.engine.result import RunResult
    from confirmatory.engine.run import Run
    from confirmatory.records.chain import RECORD_FORMAT
    from confirmatory.verify.report import Report as Verification
    from confirmatory.verify.verification import verify_run

# name -> (module, attribute): imported on first use
_LAZY = {
    "RECORD_FORMAT": ("confirmatory.records.chain", "RECORD_FORMAT"),
    "load_design": ("confirmatory.design.load", "load_design"),
    "DesignError": ("confirmatory.design.model", "DesignError"),
    "LoadedDesign": ("confirmatory.design.model", "LoadedDesign"),
    "preflight": ("confirmatory.engine.preflight", "preflight"),
    "Problem": ("confirmatory.engine.preflight", "Problem"),
    "Run": ("confirmatory.engine.run", "Run"),
    "RunOptions": ("confirmatory.engine.options", "RunOptions"),
    "RunResult": ("confirmatory.engine.result", "RunResult"),
    "Verification": ("confirmatory.verify.report", "Report"),
    "verify_run": ("confirmatory.verify.verification", "verify_run"),
}


def __getattr__(name: str) -> Any:
    # Lazily: an engine worker unpickling in a study's directory imports this
    # package first, and the chain's format imports json.encoder (a design
    # directory may hold a json.py; design.load refuses it, the worker must
    # not die of it first).
    if name in _LAZY:
        import importlib

        module, attr = _LAZY[name]
        return getattr(importlib.import_module(module), attr)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["AttemptDeadline", "BudgetStop", "DesignError", "LoadedDesign", "Problem", "RECORD_FORMAT", "Run",
           "RunOptions", "RunResult", "Verification", "__version__", "load_design", "preflight",
           "verify_run"]
