"""Helpers for tests that execute fake runs and check them with the verifier (the oracle)."""

from __future__ import annotations

import hashlib
import json
import shutil
import threading
from pathlib import Path
from typing import Any

from confirmatory.design.load import load_design
from confirmatory.engine.run import Run, RunResult
from confirmatory.testing.designs import write_design

DEMO = Path(__file__).resolve().parent.parent / "confirmatory" / "demo"


def minimal_design(tmp_path: Path, module: str, harness_src: str, extra_model_lines: str = "") -> Path:
    """The bundled minimal design, copied beside its households and a harness
    module of its own (a unique name: imports are cached), pinned; optionally
    with lines added to its last model."""
    harness = tmp_path / f"{module}.py"
    harness.write_text(harness_src)
    shutil.copy(DEMO / "minimal-households.jsonl", tmp_path / "minimal-households.jsonl")
    text = (DEMO / "minimal.toml").read_text()
    old_pin = text.split('"minimal_harness.py" = "')[1].split('"')[0]
    text = text.replace("confirmatory.demo.minimal_harness:run", f"{module}:run")
    pin = hashlib.sha256(harness.read_bytes()).hexdigest()
    text = text.replace(f'"minimal_harness.py" = "{old_pin}"', f'"{module}.py" = "{pin}"')
    # The engine stays the package's (confirmatory.demo.engine), not beside the copy: unpinned here.
    text = "".join(
        line for line in text.splitlines(keepends=True) if not line.startswith(('"engine.py" = ', '"calculator.py" = '))
    )
    text = text.replace('name = "truncates"\n', 'name = "truncates"\n' + extra_model_lines)
    design = tmp_path / "design.toml"
    design.write_text(text)
    return design


def make_run(
    tmp_path: Path,
    *,
    install_signals: bool = False,
    clock: Any = None,
    host_readers: Any = None,
    disk_floor_bytes: int | None = None,
    restore_signals: bool = True,
    **design_kw: Any,
) -> Run:
    design = write_design(tmp_path / "design", **design_kw)
    extra = {} if disk_floor_bytes is None else {"disk_floor_bytes": disk_floor_bytes}
    return Run(
        load_design(design),
        tmp_path / "run",
        install_signals=install_signals,
        clock=clock,
        host_readers=host_readers,
        restore_signals=restore_signals,
        **extra,
    )


def execute(tmp_path: Path, **kw: Any) -> tuple[RunResult, Path]:
    run = make_run(tmp_path, **kw)
    result = run.execute()
    return result, run.run_dir


def verified(run_dir: Path) -> Any:
    """Run the verifier and fail with its whole report unless every invariant holds."""
    from confirmatory.verify import verify_run

    report = verify_run(run_dir)
    assert report.ok, report.to_table(shown=10)
    return report


def events(run_dir: Path, model: str | None = None, log: str = "run.jsonl") -> list[dict[str, Any]]:
    path = run_dir / log if model is None else run_dir / "models" / model / log
    return [json.loads(line) for line in path.read_text().splitlines()]


def of(evts: list[dict[str, Any]], event: str, **match: Any) -> list[dict[str, Any]]:
    return [e for e in evts if e.get("event") == event and all(e.get(k) == v for k, v in match.items())]


def record(run_dir: Path, model: str, household: str, arm: str, pass_index: int) -> dict[str, Any]:
    path = run_dir / "models" / model / "records" / household / arm / f"{pass_index}.json"
    return json.loads(path.read_text())


def in_background(fn: Any) -> threading.Thread:
    t = threading.Thread(target=fn, daemon=True)
    t.start()
    return t


def fail_first_write(monkeypatch: Any, event: str, log_suffix: str) -> list[str]:
    """Make the first write of a ``event`` line to the log whose path ends
    with ``log_suffix`` fail with EIO (a real os.write otherwise); returns
    the list the failed file's path is put in once it has failed."""
    import errno
    import os

    real_write = os.write
    failed: list[str] = []
    needle = f'"event":"{event}"'.encode()

    def write(fd: int, data: Any) -> int:
        if not failed and needle in bytes(data):
            try:
                target = os.readlink(f"/proc/self/fd/{fd}")
            except OSError:
                target = ""
            if target.endswith(log_suffix):
                failed.append(target)
                raise OSError(errno.EIO, "injected I/O error")
        return real_write(fd, data)

    monkeypatch.setattr(os, "write", write)
    return failed
