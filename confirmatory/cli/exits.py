"""The exit statuses of the commands, one per outcome (README.md, docs/VERIFY.md),
as the front door names them (defined in ``confirmatory.core.exits``)."""

from confirmatory import (
    EXIT_CEILING,
    EXIT_FAILED,
    EXIT_OK,
    EXIT_REFUSED,
    EXIT_STOPPED,
    EXIT_USAGE,
    EXIT_WITNESS,
)

__all__ = ["EXIT_CEILING", "EXIT_FAILED", "EXIT_OK", "EXIT_REFUSED", "EXIT_STOPPED", "EXIT_USAGE", "EXIT_WITNESS"]
