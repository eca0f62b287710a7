"""Deprecated: ``confirmatory.errors`` is now ``confirmatory.core.errors`` (the errors a harness raises and meets).

Kept for one release so that a harness written against 0.1 keeps working;
it warns once on import. Import ``confirmatory.core.errors`` instead (docs/HARNESS.md).
"""

import sys
import warnings

import confirmatory.core.errors as _new

warnings.warn("confirmatory.errors is deprecated; import confirmatory.core.errors instead (docs/HARNESS.md)",
              DeprecationWarning, stacklevel=2)
sys.modules[__name__] = _new
