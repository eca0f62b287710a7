"""A study's differential test of the runner, as a study team writes it in its own repository.

It runs the runner's ``Run`` through the library's front door on a small
board with the shipped fakes (the model and the engine pool of
``confirmatory.testing.fakes``, the host's readers of
``confirmatory.testing.hostfakes``), then reads the records with a reader
of its own, written from RECORDS.md with the standard library only: it
trusts nothing of the runner's, not even its verifier. Run it with
``python -m pytest -q examples/differential``.

What it checks, each straight from the contract:
- every log is a hash chain: line i has ``seq`` i and ``prev`` the sha256
  of line i-1's bytes (line 0's: sha256 of "<manifest sha256>:<log path>");
- every attempt line names a record file that hashes as it says and
  counts the cost it says;
- every household of every model's seeded draw ended, finished;
- the close line's total spend is the sum of every attempt's and late cost.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import confirmatory
from confirmatory.testing.designs import write_design
from confirmatory.testing.hostfakes import ScriptedReaders


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _lines(path: Path) -> list[dict]:
    return [json.loads(raw) for raw in path.read_bytes().splitlines()]


def chain_problems(run_dir: Path) -> list[str]:
    problems = []
    run_sha = _sha((run_dir / "manifest.json").read_bytes())
    logs = [
        (rel, run_sha)
        for rel in ("run.jsonl", "host.jsonl", "anchors.jsonl", "anchor-pushes.jsonl", "resume.jsonl")
        if (run_dir / rel).exists()
    ]
    for model in sorted(p.name for p in (run_dir / "models").iterdir()):
        model_sha = _sha((run_dir / "models" / model / "manifest.json").read_bytes())
        logs += [(f"models/{model}/{name}", model_sha) for name in ("run.jsonl", "admission.jsonl")]
    for rel, manifest_sha in logs:
        prev = _sha(f"{manifest_sha}:{rel}".encode())
        for i, raw in enumerate((run_dir / rel).read_bytes().splitlines()):
            obj = json.loads(raw)
            if obj.get("seq") != i or obj.get("prev") != prev:
                problems.append(f"{rel}:{i}: seq {obj.get('seq')!r} / prev do not chain")
                break
            prev = _sha(raw)
    return problems


def record_problems(run_dir: Path) -> list[str]:
    problems = []
    for log in sorted((run_dir / "models").glob("*/run.jsonl")):
        for line in _lines(log):
            if line.get("event") != "attempt":
                continue
            path = log.parent / line["record"]
            if not path.is_file():
                problems.append(f"{log.parent.name}: {line['record']}: no such record")
                continue
            data = path.read_bytes()
            if _sha(data) != line["record_sha256"]:
                problems.append(f"{log.parent.name}: {line['record']}: does not hash as its attempt line says")
            if json.loads(data).get("cost_nusd") != line["cost_nusd"]:
                problems.append(f"{log.parent.name}: {line['record']}: its cost differs from its attempt line's")
    return problems


def draw_problems(run_dir: Path) -> list[str]:
    problems = []
    for log in sorted((run_dir / "models").glob("*/run.jsonl")):
        draw = json.loads((log.parent / "manifest.json").read_bytes())["draw"]
        ended = {
            line["household"]
            for line in _lines(log)
            if line.get("event") == "household" and line.get("finished") is True
        }
        problems += [f"{log.parent.name}: household {h} of its draw never finished" for h in draw if h not in ended]
    return problems


def spend_problems(run_dir: Path) -> list[str]:
    spent = sum(
        line.get("cost_nusd", 0)
        for log in (run_dir / "models").glob("*/run.jsonl")
        for line in _lines(log)
        if line.get("event") in ("attempt", "late-cost")
    )
    before = json.loads((run_dir / "manifest.json").read_bytes()).get("spend_before_nusd", 0)
    closes = [line for line in _lines(run_dir / "run.jsonl") if line.get("event") == "close"]
    if len(closes) != 1:
        return [f"run.jsonl: {len(closes)} close lines"]
    if closes[0]["spend_total_nusd"] != before + spent:
        return [
            f"run.jsonl: the close line's total {closes[0]['spend_total_nusd']} is not the "
            f"{before + spent} its attempts and late costs add up to"
        ]
    return []


def test_the_runner_follows_the_contract_on_our_board(tmp_path):
    households = [{"id": f"hh-{i:03d}"} for i in range(8)]
    households[2]["plan"] = {"alone/0": "provider"}  # one provider failure: a rerun in pass 1
    design = confirmatory.load_design(write_design(tmp_path / "board", households=households, models=2))
    run_dir = tmp_path / "run"
    assert confirmatory.preflight(design, run_dir) == []
    options = confirmatory.RunOptions(host_readers=ScriptedReaders([0.1]), install_signals=False)
    result = confirmatory.Run(design, run_dir, options=options).execute()
    assert result.status == "completed", result
    problems = chain_problems(run_dir) + record_problems(run_dir) + draw_problems(run_dir) + spend_problems(run_dir)
    assert problems == [], problems
