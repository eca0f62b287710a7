#!/usr/bin/env python3
"""Thin entry point for the design's ``anchors.command``:
``python scripts/confirmatory_anchor.py --clone DIR [--run-id ID] RUN_ANCHORS_FILE``.

The runner appends the absolute path of anchors.jsonl as the last argument.
``main`` and the push side (``publish``) live in
``confirmatory.anchors.witness``; the read side that ``verify --witness``
runs is ``confirmatory.anchors.check``, and the git plumbing both use is
``confirmatory.anchors.git``. See docs/ANCHORS.md.
"""

import sys
from pathlib import Path

# Run from a checkout without installing the package first.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from confirmatory.anchors.witness import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
