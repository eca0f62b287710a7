"""Deprecated: ``confirmatory.pool`` is now ``confirmatory.engine.pool`` (the engine pool (ProcessEnginePool, PoolFailure)).

Kept for one release so that a harness written against 0.1 keeps working;
it warns once on import. Import ``confirmatory.engine.pool`` instead (docs/HARNESS.md).
"""

import sys
import warnings

import confirmatory.engine.pool as _new

warnings.warn("confirmatory.pool is deprecated; import confirmatory.engine.pool instead (docs/HARNESS.md)",
              DeprecationWarning, stacklevel=2)
sys.modules[__name__] = _new
