"""The exit statuses of the commands, one per outcome (README.md, docs/VERIFY.md)."""

# Exit statuses, one per outcome (documented in README.md).
EXIT_OK = 0  # completed; for verify: every invariant holds
EXIT_FAILED = 1  # verify found a violation; an unexpected error
EXIT_USAGE = 2  # click's own usage errors
EXIT_REFUSED = 3  # refused to start: bad design, drifted pin, missing key, existing run dir
EXIT_STOPPED = 4  # the run ended with a stop (cause in run.jsonl and on stderr)
EXIT_CEILING = 5  # the spend ceiling was crossed
EXIT_WITNESS = 6  # completed, but the witness does not hold the final anchor yet
