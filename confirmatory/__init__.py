"""confirmatory: the runner for the confirmatory stage of a pre-registered LLM study.

The package is split so that what *decides* (draws, admission, classes,
actions, stop rules) is pure and importable without threads, I/O or litellm,
and what *moves* (lanes, the Run, the sampler, the anchorer) calls into it.
See docs/ARCHITECTURE.md.

Importing this package must stay cheap: litellm is imported only by
``confirmatory.engine.llm``, psutil only by ``confirmatory.host.sampler``.
"""

__version__ = "0.1.0"
from confirmatory.core.errors import AttemptDeadline, BudgetStop  # noqa: E402


def __getattr__(name: str):
    # Lazily: an engine worker unpickling in a study's directory imports this
    # package first, and the chain's format imports json.encoder (a design
    # directory may hold a json.py; design.load refuses it, the worker must
    # not die of it first).
    if name == "RECORD_FORMAT":
        from confirmatory.records.chain import RECORD_FORMAT

        return RECORD_FORMAT
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["AttemptDeadline", "BudgetStop", "RECORD_FORMAT", "__version__"]
