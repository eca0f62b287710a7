"""The suite's root: tests/ mirrors the package (tests/core/, tests/records/, ...).

pytest puts this folder on sys.path (rootdir conftest, prepend import mode),
so every test file imports the shared helpers beside it: runhelpers (run a
design and read its records), processes (real child processes), mutants
(the planted faults).
"""

import os

if os.environ.get("CONFIRMATORY_MUTANT_RUN") == "1":
    # A mutant's run (tests/test_mutants.py) asks only whether its test
    # fails: hypothesis need not shrink the failing example it found (a
    # shrink took most of a property test's 26 s), nor keep a database in
    # the project copy.
    from hypothesis import Phase, settings

    settings.register_profile("mutant", phases=[Phase.explicit, Phase.reuse, Phase.generate], database=None)
    settings.load_profile("mutant")
