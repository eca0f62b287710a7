"""Deprecated: ``confirmatory.witness`` is now ``confirmatory.anchors`` (``witness``, the push
side; ``check``, the read side; ``git``, what both use).

A design frozen under 0.1 names this module in its ``[anchors] command``
(``python -m confirmatory.witness``); it keeps working for one release, with
a note on stderr, which the push record keeps. Write
``-m confirmatory.anchors.witness`` in new designs (docs/ANCHORS.md).
"""

import sys
import warnings
from typing import Any

from confirmatory.anchors import check as _check
from confirmatory.anchors import git as _git
from confirmatory.anchors import witness as _new

if __name__ == "__main__":
    print("confirmatory.witness is deprecated; run python -m confirmatory.anchors.witness instead",
          file=sys.stderr)
    sys.exit(_new.main())

warnings.warn("confirmatory.witness is deprecated; import confirmatory.anchors.witness instead",
              DeprecationWarning, stacklevel=2)


def __getattr__(name: str) -> Any:
    for module in (_new, _check, _git):
        if hasattr(module, name):
            return getattr(module, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
