"""Real disk faults under a real runner: each helper runs ``confirmatory run``
as a process on a small design against the bundled simulator, with one real
fault, and returns what it left (``Faulted``): the run directory, the exit
status, stderr, and strace's log of every fsync, write, open and close of
the run (always for EIO; for the others when strace is installed).

- ``enospc_run``: the run directory on a small tmpfs that fills mid-run
  (ENOSPC). A context manager: the tmpfs stays mounted until it exits;
  ``Faulted.grow()`` remounts it larger (the disk fixed), so a test can carry
  the run on before the directory goes.
- ``efbig_run``: the runner's files may not grow past a size
  (``RLIMIT_FSIZE``, SIGXFSZ ignored: the write fails with EFBIG).
- ``eio_run``: strace injects EIO into the Nth fsync (of one file, or of
  every thread's).

The runner's 64 MiB free-space floor (``engine.run.DISK_FLOOR_BYTES``) would
stop these runs before any fault (it is what avoids them), so the process
lowers it to 0 before it hands its arguments to the CLI, as the in-process
disk tests do: the command is otherwise ``confirmatory run`` itself.
"""

from __future__ import annotations

import contextlib
import os
import re
import resource
import shutil
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from runhelpers import DEMO, minimal_design

ROOT = Path(__file__).resolve().parent.parent

# `confirmatory run` with the free-space floor lowered (the only change).
LAUNCH = (
    "import sys\n"
    "import confirmatory.engine.run as r\n"
    "r.DISK_FLOOR_BYTES = 0\n"
    "from confirmatory.cli.main import main\n"
    "main(args=sys.argv[1:], prog_name='confirmatory')\n"
)


@dataclass
class Faulted:
    """What a faulted run left."""

    run_dir: Path
    design: Path
    returncode: int
    stderr: str
    strace_log: Path | None = None
    mount: Path | None = None  # the tmpfs the run directory is on (enospc_run)

    def grow(self, size_kib: int = 256 << 10) -> None:
        """The disk fixed: remount the run's tmpfs at ``size_kib`` (the
        default, 256 MiB, is above the runner's 64 MiB free-space floor)."""
        assert self.mount is not None, "not on a tmpfs"
        subprocess.run(["mount", "-o", f"remount,size={size_kib}k", str(self.mount)], check=True, capture_output=True)


def simulator_design(root: Path, witness_root: Path | None = None) -> Path:
    """The bundled minimal design (3 models, 6 households, 3 arms, every call
    to the bundled simulator on 127.0.0.1) in ``root/study``, its harness
    pinned beside it, anchored to a local witness in ``root/witness``
    (off the faulty disk)."""
    from confirmatory.anchors.witness import init_local_witness

    (root / "study").mkdir(parents=True, exist_ok=True)
    design = minimal_design(root / "study", "diskfault_harness", (DEMO / "minimal_harness.py").read_text())
    clone = init_local_witness((witness_root or root) / "witness")
    text = design.read_text()
    text, n = re.subn(
        r"(?m)^command = \[.*\]$",
        f'command = ["{{python}}", "-m", "confirmatory.anchors.witness", "--clone", "{clone}"]',
        text,
    )
    assert n == 1
    design.write_text(text)
    return design


def _env() -> dict[str, str]:
    path = os.environ.get("PYTHONPATH")
    return dict(os.environ, PYTHONPATH=str(ROOT) + (os.pathsep + path if path else ""))


TRACED = "trace=fsync,fdatasync,write,pwrite64,writev,open,openat,close"


def run_process(
    design: Path,
    run_dir: Path,
    *,
    strace_log: Path | None = None,
    inject: tuple[str, ...] = (),
    preexec_fn=None,
    timeout: float = 240,
    env: dict[str, str] | None = None,
) -> subprocess.CompletedProcess:
    """``confirmatory run DESIGN --out RUN_DIR --quiet`` as a process. With
    ``strace_log``: under ``strace -f -y`` (every process and thread; each
    descriptor printed with its path), logging every fsync, write, open and
    close, and injecting ``inject``. strace writes its log into a pipe that
    this process copies to ``strace_log``: a pipe is no regular file, so a
    file-size limit meant for the runner (which strace passes on) cannot
    cut the log short."""
    cmd = [sys.executable, "-c", LAUNCH, "run", str(design), "--out", str(run_dir), "--quiet"]
    if strace_log is None:
        return subprocess.run(
            cmd, capture_output=True, text=True, timeout=timeout, env={**_env(), **(env or {})}, preexec_fn=preexec_fn
        )
    strace = strace_or_skip()
    read_end, write_end = os.pipe()
    copier = threading.Thread(target=_copy, args=(read_end, strace_log), daemon=True)
    copier.start()
    try:
        done = subprocess.run(
            [strace, "-f", "-y", "-qq", "-e", TRACED, *inject, "-o", f"/dev/fd/{write_end}", *cmd],
            capture_output=True,
            text=True,
            timeout=timeout,
            env={**_env(), **(env or {})},
            preexec_fn=preexec_fn,
            pass_fds=(write_end,),
        )
    finally:
        os.close(write_end)
        copier.join(timeout=30)
    return done


def _copy(fd: int, dest: Path) -> None:
    with os.fdopen(fd, "rb") as src, open(dest, "wb") as out:
        shutil.copyfileobj(src, out)


def strace_or_skip() -> str:
    path = shutil.which("strace")
    if path is None:
        pytest.skip("needs strace (apt-get install strace; .ci/run installs it)")
    return path


# ------------------------------------------------------------------ ENOSPC


def _mounted(path: Path) -> bool:
    return any(line.split()[1] == str(path) for line in Path("/proc/self/mounts").read_text().splitlines())


@contextlib.contextmanager
def tmpfs(path: Path, size_kib: int) -> Iterator[Path]:
    """A tmpfs of ``size_kib`` at ``path``, unmounted on the way out; skips
    the test (saying why) when this process may not mount one."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs for ENOSPC needs root (CI runs as root)")
    path.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size_kib}k,mode=0755", "tmpfs", str(path)],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        pytest.skip(f"could not mount a tmpfs (mount -t tmpfs): {done.stderr.strip() or done.returncode}")
    try:
        yield path
    finally:
        if _mounted(path):
            subprocess.run(["umount", str(path)], capture_output=True)
            if _mounted(path):  # something still has a file open there
                subprocess.run(["umount", "-l", str(path)], capture_output=True)


# 160 KiB: the run's set-up takes about 60 (every file a 4 KiB page at
# least), its 54 records and growing logs about 280 more: the disk fills
# about a third of the way through the households.
ENOSPC_KIB = 160


@contextlib.contextmanager
def enospc_run(root: Path, size_kib: int = ENOSPC_KIB) -> Iterator[Faulted]:
    """The run directory (``run-enospc``) on a ``size_kib`` tmpfs at
    ``root/disk``, run until the disk is full. Yields while the tmpfs is
    mounted; traced by strace when it is installed (``Faulted.strace_log``)."""
    design = simulator_design(root)
    log = root / "strace-enospc.log" if shutil.which("strace") else None
    with tmpfs(root / "disk", size_kib) as disk:
        run_dir = disk / "run-enospc"
        done = run_process(design, run_dir, strace_log=log)
        yield Faulted(run_dir, design, done.returncode, done.stderr, strace_log=log, mount=disk)


# Bytes a file of the runner may hold: past the set-up's largest file
# (config.json, about 6.7 kB), below the models' run.jsonl at the end
# (about 10 kB): a model log fails mid-run.
EFBIG_BYTES = 8192


def efbig_run(root: Path, limit_bytes: int = EFBIG_BYTES) -> Faulted:
    """The runner (``root/run-efbig``) and its children may not write past
    ``limit_bytes`` in any file: RLIMIT_FSIZE, with SIGXFSZ ignored so that
    the write that would pass it is cut short or returns EFBIG instead of
    killing the process. Traced by strace when it is installed."""

    def limit() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit_bytes, limit_bytes))

    design = simulator_design(root)
    run_dir = root / "run-efbig"
    log = root / "strace-efbig.log" if shutil.which("strace") else None
    done = run_process(design, run_dir, strace_log=log, preexec_fn=limit)
    return Faulted(run_dir, design, done.returncode, done.stderr, strace_log=log)


def eio_run(root: Path, when: int, *, only: str | None = None, env: dict[str, str] | None = None) -> Faulted:
    """``root/run-eio``, with strace injecting EIO into the ``when``-th fsync.
    strace counts per thread: without ``only`` every thread's ``when``-th
    fsync fails; with ``only`` (a path relative to the run directory) only
    that file's fsyncs count and fail (strace -P, which filters the log
    alike: it then holds that file's history)."""
    strace_or_skip()
    design = simulator_design(root)
    run_dir = root / "run-eio"
    inject = ("-e", f"inject=fsync:error=EIO:when={when}")
    if only is not None:
        inject += ("-P", str(run_dir / only))
    log = root / "strace-eio.log"
    done = run_process(design, run_dir, strace_log=log, inject=inject, env=env)
    return Faulted(run_dir, design, done.returncode, done.stderr, strace_log=log)


_RESUMED = re.compile(r"^(\d+)\s+<\.\.\. \w+ resumed>(.*)$")
_CALL = re.compile(r"^\d+\s+(fsync|fdatasync|write|pwrite64|writev|close)\((\d+)(?:<([^>]*)>)?")
_RESULT = re.compile(r"\)\s+=\s+(-?\d+)(?: (E[A-Z0-9]+))?[^)]*(?:\([^)]*\))?[^=]*$")


@dataclass
class FsyncAudit:
    """What strace's log says about the descriptors whose write or fsync failed."""

    failed: list[str]  # each write or fsync of a run file that failed (its log line)
    retried: list[str]  # each fsync of a descriptor after a write or fsync of it failed, before it was closed
    file_again: list[str]  # each fsync, on any descriptor, of a file whose fsync or write had failed
    fsyncs: int

    def failed_with(self, name: str, call: str = "") -> list[str]:
        return [line for line in self.failed if f"= -1 {name} " in line and f" {call}(" in line]


def _joined(lines: list[str]) -> list[str]:
    """strace splits a call another thread interrupts into "<unfinished ...>"
    and "<... fsync resumed>": each such pair joined (by thread id) into one line."""
    pending: dict[str, str] = {}
    out: list[str] = []
    for line in lines:
        if line.endswith("<unfinished ...>"):
            pending[line.split(" ", 1)[0]] = line[: -len("<unfinished ...>")].rstrip()
            continue
        m = _RESUMED.match(line)
        if m and m.group(1) in pending:
            out.append(pending.pop(m.group(1)) + m.group(2))
        else:
            out.append(line)
    return out


def audit_fsyncs(log: Path, under: Path) -> FsyncAudit:
    """Read strace's log for the files under ``under`` (the run directory):
    every write or fsync that failed, whether any later fsync touched that
    descriptor before a close let its number go to another file (the
    PostgreSQL rule: a failed fsync is never retried, the kernel may have
    dropped the pages), and whether that file was fsynced again at all,
    through a new descriptor. strace -f prints thread ids and the runner's
    threads share one table of descriptors, so a descriptor is its number
    with the path strace printed beside it (``-y``)."""
    prefix = str(under) + "/"
    failed: list[str] = []
    poisoned: set[tuple[int, str]] = set()
    bad_files: set[str] = set()
    retried: list[str] = []
    again: list[str] = []
    fsyncs = 0
    for line in _joined(log.read_text(errors="replace").splitlines()):
        m = _CALL.match(line)
        if not m or not (m.group(3) or "").startswith(prefix):
            continue
        call, key = m.group(1), (int(m.group(2)), m.group(3))
        if call == "close":
            poisoned.discard(key)  # the number may now name another file
            continue
        r = _RESULT.search(line)
        failure = r is not None and r.group(1) == "-1"
        if call in ("fsync", "fdatasync"):
            fsyncs += 1
            if key in poisoned:
                retried.append(line)
            elif key[1] in bad_files:
                again.append(line)
        if failure and r.group(2) not in ("EINTR", "EAGAIN"):
            failed.append(line)
            poisoned.add(key)
            bad_files.add(key[1])
    return FsyncAudit(failed, retried, again, fsyncs)


@contextlib.contextmanager
def filled_run(
    root: Path, at: str, count: int = 1, *, leave: int = 0, witness_on_disk: bool = False
) -> Iterator[Faulted]:
    """The run directory (``run-full``) on a roomy tmpfs that a fault plan
    (``confirmatory.records.killpoint``: CONFIRMATORY_FILL_AT) fills just
    before the ``count``-th write ``at`` names, ``leave`` bytes left free: so
    that write is the first to fail, whichever log it is. The witness clone
    is on the same disk with ``witness_on_disk``. ``Faulted.grow()`` (or
    removing ``mount/filler``) gives the room back."""
    with tmpfs(root / "disk", 32 << 10) as disk:
        design = simulator_design(root, witness_root=disk if witness_on_disk else None)
        run_dir = disk / "run-full"
        done = run_process(
            design,
            run_dir,
            env={
                "CONFIRMATORY_FILL_AT": at,
                "CONFIRMATORY_FILL_AT_COUNT": str(count),
                "CONFIRMATORY_FILL_FILE": str(disk / "filler"),
                "CONFIRMATORY_FILL_LEAVE": str(leave),
            },
        )
        yield Faulted(run_dir, design, done.returncode, done.stderr, mount=disk)
