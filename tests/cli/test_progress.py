"""What a person watching (or reading the log of) a long run is told."""

from __future__ import annotations

import io
import json
import re
import time

import pytest
from runhelpers import in_background, make_run, verified

from confirmatory.cli.progress import Progress
from confirmatory.engine.resume import request_resume

FAST = {"engine_factory": "confirmatory.testing.fakes:null_engine"}


def watched(run, progress, meanwhile):
    """Run to the end with ``progress`` shown and ``meanwhile`` in a thread
    (the person at the terminal); the result, once verified."""
    helper = in_background(meanwhile)
    result = run.wait()
    helper.join(10)
    progress.stop()
    run.close()
    verified(run.run_dir)
    return result


@pytest.mark.slow
def test_a_quiet_run_still_says_once_that_a_model_paused_and_how_to_resume_it(tmp_path):
    hh = [{"id": "hh-000", "plan": {"calculator/0": "operator"}}, {"id": "hh-001"}]
    run = make_run(tmp_path, households=hh, models=1, **FAST)
    out = io.StringIO()
    progress = Progress(run, stream=out, table=False)
    run.start()
    progress.start()
    m = run.models["m0"]

    def operator():
        while "PAUSED" not in out.getvalue():
            time.sleep(0.05)
        time.sleep(1.2)  # two more looks: the event is not repeated
        request_resume(run.run_dir, "m0")

    result = watched(run, progress, operator)
    text = out.getvalue()
    assert result.status == "completed" and not m.paused
    paused = [line for line in text.splitlines() if "PAUSED" in line]
    assert len(paused) == 1, text
    assert f"confirmatory resume {run.run_dir} --model m0" in paused[0]
    # ... and where its failure is, and what it was: the record (run.jsonl
    # has only the pause until the household ends, after the resume).
    assert "PAUSED for an operator: models/m0/records/hh-000/calculator/0.json: " in paused[0], paused[0]
    assert "AuthenticationError" in paused[0] and "planted operator fault" in paused[0]
    assert "households" not in text  # no table with table=False


def test_a_stopping_run_says_what_it_waits_for_and_that_a_second_signal_changes_nothing(tmp_path):
    import os
    import signal

    hh = [{"id": f"hh-{i:03d}", "latency_s": 0.05} for i in range(40)]
    run = make_run(tmp_path, households=hh, models=1, install_signals=True, **FAST)
    out = io.StringIO()
    progress = Progress(run, stream=out, table=False)
    # A terminal's session (the suite itself may run under nohup, which
    # ignores SIGHUP, and the runner then leaves it ignored).
    # Restored once the run has closed (and restored its own handlers).
    hup = signal.signal(signal.SIGHUP, signal.SIG_DFL)
    try:
        run.start()
        progress.start()

        def interrupt():
            time.sleep(0.3)
            os.kill(os.getpid(), signal.SIGHUP)  # the terminal closed: an interrupt like any other
            time.sleep(0.1)
            os.kill(os.getpid(), signal.SIGINT)

        result = watched(run, progress, interrupt)
    finally:
        signal.signal(signal.SIGHUP, hup)
    text = out.getvalue()
    assert result.status == "stopped" and result.stop_cause == "interrupt"
    # (the first signal is what stopped it: SIGHUP, the detail of the run's stop line)
    assert (
        text.count(f"run stopping (interrupt: signal {int(signal.SIGHUP)}): calls in flight end within their timeout")
        == 1
    ), text
    assert "final anchor is written and pushed" in text
    assert run.signals_received == 2 and text.count("signal received again: already stopping") == 1, text
    # The last table does not call a model cut short "done".
    assert progress.lines()[1].endswith("stopped (interrupt)"), progress.lines()


def test_a_terminal_gets_the_live_region_and_a_file_plain_lines_with_a_summary_every_60_s(tmp_path):
    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    run = make_run(tmp_path, households=2, models=1, **FAST)
    assert Progress(run, stream=Tty()).live and not Progress(run, stream=Tty(), table=False).live
    assert not Progress(run, stream=io.StringIO()).live and Progress(run, stream=io.StringIO()).interval_s == 60.0
    Progress(run, stream=io.StringIO()).stop()  # never started (the run failed to start): no error


def test_the_live_region_is_redrawn_in_place_over_exactly_the_lines_it_drew(tmp_path, monkeypatch):
    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    monkeypatch.setenv("COLUMNS", "60")
    monkeypatch.setenv("LINES", "30")
    hh = [{"id": f"hh-{i:03d}", "latency_s": 0.02} for i in range(6)]
    run = make_run(tmp_path, households=hh, models=2, **FAST)
    out = Tty()
    progress = Progress(run, stream=out)
    progress.tick()  # before the run starts
    assert "starting: pools, first anchor" in out.getvalue()
    run.start()
    progress.start()
    watched(run, progress, lambda: None)
    text = out.getvalue()
    frames = text.split("\x1b[J")[:-1]
    assert len(frames) >= 3, text
    drawn = 0
    for frame in frames:
        moved = re.match(r"\r\x1b\[(\d+)A", frame)
        # each redraw goes up over what the one before drew, then erases and writes each line
        assert (int(moved[1]) if moved else 0) == drawn, (drawn, frame)
        body = frame[moved.end() :] if moved else frame
        lines = body.split("\n")[:-1]
        assert all(line.startswith("\x1b[2K") and len(line) - 4 < 60 for line in lines), lines
        drawn = len(lines)
    assert rows_done(frames[-1]) == 2, frames[-1]


def rows_done(frame: str) -> int:
    return sum(1 for line in frame.split("\n") if line.rstrip().endswith("  done"))


def test_fitted_lines_break_between_words_and_never_pass_the_width():
    from hypothesis import given
    from hypothesis import strategies as st

    from confirmatory.cli.progress import fit

    words = st.text(alphabet="abcdefghij/-.:$", min_size=1, max_size=12)

    @given(st.lists(words, min_size=1, max_size=40), st.integers(20, 80))
    def check(ws, width):
        line = "  " + " ".join(ws)
        out = fit([line], width)
        assert all(len(piece) <= width for piece in out)
        assert [w for piece in out for w in piece.split()] == ws  # every word whole, in order

    check()


def test_not_on_a_terminal_each_change_of_state_is_one_plain_line(tmp_path):
    hh = [{"id": "hh-000", "plan": {"calculator/0": "operator"}}, {"id": "hh-001"}]
    run = make_run(tmp_path, households=hh, models=1, **FAST)
    out = io.StringIO()
    progress = Progress(run, stream=out)
    progress.start()
    run.start()

    def operator():
        while "PAUSED" not in out.getvalue():
            time.sleep(0.05)
        request_resume(run.run_dir, "m0")

    watched(run, progress, operator)
    text = out.getvalue()
    assert "\x1b" not in text
    said = [line.split("] ", 1)[1] for line in text.splitlines() if line.startswith("[")]
    assert said[0] == "starting: pools, first anchor" and said[1] == "run started: 1 model(s), 2 lane(s)", said
    # (resumed, then done; or done by the next look)
    assert [s for s in said if s.startswith("m0: ")][1:] in (
        ["m0: resumed, running", "m0: done"],
        ["m0: resumed, done"],
    ), said
    assert sum("PAUSED" in s for s in said) == 1
    # at the end: the summary line, then the table (its head and a row per model)
    assert said[-2].startswith("spend $") and "m0 2/2 ended" in said[-2], said
    assert said[-1].startswith("run spend $") and text.rstrip().splitlines()[-1].startswith("  m0 "), text


def test_the_display_says_the_run_is_starting_before_its_first_wait(tmp_path):
    # started and stopped at once, before the run starts: the first look is
    # taken before the display waits for anything, so the line is there
    run = make_run(tmp_path, households=[{"id": "hh-000"}], models=1, **FAST)
    out = io.StringIO()
    progress = Progress(run, stream=out)
    progress.start()
    progress.stop()
    said = [line.split("] ", 1)[1] for line in out.getvalue().splitlines() if line.startswith("[")]
    assert said == ["starting: pools, first anchor"], out.getvalue()


def test_time_left_is_the_remaining_households_at_the_pace_so_far():
    from confirmatory.cli.progress import time_left

    assert time_left(0, 12, 30.0) is None  # no pace yet
    assert time_left(12, 12, 30.0) is None  # nothing left
    assert time_left(3, 12, 60.0) == "~0:03:00 left at this pace"  # 9 more at 20 s each
    assert time_left(100, 1000, 3600.0) == "~9:00:00 left at this pace"
    # rounded up: while a household remains, never "~0:00:00 left"
    assert time_left(11, 12, 3.0) == "~0:00:01 left at this pace"


def test_the_table_of_a_model_under_way_says_how_long_its_remaining_households_take(tmp_path):
    hh = [{"id": f"hh-{i:03d}", "latency_s": 0.05} for i in range(12)]
    run = make_run(tmp_path, households=hh, models=1, arms=("alone",), **FAST)
    out = io.StringIO()
    progress = Progress(run, stream=out, table=False)
    run.start()
    progress.start()
    seen = []

    def look():
        m = run.models["m0"]
        while m.households_done < len(m.draw):
            if 0 < m.households_done < len(m.draw) - 1:
                seen.append(progress.lines()[1])
            time.sleep(0.02)

    watched(run, progress, look)
    # (a household may end between the look and the line: then it says done)
    assert any("left at this pace" in line for line in seen), seen
    assert all("left at this pace" in line or line.endswith("done") for line in seen), seen
    assert "done" in progress.lines()[1] and "left at this pace" not in progress.lines()[1]


def test_a_harness_stop_says_which_record_and_exception(tmp_path):
    hh = [{"id": "hh-000", "plan": {"alone/0": "harness"}}, {"id": "hh-001"}]
    run = make_run(tmp_path, households=hh, models=1, arms=("alone",), **FAST)
    out = io.StringIO()
    progress = Progress(run, stream=out, table=False)
    run.start()
    progress.start()
    result = watched(run, progress, lambda: None)
    assert run.models["m0"].stopped and run.models["m0"].stop_cause == "harness"
    (line,) = [ln for ln in out.getvalue().splitlines() if "stopped (harness)" in ln]
    assert "models/m0/records/hh-000/alone/0.json: builtins.KeyError:" in line and "the harness broke" in line, line
    # The stop line carries it too (RUN.md: `detail`, the exception).
    stops = [
        o
        for o in map(json.loads, (run.run_dir / "models/m0/run.jsonl").read_text().splitlines())
        if o.get("event") == "stop"
    ]
    assert [s["cause"] for s in stops] == ["harness"] and "KeyError" in stops[0]["detail"], stops
    assert result.status == "stopped" and result.stop_cause == "harness", result


def test_reruns_are_counted_when_they_start(tmp_path):
    # hh-000's alone arm fails (provider: rerun) in pass 0; with max_reruns 1
    # it is rerun once. A model paused for an operator schedules a rerun that
    # only an accepted resume starts: none here (the run is stopped instead).
    hh = [{"id": "hh-000", "plan": {"alone/0": "provider"}}, {"id": "hh-001"}]
    run = make_run(tmp_path, households=hh, models=1, arms=("alone",), rules={"max_reruns_per_arm": 1}, **FAST)
    run.start()
    result = run.wait()
    run.close()
    verified(run.run_dir)
    m = run.models["m0"]
    lines = [json.loads(ln) for ln in (run.run_dir / "models/m0/run.jsonl").read_text().splitlines()]
    later = [o for o in lines if o.get("event") == "attempt" and o["pass"] > 0]
    assert result.status == "completed" and len(later) == 1 and m.reruns == 1 and m.attempts == 3


def test_after_an_interrupt_the_last_table_still_calls_a_model_that_had_finished_done(tmp_path):
    import os
    import signal

    hh = [{"id": "hh-000", "plan": {"m0:alone/0": "operator"}}, {"id": "hh-001"}]
    run = make_run(tmp_path, households=hh, models=2, install_signals=True, **FAST)
    out = io.StringIO()
    progress = Progress(run, stream=out, table=False)
    run.start()
    progress.start()

    def interrupt():  # m1 has run its draw through, m0 waits for an operator: then Ctrl-C
        m1 = run.models["m1"]
        while not (run.models["m0"].paused and len(m1.lane_ends) >= m1.spec.lanes):
            time.sleep(0.05)
        os.kill(os.getpid(), signal.SIGINT)

    result = watched(run, progress, interrupt)
    assert result.status == "stopped" and result.stop_cause == "interrupt"
    rows = {line.split()[0]: line for line in progress.lines()[1:]}
    assert rows["m1"].endswith(" done"), rows
    assert rows["m0"].endswith("stopped (interrupt)"), rows


def test_fitted_lines_break_between_phrases_where_each_fits():
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from confirmatory.cli.progress import fit

    word = st.text(alphabet="abcdefghij/.:$()", min_size=1, max_size=8)
    phrase = st.lists(word, min_size=1, max_size=4).map(" ".join)

    @settings(deadline=None, max_examples=200)
    @given(st.lists(phrase, min_size=1, max_size=12), st.integers(40, 80))
    def check(phrases, width):
        out = fit(["  " + "  ".join(phrases)], width)
        assert all(len(piece) <= width for piece in out)
        indent = min(2 + 4, width // 2)  # a continuation line's (fit's)
        for p in phrases:  # a phrase that fits a continuation line is on one line, whole
            if len(p) <= width - indent:
                assert any(p in piece for piece in out), (p, out)
        assert [w for piece in out for w in piece.split()] == [w for p in phrases for w in p.split()]

    check()


def test_the_region_has_the_time_left_in_every_frame_bars_of_work_done_and_no_stale_wait_at_the_end(tmp_path):
    hh = [{"id": f"hh-{i:03d}", "latency_s": 0.03} for i in range(12)]
    run = make_run(tmp_path, households=hh, models=2, **FAST)
    progress = Progress(run, stream=io.StringIO(), live=True)
    run.start()
    frames = []

    def look():
        while not getattr(run, "_finished", False):
            frames.append(progress.region())
            time.sleep(0.01)

    watched(run, progress, look)
    frames.append(progress.region())
    under_way = [f for f in frames if f[0].startswith("confirmatory run") and len(f) > 2]
    assert len(under_way) >= 5
    slot = re.compile(r"^confirmatory run  \d+:\d\d:\d\d  (~\d+:\d\d:\d\d left at this pace|time left: [^/]+)  /")
    assert all(slot.search(f[0]) for f in under_way), [f[0] for f in under_way if not slot.search(f[0])]
    assert not any("~0:00:00 left" in f[0] for f in under_way)
    for f in under_way:  # the run's bar and each model's are households ended of the draw
        m = re.match(r"households (\d+)/(\d+) ended \[[#.]+\] (\d+)%", f[1])
        assert m and int(m[1]) <= int(m[2]) and abs(int(m[3]) - 100 * int(m[1]) / int(m[2])) <= 0.5, f[1]
        for row in f[2:4]:
            r = re.match(r"  m\d  households (\d+)/(\d+) decided, (\d+) ended \[[#.]{10}\] (\d+)%  ", row)
            assert r and int(r[3]) <= int(r[2]) and abs(int(r[4]) - 100 * int(r[3]) / int(r[2])) <= 0.5, row
    end = frames[-1]
    assert "time left: none (every lane has ended)" in end[0], end
    assert not any("waiting for the witness push" in line for line in end), end
    summary = Progress(run, stream=io.StringIO()).summary()
    assert " 1 reruns" not in summary and " 1 attempts" not in summary
