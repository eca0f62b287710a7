"""Outside evidence sources for the host log: a file to follow, a command to run.

Owns reading *new* lines from where the run's evidence comes from (a guard
log, power or sleep events, the kernel's OOM-killer lines): a followed file
survives rotation and truncation (each is reported as a note), a command's
output counts only for lines not seen before. A failed read raises
``ReadFailed``; the sampler (``confirmatory.host.sampler``) retries it and decides.
No psutil here.
"""

from __future__ import annotations

import os
import subprocess
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from confirmatory.runtime import children


class ReadFailed(Exception):
    """A reading could not be taken (a value of the world, not a bug)."""


READ_ERRORS = (ReadFailed, OSError)

# A command's output is read into memory: past this much of its stdout it is
# stopped and the read fails (a log printed without end, a wrong command).
MAX_COMMAND_OUTPUT_BYTES = 16 << 20
# Of its stderr only the end is kept, for the message of a failed read.
STDERR_TAIL_BYTES = 4096
# The longest line a source reports. A longer one is cut to its first
# MAX_LINE_BYTES, with a note: a rule still matches a message at its start,
# and a file's line that never ends is reported when it passes this, at the
# time it was read, while what follows up to its newline is dropped, not kept.
MAX_LINE_BYTES = 64 << 10


@dataclass(frozen=True, slots=True)
class SourceRead:
    lines: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()  # what happened to the source (rotation, truncation)


class EvidenceSource(Protocol):
    name: str

    def read_new(self) -> SourceRead: ...


def _decode_lines(chunks: list[bytes]) -> list[str]:
    out = []
    for raw in chunks:
        text = raw.decode("utf-8", errors="replace").rstrip("\r")
        if text.strip():
            out.append(text)
    return out


def _cut_note(what: str, cut: int) -> str:
    """The note for ``cut`` lines of ``what`` cut at MAX_LINE_BYTES."""
    said, each = (
        (f"a line of {what} was cut", "its start is")
        if cut == 1
        else (f"{cut} lines of {what} were cut", "the start of each is")
    )
    return (
        f"{said} at {MAX_LINE_BYTES:,} bytes (MAX_LINE_BYTES): {each} reported as a line, "
        "the rest of it up to its newline dropped"
    )


class _Lines:
    """What one read of a file finds: its complete lines, each at most
    MAX_LINE_BYTES (``cut``: how many were longer), and the unfinished rest,
    never longer. Made from the source's state and committed to it only at
    the end of the read (FileSource)."""

    def __init__(self, pending: bytes, dropping: bool):
        self.pending = pending
        # The bytes up to the next newline are not a line to report: the
        # rest of the line being written at baseline, or of a line cut.
        self.dropping = dropping
        self.lines: list[bytes] = []
        self.cut = 0

    def feed(self, data: bytes) -> None:
        """The bytes read next from the file."""
        parts = (self.pending + data).split(b"\n")
        rest = parts.pop()
        if self.dropping:
            if not parts:
                self.pending = b""
                return
            parts, self.dropping = parts[1:], False
        for line in parts:
            if len(line) > MAX_LINE_BYTES:
                line, self.cut = line[:MAX_LINE_BYTES], self.cut + 1
            self.lines.append(line)
        if len(rest) > MAX_LINE_BYTES:
            # A line that passes the bound before its newline is reported now.
            self.lines.append(rest[:MAX_LINE_BYTES])
            self.cut += 1
            rest, self.dropping = b"", True
        self.pending = rest

    def end_file(self) -> None:
        """The file is left (rotation): its unfinished last line is a line."""
        if self.pending and not self.dropping:
            self.lines.append(self.pending)
        self.restart()

    def restart(self) -> None:
        """Reading starts again at a file's first byte."""
        self.pending, self.dropping = b"", False


# Non-blocking: opening a FIFO (or a device) for reading would otherwise wait
# for a writer, the sampler's thread and `check`'s probe with it; a FIFO then
# fails its first read (it cannot be read at an offset) and is refused.
_OPEN_FLAGS = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0)


class FileSource:
    """Follows a file like `tail -F`: only bytes appended after the first read.

    The file stays open between reads, so the tail of a file renamed away by
    rotation is still read before switching to the new file at the path.
    Reads use `os.pread` and commit their state only at the end, so a read
    that fails half-way can be retried without losing or repeating lines.
    A missing file is not a failure (logs are often created lazily); it is
    noted once, and a file that appears later is read from its start. A line
    longer than MAX_LINE_BYTES is cut (``_Lines``), with a note.
    """

    def __init__(self, name: str, path: str | os.PathLike[str]):
        self.name = name
        self.path = Path(path)
        self._started = False
        self._fd: int | None = None
        self._ident: tuple[int, int] | None = None
        self._offset = 0
        self._pending = b""  # the unfinished last line, at most MAX_LINE_BYTES
        self._dropping = False  # up to the next newline, bytes are dropped (_Lines)
        self._missing_noted = False

    def read_new(self) -> SourceRead:
        if not self._started:
            return self._baseline()
        notes: list[str] = []
        found, offset = _Lines(self._pending, self._dropping), self._offset
        if self._fd is not None:
            if os.fstat(self._fd).st_size < offset:
                # Race: truncated and refilled past `offset` between two reads looks
                # like growth; what was written before the refill is then lost.
                notes.append(f"{self.path} truncated below byte {offset}; reading it again from the start")
                found.restart()
                offset = 0
            data = _pread_all(self._fd, offset)
            found.feed(data)
            offset += len(data)
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            st = None
        new_fd = None
        missing_noted = self._missing_noted
        if st is None:
            if not missing_noted:
                notes.append(f"{self.path} is missing; waiting for it to appear")
                missing_noted = True
        elif (st.st_dev, st.st_ino) != self._ident:
            new_fd = os.open(self.path, _OPEN_FLAGS)
            try:
                if self._fd is not None:
                    notes.append(f"{self.path} was replaced (rotation); the old file was read to its end")
                    found.end_file()
                else:
                    notes.append(f"{self.path} appeared; reading it from the start")
                    found.restart()
                data = _pread_all(new_fd, 0)
                found.feed(data)
                offset = len(data)
                ident = (os.fstat(new_fd).st_dev, os.fstat(new_fd).st_ino)
            except BaseException:
                os.close(new_fd)
                raise
            missing_noted = False
        if found.cut:
            notes.append(_cut_note(str(self.path), found.cut))
        # Commit: nothing above changed the source's state.
        if new_fd is not None:
            if self._fd is not None:
                os.close(self._fd)
            self._fd, self._ident = new_fd, ident
        self._pending, self._dropping, self._offset = found.pending, found.dropping, offset
        self._missing_noted = missing_noted
        return SourceRead(lines=tuple(_decode_lines(found.lines)), notes=tuple(notes))

    def _baseline(self) -> SourceRead:
        try:
            fd = os.open(self.path, _OPEN_FLAGS)
        except FileNotFoundError:
            self._started, self._missing_noted = True, True
            return SourceRead(notes=(f"{self.path} is missing; waiting for it to appear",))
        try:
            st = os.fstat(fd)
            last = os.pread(fd, 1, st.st_size - 1) if st.st_size else b"\n"
        except BaseException:
            os.close(fd)
            raise
        self._fd, self._ident, self._offset = fd, (st.st_dev, st.st_ino), st.st_size
        self._dropping = last != b"\n"  # the line being written at baseline is not ours
        self._started = True
        return SourceRead()

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def _pread_all(fd: int, offset: int) -> bytes:
    chunks: list[bytes] = []
    while True:
        chunk = os.pread(fd, 1 << 16, offset)
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)
        offset += len(chunk)


class CommandSource:
    """Runs a command at every read; output lines it has not printed before count.

    The first successful run is the baseline (its lines predate the monitor).
    Lines are counted as a multiset: the k-th copy of a line is new when no
    earlier output held k copies, so a log that repeats a message still
    shows each repeat once.  A command must exit: a follow-mode command
    (`-f`, `--follow`) would time out (see docs/HOST.md for the alternatives).
    A non-zero exit status is a failed read, and so is output past
    MAX_COMMAND_OUTPUT_BYTES. It runs in a session of its own
    (``confirmatory.runtime.children``), so a timeout or that bound stops every
    process it started.
    """

    def __init__(
        self, name: str, argv: Sequence[str], *, timeout_s: float = 10.0, cwd: str | os.PathLike[str] | None = None
    ):
        self.name = name
        self.argv = list(argv)
        self.timeout_s = timeout_s
        self.cwd = cwd  # the design's directory: a relative program path is taken from there
        self._seen: Counter[str] | None = None

    def read_new(self) -> SourceRead:
        try:
            # Its own session: stopped at its timeout, or at the bound on its
            # output, with every process it started (a shell's pipeline).
            done = children.run_captured(
                self.argv,
                cwd=self.cwd,
                timeout=self.timeout_s,
                max_stdout=MAX_COMMAND_OUTPUT_BYTES,
                stderr_tail=STDERR_TAIL_BYTES,
            )
        except (OSError, subprocess.SubprocessError) as exc:
            raise ReadFailed(f"command {self.argv[0]!r}: {type(exc).__name__}: {exc}") from exc
        if done.stopped == children.TIMEOUT:
            raise ReadFailed(
                f"command {self.argv[0]!r}: TimeoutExpired: it ran longer than its timeout of "
                f"{self.timeout_s:g} s; it was stopped with every process it started"
            )
        if done.stopped == children.OUTPUT:
            raise ReadFailed(
                f"command {self.argv[0]!r}: its output exceeded the bound of "
                f"{MAX_COMMAND_OUTPUT_BYTES:,} bytes (MAX_COMMAND_OUTPUT_BYTES); "
                "it was stopped with every process it started"
            )
        if done.rc != 0:
            tail = done.stderr.decode("utf-8", errors="replace").strip()[-300:]
            raise ReadFailed(f"command {self.argv[0]!r} exited {done.rc}" + (f": {tail}" if tail else ""))
        raw = done.stdout.split(b"\n")
        output = _decode_lines([line[:MAX_LINE_BYTES] for line in raw])
        if self._seen is None:
            self._seen = Counter(output)
            return SourceRead()
        copies: Counter[str] = Counter()
        new = []
        for line in output:
            copies[line] += 1
            if copies[line] > self._seen[line]:
                new.append(line)
        for line, k in copies.items():
            self._seen[line] = max(self._seen[line], k)
        # A note for the new lines that were cut (a cut line seen before was noted then).
        long = set(_decode_lines([line[:MAX_LINE_BYTES] for line in raw if len(line) > MAX_LINE_BYTES]))
        cut = sum(line in long for line in new)
        notes = (_cut_note(f"command {self.argv[0]!r}'s output", cut),) if cut else ()
        return SourceRead(lines=tuple(new), notes=notes)


def _field(item: Any, key: str) -> Any:
    return item.get(key) if isinstance(item, dict) else getattr(item, key, None)


def sources_from_spec(
    evidence: Sequence[Any], *, command_timeout_s: float = 10.0, base_dir: str | os.PathLike[str] | None = None
) -> list[EvidenceSource]:
    """The design's `[[host.evidence]]` entries as sources ({name, path} or {name, command}).

    Relative paths are the design directory's, as for the households file and
    the pins: a relative `path` is resolved against it, and a command runs in
    it (so a relative program path is taken from there too, as the anchor
    command's is). The directory is ``base_dir``, else the entry's own
    ``base_dir`` (``Evidence`` entries of a loaded design carry it), else the
    working directory.
    """
    sources: list[EvidenceSource] = []
    for item in evidence:
        name, path, command = _field(item, "name"), _field(item, "path"), _field(item, "command")
        if (path is None) == (command is None):
            raise ValueError(f"evidence source {name!r}: give exactly one of path or command")
        directory = base_dir if base_dir is not None else _field(item, "base_dir")
        if path is not None:
            sources.append(FileSource(name, Path(directory) / path if directory is not None else path))
        else:
            sources.append(CommandSource(name, command, timeout_s=command_timeout_s, cwd=directory))
    return sources


def command_timeout_s(sample_interval_s: float) -> float:
    """How long an evidence command may run at a read: the sample interval,
    within 1 to 10 s (the sampler's and the preflight probe's)."""
    return min(10.0, max(1.0, float(sample_interval_s)))


def retry_pause_s(sample_interval_s: float) -> float:
    """The pause between two tries of a failed read: a tenth of the sample
    interval, at most 1 s."""
    return min(1.0, float(sample_interval_s) / 10)


def probe_source(source: EvidenceSource, *, tries: int, pause_s: float, sleep: Any = None) -> str | None:
    """Read ``source`` as the sampler will: its first read (the baseline)
    and the next, each failed read tried again up to ``tries`` times with
    ``pause_s`` between, as ``HostMonitor`` does; the problem when every try
    of a read failed, else None. Such a source would end the run with
    ``runner-error`` at the sampler's first step, after the first households
    were admitted and paid for; `check` and `run` refuse it before. Nothing
    is kept: the run reads from its own fresh sources."""
    import time

    sleep = sleep or time.sleep
    try:
        for _ in range(2):
            error = None
            for k in range(max(1, tries)):
                try:
                    source.read_new()
                    break
                except READ_ERRORS as exc:
                    error = f"{type(exc).__name__}: {exc}"
                if k + 1 < tries:
                    sleep(pause_s)
            else:
                return f"failed {max(1, tries)} reads: {error}"
            if isinstance(source, CommandSource):
                break  # each read runs it again: one run shows it
    finally:
        close = getattr(source, "close", None)
        if close is not None:
            close()
    return None
