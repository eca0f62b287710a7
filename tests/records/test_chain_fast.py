"""The readers' fast path (orjson) may only ever agree with the standard library.

``chain._fast_canonical(obj, line)`` accepts a line without the standard
encoder; ``chain.parse_document(data)`` takes orjson's object of a record.
Each must be sound: whenever it says yes, the standard library's canonical
test accepts the same bytes and its parser gives an equal object (equal
value *and* type, all the way down). Completeness is only a speed matter,
but the lines the runner writes must take the fast path (else the benchmark
measures nothing), so that is checked too.
"""

from __future__ import annotations

import json
import math
import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from confirmatory.records import chain

pytestmark = pytest.mark.skipif(chain._fast_loads is None, reason="orjson is not installed")

orjson = pytest.importorskip("orjson")


def same(a, b) -> bool:
    """Equal value and type, recursively (json's 1 == 1.0 == True is not enough)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return list(a) == list(b) and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if isinstance(a, float) and math.isnan(a):
        return math.isnan(b)
    return a == b


def standard_accepts(line: bytes):
    """The standard library's verdict on one log line: its object, or None."""
    try:
        obj = chain._parse_line(line.decode())
        return obj if chain._CANON.encode(obj) == line.decode() else None
    except Exception:  # noqa: BLE001 - any failure is a "no"
        return None


def fast_accepts(line: bytes):
    try:
        obj = orjson.loads(line)
    except Exception:  # noqa: BLE001
        return None
    return obj if type(obj) is dict and chain._fast_canonical(obj, line) else None


# Floats from every magnitude, with the borders between the two encoders'
# formats weighted in; strings with escapes, controls, separators and
# astral characters; integers past 64 bits.
BORDERS = [
    1e-4,
    1e-5,
    9.999999999999999e-5,
    1e-7,
    1e-10,
    1e15,
    1e16,
    9999999999999998.0,
    1e17,
    1e22,
    5e-324,
    1.7976931348623157e308,
    0.1,
    0.30000000000000004,
    1764420000.123456,
    0.0,
]
floats = st.one_of(
    st.floats(allow_nan=False, allow_infinity=False),
    st.sampled_from(BORDERS).map(lambda x: x),
    st.builds(lambda m, e: m * 10.0**e, st.floats(1, 10), st.integers(-12, 20)),
)
texts = st.text(st.characters(codec="utf-8"), max_size=12) | st.sampled_from(
    ["", "e5,", 'x"y', "a\\b", "\n", "\u2028", "\x7f", "😀", "0.0000", "1e16", "true", "e-3]"]
)
scalars = st.none() | st.booleans() | st.integers(-(2**70), 2**70) | floats | texts
values = st.recursive(
    scalars, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(texts, inner, max_size=4), max_leaves=12
)
objects = st.dictionaries(texts, values, max_size=8)


def encodings(obj: dict) -> list[bytes]:
    """The standard canonical bytes and orjson's own (which differ on some floats)."""
    out = [chain.dumps(obj)]
    try:
        out.append(orjson.dumps(obj, option=orjson.OPT_SORT_KEYS))
    except orjson.JSONEncodeError:  # ints past 64 bits
        pass
    return out


@pytest.mark.slow
@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(objects)
def test_fast_canonical_accepts_only_what_the_standard_test_accepts(obj):
    for line in encodings(obj):
        fast = fast_accepts(line)
        if fast is not None:
            std = standard_accepts(line)
            assert std is not None, line
            assert same(fast, std), line


@pytest.mark.slow
@settings(max_examples=1500, deadline=None)
@given(objects)
def test_parse_document_is_json_loads(obj):
    for body in encodings(obj):
        for data in (body, body + b"\n"):
            assert same(chain.parse_document(data), json.loads(data))


@pytest.mark.parametrize(
    "data",
    [
        b'{"a":1,"a":2}\n',
        b'{"a":123456789012345678901234567890}\n',
        b'{"a":NaN}\n',
        b'{"a":"\\ud800"}\n',
        b'{"a":1e16}\n',
        b'{ "a": 1 }\n',
        b'{"b":1,"a":2}',
        b'{"a":"\\u00e9"}\n',
    ],
)
def test_parse_document_on_texts_orjson_reads_otherwise(data):
    assert same(chain.parse_document(data), json.loads(data))


def test_every_plain_float_is_written_alike():
    """The claim the exponent and 0.0000 guards rest on, for the orjson
    installed: where it writes a finite double in plain digits other than
    0.0000..., it writes repr's digits. Swept over the magnitudes where it
    writes plain digits, with random and short-digit mantissas, and spot
    checks of every other magnitude."""
    rng = random.Random(7)
    checked = signed = 0
    for e in range(-325, 309):
        for _ in range(2000 if -7 <= e <= 17 else 20):
            x = rng.uniform(1, 10) * 10.0**e
            if rng.random() < 0.4:
                x = float(f"{x:.{rng.randint(1, 9)}g}")
            if not math.isfinite(x):
                continue
            for v in (x, -x):
                fast = orjson.dumps(v).decode()
                if "e" not in fast and not fast.lstrip("-").startswith("0.0000"):
                    assert fast == json.dumps(v), v
                    checked += 1
                elif "e" in fast and chain._SIGNED_EXPONENTS:
                    # what the cheaper exponent test rests on
                    assert "e+" in fast or "e-" in fast, v
                    signed += 1
    assert checked > 60000
    assert signed > 1000 or not chain._SIGNED_EXPONENTS


GUARDED = [
    {"x": 1e16},
    {"x": -1.5e17},
    {"x": 1e-7},
    {"x": 1e-5},
    {"x": [2.5e-6]},
    {"x": {"y": 1e300}},
    {"x": 3.2e-05, "y": "e5,"},
]


def test_the_guards_are_needed():
    """Lines that are orjson's own encoding but not the standard one (which
    floats they are depends on orjson's version; 1e-7 and 1e-5 differ in every
    version seen): the fast test must refuse each. A planted fault that drops
    the exponent or the 0.0000 guard fails here (both exponent tests are tried)."""
    differ = 0
    for obj in GUARDED:
        line = orjson.dumps(obj, option=orjson.OPT_SORT_KEYS)
        if line == chain.dumps(obj):  # the standard test accepts it; the fast one may leave it to it
            assert fast_accepts(line) is None or same(fast_accepts(line), standard_accepts(line))
            continue
        differ += 1
        assert orjson.dumps(orjson.loads(line), option=orjson.OPT_SORT_KEYS) == line
        assert standard_accepts(line) is None, line
        assert fast_accepts(line) is None, line
    assert differ >= 3


def test_the_runners_lines_take_the_fast_path():
    t = 1764420000.123456
    lines = [
        {
            "event": "sample",
            "t": t,
            "wall": t,
            "mono": 1234.5,
            "mem_pressure": 0.0,
            "mem_available": 123456789,
            "swap_used": 0,
            "load1": 0.52,
            "clock_back_max_s": 0.0,
        },
        {
            "event": "attempt",
            "lane": 1,
            "household": "h00012",
            "arm": "calculator",
            "pass": 0,
            "start": t,
            "end": t + 4.25,
            "cost_nusd": 1234567,
            "record": "records/h00012/calculator/0.json",
            "record_sha256": "3e5" + "0" * 61,
            "class": "ok",
            "action": "done",
            "signature": None,
            "host_lines": 812,
        },
        {
            "event": "decision",
            "lane": 0,
            "household": "h00013",
            "t": t,
            "admit": True,
            "finished_nusd": 10,
            "under_way": 2,
            "reserve_nusd": 5,
            "cap_nusd": 100,
        },
    ]
    for i, obj in enumerate(lines):
        obj = {**obj, "seq": i, "prev": "e5" * 32}
        line = chain.dumps(obj)
        assert same(fast_accepts(line), standard_accepts(line))
        assert fast_accepts(line) is not None


@pytest.mark.parametrize(
    "signed, lines",
    [
        (True, [b'{"x":1e+16}', b'{"x":-1e-7}', b'{"a":{"b":[2.5e+300]}}', b'{"x":1.5e-6,"y":1}']),
        (False, [b'{"x":1e16}', b'{"x":-1e-7}', b'{"a":{"b":[2.5e300]}}', b'{"x":1.5e-6,"y":1}', b'{"x":1e+16}']),
    ],
)
def test_both_exponent_tests_find_every_exponent(signed, lines):
    """Each exponent test, on the exponents the orjson it serves writes."""
    no_exponent = chain._no_signed_exponent if signed else chain._no_exponent_found
    for line in lines:
        assert not no_exponent(line), line
    assert no_exponent(b'{"event":"sample","prev":"3e5e9","t":1764420000.5,"x":true,"y":false}')
    assert no_exponent(b'{"event":"push","n":-5,"t":2.5}')


def test_mutated_lines_are_never_accepted_by_the_fast_test_alone():
    """Byte-level fuzz: runner-shaped lines with one to three bytes replaced,
    inserted or deleted (digits, exponents, signs, quotes, escapes, spaces,
    literals, UTF-8). Whatever the fast test accepts, the standard test
    accepts with an equal object. (Run once with 300k mutations: none.)"""
    rng = random.Random(3)
    t = 1764420000.123456
    base = [
        {
            "event": "sample",
            "t": t,
            "wall": t,
            "mono": 12.5,
            "mem_pressure": 0.25,
            "mem_available": 10**10,
            "swap_used": 0,
            "load1": 1.5,
            "clock_back_max_s": 0.0,
            "seq": 7,
            "prev": "0e5" * 21 + "a",
        },
        {
            "event": "attempt",
            "household": "h00012",
            "arm": "explain",
            "pass": 1,
            "start": t,
            "end": t + 0.001,
            "cost_nusd": 120,
            "signature": None,
            "ok": True,
            "calls": [1.5, -2, "é"],
            "seq": 3,
            "prev": "ab" * 32,
        },
        {
            "event": "anchor",
            "final": False,
            "logs": {"a.jsonl": {"lines": 10, "head": "cd" * 32}},
            "t": 2.5e-3,
            "seq": 1,
            "prev": "ef" * 32,
        },
    ]
    lines = [chain.dumps(obj) for obj in base]
    alphabet = b'0123456789.eE+-",:{}[] \\tfalsnu/x\xc3\xa9'
    accepted = 0
    for _ in range(20000):
        line = bytearray(rng.choice(lines))
        for _ in range(rng.randint(1, 3)):
            i, c = rng.randrange(len(line)), alphabet[rng.randrange(len(alphabet))]
            op = rng.random()
            if op < 0.4:
                line[i] = c
            elif op < 0.7:
                line.insert(i, c)
            else:
                del line[i]
        fast = fast_accepts(bytes(line))
        if fast is not None:
            accepted += 1
            assert same(fast, standard_accepts(bytes(line))), bytes(line)
    assert accepted > 1000  # the fuzz reaches the fast path
