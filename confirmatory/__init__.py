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
    from confirmatory.anchors.anchorer import FINAL_PUSH_TIMEOUT_S
    from confirmatory.anchors.push import push_anchor_command
    from confirmatory.commands.continue_run import continue_command
    from confirmatory.commands.demo import demo_command
    from confirmatory.commands.probe import probe_seed_command
    from confirmatory.commands.run import (
        Display,
        DisplayFactory,
        EndSummary,
        SignalHandler,
        end_summary,
        run_command,
    )
    from confirmatory.commands.witness import key_new_command, witness_serve_command
    from confirmatory.core.exits import (
        EXIT_CEILING,
        EXIT_FAILED,
        EXIT_OK,
        EXIT_REFUSED,
        EXIT_STOPPED,
        EXIT_USAGE,
        EXIT_WITNESS,
    )
    from confirmatory.core.money import format_usd
    from confirmatory.core.text import fit as fit_lines
    from confirmatory.design.load import load_design
    from confirmatory.design.model import DesignError, LoadedDesign
    from confirmatory.engine.check import check_command
    from confirmatory.engine.options import RunOptions
    from confirmatory.engine.preflight import Problem, preflight
    from confirmatory.engine.result import RunResult
    from confirmatory.engine.resume import resume_command
    from confirmatory.engine.run import Run
    from confirmatory.records.chain import RECORD_FORMAT
    from confirmatory.records.checkpoints import checkpoint_command
    from confirmatory.records.proofs import check_proof_command, prove_command
    from confirmatory.report.command import report_command
    from confirmatory.report.show import show_command
    from confirmatory.sim.server import serve_command
    from confirmatory.verify.command import verify_command
    from confirmatory.verify.report import Report as Verification
    from confirmatory.verify.verification import verify_run

# name -> (module, attribute): imported on first use
_LAZY = {
    "key_new_command": ("confirmatory.commands.witness", "key_new_command"),
    "witness_serve_command": ("confirmatory.commands.witness", "witness_serve_command"),
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
    # The commands (docs/LIBRARY.md "The commands"): one function per command
    # of the command line, each taking its arguments as values and returning
    # its exit status; `confirmatory.cli` parses, calls one, and shows.
    "check_command": ("confirmatory.engine.check", "check_command"),
    "run_command": ("confirmatory.commands.run", "run_command"),
    "EndSummary": ("confirmatory.commands.run", "EndSummary"),
    "end_summary": ("confirmatory.commands.run", "end_summary"),
    "Display": ("confirmatory.commands.run", "Display"),
    "DisplayFactory": ("confirmatory.commands.run", "DisplayFactory"),
    "SignalHandler": ("confirmatory.commands.run", "SignalHandler"),
    "continue_command": ("confirmatory.commands.continue_run", "continue_command"),
    "demo_command": ("confirmatory.commands.demo", "demo_command"),
    "probe_seed_command": ("confirmatory.commands.probe", "probe_seed_command"),
    "push_anchor_command": ("confirmatory.anchors.push", "push_anchor_command"),
    "prove_command": ("confirmatory.records.proofs", "prove_command"),
    "check_proof_command": ("confirmatory.records.proofs", "check_proof_command"),
    "checkpoint_command": ("confirmatory.records.checkpoints", "checkpoint_command"),
    "report_command": ("confirmatory.report.command", "report_command"),
    "show_command": ("confirmatory.report.show", "show_command"),
    "verify_command": ("confirmatory.verify.command", "verify_command"),
    "resume_command": ("confirmatory.engine.resume", "resume_command"),
    "serve_command": ("confirmatory.sim.server", "serve_command"),
    # what the display shows
    "format_usd": ("confirmatory.core.money", "format_usd"),
    "fit_lines": ("confirmatory.core.text", "fit"),
    "FINAL_PUSH_TIMEOUT_S": ("confirmatory.anchors.anchorer", "FINAL_PUSH_TIMEOUT_S"),
    # the exit statuses, one per outcome (README.md)
    **{
        name: ("confirmatory.core.exits", name)
        for name in (
            "EXIT_OK",
            "EXIT_FAILED",
            "EXIT_USAGE",
            "EXIT_REFUSED",
            "EXIT_STOPPED",
            "EXIT_CEILING",
            "EXIT_WITNESS",
        )
    },
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


__all__ = [
    "AttemptDeadline",
    "BudgetStop",
    "DesignError",
    "Display",
    "DisplayFactory",
    "EXIT_CEILING",
    "EXIT_FAILED",
    "EXIT_OK",
    "EXIT_REFUSED",
    "EXIT_STOPPED",
    "EXIT_USAGE",
    "EXIT_WITNESS",
    "EndSummary",
    "FINAL_PUSH_TIMEOUT_S",
    "LoadedDesign",
    "Problem",
    "RECORD_FORMAT",
    "Run",
    "RunOptions",
    "RunResult",
    "SignalHandler",
    "Verification",
    "__version__",
    "check_command",
    "check_proof_command",
    "checkpoint_command",
    "continue_command",
    "demo_command",
    "end_summary",
    "fit_lines",
    "format_usd",
    "load_design",
    "preflight",
    "probe_seed_command",
    "prove_command",
    "push_anchor_command",
    "key_new_command",
    "witness_serve_command",
    "report_command",
    "resume_command",
    "run_command",
    "serve_command",
    "show_command",
    "verify_command",
    "verify_run",
]
