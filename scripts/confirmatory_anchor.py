#!/usr/bin/env python3
"""Thin entry point for the design's ``anchors.command``:
``python scripts/confirmatory_anchor.py --clone DIR [--run-id ID] RUN_ANCHORS_FILE``.

The runner appends the absolute path of anchors.jsonl as the last argument.
Everything lives in ``confirmatory.witness``; see docs/ANCHORS.md.
"""
import sys
from pathlib import Path

# Run from a checkout without installing the package first.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from confirmatory.witness import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
