"""Deprecated: ``confirmatory.llm`` is now ``confirmatory.engine.llm`` (the litellm boundary (chat, responses, Reply, UnpricedCall, ...)).

Kept for one release so that a harness written against 0.1 keeps working;
it warns once on import. Import ``confirmatory.engine.llm`` instead (docs/HARNESS.md).
"""

import sys
import warnings

import confirmatory.engine.llm as _new

warnings.warn("confirmatory.llm is deprecated; import confirmatory.engine.llm instead (docs/HARNESS.md)",
              DeprecationWarning, stacklevel=2)
sys.modules[__name__] = _new
