"""confirmatory: the runner for the confirmatory stage of a pre-registered LLM study.

The package is split so that what *decides* (draws, admission, classes,
actions, stop rules) is pure and importable without threads, I/O or litellm,
and what *moves* (lanes, the Run, the sampler, the anchorer) calls into it.
See docs/ARCHITECTURE.md.

Importing this package must stay cheap: litellm is imported only by
``confirmatory.llm``, psutil only by ``confirmatory.host``.
"""

__version__ = "0.1.0"
RECORD_FORMAT = "confirmatory-run/1"

from confirmatory.errors import AttemptDeadline, BudgetStop  # noqa: E402

__all__ = ["AttemptDeadline", "BudgetStop", "RECORD_FORMAT", "__version__"]
