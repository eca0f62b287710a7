"""verify on valid runs: every plan of the generator verifies, the report and
the command say so, and verify stays independent of the runner."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from confirmatory.core.hostrules import attempt_host_verdict
from confirmatory.records.hostindex import HostIndex
from confirmatory.testing.rungen import Plan, generate_run
from confirmatory.verify import Status, verify_command, verify_run

PLANS = {
    "default": Plan(anchor_every_s=150, cap_usd=0.45),
    "inconclusive signature stops a model": Plan(inconclusive=("alpha", 2), households=30),
    "deadline with a late cost": Plan(deadline=("alpha", 4), harness=None),
    "ceiling crossed": Plan(ceiling_usd=0.9),
    "durable chain writer": Plan(households=6, durable=True),
}


@pytest.mark.parametrize("name", list(PLANS))
def test_a_generated_rule_abiding_run_passes_every_invariant(tmp_path, name):
    root = generate_run(tmp_path / "run", PLANS[name])
    report = verify_run(root)
    assert report.ok, report.to_table()
    assert all(r.checked > 0 for r in report.results)
    assert report.unanchored_tail == 0


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    return generate_run(tmp_path_factory.mktemp("v") / "run", PLANS["default"])


def test_the_command_prints_a_table_and_exits_zero_only_when_all_hold(run, capsys):
    assert verify_command(run) == 0
    out = capsys.readouterr().out
    assert "ALL INVARIANTS HOLD" in out and "spend conserved" in out
    assert verify_command(run, as_json=True) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["ok"] is True and len(data["invariants"]) == 12


def test_without_a_witness_the_report_says_it_was_not_checked(run):
    report = verify_run(run)
    assert report.ok and report.witness is None
    assert "witness: not checked (verify --witness CLONE" in report.to_table()
    assert json.loads(report.to_json())["witness"] == {
        "checked": False,
        "clone": None,
        "problems": None,
        "unchecked": [],
    }


def test_the_report_says_how_the_records_say_the_run_ended(run, tmp_path):
    import re

    # The module's run: gamma's harness failure stops gamma; the cap stops admission.
    report = verify_run(run)
    assert report.to_table().splitlines()[2] == f"the records say: {report.outcome}"
    assert report.outcome.startswith("stopped; alpha: "), report.outcome
    assert re.search(r"; gamma: \d+ of 24 households ended \(\d+ unfinished\), stopped \(harness\)$", report.outcome), (
        report.outcome
    )
    clean = verify_run(generate_run(tmp_path / "clean", Plan(households=6, harness=None)))
    assert clean.ok and re.fullmatch(r"completed(; \w+: 6 of 6 households ended){3}", clean.outcome), clean.outcome


def test_a_chain_break_is_shown_first_as_where_to_start(run, tmp_path):
    import shutil

    bad = tmp_path / "bad"
    shutil.copytree(run, bad)
    path = bad / "models/alpha/run.jsonl"
    data = path.read_bytes().split(b"\n")
    data[5] = data[5].replace(b'"cost_nusd":', b'"cost_nusd":1', 1)  # a number edited
    assert b'"cost_nusd":1' in data[5]
    path.write_bytes(b"\n".join(data))
    report = verify_run(bad)
    (root,) = report.start_here
    # The edited line still links to the one before; the next one no longer links to it.
    assert (root.file, root.line, root.invariant) == ("models/alpha/run.jsonl", 6, 8)
    assert root.message.startswith("chain: ") and "line 5 was changed" in root.message
    table = report.to_table().splitlines()
    start = table.index(
        "START HERE (checks read each log only up to its first break; violations below may follow from these):"
    )
    assert table[start + 1].startswith("  models/alpha/run.jsonl:7: chain: ")
    assert start < next(i for i, line in enumerate(table) if line.lstrip().startswith("#  invariant"))
    assert json.loads(report.to_json())["start_here"][0]["line"] == 6
    assert verify_run(run).start_here == ()


def test_a_violation_is_reported_with_its_file_and_line(run, tmp_path):
    import shutil

    bad = tmp_path / "bad"
    shutil.copytree(run, bad)
    path = bad / "models/alpha/run.jsonl"
    data = path.read_bytes().split(b"\n")
    data[5] = data[5].replace(b'"', b"'", 1)
    path.write_bytes(b"\n".join(data))
    report = verify_run(bad)
    first = report.result(8).first[0]
    assert first.file == "models/alpha/run.jsonl" and first.line == 5
    assert verify_command(bad) == 1
    assert report.result(8).status is Status.FAIL


def test_host_index_gives_the_verdict_of_the_whole_log():
    lines = [{"event": "open", "t": 0.0}]
    t = 0.0
    for k in range(200):
        t += 10 + (k % 7) * 9  # some gaps exceed max_gap_s
        lines.append(
            {
                "event": "sample",
                "t": t,
                "mem_pressure": 50.0 if k % 13 == 0 else 1.0,
                "clock_back_max_s": 2.5 if k == 40 else 0.0,
            }
        )
        if k % 17 == 0:
            lines.append({"event": "evidence", "t": t + 1, "since": t - (k % 5) * 8, "source": "guard", "line": "x"})
    index = HostIndex(lines)
    for s in range(0, int(t) + 50, 7):
        for d in (0.5, 12.0, 80.0):
            full = attempt_host_verdict(lines, s, s + d, max_gap_s=45, pressure_threshold=10)
            assert index.verdict(s, s + d, max_gap_s=45, pressure_threshold=10) == full, (s, d)


@pytest.mark.slow
def test_verify_imports_neither_the_runner_nor_litellm_nor_psutil():
    code = (
        "import sys, confirmatory.verify; "
        "bad = [m for m in sys.modules if m.split('.')[0] in ('litellm', 'psutil') "
        "or m in ('confirmatory.engine.run', 'confirmatory.engine.lanes', 'confirmatory.anchors.anchorer', 'confirmatory.host.sampler')]; "
        "print(bad)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_a_witness_that_holds_every_anchor_passes_and_one_that_diverges_fails(run, tmp_path):
    from confirmatory.anchors.witness import publish

    remote, clone = tmp_path / "remote.git", tmp_path / "clone"
    subprocess.run(["git", "init", "-q", "--bare", str(remote)], check=True)
    subprocess.run(["git", "clone", "-q", str(remote), str(clone)], check=True, capture_output=True)
    subprocess.run(["git", "-C", str(clone), "checkout", "-q", "-b", "main"], check=True)
    publish(clone, run / "anchors.jsonl", run_id=run.name)
    honest = verify_run(run, witness=clone)
    assert honest.ok
    assert honest.witness_line() == f"witness: {clone} holds every anchor of the run, unchanged"
    assert json.loads(honest.to_json())["witness"] == {
        "checked": True,
        "clone": str(clone),
        "problems": 0,
        "unchecked": [],
    }
    # a forger re-chains anchors.jsonl after changing its open line: nothing in the
    # run can tell, the witness can
    import shutil

    from confirmatory.records.chain import dumps, log_seed, sha256_hex

    forged = tmp_path / "copy" / run.name
    shutil.copytree(run, forged)
    objs = [json.loads(x) for x in (forged / "anchors.jsonl").read_bytes().split(b"\n")[:-1]]
    objs[0]["t"] += 1
    seed = log_seed(sha256_hex((forged / "manifest.json").read_bytes()), "anchors.jsonl")
    out, head = [], seed
    for k, o in enumerate(objs):
        line = dumps({**o, "seq": k, "prev": head})
        out.append(line + b"\n")
        head = sha256_hex(line)
    (forged / "anchors.jsonl").write_bytes(b"".join(out))
    assert verify_run(forged).ok
    report = verify_run(forged, witness=clone)
    assert report.failed() == {8}
    assert any(v.file == "witness" for v in report.result(8).first)
    assert report.witness_problems >= 1 and "problem(s), listed under invariant 8" in report.to_table()


def _random_host_log(rng, n=300):
    lines = [{"event": "open", "t": 0.0}]
    t = last_sample = 0.0
    for k in range(n):
        t += rng.choice([0.0, 5.0, 10.0, 30.0, 50.0, 90.0])
        kind = rng.random()
        if kind < 0.08:
            line = {"event": "evidence", "t": t, "source": "guard", "line": f"oom {k}"}
            # (1e9: a line that reaches back past the log's start, so every later
            # window's marks are looked at: the summary's tree takes over there)
            back_to = rng.choice([None, 0.0, 2.0, 25.0, 120.0, 1e9])
            if back_to is not None:
                line["since"] = max(0.0, t - back_to)
            lines.append(line)
        elif kind < 0.12:
            lines.append({"event": "sample-failed", "t": t, "error": "x"})
        else:
            line = {
                "event": "sample",
                "t": t,
                "mem_pressure": rng.choice([None, 0.5, 9.9, 10.0, 55.0]),
                "clock_back_max_s": rng.choice([0.0] * 12 + [0.3, 2.5, 7.0]),
            }
            # when the step began reading its sources: after the previous sample, by this one
            frac = rng.choice([None, 0.0, 0.5, 0.99, 1.0])
            if frac is not None:
                line["reads_began"] = last_sample + frac * (t - last_sample)
            last_sample = t
            lines.append(line)
    return lines, t


@pytest.mark.slow
@pytest.mark.parametrize("block", [None, 1, 3])  # None: column.BLOCK, every sample in memory here
def test_the_host_summary_gives_the_verdict_of_the_log_or_its_prefix(block):
    import random

    from confirmatory.records.hostindex import HostSummary

    rng = random.Random(5)
    for _ in range(25):
        lines, end_t = _random_host_log(rng)
        summary = HostSummary(max_gap_s=45, pressure_threshold=10, block=block)
        for obj in lines:
            summary.add(obj)
        assert summary.monotone and not summary.poison
        for _ in range(300):
            s = rng.uniform(-20, end_t + 60)
            e = s + rng.choice([0.0, 0.05, 3.0, 40.0, 200.0])
            for limit in (None, rng.randrange(0, len(lines) + 3), -rng.randrange(1, 5)):
                expected = attempt_host_verdict(
                    lines if limit is None else lines[:limit], s, e, max_gap_s=45, pressure_threshold=10
                )
                assert summary.verdict(s, e, limit=limit) == expected, (s, e, limit)
                assert summary.is_host(s, e, limit) == bool(expected.reasons), (s, e, limit)


_END = st.sampled_from([0.0, 1.0, 2.0, 3.0, 5.0, float("nan")])


@pytest.mark.slow
@settings(max_examples=400, deadline=None)
@given(
    st.lists(st.tuples(_END, _END), max_size=40),
    st.lists(
        st.tuples(st.sampled_from([0.0, 1.0, 2.5, 3.0, 5.0]), st.sampled_from([0.0, 1.0, 3.0, 5.0])),
        min_size=1,
        max_size=6,
    ),
)
def test_the_overlap_index_yields_every_interval_touching_the_window_in_order_of_end(intervals, windows):
    """The index an edited host log's marks and gaps are looked up in: what
    a scan of every interval finds (an interval with a NaN touches nothing;
    ends equal to the window's edges touch it), in order of end. (A window's
    edges are an attempt's times: numbers, never NaN.)"""
    import math

    from confirmatory.records.hostindex import _Overlaps

    starts, ends = [a for a, _ in intervals], [b for _, b in intervals]
    index = _Overlaps(starts, ends)
    for lo, hi in windows:
        got = list(index.touching(lo, hi))
        want = [
            j
            for j in range(len(intervals))
            if ends[j] >= lo and starts[j] <= hi and not math.isnan(starts[j]) and not math.isnan(ends[j])
        ]
        assert sorted(got) == want and len(got) == len(set(got))
        assert [ends[j] for j in got] == sorted(ends[j] for j in got)


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.one_of(
            st.tuples(st.just("add"), _END), st.tuples(st.integers(0, 40), st.sampled_from([0.0, 1.0, 2.5, 3.0, 5.0]))
        ),
        max_size=80,
    )
)
def test_the_least_tree_yields_every_position_at_most_a_value_as_it_grows(steps):
    """The tree a host summary keeps its marks' ``since`` in, appended to as
    the runner's monitor does between its questions: every position from k
    on whose value is <= x (NaN never), in order."""
    from confirmatory.records.hostindex import _Least

    tree, values = _Least(), []
    for step in steps:
        if step[0] == "add":
            tree.append(step[1])
            values.append(step[1])
            continue
        k, x = step
        assert list(tree.at_most(k, x)) == [j for j in range(k, len(values)) if values[j] <= x]


def _edited_host_log(rng, lines, poison):
    """A random log edited as only an edit makes one: lines swapped, moved or
    repeated, a time set back, a step's reads beginning before the sample
    before it, a `since` that is not a number, NaN; with ``poison``, also a
    value where the rule reads a number (a time, clock step or pressure)."""
    lines = [dict(line) for line in lines]
    kinds = ["swap", "move", "dup", "back", "began", "since", "nan"] + (["poison"] * 3 if poison else [])
    for _ in range(rng.randrange(1, 5)):
        kind, k = rng.choice(kinds), rng.randrange(1, len(lines))
        line = lines[k]
        if kind == "swap" and k + 1 < len(lines):
            lines[k], lines[k + 1] = lines[k + 1], line
        elif kind == "move":
            lines.insert(rng.randrange(1, len(lines)), lines.pop(k))
        elif kind == "dup":
            lines.insert(k, dict(line))
        elif kind == "back":
            line["t"] = line["t"] - rng.choice([1.0, 30.0, 400.0])
        elif kind == "began" and line.get("event") == "sample":
            line["reads_began"] = line["t"] - rng.choice([5.0, 90.0])
        elif kind == "since" and line.get("event") == "evidence":
            line["since"] = "long ago"
        elif kind == "nan":
            line[rng.choice(["t", "mem_pressure", "reads_began", "since"])] = float("nan")
        elif kind == "poison":
            key = rng.choice(["t", "t", "mem_pressure", "clock_back_max_s"])
            line[key] = rng.choice(["late", None, [1]]) if key == "t" else rng.choice(["high", "2.5"])
    return lines


@pytest.mark.slow
@pytest.mark.parametrize("block", [None, 2])
@pytest.mark.parametrize("poison", [False, True])
def test_the_host_summary_gives_the_verdict_of_an_edited_log_or_none_where_the_rule_may_fail(block, poison):
    """An edited host log (times going back, keys out of order, NaN, lines
    moved): the summary's verdict is the rule's own, on the log and every
    prefix. Where a line holds a value the rule cannot compare (poison), a
    verdict whose prefix holds it is refused (the rule may fail there: it
    never gives a verdict the summary would not)."""
    import math
    import random

    from confirmatory.records.hostindex import HostSummary

    rng = random.Random(17 + poison)
    refused = 0
    for _ in range(60):
        lines = _edited_host_log(rng, _random_host_log(rng, n=60)[0], poison)
        summary = HostSummary(max_gap_s=45, pressure_threshold=10, block=block)
        for obj in lines:
            summary.add(obj)
        end_t = max(x["t"] for x in lines if isinstance(x.get("t"), float) and not math.isnan(x["t"]))
        for _ in range(60):
            s = rng.uniform(-20, end_t + 60)
            e = s + rng.choice([0.0, 3.0, 40.0, 200.0])
            for limit in (None, rng.randrange(0, len(lines) + 3)):
                prefix = lines if limit is None else lines[:limit]
                try:
                    expected = attempt_host_verdict(prefix, s, e, max_gap_s=45, pressure_threshold=10)
                except (TypeError, ValueError):
                    expected = None
                try:
                    got, got_host = summary.verdict(s, e, limit=limit), summary.is_host(s, e, limit)
                except ValueError:
                    refused += 1
                    assert summary.poison and summary.poison[0] < len(prefix), (s, e, limit)
                    continue
                assert expected is not None, (s, e, limit)  # the rule failed: no verdict
                assert got == expected and got_host == bool(expected.reasons), (s, e, limit)
    assert (refused > 0) == poison


def test_a_host_log_whose_times_go_back_is_said_so_and_its_lines_still_judged():
    from confirmatory.records.hostindex import HostSummary

    lines = [
        {"event": "open", "t": 0.0},
        {"event": "sample", "t": 20.0},
        {"event": "sample", "t": 10.0, "mem_pressure": 50.0},
        {"event": "sample", "t": 40.0},
    ]
    summary = HostSummary(max_gap_s=45, pressure_threshold=10)
    for obj in lines:
        summary.add(obj)
    assert not summary.monotone and not summary.poison
    # completed by the sample at 40: the back-dated pressure sample is in its prefix
    assert summary.verdict(5.0, 25.0).reasons == ("pressure 50 > 10 at 10.000",)
    assert attempt_host_verdict(lines, 5.0, 25.0, max_gap_s=45, pressure_threshold=10).reasons == (
        "pressure 50 > 10 at 10.000",
    )
    summary.add({"event": "sample", "t": "late"})
    assert summary.poison == [4]
    assert summary.is_host(5.0, 25.0) is True  # completed before the line the rule cannot read
    with pytest.raises(ValueError, match="line 4"):
        summary.is_host(50.0, 60.0)


def test_the_one_pass_reader_agrees_with_check_chain_and_iter_lines(tmp_path, run):
    from itertools import islice

    from confirmatory.records.layout import load_layout
    from confirmatory.records.reader import ChainReader, check_chain, iter_lines

    seed = {s.relpath: s.seed for s in load_layout(run).logs()}["models/alpha/run.jsonl"]
    data = (run / "models/alpha/run.jsonl").read_bytes()
    lines = data.split(b"\n")[:-1]
    cases = {
        "whole": data,
        "flipped": b"\n".join(lines[:7] + [lines[7].replace(b'"', b"'", 1)] + lines[8:]) + b"\n",
        "torn": data + b'{"event":',
        "empty": b"",
    }
    for name, content in cases.items():
        path = tmp_path / f"{name}.jsonl"
        path.write_bytes(content)
        reader = ChainReader(path, seed, heads_at={0, 3, 5, 10_000})
        got = list(reader)
        check = check_chain(path, seed)
        assert reader.result == check, name
        good = list(islice(iter_lines(path), check.lines)) if check.lines else []
        assert got == [(ln.seq, ln.obj) for ln in good], name
        hashes = {ln.seq + 1: ln.hash for ln in good}
        assert reader.heads == {n: (seed if n == 0 else hashes[n]) for n in (0, 3, 5) if n <= check.lines}, name


def _report_key(report):
    return [(r.invariant, r.status, r.checked, r.violations, r.first, r.note) for r in report.results]


def test_worker_processes_give_the_same_report_as_one_process(run, tmp_path):
    import shutil

    assert _report_key(verify_run(run, workers=3)) == _report_key(verify_run(run, workers=1))
    bad = tmp_path / "bad"
    shutil.copytree(run, bad)
    # a broken host chain (the workers' verdicts must be redone on its valid
    # prefix) and a planted record edit in one model
    host = (bad / "host.jsonl").read_bytes().split(b"\n")
    host[9] = host[9].replace(b'"load1":0.7', b'"load1":0.8')  # still JSON: the values read go past it
    assert host[9] != (bad / "host.jsonl").read_bytes().split(b"\n")[9]
    (bad / "host.jsonl").write_bytes(b"\n".join(host))
    record = sorted((bad / "models/beta/records").rglob("*.json"))[4]
    record.write_bytes(record.read_bytes().replace(b'"net_income"', b'"net_incomf"'))
    one, many = verify_run(bad, workers=1), verify_run(bad, workers=3)
    assert not one.ok and {1, 8} <= one.failed()
    assert _report_key(many) == _report_key(one)


@pytest.mark.slow
def test_host_sample_columns_in_small_blocks_give_the_same_reports(run, tmp_path, monkeypatch):
    """With blocks of 2 samples, the host summary's sample times and keys
    live in files: the span workers write them through the parent's
    descriptors, the parent joins them, the model workers read them back.
    Every report is the one of the default blocks (here: all in memory), on
    an intact run, a broken host chain, and a re-chained host log whose
    pressure makes the attempts' classes wrong."""
    import shutil

    from confirmatory.records import column
    from confirmatory.records.chain import log_seed, sha256_hex

    broken, pressed = tmp_path / "broken", tmp_path / "pressed"
    for copy in (broken, pressed):
        shutil.copytree(run, copy)
    host = (broken / "host.jsonl").read_bytes().split(b"\n")
    host[9] = host[9].replace(b'"load1":0.7', b'"load1":0.8')
    (broken / "host.jsonl").write_bytes(b"\n".join(host))
    objs = [json.loads(x) for x in (pressed / "host.jsonl").read_bytes().split(b"\n")[:-1]]
    for k in range(3, len(objs), 4):
        if objs[k].get("event") == "sample":
            objs[k]["mem_pressure"] = 99.0
    seed = log_seed(sha256_hex((pressed / "manifest.json").read_bytes()), "host.jsonl")
    (pressed / "host.jsonl").write_bytes(
        _chained([{k: v for k, v in o.items() if k not in ("seq", "prev")} for o in objs], seed)
    )
    runs = (run, broken, pressed)
    default = [[_report_key(verify_run(r, workers=w)) for w in (1, 3)] for r in runs]
    monkeypatch.setattr(column, "BLOCK", 2)  # read when a summary is made; the forked workers inherit it
    small = [[_report_key(verify_run(r, workers=w)) for w in (1, 3)] for r in runs]
    assert small == default
    assert all(one == many for one, many in default)
    assert verify_run(run).ok and 8 in verify_run(broken).failed() and 2 in verify_run(pressed).failed()


def test_without_a_temporary_directory_the_host_columns_stay_in_memory_and_report_the_same(run, monkeypatch, tmp_path):
    import tempfile

    from confirmatory.records import column

    expected = _report_key(verify_run(run, workers=1))
    monkeypatch.setattr(column, "BLOCK", 2)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "no-such-directory"))  # no file can be made
    with pytest.raises(OSError):
        tempfile.TemporaryFile()
    assert [_report_key(verify_run(run, workers=w)) for w in (1, 3)] == [expected, expected]


def test_what_verify_keeps_of_each_anchor_is_a_few_hundred_bytes(tmp_path):
    """Anchors come every anchors.interval_s, so their number grows with the
    run's length: verify keeps each one's counts and heads in arrays (about
    40 bytes per log), not its parsed line (about 4 kB, measured before)."""
    import tracemalloc

    from confirmatory.records.layout import load_layout
    from confirmatory.verify.logs import LogPass
    from confirmatory.verify.report import Findings

    root = generate_run(tmp_path / "run", Plan(households=60, anchor_every_s=2.0, harness=None))
    anchors = len((root / "anchors.jsonl").read_bytes().splitlines()) - 1
    assert anchors > 200
    layout = load_layout(root)
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        logs = LogPass(layout, Findings())  # noqa: F841 - kept alive while its memory is measured
        kept = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert kept / anchors < 1000, kept / anchors
    assert verify_run(root).ok


def test_the_anchors_of_a_model_whose_manifest_is_unreadable_are_not_passed_over(run, tmp_path):
    """Its logs have no seed, so no pass reads them: each anchored count of
    them still fails (the log has no valid line), beside the manifest's hash."""
    import shutil

    bad = tmp_path / "bad"
    shutil.copytree(run, bad)
    (bad / "models/beta/manifest.json").write_bytes(b"{not json")
    anchors = len((bad / "anchors.jsonl").read_bytes().splitlines()) - 1
    report = verify_run(bad)
    assert report.start_here[0].file == "models/beta/manifest.json"
    # per anchor: the manifest's hash, and beta's run.jsonl and admission.jsonl counts
    assert report.result(8).violations >= 3 * anchors, (report.result(8).violations, anchors)


# Lines on which a faster parser could read otherwise than the standard one:
# ints beyond 64 bits, exponents, -0.0, escapes, non-ASCII, nesting, duplicate
# keys, whitespace, NaN, a lone surrogate, an upper-case escape.
_TRICKY = [
    {"n": 123456789012345678901234567890},
    {"n": -9223372036854775809},
    {"n": 18446744073709551615},
    {"x": 1e16, "y": 1e-05, "z": 5e-324, "w": 1.7976931348623157e308, "v": -0.0, "u": 0.1},
    {"s": 'tab\there "quoted" back\\slash \u2028 \x7f \x01 é 🙂'},
    {"nested": {"b": [1, 2.5, {"c": None}], "a": True}, "list": [False, "x"]},
]
_RAW_TRICKY = [
    b'{"dup":1,"dup":2,"prev":"%s","seq":%d}',
    b' {"prev":"%s","seq":%d}',
    b'{"n":NaN,"prev":"%s","seq":%d}',
    b'{"prev":"%s","s":"\\ud800","seq":%d}',
    b'{"prev":"%s","s":"\\u001F","seq":%d}',
    b'{"n":1.50,"prev":"%s","seq":%d}',
    b'{"n":1E+16,"prev":"%s","seq":%d}',
]


def _chained(objs: list[dict], seed: str) -> bytes:
    from confirmatory.records.chain import dumps, sha256_hex

    out, head = [], seed
    for seq, obj in enumerate(objs):
        line = dumps({**obj, "seq": seq, "prev": head})
        out.append(line)
        head = sha256_hex(line)
    return b"".join(line + b"\n" for line in out)


def test_the_fast_parser_changes_nothing_the_readers_accept_or_yield(tmp_path, monkeypatch):
    from confirmatory.records import chain, reader

    if chain._fast_loads is None:
        pytest.skip("no fast parser installed")
    seed = "ab" * 32
    whole = _chained([{"event": "open"}, *_TRICKY, {"event": "close"}], seed)
    lines = whole.split(b"\n")[:-1]
    cases = {"whole": whole}
    for k, raw in enumerate(_RAW_TRICKY):  # each as line 3, after a valid prefix
        head = chain.sha256_hex(lines[2])
        cases[f"raw{k}"] = b"\n".join(lines[:3] + [raw % (head.encode(), 3)] + lines[4:]) + b"\n"
    for name, content in cases.items():
        path = tmp_path / f"{name}.jsonl"
        path.write_bytes(content)
        fast = reader.ChainReader(path, seed, heads_at={0, 2, 5})
        got_fast = [(s, o, repr(o)) for s, o in fast]
        with monkeypatch.context() as m:
            m.setattr(chain, "_fast_loads", None)
            m.setattr(reader, "_fast_loads", None)
            slow = reader.ChainReader(path, seed, heads_at={0, 2, 5})
            got_slow = [(s, o, repr(o)) for s, o in slow]
            objs_slow = [repr(o) for o in reader.iter_objects(path)]
        assert got_fast == got_slow, name  # values and their types (repr tells 1 from 1.0)
        assert fast.result == slow.result and fast.heads == slow.heads, name
        assert slow.fast_overruled == 0
        assert [o for _, _, o in got_fast] == objs_slow[: fast.result.lines], name
    # the long ints are read otherwise by the fast parser: overruled, and said so
    overruled = reader.ChainReader(tmp_path / "whole.jsonl", seed)
    list(overruled)
    assert overruled.result.ok and overruled.fast_overruled >= 2


@pytest.mark.slow
def test_a_host_log_the_fast_parser_reads_otherwise_gives_the_same_report(run, tmp_path):
    import shutil

    from confirmatory.records import chain
    from confirmatory.records.layout import load_layout
    from confirmatory.records.reader import ChainReader

    # long ints in a sample, re-chained: every line stays a valid link, but
    # the fast parser reads them as floats: the worker's chain pass says so
    # and the parent takes its verdicts from the standard parser. A late
    # time makes the log irregular (times go back after it): the whole-log
    # index then, in the workers' mode as in one process.
    edits = ({"mem_available": 10**30}, {"t": 10**30, "mem_pressure": 10**25}, {"t": 2e9})
    for n, edit in enumerate(edits):
        bad = tmp_path / f"bad{n}"
        shutil.copytree(run, bad)
        path = bad / "host.jsonl"
        objs = [json.loads(line) for line in path.read_bytes().split(b"\n")[:-1]]
        k = [i for i, o in enumerate(objs) if o.get("event") == "sample"][5]
        objs[k].update(edit)
        seed = {s.relpath: s.seed for s in load_layout(bad).logs()}["host.jsonl"]
        path.write_bytes(_chained([{x: v for x, v in o.items() if x not in ("seq", "prev")} for o in objs], seed))
        reader = ChainReader(path, seed)
        list(reader)
        assert reader.result.ok and reader.result.lines == len(objs)
        if chain._fast_loads is not None:
            assert reader.fast_overruled == (n < 2)
        one, many = verify_run(bad, workers=1), verify_run(bad, workers=3)
        assert _report_key(many) == _report_key(one), n


@pytest.mark.slow
def test_host_spans_joined_give_the_same_report_as_one_pass(run, tmp_path):
    """host.jsonl's chain is checked in spans by worker processes and joined;
    damage at and around the cut (or anywhere) must read exactly as one pass
    reads it: the join falls back to that pass for any span or seam that is
    not a clean link."""
    import shutil

    from confirmatory.records.chain import dumps, sha256_hex
    from confirmatory.records.layout import load_layout
    from confirmatory.verify.hostlog import host_spans

    data = (run / "host.jsonl").read_bytes()
    lines = data.split(b"\n")[:-1]
    (cut, _), (start2, _) = host_spans(run / "host.jsonl", 2)
    assert cut == 0 and 0 < start2 < len(data)
    at = data[:start2].count(b"\n")  # the second span's first line
    seed = {s.relpath: s.seed for s in load_layout(run).logs()}["host.jsonl"]

    def rechained(ls):
        out, head = [], seed
        for seq, raw in enumerate(ls):
            obj = json.loads(raw)
            obj.update(seq=seq, prev=head)
            out.append(dumps(obj))
            head = sha256_hex(out[-1])
        return out

    def flip(ls, i):
        return ls[:i] + [ls[i].replace(b'"t":', b'"t" :', 1)] + ls[i + 1 :]

    cases = {"intact": lines}
    for i in (1, at - 1, at, at + 1, len(lines) - 1):
        cases[f"flip{i}"] = flip(lines, i)
        cases[f"delete{i}"] = lines[:i] + lines[i + 1 :]
        cases[f"duplicate{i}"] = lines[: i + 1] + lines[i:]
        cases[f"truncate{i}"] = lines[:i]
        if i + 1 < len(lines):
            cases[f"swap{i}"] = lines[:i] + [lines[i + 1], lines[i]] + lines[i + 2 :]
    # chain-valid rewrites (the anchors, not the chain, catch these)
    cases[f"rechained-without{at}"] = rechained(lines[:at] + lines[at + 1 :])
    cases["rechained-without-open"] = rechained(lines[1:])  # line 0 is then not an open line
    cases[f"rechained-edit{at}"] = rechained(
        lines[:at] + [lines[at].replace(b'"load1":', b'"load1":1', 1)] + lines[at + 1 :]
    )
    assert cases[f"rechained-edit{at}"][at] != lines[at]
    assert all(len(c) > at for k, c in cases.items() if not k.startswith("truncate"))
    for name, content in cases.items():
        bad = tmp_path / name
        shutil.copytree(run, bad)
        (bad / "host.jsonl").write_bytes(b"".join(line + b"\n" for line in content))
        one, many = verify_run(bad, workers=1), verify_run(bad, workers=3)
        assert _report_key(many) == _report_key(one), name
        assert one.ok == (name == "intact"), name  # every damage is found, in both modes
    for name, content in (
        ("torn", data + b'{"event":"sam'),
        ("empty", b""),
        ("missing", None),
        ("one-long-line", b"x" * 300_000 + b"\n" + data),
    ):
        bad = tmp_path / name
        shutil.copytree(run, bad)
        if content is None:
            (bad / "host.jsonl").unlink()
        else:
            (bad / "host.jsonl").write_bytes(content)
        one = verify_run(bad, workers=1)
        assert not one.ok and _report_key(verify_run(bad, workers=3)) == _report_key(one), name


@pytest.mark.slow
@pytest.mark.parametrize("block", [None, 2])
def test_host_summaries_of_spans_join_into_the_summary_of_the_whole_log(block):
    """HostSummary.join, cut at every line of random logs (pressure, clock
    steps, gaps at and across the cut, evidence, failed samples, a time that
    goes back): every field equals one summary fed every line (with small
    blocks: the sample columns joined from their files)."""
    import random

    from confirmatory.records.hostindex import HostSummary

    def fed(lines):
        summary = HostSummary(max_gap_s=45, pressure_threshold=10, block=block)
        for obj in lines:
            summary.add(obj)
        return summary

    rng = random.Random(11)
    for trial in range(30):
        lines, _ = _random_host_log(rng, n=40)
        if trial % 5 == 4:  # a time that goes back somewhere
            k = rng.randrange(2, len(lines))
            lines[k] = {**lines[k], "t": lines[k]["t"] - 100.0}
        whole = fed(lines).state()
        for cut in range(1, len(lines)):
            for second in (cut + rng.randrange(1, 6),):
                spans = [lines[:cut], lines[cut:second], lines[second:]]
                parts = [(fed(span), span[0]["t"] if span else None) for span in spans if span]
                assert HostSummary.join(parts).state() == whole, (trial, cut, second)
    # a later span whose first line has no time: no join
    assert HostSummary.join([(fed(lines[:3]), 0.0), (fed([{"event": "sample-failed"}]), None)]) is None


def _full_samples(rng, lines):
    """``lines`` with every sample given the fields the sampler writes besides
    those the rule reads (wall and monotonic clocks, load, byte counts); the
    wall clock steps forward and back now and then."""
    out, offset = [], 1.8e9
    for obj in lines:
        if obj.get("event") == "sample":
            offset += rng.choice([0.0] * 8 + [0.002, -3.0, 40.0])
            mono = obj["t"] - 1.8e9 + 1000.0 if type(obj["t"]) is float else 1000.0
            obj = {
                **obj,
                "wall": mono + offset,
                "mono": mono,
                "load1": 0.7,
                "mem_available": 8 << 30,
                "swap_used": 0,
                "mem_pressure": obj["mem_pressure"] if obj["mem_pressure"] is not None else 0.5,
            }
        out.append(obj)
    return out


_ODD_VALUES = ("x", None, [1.0], {"a": 1.0}, True, False, 3, -2, 2.5, float("nan"), float("inf"), 2**60 + 1, "missing")


def _oddly_typed(rng, lines, rate):
    """Some samples with a field of another kind, or missing (as only an edit makes them)."""
    from confirmatory.verify.hostlog import SAMPLE_INTEGERS, SAMPLE_NUMBERS

    lines = [dict(obj) for obj in lines]
    for obj in lines:
        while obj.get("event") == "sample" and rng.random() < rate:
            name, value = rng.choice((*SAMPLE_NUMBERS, *SAMPLE_INTEGERS, "reads_began")), rng.choice(_ODD_VALUES)
            if value == "missing":
                obj.pop(name, None)
            else:
                obj[name] = value
    return lines


@pytest.mark.parametrize("parse", ["dicts", "json", "orjson"])
@pytest.mark.parametrize("block", [None, 2])
def test_the_checked_pass_over_host_lines_gives_what_adding_and_checking_every_line_gives(parse, block, monkeypatch):
    """verify.summarize_checked on random logs, edited as only an edit
    makes one (times going back, NaN, lines moved, values the rule cannot
    read) and with fields of every other kind or missing, parsed three ways:
    its summary is, every field, the one `HostSummary.add` builds from every
    line; its drift the one `ClockDrift.add` gives on every sample; and every
    sample with a field not of its kind is reported (its quick check of the
    common sample's kinds lets none by), with `sample_problem`'s message, at
    its line, and no other. Also with the pass cut in two and parameters
    that are integers."""
    import math
    import random

    from confirmatory.records import chain
    from confirmatory.records.hostindex import HostSummary
    from confirmatory.verify import report as report_module
    from confirmatory.verify.clocks import ClockDrift
    from confirmatory.verify.hostlog import sample_problem, summarize_checked
    from confirmatory.verify.report import Findings

    if parse == "orjson" and chain._fast_loads is None:
        pytest.skip("orjson is not installed")
    monkeypatch.setattr(report_module, "KEEP_PER_INVARIANT", 10**6)  # every violation kept, to compare them all
    loads = {"json": json.loads, "orjson": chain._fast_loads}.get(parse)

    def parsed(obj):
        if loads is None:
            return obj
        try:  # through the parser (its key objects), where it writes the line back as it was
            line = json.dumps(obj)
            back = loads(line)
            return back if json.dumps(back) == line else obj
        except (TypeError, ValueError):
            return obj

    def drift_state(d):
        return repr([getattr(d, name) for name in ClockDrift.__slots__])

    rng = random.Random(23 + block if block else 23)
    common = 0
    for trial in range(80):
        lines = _full_samples(rng, _random_host_log(rng, n=rng.choice([5, 60, 150]))[0])
        if trial % 4:
            lines = _edited_host_log(rng, lines, poison=False)  # values the rule cannot read: below
        lines = [parsed(obj) for obj in _oddly_typed(rng, lines, rng.choice([0.0, 0.03, 0.3]))]
        params = rng.choice(
            [{"max_gap_s": 45, "pressure_threshold": 10}, {"max_gap_s": 45.5, "pressure_threshold": 9.9}]
        )
        summary, found, drift = HostSummary(**params, block=block), Findings(), ClockDrift()
        pairs = list(enumerate(lines))
        cut = rng.randrange(len(pairs) + 1)
        summarize_checked(iter(pairs[:cut]), summary, found, drift)
        summarize_checked(iter(pairs[cut:]), summary, found, drift)

        fed, fed_drift, problems = HostSummary(**params, block=block), ClockDrift(), []
        for seq, obj in pairs:
            fed.add(obj)
            if obj.get("event") == "sample":
                fed_drift.add(obj.get("wall"), obj.get("mono"), obj.get("clock_back_max_s"))
                if (problem := sample_problem(obj)) is not None:
                    problems.append((seq, f"sample: {problem}"))
                elif all(type(obj[k]) is float for k in ("t", "wall", "mono", "mem_pressure", "load1")):
                    common += not math.isnan(obj["t"])
        assert repr(summary.state()) == repr(fed.state()), (trial, cut)
        assert drift_state(drift) == drift_state(fed_drift), (trial, cut)
        said = [(v.line, v.message) for v in found.first[2] if v.message.startswith("sample: ")]
        assert said == problems, (trial, cut)
        assert found.count[2] == len(found.first[2])
        assert found.checked[2] == sum(o.get("event") in ("sample", "evidence", "sample-failed") for o in lines)
    assert common > 2000  # most samples took the common path


@pytest.mark.parametrize("at", [0, 3])
@pytest.mark.parametrize(
    "name",
    ["t", "wall", "mono", "mem_pressure", "load1", "clock_back_max_s", "mem_available", "swap_used", "reads_began"],
)
def test_a_sample_field_of_any_other_kind_is_reported_by_the_checked_pass(name, at):
    """Each field of a host sample, of every kind but its own or missing (a
    number: a float or an integer; a byte count: an integer; `reads_began` a
    number where there), is reported once, at its line, with its name; the
    first sample (which sets the drift's start) or a later one, among
    samples of the common kind. The kinds the contract allows are not."""
    from confirmatory.records.hostindex import HostSummary
    from confirmatory.verify.clocks import ClockDrift
    from confirmatory.verify.hostlog import SAMPLE_INTEGERS, summarize_checked
    from confirmatory.verify.report import Findings

    def sample(k):
        return {
            "event": "sample",
            "t": 100.0 + k,
            "wall": 100.0 + k,
            "mono": 5.0 + k,
            "mem_pressure": 0.5,
            "load1": 0.7,
            "clock_back_max_s": 0.0,
            "mem_available": 1 << 33,
            "swap_used": 0,
            "reads_began": 99.5 + k,
        }

    integer = name in SAMPLE_INTEGERS
    odd = ["x", None, [1.0], {"a": 1}, True, False] + ([1.5, float("nan")] if integer else [])
    allowed = [7, 2**70] + ([] if integer else [0.25, float("nan"), float("inf")])
    (allowed if name == "reads_began" else odd).append("missing")
    for value, ok in [(v, False) for v in odd] + [(v, True) for v in allowed]:
        lines = [{"event": "open", "t": 99.0}] + [sample(k) for k in range(6)]
        if value == "missing":
            del lines[1 + at][name]
        else:
            lines[1 + at][name] = value
        found = Findings()
        summarize_checked(enumerate(lines), HostSummary(max_gap_s=45, pressure_threshold=10), found, ClockDrift())
        said = [(v.line, v.message) for v in found.first[2]]
        if ok:
            assert said == [], (value, said)
            continue
        want = f"{name} missing" if value == "missing" else f"{name} is {value!r}, not"
        assert found.count[2] == 1 and said[0][0] == 1 + at and said[0][1].startswith(f"sample: {want}"), (value, said)
        assert found.checked[2] == 6


@pytest.mark.slow
def test_the_report_is_the_same_without_orjson(run, tmp_path, monkeypatch):
    """orjson only speeds verify up: with the standard library alone the
    report is identical, on an intact run and on damaged ones."""
    import shutil

    from confirmatory.records import chain, reader

    if chain._fast_loads is None:
        pytest.skip("orjson is not installed")
    bad = tmp_path / "bad"
    shutil.copytree(run, bad)
    host = (bad / "host.jsonl").read_bytes().split(b"\n")
    host[9] = host[9].replace(b'"load1":0.7', b'"load1":0.8')
    (bad / "host.jsonl").write_bytes(b"\n".join(host))
    record = sorted((bad / "models/alpha/records").rglob("*.json"))[3]
    record.write_bytes(record.read_bytes().replace(b'"cost_nusd":', b'"cost_nusd": ', 1))
    log = bad / "models/gamma/run.jsonl"
    log.write_bytes(log.read_bytes().replace(b'"event":"household"', b'"event": "household"', 1))
    for root in (run, bad):
        fast = {w: _report_key(verify_run(root, workers=w)) for w in (1, 3)}
        with monkeypatch.context() as m:
            m.setattr(chain, "_fast_loads", None)
            m.setattr(reader, "_fast_loads", None)
            slow = {w: _report_key(verify_run(root, workers=w)) for w in (1, 3)}
        assert fast == slow and fast[1] == fast[3], root.name
    assert not verify_run(bad, workers=1).ok


def test_a_witness_asked_for_but_not_reached_is_not_reported_as_not_asked(run, tmp_path):
    # An anchor line whose count is not a number makes the anchors unreadable
    # for the witness check: the report must not tell the reader to pass --witness.
    import shutil

    from confirmatory.records.chain import dumps, log_seed, sha256_hex

    bad = tmp_path / "bad"
    shutil.copytree(run, bad)
    objs = [json.loads(x) for x in (bad / "anchors.jsonl").read_bytes().split(b"\n")[:-1]]
    rel = next(iter(objs[-1]["logs"]))
    objs[-1]["logs"][rel]["lines"] = "x"  # in the final anchor
    head, out = log_seed(sha256_hex((bad / "manifest.json").read_bytes()), "anchors.jsonl"), []
    for k, o in enumerate(objs):
        line = dumps({**o, "seq": k, "prev": head})
        out.append(line + b"\n")
        head = sha256_hex(line)
    (bad / "anchors.jsonl").write_bytes(b"".join(out))
    report = verify_run(bad, witness=tmp_path / "some-clone")
    assert report.witness == str(tmp_path / "some-clone") and report.witness_problems >= 1
    assert "not checked (verify --witness" not in report.to_table()


def test_a_changed_manifest_is_shown_once_where_to_start(run, tmp_path):
    import shutil

    bad = tmp_path / "bad"
    shutil.copytree(run, bad)
    path = bad / "models/alpha/manifest.json"
    path.write_bytes(path.read_bytes().replace(b'"lanes":', b'"lanes": ', 1))  # same JSON, other bytes
    report = verify_run(bad)
    roots = [v.message for v in report.start_here]
    assert roots.count("manifest models/alpha/manifest.json does not hash as anchored") == 1, roots
    assert report.result(8).violations > 1  # every anchor that lists it still fails


def test_the_span_workers_sample_files_are_removed_whatever_the_host_log_holds(run, tmp_path, monkeypatch):
    # the files have no name from the start (column.Column): none may ever
    # appear in the temporary directory, however the host log is read
    import shutil
    import tempfile

    spill_dir = tmp_path / "tmp"
    spill_dir.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(spill_dir))  # the forked workers inherit it
    intact = verify_run(run, workers=2)
    assert intact.ok and list(spill_dir.iterdir()) == []
    # A damaged host log: the parent falls back to one whole pass; the files still go.
    bad = tmp_path / "bad"
    shutil.copytree(run, bad)
    host = bad / "host.jsonl"
    lines = host.read_bytes().split(b"\n")
    lines[len(lines) // 2] = lines[len(lines) // 2].replace(b'"t":', b'"t":1', 1)
    host.write_bytes(b"\n".join(lines))
    damaged = verify_run(bad, workers=2)
    assert not damaged.ok and list(spill_dir.iterdir()) == []
    assert damaged.to_json() == verify_run(bad, workers=1).to_json()  # reported as in one process


_END = st.one_of(st.sampled_from([0.0, 1.0, 2.0, 2.0, 3.5, 7.0]), st.just(float("nan")), st.integers(0, 8))


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.sampled_from("abcdef"), _END), min_size=1, max_size=25), st.data())
def test_the_inconclusive_counts_are_the_sets_of_the_rule(attempts, data):
    from confirmatory.verify.classes import known_counts

    ended = {h: data.draw(_END) for h, _ in attempts}
    expected = []
    for h, end in attempts:
        lower = {h} | {x for x, _ in attempts if ended[x] < end}
        upper = {h} | {x for x, e in attempts if e < ended[h]}
        expected.append((len(lower), len(upper)))
    assert known_counts(attempts, ended) == expected
