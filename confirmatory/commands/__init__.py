"""The work of the commands that drive a whole run (run, continue, demo, probe-seed),
below the command line: each re-exported from ``confirmatory`` (docs/LIBRARY.md)."""
