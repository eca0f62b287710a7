"""Chained logs keep every acknowledged line, and report any damage exactly."""

import errno
import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from confirmatory.records.chain import ChainBroken, ChainWriteFailed, TornTail, dumps, log_seed, sha256_hex
from confirmatory.records.reader import check_chain, iter_lines, prefix_head
from confirmatory.records.writer import ChainWriter, write_json_durable

SEED = log_seed("0" * 64, "run.jsonl")


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def fd_path(fd: int) -> str:
    return os.readlink(f"/proc/self/fd/{fd}")


def write_log(path: Path, n: int) -> list[bytes]:
    """A log of n lines written by the writer; returns its lines with newlines."""
    with ChainWriter(path, SEED) as w:
        for i in range(n):
            w.append({"event": "open" if i == 0 else "tick", "t": 1_800_000_000.25 + i, "note": f"línea {i}"})
    return path.read_bytes().splitlines(keepends=True)


@pytest.fixture
def fsyncs(monkeypatch):
    """Every os.fsync call, as the path its descriptor pointed to."""
    calls: list[str] = []
    real = os.fsync

    def recording(fd):
        calls.append(fd_path(fd))
        return real(fd)

    monkeypatch.setattr(os, "fsync", recording)
    return calls


# ---------------------------------------------------------------- encoding


def test_a_line_is_json_dumps_with_sorted_keys_no_spaces_and_raw_utf8():
    obj = {"z": 1, "a": [1.5, None, True], "é": "naïve ☃", "m": {"b": 2, "a": 1}}
    expected = json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()
    assert dumps(obj) == expected
    assert b" " not in dumps({"a": 1, "b": [1, 2]})
    assert "☃".encode() in dumps(obj)


def test_the_seed_is_the_sha256_of_manifest_hash_colon_relative_path():
    assert log_seed("ab" * 32, "models/m/run.jsonl") == sha(f"{'ab' * 32}:models/m/run.jsonl".encode())


def test_append_adds_seq_and_prev_and_returns_the_hash_of_the_line_without_newline(tmp_path):
    path = tmp_path / "run.jsonl"
    obj = {"event": "open", "t": 1.5}
    with ChainWriter(path, SEED) as w:
        h0 = w.append(obj)
        h1 = w.append({"event": "tick", "t": 2.0})
        assert w.snapshot() == (2, h1)
    assert obj == {"event": "open", "t": 1.5}  # the caller's dict is not touched
    lines = path.read_bytes().split(b"\n")
    assert lines[2] == b""
    assert json.loads(lines[0]) == {"event": "open", "t": 1.5, "seq": 0, "prev": SEED}
    assert json.loads(lines[1])["prev"] == h0 == sha(lines[0])
    assert h1 == sha(lines[1])


def test_an_object_that_carries_seq_or_prev_is_refused(tmp_path):
    with ChainWriter(tmp_path / "x.jsonl", SEED) as w:
        with pytest.raises(ValueError):
            w.append({"seq": 3})
        assert w.snapshot() == (0, SEED)


def test_reopening_a_log_continues_its_chain(tmp_path):
    path = tmp_path / "run.jsonl"
    write_log(path, 3)
    with ChainWriter(path, SEED) as w:
        assert w.lines == 3
        w.append({"event": "again"})
    result = check_chain(path, SEED)
    assert result.ok and result.lines == 4


def test_creating_a_log_fsyncs_its_new_directories_and_the_file_entry(tmp_path, fsyncs):
    path = tmp_path / "models" / "m" / "run.jsonl"
    w = ChainWriter(path, SEED)
    w.close()
    for directory in (tmp_path, tmp_path / "models", tmp_path / "models" / "m"):
        assert str(directory) in fsyncs  # each new entry's parent, then the file's
    assert fsyncs.index(str(tmp_path)) < fsyncs.index(str(tmp_path / "models" / "m"))
    fsyncs.clear()
    ChainWriter(path, SEED).close()  # reopening creates nothing, so owes no dir fsync
    assert fsyncs == []


def test_each_append_is_fsynced_before_it_returns(tmp_path, fsyncs):
    path = tmp_path / "run.jsonl"
    with ChainWriter(path, SEED) as w:
        for i in range(3):
            w.append({"i": i})
            assert fsyncs[-1] == str(path)
            assert path.read_bytes().count(b"\n") == i + 1
    assert fsyncs.count(str(path)) == 3


# ---------------------------------------------------------------- faults


def test_an_fsync_error_acknowledges_nothing_and_is_never_retried(tmp_path, monkeypatch):
    path = tmp_path / "run.jsonl"
    w = ChainWriter(path, SEED)
    w.append({"event": "open"})
    before = w.snapshot()
    on_log: list[int] = []
    writes: list[int] = []
    real_fsync, real_write = os.fsync, os.write

    def failing_fsync(fd):
        if fd_path(fd) == str(path):
            on_log.append(fd)
            raise OSError(errno.EIO, "injected EIO")
        return real_fsync(fd)

    def counting_write(fd, data):
        writes.append(fd)
        return real_write(fd, data)

    monkeypatch.setattr(os, "fsync", failing_fsync)
    monkeypatch.setattr(os, "write", counting_write)
    with pytest.raises(ChainWriteFailed, match="fsync of line 1 failed"):
        w.append({"event": "lost"})
    assert w.failed and w.snapshot() == before
    size = path.stat().st_size
    for _ in range(3):
        with pytest.raises(ChainWriteFailed, match="failed earlier"):
            w.append({"event": "refused"})
    assert len(on_log) == 1  # one fsync on that descriptor, never a second
    assert len(writes) == 1  # the refused appends wrote nothing
    assert path.stat().st_size == size
    assert w.snapshot() == before
    w.close()


def test_a_write_error_part_way_fails_the_writer_and_leaves_a_torn_tail(tmp_path, monkeypatch):
    path = tmp_path / "run.jsonl"
    w = ChainWriter(path, SEED)
    w.append({"event": "open"})
    acked = path.stat().st_size
    real_write = os.write
    calls = []

    def half_then_eio(fd, data):
        calls.append(fd)
        if len(calls) == 1:
            return real_write(fd, bytes(data[:10]))
        raise OSError(errno.EIO, "injected EIO")

    monkeypatch.setattr(os, "write", half_then_eio)
    with pytest.raises(ChainWriteFailed, match="write of line 1 failed"):
        w.append({"event": "lost", "pad": "x" * 40})
    monkeypatch.undo()
    assert w.snapshot()[0] == 1
    with pytest.raises(ChainWriteFailed):
        w.append({"event": "refused"})
    with pytest.raises(TornTail) as info:
        ChainWriter(path, SEED)
    torn_bytes = path.read_bytes()[acked:]
    assert (info.value.offset, info.value.length, info.value.sha256) == (acked, 10, sha(torn_bytes))


def test_short_writes_still_produce_a_correct_log(tmp_path, monkeypatch):
    real_write = os.write
    monkeypatch.setattr(os, "write", lambda fd, data: real_write(fd, bytes(data[:1])))
    path = tmp_path / "run.jsonl"
    objs = [{"event": "e", "i": i, "text": "ü" * i} for i in range(5)]
    with ChainWriter(path, SEED) as w:
        for obj in objs:
            w.append(obj)
    digest = write_json_durable(tmp_path / "rec.json", {"a": "ß", "b": 2})
    monkeypatch.undo()
    assert check_chain(path, SEED).ok
    assert [{k: v for k, v in line.obj.items() if k not in ("seq", "prev")} for line in iter_lines(path)] == objs
    assert (tmp_path / "rec.json").read_bytes() == dumps({"a": "ß", "b": 2}) + b"\n"
    assert digest == sha((tmp_path / "rec.json").read_bytes())


# ---------------------------------------------------------------- damage on disk


def test_truncating_the_last_two_lines_at_every_byte_is_described_exactly(tmp_path):
    lines = write_log(tmp_path / "whole.jsonl", 6)
    raw = b"".join(lines)
    starts = [sum(map(len, lines[:i])) for i in range(len(lines) + 1)]
    heads = [SEED] + [sha(line[:-1]) for line in lines]
    path = tmp_path / "cut.jsonl"
    for cut in range(starts[4], len(raw)):
        path.write_bytes(raw[:cut])
        result = check_chain(path, SEED)
        if cut in starts:  # a cut between lines leaves a shorter, valid log
            k = starts.index(cut)
            assert (result.ok, result.lines, result.head, result.torn) == (True, k, heads[k], None)
            with ChainWriter(path, SEED) as w:
                assert w.snapshot() == (k, heads[k])
            continue
        k = max(i for i, s in enumerate(starts) if s < cut)
        partial = raw[starts[k] : cut]
        assert not result.ok and (result.lines, result.head, result.problem_line) == (k, heads[k], k)
        assert (result.torn.offset, result.torn.length, result.torn.sha256) == (starts[k], len(partial), sha(partial))
        if cut == starts[k + 1] - 1:
            assert "otherwise whole" in result.torn.reason
        with pytest.raises(TornTail) as info:
            ChainWriter(path, SEED)
        assert (info.value.offset, info.value.length, info.value.sha256) == (starts[k], len(partial), sha(partial))
        assert path.read_bytes() == raw[:cut]  # reported, never truncated


def test_flipping_any_byte_of_an_earlier_line_breaks_the_chain_on_open(tmp_path):
    lines = write_log(tmp_path / "whole.jsonl", 5)
    raw = b"".join(lines)
    path = tmp_path / "flipped.jsonl"
    for k in range(len(lines) - 1):
        start = sum(map(len, lines[:k]))
        for pos in range(start, start + len(lines[k])):
            damaged = bytearray(raw)
            damaged[pos] ^= 0x01
            path.write_bytes(bytes(damaged))
            with pytest.raises(ChainBroken) as info:
                ChainWriter(path, SEED)
            # the line itself, or the next one whose prev no longer matches
            assert info.value.seq in (k, k + 1), (k, pos)
            assert not check_chain(path, SEED).ok


def test_a_line_not_in_canonical_encoding_breaks_the_chain(tmp_path):
    lines = write_log(tmp_path / "a.jsonl", 3)
    obj = json.loads(lines[1])
    spaced = json.dumps(obj, sort_keys=True).encode() + b"\n"  # ", " and ": "
    path = tmp_path / "b.jsonl"
    path.write_bytes(lines[0] + spaced + lines[2])
    result = check_chain(path, SEED)
    assert (result.ok, result.problem_line, result.torn) == (False, 1, None)
    assert "canonical" in result.problem


@pytest.mark.parametrize("seq", [2, 0, True, 1.0, "1", None])
def test_a_line_whose_seq_is_not_its_position_breaks_the_chain(tmp_path, seq):
    line0 = dumps({"event": "open", "seq": 0, "prev": SEED})
    fields = {"event": "tick", "prev": sha(line0)} | ({} if seq is None else {"seq": seq})
    line2 = dumps({"event": "tick", "seq": 2, "prev": sha(dumps(fields))})
    path = tmp_path / "run.jsonl"
    path.write_bytes(line0 + b"\n" + dumps(fields) + b"\n" + line2 + b"\n")
    result = check_chain(path, SEED)
    assert (result.ok, result.lines, result.problem_line) == (False, 1, 1)
    assert "seq" in result.problem
    with pytest.raises(ChainBroken) as info:
        ChainWriter(path, SEED)
    assert (info.value.seq, info.value.offset) == (1, len(line0) + 1)


def test_a_wrong_seed_breaks_the_chain_at_line_zero(tmp_path):
    write_log(tmp_path / "a.jsonl", 2)
    with pytest.raises(ChainBroken) as info:
        ChainWriter(tmp_path / "a.jsonl", log_seed("1" * 64, "run.jsonl"))
    assert (info.value.seq, info.value.offset) == (0, 0)


# ---------------------------------------------------------------- readers


def test_check_chain_reports_instead_of_raising(tmp_path):
    missing = check_chain(tmp_path / "none.jsonl", SEED)
    assert not missing.ok and "no such file" in missing.problem
    (tmp_path / "junk.jsonl").write_bytes(b"not json\n{}\n")
    junk = check_chain(tmp_path / "junk.jsonl", SEED)
    assert (junk.ok, junk.lines, junk.problem_line) == (False, 0, 0)
    empty = tmp_path / "empty.jsonl"
    empty.write_bytes(b"")
    assert check_chain(empty, SEED) == check_chain(empty, SEED) and check_chain(empty, SEED).head == SEED


def test_prefix_head_is_the_head_after_exactly_n_lines(tmp_path):
    path = tmp_path / "run.jsonl"
    lines = write_log(path, 5)
    with open(path, "ab") as f:
        f.write(b'{"torn":')  # a torn tail does not disturb any prefix
    heads = [SEED] + [sha(line[:-1]) for line in lines]
    assert [prefix_head(path, SEED, n) for n in range(6)] == heads
    assert prefix_head(path, SEED, 6) is None
    assert prefix_head(path, log_seed("9" * 64, "x"), 2) is None


def test_iter_lines_yields_every_line_with_offsets_that_tile_the_file(tmp_path):
    path = tmp_path / "run.jsonl"
    lines = write_log(path, 4)
    got = list(iter_lines(path))
    assert [g.seq for g in got] == [0, 1, 2, 3]
    assert [g.obj for g in got] == [json.loads(line) for line in lines]
    assert [g.hash for g in got] == [sha(line[:-1]) for line in lines]
    assert [(g.offset, g.length) for g in got] == [(sum(map(len, lines[:i])), len(lines[i])) for i in range(4)]
    with open(path, "ab") as f:
        f.write(b'{"ev')
    with pytest.raises(TornTail) as info:
        list(iter_lines(path))
    assert (info.value.offset, info.value.length) == (sum(map(len, lines)), 4)


@pytest.mark.slow
def test_check_chain_reads_a_large_log_whole(tmp_path):
    # (its speed is measured by benchmarks/bench_verify.py, not asserted here)
    path = tmp_path / "big.jsonl"
    head, out = SEED, []
    for i in range(60_000):
        line = dumps(
            {
                "event": "sample",
                "t": 1_800_000_000.125 + i,
                "mem_pressure": 1.5,
                "load1": 0.25,
                "clock_back_max_s": 0.0,
                "seq": i,
                "prev": head,
            }
        )
        head = sha256_hex(line)
        out.append(line)
    path.write_bytes(b"\n".join(out) + b"\n")
    result = check_chain(path, SEED)
    assert result.ok and result.lines == 60_000 and result.head == head


# ---------------------------------------------------------------- whole files


def test_write_json_durable_replaces_atomically_and_fsyncs_file_and_directory(tmp_path, fsyncs):
    path = tmp_path / "records" / "h" / "a" / "0.json"
    digest = write_json_durable(path, {"b": 1, "a": "x"})
    assert path.read_bytes() == b'{"a":"x","b":1}\n'
    assert digest == sha(path.read_bytes())
    assert any(p.startswith(str(path.parent) + "/.0.json") for p in fsyncs)  # the tmp file's bytes
    assert fsyncs[-1] == str(path.parent)  # then the rename
    write_json_durable(path, {"a": "y"})
    assert path.read_bytes() == b'{"a":"y"}\n'
    assert sorted(p.name for p in path.parent.iterdir()) == ["0.json"]  # no tmp left behind


# ---------------------------------------------------------------- stateful


PAYLOAD = st.dictionaries(
    st.text(max_size=4).filter(lambda k: k not in ("seq", "prev")),
    st.one_of(
        st.integers(), st.text(max_size=6), st.floats(allow_nan=False, allow_infinity=False), st.booleans(), st.none()
    ),
    max_size=3,
)
NAMES = ("run.jsonl", "models/m/run.jsonl")


class ChainMachine(RuleBasedStateMachine):
    """Appends, reopens, power cuts and torn writes against two real logs.

    The model is what was acknowledged: the objects and the byte length that
    append() had fsynced when it returned. A power cut keeps exactly that.
    """

    def __init__(self) -> None:
        super().__init__()
        self.dir = Path(tempfile.mkdtemp(prefix="chain-sm-"))
        self.seeds = {n: log_seed("f" * 64, n) for n in NAMES}
        self.writers: dict[str, ChainWriter | None] = {n: ChainWriter(self.dir / n, self.seeds[n]) for n in NAMES}
        self.acked: dict[str, list[dict]] = {n: [] for n in NAMES}
        self.acked_bytes = {n: 0 for n in NAMES}
        self.torn: dict[str, bytes | None] = {n: None for n in NAMES}

    def head(self, name: str) -> str:
        return sha(dumps(self.acked[name][-1])) if self.acked[name] else self.seeds[name]

    def open_writer(self, name: str) -> None:
        if self.writers[name] is not None:
            self.writers[name].close()
        self.writers[name] = ChainWriter(self.dir / name, self.seeds[name])

    @rule(name=st.sampled_from(NAMES), payload=PAYLOAD)
    def append(self, name, payload):
        if self.writers[name] is None:
            return  # the log ends in a torn write: nothing is appended until it is dealt with
        digest = self.writers[name].append(payload)
        full = {**payload, "seq": len(self.acked[name]), "prev": self.head(name)}
        self.acked[name].append(full)
        self.acked_bytes[name] += len(dumps(full)) + 1
        assert digest == self.head(name)

    @rule(name=st.sampled_from(NAMES), payload=PAYLOAD, data=st.data())
    def torn_write(self, name, payload, data):
        """A crash in the middle of an append: part of a line, never acknowledged."""
        if self.writers[name] is None:
            return
        self.writers[name].close()
        self.writers[name] = None
        line = dumps({**payload, "seq": len(self.acked[name]), "prev": self.head(name)}) + b"\n"
        cut = data.draw(st.integers(min_value=1, max_value=len(line) - 1))
        with open(self.dir / name, "ab") as f:
            f.write(line[:cut])
        self.torn[name] = line[:cut]

    @rule(name=st.sampled_from(NAMES))
    def reopen(self, name):
        torn = self.torn[name]
        if torn is not None:
            with pytest.raises(TornTail) as info:
                ChainWriter(self.dir / name, self.seeds[name])
            assert (info.value.offset, info.value.length, info.value.sha256) == (
                self.acked_bytes[name],
                len(torn),
                sha(torn),
            )
            os.truncate(self.dir / name, self.acked_bytes[name])  # the operator's explicit recovery
            self.torn[name] = None
        self.open_writer(name)
        assert self.writers[name].snapshot() == (len(self.acked[name]), self.head(name))

    @rule()
    def power_cut(self):
        """Every file keeps what was fsynced when its last append returned."""
        for name in NAMES:
            if self.writers[name] is not None:
                self.writers[name].close()
                self.writers[name] = None
            os.truncate(self.dir / name, self.acked_bytes[name])
            self.torn[name] = None
        for name in NAMES:
            self.open_writer(name)

    @invariant()
    def every_acknowledged_line_survives_in_order_with_a_valid_chain(self):
        for name in NAMES:
            result = check_chain(self.dir / name, self.seeds[name])
            assert (result.lines, result.head) == (len(self.acked[name]), self.head(name))
            assert result.ok == (self.torn[name] is None)
            if self.torn[name] is None:
                assert [line.obj for line in iter_lines(self.dir / name)] == self.acked[name]
            if self.writers[name] is not None:
                assert self.writers[name].snapshot() == (len(self.acked[name]), self.head(name))

    def teardown(self):
        for w in self.writers.values():
            if w is not None:
                w.close()
        shutil.rmtree(self.dir, ignore_errors=True)


ChainMachine.TestCase.settings = settings(max_examples=50, stateful_step_count=25, deadline=None)
test_acknowledged_lines_survive_appends_reopens_power_cuts_and_torn_writes = pytest.mark.slow(ChainMachine.TestCase)


def test_a_log_read_in_spans_gives_what_one_pass_gives(tmp_path):
    """ChainReader over byte spans: cut at every line, the spans' lines,
    heads and ends join into the whole pass's; each later span says where it
    starts (``first``: the seq and prev of its first line)."""
    seed = "cd" * 32
    path = tmp_path / "log.jsonl"
    w = ChainWriter(path, seed)
    for i in range(12):
        w.append({"event": "open" if i == 0 else "sample", "t": 1.5 * i, "x": [i, {"y": "é"}]})
    w.close()
    data = path.read_bytes()
    from confirmatory.records.reader import ChainReader

    whole = ChainReader(path, seed, heads_at=range(13))
    expected = list(whole)
    starts = [0] + [i + 1 for i, b in enumerate(data) if b == 0x0A][:-1]
    for k, cut in enumerate(starts[1:], start=1):
        a = ChainReader(path, seed, heads_at=range(13), stop=cut)
        b = ChainReader(path, seed, heads_at=range(13), start=cut)
        got = list(a) + list(b)
        assert got == expected
        assert a.result.ok and b.result.ok and a.first is None
        assert b.first == (a.result.lines, a.result.head) == (k, expected[k][1]["prev"])
        assert b.result == whole.result
        assert {**a.heads, **b.heads} == whole.heads


def test_no_secret_value_is_written_by_a_log_or_a_durable_file_whatever_the_caller_passes(tmp_path, monkeypatch):
    """The writers' last line of defence (redaction.Guard): an exception's text in
    a stop's detail, a provider's echo in a record, any field at any depth."""
    secret = "a1b2c3d4e5f6a7b8c9d0"  # no recognisable shape: only its value can find it
    monkeypatch.setenv("WITNESS_DEPLOY_TOKEN", secret)
    with ChainWriter(tmp_path / "run.jsonl", SEED) as w:
        w.append({"event": "stop", "cause": "runner-error", "detail": f"KeyError('{secret}')", "t": 1.0})
        w.append({"event": "x", "nested": [{"deep": secret + "-suffix"}], "t": 2.0})
        w.append({"event": "clean", "t": 3.0})
    sha = write_json_durable(tmp_path / "rec.json", {"calls": [{"extra": {"echo": secret}}]})
    logged, record = (tmp_path / "run.jsonl").read_bytes(), (tmp_path / "rec.json").read_bytes()
    assert secret.encode() not in logged and secret.encode() not in record
    assert b"[redacted:WITNESS_DEPLOY_TOKEN]" in logged and b"[redacted:WITNESS_DEPLOY_TOKEN]" in record
    assert sha == hashlib.sha256(record).hexdigest()
    assert check_chain(tmp_path / "run.jsonl", SEED).ok  # the chain links the lines as written
    assert json.loads(logged.splitlines()[2]) == {
        "event": "clean",
        "t": 3.0,
        "seq": 2,
        "prev": hashlib.sha256(logged.splitlines()[1]).hexdigest(),
    }


def test_the_writers_guard_removes_only_the_secret_value_and_leaves_the_study_data(tmp_path, monkeypatch):
    secret = "a1b2c3d4e5f6a7b8c9d0"
    monkeypatch.setenv("WITNESS_DEPLOY_TOKEN", secret)
    record = {
        "answer": "Basic allowance 12570",
        "extra": {"author": "x", "cache_key": "k1", "echo": secret},
        "calls": [{"note": "Bearer abcdefgh12345 sk-abcdefghijkl"}],
    }
    write_json_durable(tmp_path / "rec.json", record)
    written = json.loads((tmp_path / "rec.json").read_bytes())
    expected = json.loads(json.dumps(record).replace(secret, "[redacted:WITNESS_DEPLOY_TOKEN]"))
    assert written == expected


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.sampled_from([b"\n", b"a", b"{", b"\\", b"e+", b"0.0000", b"1"]), max_size=80),
    st.integers(1, 9),
    st.integers(0, 40),
)
def test_batches_hand_out_every_line_once_at_its_offset_whatever_the_chunk_size(tokens, chunk, start_at):
    """reader._batches, with chunks from 1 byte up: lines longer than a chunk
    are whole, each line once, at its byte offset, the unterminated tail
    last; a batch's guard holds only if it holds for each of its lines."""
    import io

    from confirmatory.records import chain, reader

    data = b"".join(tokens)
    start = data.find(b"\n", min(start_at, len(data))) + 1 if start_at else 0  # a line's first byte
    old = reader._CHUNK
    reader._CHUNK = chunk
    try:
        got = list(reader._batches(io.BytesIO(data), start, guard=chain._guards_hold))
    finally:
        reader._CHUNK = old
    body = data[start:]
    *whole, tail = body.split(b"\n")
    lines, offsets, at = [], [], start
    for line in whole:
        lines.append(line)
        offsets.append(at)
        at += len(line) + 1
    seen, seen_at = [], []
    for k, (base, parts, is_tail, clean) in enumerate(got):
        assert is_tail == (k == len(got) - 1 and bool(tail)), (k, is_tail)
        if is_tail:
            assert parts == [tail] and base == at and clean is False
            continue
        assert parts, "no empty batch"
        if clean:
            assert all(chain._guards_hold(line) for line in parts)
        for line in parts:
            seen.append(line)
            seen_at.append(base)
            base += len(line) + 1
    assert seen == lines and seen_at == offsets
