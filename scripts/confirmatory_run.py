#!/usr/bin/env python3
"""Thin entry point: ``python scripts/confirmatory_run.py [COMMAND ...]``.

With no arguments it runs the bundled reference study against the simulated
provider (the ``demo`` command). Everything else is the ``confirmatory`` CLI.
"""

import sys
from pathlib import Path

# Run from a checkout without installing the package first.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from confirmatory.cli.main import main  # noqa: E402

if __name__ == "__main__":
    main(args=sys.argv[1:] or ["demo"], prog_name="confirmatory_run.py")
