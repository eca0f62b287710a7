"""Readers of a run directory's files (RECORDS.md): a manifest or record
read together with the sha256 of its bytes (``read_json``), a log's lines
one at a time (``stream``), and the fields the contract requires of a
record, of its calls and of an error object.

Where each file lives is ``confirmatory.records.layout``; the indexes over
host.jsonl are ``confirmatory.records.hostindex``.

Pure readers: nothing here writes, and nothing imports the runner, litellm
or psutil. Logs themselves are streamed with `chain.iter_lines`.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from confirmatory.records.chain import LogLine, open_regular
from confirmatory.records.reader import iter_lines

# A record's contract fields (RECORDS.md "Records"), its calls' and an error
# object's: required, as that section says of every field it names. The
# runner writes records with them (spend); verify requires them.
RECORD_FIELDS = (
    "model",
    "household",
    "arm",
    "pass",
    "lane",
    "start",
    "end",
    "status",
    "cost_nusd",
    "error",
    "calls",
    "answer",
)
CALL_FIELDS = ("kind", "start", "end", "cost_nusd", "finish_reason", "error")
CALL_KINDS = ("chat", "responses", "tool", "explain")
ERROR_FIELDS = ("type", "mro", "message", "escalated_after_truncation")
_ERROR_FIELD_SET = frozenset(ERROR_FIELDS)


def is_error_object(err: Any) -> bool:
    """Whether ``err`` is an error as a record holds one: an object with the
    contract's fields, ``type`` a string and ``mro`` a list."""
    return (
        type(err) is dict and err.keys() >= _ERROR_FIELD_SET and type(err["type"]) is str and type(err["mro"]) is list
    )


@dataclass(frozen=True, slots=True)
class JsonFile:
    """A JSON file as read: its object (None if unreadable), sha256, problem."""

    obj: Any
    sha256: str | None
    problem: str | None = None


def read_json(path: Path) -> JsonFile:
    try:
        with open_regular(path) as fh:  # a FIFO or a device is not a manifest: never read
            data = fh.read()
    except OSError as exc:
        return JsonFile(None, None, f"cannot read: {exc.strerror or exc}")
    digest = hashlib.sha256(data).hexdigest()
    try:
        return JsonFile(json.loads(data), digest)
    except (ValueError, UnicodeDecodeError) as exc:
        return JsonFile(None, digest, f"not JSON: {exc}")


def stream(path: Path) -> Iterator[LogLine]:
    """The lines of a log, one at a time (`chain.iter_lines`)."""
    return iter_lines(Path(path))
