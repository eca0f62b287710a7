"""The suite's root: tests/ mirrors the package (tests/core/, tests/records/, ...).

pytest puts this folder on sys.path (rootdir conftest, prepend import mode),
so every test file imports the shared helpers beside it: runhelpers (run a
design and read its records), processes (real child processes), mutants
(the planted faults).
"""
