"""verify's one-pass reader (`reader.ChainReader`) asks the byte guards of
its fast canonical test once per batch of lines, and line by line only in a
batch where they fail. Whatever it accepts must still be what the standard
library's test accepts, wherever in a batch, or in which batch, the line
sits that only the guards refuse."""

from __future__ import annotations

import pytest

from confirmatory.records import chain, reader

pytestmark = pytest.mark.skipif(chain._fast_loads is None, reason="orjson is not installed")
orjson = pytest.importorskip("orjson")

# orjson's own encoding of each differs from the standard one (only the
# guards keep the fast test from accepting it; tests/records/test_chain_fast.py)
ODD = [{"x": 1e-7}, {"x": 1e-5}, {"x": [2.5e-6]}]
SEED = "cd" * 32


def _log(objs: list[dict], odd_at: int, odd: dict) -> bytes:
    """A chained log of ``objs`` whose line ``odd_at`` is ``odd`` written as
    orjson writes it (chained correctly: only its encoding is wrong)."""
    out, head = [], SEED
    for seq, obj in enumerate(objs):
        obj = {**(odd if seq == odd_at else obj), "seq": seq, "prev": head}
        line = orjson.dumps(obj, option=orjson.OPT_SORT_KEYS) if seq == odd_at else chain.dumps(obj)
        out.append(line)
        head = chain.sha256_hex(line)
    return b"".join(line + b"\n" for line in out)


@pytest.mark.parametrize("odd", ODD)
def test_a_line_only_the_guards_refuse_breaks_the_chain_anywhere_in_a_batch(tmp_path, monkeypatch, odd):
    line = orjson.dumps({**odd, "seq": 1, "prev": SEED}, option=orjson.OPT_SORT_KEYS)
    assert chain._fast_dumps(orjson.loads(line), option=chain._SORT_KEYS) == line  # orjson alone would say yes
    assert not chain._guards_hold(line)
    objs = [{"event": "open", "t": 0.0}] + [{"event": "sample", "t": 1.5 * k, "load1": 0.25} for k in range(1, 6000)]
    first_batch = reader._CHUNK // len(chain.dumps({**objs[-1], "seq": 5999, "prev": SEED}))
    for odd_at in (1, 17, first_batch - 3, first_batch + 40, len(objs) - 1):  # first batch, a later one, last line
        path = tmp_path / f"log{odd_at}.jsonl"
        path.write_bytes(_log(objs, odd_at, odd))
        fast = reader.ChainReader(path, SEED, heads_at={0, 5, odd_at})
        got = [s for s, _ in fast]
        with monkeypatch.context() as m:
            m.setattr(chain, "_fast_loads", None)
            m.setattr(reader, "_fast_loads", None)
            slow = reader.ChainReader(path, SEED, heads_at={0, 5, odd_at})
            want = [s for s, _ in slow]
        assert got == want == list(range(odd_at)), odd_at
        assert fast.result == slow.result == reader.check_chain(path, SEED), odd_at
        assert not fast.result.ok and fast.result.problem_line == odd_at
        assert fast.heads == slow.heads


def test_the_batch_guards_hold_exactly_when_every_line_passes_them():
    lines = [b'{"a":1.5,"prev":"e5e5","seq":0}', b'{"b":"x-y","seq":1}', b'{"c":0.001,"seq":2}']
    assert chain._guards_hold(b"\n".join(lines) + b"\n")
    for bad in (b'{"x":1e-7}', b'{"x":1e+16}', b'{"s":"a\\"b"}', b'{"x":0.00001}'):
        for k in range(len(lines) + 1):
            batch = b"\n".join(lines[:k] + [bad] + lines[k:]) + b"\n"
            assert not chain._guards_hold(batch), (bad, k)
