"""The least any verifier written in Python must do to check a run, with none of the checks:

    python benchmarks/verify_floor.py RUN_DIR [--workers N]

Every folder under each model's records/ is listed (as verify lists it, to
find a record file without a line), every record file is opened, read,
hashed (sha256) and parsed, and every line of every log is hashed and
parsed, with orjson (the fastest parser verify may use; json.loads without
it). Nothing is compared and nothing is kept. The work is cut
into tasks at least as fine as verify's (host.jsonl in spans, each model's
records and logs apart) and run by a pool of N processes, largest first
(default: one per core), so the time is a floor for this interpreter on
this machine and disk: verify cannot beat it and still read what it checks.

Prints one JSON object: seconds, items (lines + files), workers.
bench_verify.py reports verify's time as a multiple of this one.
"""

from __future__ import annotations

import argparse
import itertools
import json
import multiprocessing
import os
import sys
import time
from hashlib import sha256

try:
    from orjson import loads
except ImportError:  # verify runs without it too
    from json import loads

_RDONLY = os.O_RDONLY | getattr(os, "O_CLOEXEC", 0)


def log_span(path: str, start: int, stop: int) -> int:
    """Hash and parse the lines that begin in [start, stop) of a log."""
    n = 0
    with open(path, "rb") as fh:
        fh.seek(start)
        pos = start
        for line in fh:
            if pos >= stop:
                break
            pos += len(line)
            body = line[:-1] if line.endswith(b"\n") else line
            sha256(body).hexdigest()
            loads(body)
            n += 1
    return n


def records(base: str) -> int:
    """List every household and arm folder; read, hash and parse every file in them."""
    n = 0
    try:
        households = os.listdir(base)
    except FileNotFoundError:
        return 0
    for h in households:
        for arm in os.scandir(os.path.join(base, h)):
            for name in os.listdir(arm.path):
                fd = os.open(os.path.join(arm.path, name), _RDONLY)
                try:
                    data = os.read(fd, 1 << 16)
                finally:
                    os.close(fd)
                sha256(data).hexdigest()
                loads(data)
                n += 1
    return n


def spans(path: str, parts: int) -> list[tuple[int, int]]:
    """[start, stop) byte ranges of a log, each starting at a line."""
    size = os.path.getsize(path)
    cuts = [0]
    with open(path, "rb") as fh:
        for k in range(1, parts):
            fh.seek(size * k // parts)
            fh.readline()
            cuts.append(min(fh.tell(), size))
    cuts.append(size)
    return [(a, b) for a, b in itertools.pairwise(cuts) if b > a]


def tasks(root: str, parts: int) -> list[tuple[int, str, tuple]]:
    """(weight in bytes, kind, arguments), largest first."""
    out = []

    def log(rel: str, cut: int = 1) -> None:
        path = os.path.join(root, rel)
        if os.path.isfile(path):
            for a, b in spans(path, cut):
                out.append((b - a, "log", (path, a, b)))

    log("host.jsonl", parts)
    for rel in ("run.jsonl", "anchors.jsonl", "anchor-pushes.jsonl", "resume.jsonl"):
        log(rel)
    models = os.path.join(root, "models")
    for m in sorted(os.listdir(models)):
        log(f"models/{m}/run.jsonl")
        log(f"models/{m}/admission.jsonl")
        base = os.path.join(models, m, "records")
        # weighted by the model's run.jsonl (one attempt line per record file)
        try:
            weight = 4 * os.path.getsize(os.path.join(models, m, "run.jsonl"))
        except OSError:
            weight = 0
        out.append((weight, "records", (base,)))
    out.sort(key=lambda t: -t[0])
    return out


def run_task(task: tuple[int, str, tuple]) -> int:
    _, kind, args = task
    return log_span(*args) if kind == "log" else records(*args)


def floor(root: str, workers: int) -> dict:
    work = tasks(root, max(2, min(os.cpu_count() or 2, 4)) if workers > 1 else 1)
    t = time.perf_counter()
    if workers == 1:
        items = sum(run_task(w) for w in work)
    else:
        with multiprocessing.get_context("fork").Pool(workers) as pool:
            items = sum(pool.imap_unordered(run_task, work, chunksize=1))
    return {"seconds": time.perf_counter() - t, "items": items, "workers": workers}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run_dir")
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 1, help="processes (default: one per core)")
    args = ap.parse_args()
    print(json.dumps(floor(args.run_dir, max(1, args.workers))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
