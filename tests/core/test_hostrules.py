"""The pure host-evidence rule: what host.jsonl says about one attempt."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from confirmatory.core.hostrules import (
    NO_SAMPLE_AFTER,
    HostVerdict,
    attempt_host_verdict,
    completion_index,
    scan_completion,
)
from confirmatory.core.rules import Action, Cls, decide

GAP = 45.0
THRESHOLD = 10.0


def sample(t, pressure=0.0, back=0.0):
    return {
        "event": "sample",
        "t": t,
        "wall": t,
        "mono": t,
        "mem_pressure": pressure,
        "mem_available": 1 << 30,
        "swap_used": 0,
        "load1": 0.1,
        "clock_back_max_s": back,
    }


def log(*lines, open_t=0.0):
    return [{"event": "open", "t": open_t}, *lines]


def verdict(lines, start, end):
    return attempt_host_verdict(lines, start, end, max_gap_s=GAP, pressure_threshold=THRESHOLD)


def every_30s(*overrides):
    """Samples at 30, 60, ... 150; `overrides` maps a time to a replacement line."""
    table = dict(overrides)
    return log(*(table.get(t, sample(t)) for t in (30.0, 60.0, 90.0, 120.0, 150.0)))


def test_a_quiet_host_with_a_sample_after_the_attempt_gives_a_complete_clean_verdict():
    assert verdict(every_30s(), 40, 70) == HostVerdict(complete=True, reasons=())


def test_a_pressure_spike_inside_an_attempt_makes_it_host_and_reruns_it():
    v = verdict(every_30s((60.0, sample(60.0, pressure=42.5))), 40, 70)
    assert v.complete
    assert v.reasons == ("pressure 42.5 > 10 at 60.000",)
    decision = decide({"status": "ok"}, v.reasons, reruns_used=0, max_reruns=2)
    assert (decision.cls, decision.action) == (Cls.HOST, Action.RERUN)


def test_pressure_at_the_threshold_is_not_a_spike():
    assert verdict(every_30s((60.0, sample(60.0, pressure=THRESHOLD))), 40, 70).reasons == ()


def test_a_pressure_spike_outside_every_attempt_changes_nothing():
    spiky = every_30s((30.0, sample(30.0, pressure=90.0)), (120.0, sample(120.0, pressure=90.0)))
    assert verdict(spiky, 40, 70) == HostVerdict(complete=True, reasons=())


def test_a_spike_just_inside_the_slack_counts_and_one_just_outside_does_not():
    inside = log(sample(39.95, pressure=50.0), sample(60.0), sample(90.0))
    outside = log(sample(39.85, pressure=50.0), sample(60.0), sample(90.0))
    assert verdict(inside, 40, 70).reasons == ("pressure 50 > 10 at 39.950",)
    assert verdict(outside, 40, 70).reasons == ()


def test_a_gap_longer_than_max_gap_around_the_attempt_makes_it_host():
    lines = log(sample(30.0), sample(100.0), sample(130.0))
    assert verdict(lines, 40, 50).reasons == ("gap of 70.000 s between samples at 30.000 and 100.000",)


def test_a_gap_of_exactly_max_gap_is_allowed():
    assert verdict(log(sample(30.0), sample(75.0)), 40, 50).reasons == ()


def test_a_gap_that_ends_before_the_attempt_changes_nothing():
    lines = log(sample(30.0), sample(100.0), sample(130.0), sample(160.0))
    assert verdict(lines, 140, 150) == HostVerdict(complete=True, reasons=())


def test_the_open_line_is_the_first_time_point_of_a_gap():
    assert verdict(log(sample(60.0), sample(90.0)), 10, 20).reasons == (
        "gap of 60.000 s between samples at 0.000 and 60.000",
    )


def test_a_failed_sample_does_not_break_a_gap():
    lines = log(sample(30.0), {"event": "sample-failed", "t": 60.0, "error": "x"}, sample(90.0))
    assert verdict(lines, 40, 50).reasons == ("gap of 60.000 s between samples at 30.000 and 90.000",)


def test_an_evidence_line_inside_the_attempt_makes_it_host():
    lines = every_30s()
    lines.insert(2, {"event": "evidence", "t": 45.0, "source": "guard", "line": "oom-kill: python"})
    assert verdict(lines, 40, 70).reasons == ("evidence guard: oom-kill: python at 45.000",)


def test_an_evidence_line_outside_the_attempt_changes_nothing():
    lines = every_30s()
    lines.insert(2, {"event": "evidence", "t": 35.0, "source": "power", "line": "Sleep"})
    assert verdict(lines, 40, 70).reasons == ()


def test_notes_and_failed_reads_are_not_evidence():
    lines = every_30s()
    lines.insert(2, {"event": "evidence-note", "t": 45.0, "source": "guard", "note": "rotated"})
    lines.insert(3, {"event": "evidence-failed", "t": 46.0, "source": "guard", "error": "x"})
    assert verdict(lines, 40, 70).reasons == ()


def test_a_backward_clock_step_widens_the_slack_for_the_window():
    spike = sample(39.6, pressure=50.0)
    without = log(sample(35.0), spike, sample(60.0), sample(90.0))
    with_step = log(sample(35.0, back=0.5), spike, sample(60.0), sample(90.0))
    assert verdict(without, 40, 70).reasons == ()
    assert verdict(with_step, 40, 70).reasons == ("pressure 50 > 10 at 39.600",)


def test_the_first_sample_after_the_end_completes_the_evidence():
    # Both times come from the one never-backwards clock: "after" needs no slack.
    assert verdict(log(sample(30.0), sample(50.05)), 40, 50).complete
    assert not verdict(log(sample(30.0), sample(50.0)), 40, 50).complete


def test_a_backward_clock_step_widens_the_window():
    early_spike = [sample(30.0), sample(39.6, pressure=90.0)]
    assert verdict(log(*early_spike, sample(50.2)), 40, 50).reasons == ()
    # The completing sample reports a 0.5 s backward step: the slack is 0.6 s.
    stepped = verdict(log(*early_spike, sample(50.2, back=0.5)), 40, 50)
    assert stepped.complete and any("pressure 90" in r for r in stepped.reasons)


def test_without_a_sample_after_the_attempt_it_is_host_and_incomplete():
    v = verdict(log(sample(30.0), sample(45.0)), 40, 50)
    assert v == HostVerdict(complete=False, reasons=(NO_SAMPLE_AFTER,))
    assert verdict([], 40, 50) == HostVerdict(complete=False, reasons=(NO_SAMPLE_AFTER,))


def test_lines_after_the_completing_sample_do_not_change_the_verdict():
    # Read whole, the late sample would widen the slack to 5.1 s and pull the
    # early spike (and its own spike and the evidence line) into the window.
    head = log(sample(30.0), sample(35.0, pressure=90.0), sample(50.5))
    tail = [sample(51.0, pressure=90.0, back=5.0), {"event": "evidence", "t": 52.0, "source": "guard", "line": "late"}]
    assert verdict(head, 40, 50) == HostVerdict(complete=True, reasons=())
    assert verdict(head + tail, 40, 50) == HostVerdict(complete=True, reasons=())


# A log as the sampler writes it: non-decreasing times, samples with random
# pressure and clock steps, failed samples, evidence lines.
_line = st.tuples(
    st.floats(0.0, 40.0),
    st.sampled_from(["sample", "sample", "sample", "sample-failed", "evidence"]),
    st.sampled_from([0.0, 0.0, 50.0]),
    st.sampled_from([0.0, 0.0, 0.0, 0.3, 2.0]),
)


@st.composite
def _logs(draw):
    t, lines, last_sample = 0.0, [{"event": "open", "t": 0.0}], 0.0
    for dt, event, pressure, back in draw(st.lists(_line, max_size=25)):
        t += dt
        if event == "sample":
            line = sample(t, pressure, back)
            # when its step began reading the sources (absent in older logs)
            frac = draw(st.sampled_from([None, 0.0, 0.5, 1.0]))
            if frac is not None:
                line["reads_began"] = last_sample + frac * (t - last_sample)
            last_sample = t
            lines.append(line)
        elif event == "evidence":
            # `since`: when the source's previous read began (absent in older logs)
            back_to = draw(st.sampled_from([None, 0.0, 0.5, 4.0, 30.0]))
            line = {"event": "evidence", "t": t, "source": "guard", "line": "x"}
            if back_to is not None:
                line["since"] = max(0.0, t - back_to)
            lines.append(line)
        else:
            lines.append({"event": event, "t": t, "error": "x"})
    return lines


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(_logs(), st.floats(0.0, 300.0), st.floats(0.0, 60.0))
def test_the_lanes_and_verify_agree_whatever_the_log_holds_after_completion(lines, start, length):
    # The lanes decide on the first prefix that completes; verify reads it all.
    end = start + length
    whole = verdict(lines, start, end)
    for k in range(len(lines) + 1):
        early = verdict(lines[:k], start, end)
        if early.complete:
            assert early == whole
            break
    else:
        assert not whole.complete


@pytest.mark.slow
@settings(max_examples=200, deadline=None)
@given(_logs(), st.floats(0.0, 300.0), st.lists(st.integers(0, 30), max_size=5))
def test_a_waiter_scanning_in_pieces_finds_the_same_completing_sample(lines, end, cuts):
    # wait_complete scans only the lines that arrived since it last looked.
    resume_at, back_max, found = 0, 0.0, None
    for cut in sorted(cuts) + [len(lines)]:
        found, resume_at, back_max = scan_completion(lines[:cut], end, min(resume_at, cut), back_max)
        if found is not None:
            break
    assert found == completion_index(lines, end)[0]


def test_a_resumed_scan_keeps_the_backward_step_seen_before():
    lines = log(sample(30.0, back=2.0), sample(51.0))
    found, resume_at, back_max = scan_completion(lines[:2], 50.0)
    assert (found, back_max) == (None, 2.0)
    assert scan_completion(lines, 50.0, resume_at, back_max) == (2, 3, 2.0)


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(_logs(), st.floats(0.0, 300.0), st.floats(0.0, 60.0), st.integers(0, 40))
def test_the_timeline_gives_the_verdict_of_the_whole_prefix_from_a_slice(lines, start, length, limit):
    from confirmatory.core.hostrules import HostTimeline

    timeline = HostTimeline(lines)
    end = start + length
    for n in (None, limit):
        prefix = lines if n is None else lines[:n]
        expected = attempt_host_verdict(prefix, start, end, max_gap_s=45.0, pressure_threshold=10.0)
        assert timeline.verdict(start, end, max_gap_s=45.0, pressure_threshold=10.0, limit=n) == expected


def test_an_evidence_line_read_after_the_attempt_counts_for_it_if_it_may_have_appeared_during_it():
    """A guard line is stamped when it is read (`t`); it appeared after the
    source's previous read began (`since`). An OOM line read at the step after
    the pass, or by a slow source after the attempt's end, still counts for the
    attempt that ran while it may have been written."""
    lines = [
        {"event": "open", "t": 0.0},
        sample(10.0),
        sample(20.0),
        {"event": "evidence", "t": 31.0, "since": 19.9, "source": "guard", "line": "oom-kill: python"},
        sample(31.5),
    ]
    assert verdict(lines, 21.0, 25.0).reasons == ("evidence guard: oom-kill: python at 31.000",)
    # ... and for no attempt that ended before the source's previous read began
    assert verdict(lines, 12.0, 19.0).reasons == ()
    # without `since` (an older log), the read time alone
    old = [dict(line) for line in lines]
    del old[3]["since"]
    assert verdict(old, 21.0, 25.0).reasons == ()


def test_a_sample_whose_step_began_reading_before_the_attempt_ended_does_not_complete_it():
    """The step read its sources at 24.9, the attempt ended at 25.0, the
    sample came at 25.1: a guard line written at 24.95 was not read by that
    step. The attempt is complete only at the next step's sample, and the
    line (read there, since 24.9) is in its verdict."""
    lines = [
        {"event": "open", "t": 0.0},
        sample(10.0),
        {**sample(25.1), "reads_began": 24.9},
        {"event": "evidence", "t": 26.0, "since": 24.9, "source": "guard", "line": "oom-kill: python"},
        {**sample(26.1), "reads_began": 25.9},
    ]
    assert verdict(lines[:3], 20.0, 25.0) == HostVerdict(complete=False, reasons=(NO_SAMPLE_AFTER,))
    assert verdict(lines, 20.0, 25.0).reasons == ("evidence guard: oom-kill: python at 26.000",)
    # without reads_began (an older log) the sample's own time decides, as before
    old = [{k: v for k, v in line.items() if k != "reads_began"} for line in lines]
    assert verdict(old[:3], 20.0, 25.0) == HostVerdict(complete=True, reasons=())
