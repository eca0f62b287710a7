"""The host sampler with fake readers, and the real readers on this machine.

Threaded tests use real short intervals (0.05 s) and the real `Clock`.
"""

import os
import shlex
import sys
import threading
import time
from pathlib import Path

import pytest
from processes import killed_afterwards, process_gone

from confirmatory.core.hostrules import NO_SAMPLE_AFTER, HostParams, HostVerdict, attempt_host_verdict
from confirmatory.design.model import Evidence
from confirmatory.host.sampler import (
    CommandSource,
    FileSource,
    HostMonitor,
    ReadFailed,
    RealReaders,
    SourceRead,
    parse_psi_some_avg10,
    psutil_pressure,
    sources_from_spec,
)
from confirmatory.records.reader import check_chain, iter_lines
from confirmatory.runtime.clock import Clock
from confirmatory.testing.hostfakes import (
    TEST_SEED,
    BackStepClock,
    Crash,
    Fail,
    FakeEvidenceSource,
    ScriptedReaders,
    Stall,
    open_host_log,
)

FAST = dict(sample_interval_s=0.05, max_gap_s=0.5, sampler_failure_s=30.0, read_tries=5, pressure_threshold=10.0)


class Fatals:
    """The run's on_fatal, recorded."""

    def __init__(self):
        self.calls = []
        self._event = threading.Event()

    def __call__(self, cause, detail):
        self.calls.append((cause, detail))
        self._event.set()

    def wait(self, timeout=3.0):
        return self._event.wait(timeout)

    @property
    def causes(self):
        return [cause for cause, _ in self.calls]


def wait_for(predicate, timeout=3.0):
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        time.sleep(0.01)


def samples(monitor, **match):
    return [
        line for line in monitor.lines if line["event"] == "sample" and all(line.get(k) == v for k, v in match.items())
    ]


@pytest.fixture
def make_monitor(tmp_path):
    made = []

    def make(readers, window=None, clock=None, **params):
        clock = clock or Clock()
        writer = open_host_log(tmp_path / "host.jsonl", clock)
        fatals = Fatals()
        monitor = HostMonitor(
            writer,
            clock,
            HostParams(**{**FAST, **params}),
            on_fatal=fatals,
            readers=readers,
            window=window,
            retry_pause_s=0.005,
        )
        made.append((monitor, readers))
        monitor.start()
        return monitor, clock, fatals

    yield make
    for monitor, readers in made:
        if hasattr(readers, "release"):
            readers.release()
        monitor.stop()
        monitor.join(5)
        if monitor.alive and hasattr(readers, "set_script"):
            readers.set_script(Crash("teardown: stop() did not end the sampler"))
            monitor.join(2)  # so that a broken stop() fails the suite instead of hanging it
            pytest.fail("stop() did not end the sampler thread")
        assert not monitor.alive


# ---------------------------------------------------------------- with fake readers


def test_a_pressure_spike_inside_an_attempt_window_makes_the_verdict_host(make_monitor):
    readers = ScriptedReaders([0.0])
    monitor, clock, fatals = make_monitor(readers)
    wait_for(lambda: samples(monitor))
    start = clock.now()
    readers.set_pressure(60.0)
    wait_for(lambda: samples(monitor, mem_pressure=60.0))
    readers.set_pressure(0.0)
    end = clock.now()
    assert monitor.wait_complete(end, threading.Event())
    v = monitor.verdict(start, end)
    assert v.complete
    assert any(r.startswith("pressure 60 > 10 at ") for r in v.reasons), v.reasons
    assert fatals.calls == []


def test_a_pressure_spike_outside_every_attempt_changes_nothing(make_monitor):
    readers = ScriptedReaders([0.0])
    monitor, clock, _ = make_monitor(readers)
    wait_for(lambda: samples(monitor))
    before = (clock.now(), None)
    time.sleep(0.1)
    before = (before[0], clock.now())
    assert monitor.wait_complete(before[1], threading.Event())
    time.sleep(0.15)  # the spike comes later than the slack after the first window
    readers.set_pressure(90.0)
    wait_for(lambda: samples(monitor, mem_pressure=90.0))
    readers.set_pressure(0.0)
    spike_t = samples(monitor, mem_pressure=90.0)[-1]["t"]
    wait_for(lambda: samples(monitor)[-1]["mem_pressure"] == 0.0)
    time.sleep(0.15)  # past the 0.1 s slack after the spike
    after = (clock.now(), None)
    time.sleep(0.1)
    after = (after[0], clock.now())
    assert monitor.wait_complete(after[1], threading.Event())
    assert after[0] - 0.1 > spike_t > before[1] + 0.1
    assert monitor.verdict(*before) == HostVerdict(complete=True, reasons=())
    assert monitor.verdict(*after) == HostVerdict(complete=True, reasons=())


@pytest.mark.slow
def test_a_stalled_sampler_leaves_a_gap_that_makes_the_attempt_host(make_monitor):
    readers = ScriptedReaders([0.0])
    monitor, clock, fatals = make_monitor(readers)  # waits at most 0.55 s
    wait_for(lambda: samples(monitor))
    readers.set_script(Stall(1.2), 0.0)
    start = clock.now()
    time.sleep(0.1)
    end = clock.now()
    assert not monitor.wait_complete(end, threading.Event())
    assert monitor.verdict(start, end) == HostVerdict(complete=False, reasons=(NO_SAMPLE_AFTER,))
    wait_for(lambda: monitor.verdict(start, end).complete)
    reasons = monitor.verdict(start, end).reasons
    assert len(reasons) == 1 and reasons[0].startswith("gap of 1."), reasons
    # After the stall the cadence resumes; the missed samples are not made up in a burst.
    first_after = next(s["t"] for s in samples(monitor) if s["t"] > end)
    time.sleep(0.2)
    assert len([s for s in samples(monitor) if first_after < s["t"] <= first_after + 0.15]) <= 5
    assert fatals.calls == []


def test_a_source_read_failing_four_times_then_succeeding_is_fine(make_monitor):
    source = FakeEvidenceSource("guard")
    source.fail_next(4)
    source.push("guard: worker killed")
    monitor, _, fatals = make_monitor(ScriptedReaders([0.0], sources=[source]))
    wait_for(lambda: any(line["event"] == "evidence" for line in monitor.lines))
    evidence = [line for line in monitor.lines if line["event"] == "evidence"]
    assert [(e["source"], e["line"]) for e in evidence] == [("guard", "guard: worker killed")]
    assert source.reads >= 5
    assert fatals.calls == []


def test_a_source_read_failing_five_times_is_a_runner_error(make_monitor):
    source = FakeEvidenceSource("power")
    source.fail_next(5)
    monitor, _, fatals = make_monitor(ScriptedReaders([0.0], sources=[source]))
    assert fatals.wait()
    assert fatals.causes == ["runner-error"]
    assert "'power' failed 5 reads" in fatals.calls[0][1]
    failed = [line for line in monitor.lines if line["event"] == "evidence-failed"]
    assert failed and failed[0]["source"] == "power"


def test_memory_reads_failing_longer_than_sampler_failure_s_stop_the_run(make_monitor):
    began = time.monotonic()
    monitor, _, fatals = make_monitor(ScriptedReaders([Fail("no meminfo")]), sampler_failure_s=0.3)
    assert fatals.wait()
    assert time.monotonic() - began >= 0.3
    assert fatals.causes == ["sampler"]
    assert "no good host sample" in fatals.calls[0][1] and "no meminfo" in fatals.calls[0][1]
    events = {line["event"] for line in monitor.lines}
    assert "sample-failed" in events and "sample" not in events


def test_an_exception_inside_the_sampler_thread_stops_the_run(make_monitor):
    monitor, _, fatals = make_monitor(ScriptedReaders([0.0, 0.0, Crash("bug in a reader")]))
    assert fatals.wait()
    assert fatals.causes == ["sampler"]
    assert "sampler thread died: RuntimeError: bug in a reader" in fatals.calls[0][1]
    monitor.join(2)
    assert not monitor.alive
    assert isinstance(monitor.outcome, RuntimeError)


def test_a_reading_that_never_returns_is_caught_by_the_health_check(make_monitor):
    monitor, _, fatals = make_monitor(ScriptedReaders([Stall(30.0)]), sampler_failure_s=0.2)
    assert monitor.check_health() is None
    time.sleep(0.3)
    detail = monitor.check_health()
    assert detail is not None and "a reading did not return" in detail
    assert fatals.causes == ["sampler"]


def test_stopping_the_monitor_interrupts_its_wait_and_is_not_a_failure(make_monitor):
    monitor, _, fatals = make_monitor(ScriptedReaders([0.0]), sample_interval_s=30.0, max_gap_s=45.0)
    wait_for(lambda: samples(monitor))
    monitor.stop()
    monitor.stop()
    monitor.join(1.0)
    assert not monitor.alive and monitor.outcome is None and fatals.calls == []


def test_good_samples_keep_the_sampler_healthy(make_monitor):
    monitor, _, fatals = make_monitor(ScriptedReaders([0.0, Fail(), 0.0]), sampler_failure_s=0.2)
    time.sleep(0.5)
    assert monitor.check_health() is None
    assert fatals.calls == [] and monitor.alive


def test_a_sample_reports_the_backward_clock_step_corrected_before_it(make_monitor):
    clock = BackStepClock()
    monitor, _, _ = make_monitor(ScriptedReaders([0.0]), clock=clock)
    wait_for(lambda: samples(monitor))
    clock.step_back(0.7)
    wait_for(lambda: samples(monitor, clock_back_max_s=0.7))
    stepped = samples(monitor, clock_back_max_s=0.7)
    wait_for(lambda: samples(monitor)[-1]["t"] > stepped[0]["t"])
    assert len(stepped) == 1


def test_waiting_for_evidence_shows_in_waiting_and_ends_when_the_caller_stops(make_monitor):
    monitor, clock, _ = make_monitor(ScriptedReaders([Stall(30.0)]), max_gap_s=5.0)
    stop = threading.Event()
    result = {}
    waiter = threading.Thread(target=lambda: result.setdefault("r", monitor.wait_complete(clock.now(), stop)))
    began = time.monotonic()
    waiter.start()
    wait_for(lambda: monitor.waiting)
    stop.set()
    waiter.join(2)
    assert result == {"r": False} and time.monotonic() - began < 10  # not the 30 s stall
    assert not monitor.waiting


def test_an_evidence_line_during_an_attempt_makes_it_host(make_monitor):
    source = FakeEvidenceSource("guard")
    monitor, clock, _ = make_monitor(ScriptedReaders([0.0], sources=[source]))
    wait_for(lambda: samples(monitor))
    start = clock.now()
    source.push("memory guard: throttled")
    wait_for(lambda: any(line["event"] == "evidence" for line in monitor.lines))
    end = clock.now()
    assert monitor.wait_complete(end, threading.Event())
    reasons = monitor.verdict(start, end).reasons
    assert any(r.startswith("evidence guard: memory guard: throttled at ") for r in reasons)


def test_evidence_outside_the_booking_window_is_not_written(make_monitor):
    source = FakeEvidenceSource("guard")
    source.push("before the window")
    monitor, _, _ = make_monitor(ScriptedReaders([0.0], sources=[source]), window=(0.0, 1.0))
    wait_for(lambda: source.reads >= 2)
    assert not any(line["event"] == "evidence" for line in monitor.lines)


def test_the_lanes_and_verify_see_the_same_log(make_monitor, tmp_path):
    readers = ScriptedReaders([0.0, 0.0, 50.0, 0.0])
    monitor, clock, _ = make_monitor(readers)
    start = clock.now()
    wait_for(lambda: len(samples(monitor)) >= 6)
    end = clock.now()
    assert monitor.wait_complete(end, threading.Event())
    monitor.stop()
    monitor.join(2)
    path = tmp_path / "host.jsonl"
    assert check_chain(path, TEST_SEED).ok
    on_disk = [line.obj for line in iter_lines(path)]
    assert on_disk[0]["event"] == "open" and monitor.lines[0]["event"] == "open"
    params = dict(max_gap_s=FAST["max_gap_s"], pressure_threshold=FAST["pressure_threshold"])
    assert attempt_host_verdict(on_disk, start, end, **params) == monitor.verdict(start, end)
    # every window between two of its lines' times, on every prefix: the monitor's
    # verdict (from the summary it keeps) is the rule's on the lines on disk
    times = sorted({line["t"] for line in on_disk})
    seen = set()
    for a in times:
        for b in times[times.index(a) :]:
            for n in range(len(on_disk) + 1):
                want = attempt_host_verdict(on_disk[:n], a, b, **params)
                assert monitor.verdict(a, b, limit=n) == want, (a, b, n)
                seen.add((want.complete, bool(want.reasons)))
    assert seen == {(True, True), (True, False), (False, True)}  # pressure and clean windows, short prefixes


# ---------------------------------------------------------------- real readers


PSI = Path("/proc/pressure/memory")


@pytest.mark.skipif(not PSI.exists(), reason="this kernel has no PSI")
def test_the_real_psi_file_is_parsed_on_this_machine():
    readers = RealReaders()
    assert readers.pressure_source == "psi"
    reading = readers.memory()
    assert 0.0 <= reading.pressure <= 100.0
    assert reading.available > 0 and reading.swap_used >= 0
    assert readers.load() >= 0.0


def test_psi_pressure_is_the_some_line_avg10(tmp_path):
    psi = tmp_path / "memory"
    psi.write_text(
        "some avg10=42.50 avg60=1.00 avg300=0.00 total=123\nfull avg10=3.00 avg60=0.00 avg300=0.00 total=45\n"
    )
    assert RealReaders(psi_path=psi).memory().pressure == 42.5


def test_a_psi_file_that_breaks_later_is_a_failed_reading_not_a_switch(tmp_path):
    psi = tmp_path / "memory"
    psi.write_text("some avg10=1.00 avg60=0.00 avg300=0.00 total=1\n")
    readers = RealReaders(psi_path=psi)
    psi.unlink()
    with pytest.raises(ReadFailed):
        readers.memory()
    assert readers.pressure_source == "psi"


def test_the_psutil_fallback_is_taken_when_psi_is_unreadable(tmp_path):
    readers = RealReaders(psi_path=tmp_path / "no-such-file")
    assert readers.pressure_source == "psutil"
    first, second = readers.memory(), readers.memory()
    assert 0.0 <= first.pressure <= 100.0 and 0.0 <= second.pressure <= 100.0
    assert first.available > 0


def test_the_fallback_figure_rises_with_scarcity_and_with_swap_traffic():
    gib, total = 1 << 30, 10 << 30
    assert psutil_pressure(5 * gib, total, 0.0) == 0.0
    assert psutil_pressure(gib, total, 0.0) == 0.0  # 10% available: no scarcity yet
    assert psutil_pressure(gib // 2, total, 0.0) == pytest.approx(50.0)
    assert psutil_pressure(0, total, 0.0) == 100.0
    one_percent_per_s = 0.01 * total
    assert psutil_pressure(5 * gib, total, one_percent_per_s / 2) == pytest.approx(50.0)
    assert psutil_pressure(gib // 2, total, one_percent_per_s * 0.8) == pytest.approx(80.0)
    assert psutil_pressure(0, total, one_percent_per_s * 9) == 100.0
    assert psutil_pressure(0, 0, 0.0) == 0.0


def test_psi_text_without_a_some_line_is_refused():
    with pytest.raises(ValueError):
        parse_psi_some_avg10("full avg10=1.00 avg60=0.00 avg300=0.00 total=1\n")


# ---------------------------------------------------------------- real evidence sources


def append(path, text):
    with open(path, "a") as f:
        f.write(text)


def test_a_file_source_reports_only_complete_lines_appended_since_it_began(tmp_path):
    log = tmp_path / "guard.log"
    log.write_text("old line\nhalf-written")
    source = FileSource("guard", log)
    assert source.read_new().lines == ()  # baseline
    append(log, " old line ends\nfirst\nsecond\n")
    assert source.read_new().lines == ("first", "second")
    append(log, "par")
    assert source.read_new().lines == ()
    append(log, "tial\n\n")
    assert source.read_new().lines == ("partial",)


def test_a_file_source_survives_truncation_with_a_note(tmp_path):
    log = tmp_path / "guard.log"
    log.write_text("x\n" * 50)
    source = FileSource("guard", log)
    source.read_new()
    append(log, "a\n")
    assert source.read_new().lines == ("a",)
    with open(log, "w") as f:
        f.write("after truncation\n")
    read = source.read_new()
    assert read.lines == ("after truncation",)
    assert len(read.notes) == 1 and "truncated" in read.notes[0]


def test_a_file_source_survives_rotation_and_reads_the_old_file_to_its_end(tmp_path):
    log = tmp_path / "guard.log"
    log.write_text("before\n")
    source = FileSource("guard", log)
    source.read_new()
    append(log, "a\n")
    assert source.read_new().lines == ("a",)
    os.rename(log, tmp_path / "guard.log.1")
    append(tmp_path / "guard.log.1", "late in the old file\nunfinished")
    read = source.read_new()  # rotated away, the new file not yet there
    assert read.lines == ("late in the old file",)
    assert any("missing" in n for n in read.notes)
    log.write_text("new file\n")
    read = source.read_new()
    assert read.lines == ("unfinished", "new file")
    assert any("replaced" in n for n in read.notes)
    append(log, "more\n")
    assert source.read_new() == SourceRead(lines=("more",))


def test_a_rotation_between_two_reads_keeps_every_line_of_the_old_file(tmp_path):
    log = tmp_path / "guard.log"
    log.write_text("before\n")
    source = FileSource("guard", log)
    source.read_new()
    append(log, "a\n")
    os.rename(log, tmp_path / "guard.log.1")
    append(tmp_path / "guard.log.1", "late\nunfinished")
    log.write_text("new file\n")
    read = source.read_new()
    assert read.lines == ("a", "late", "unfinished", "new file")
    assert len(read.notes) == 1 and "replaced" in read.notes[0]


def test_a_file_that_appears_after_the_start_is_read_from_its_beginning(tmp_path):
    log = tmp_path / "later.log"
    source = FileSource("guard", log)
    assert any("missing" in n for n in source.read_new().notes)
    assert source.read_new().notes == ()  # noted once
    log.write_text("one\ntwo\n")
    read = source.read_new()
    assert read.lines == ("one", "two") and any("appeared" in n for n in read.notes)


CAP = 65536  # hostsources.MAX_LINE_BYTES, as docs/HOST.md gives it


def test_a_file_line_that_passes_64_kib_is_reported_at_once_cut_and_its_rest_dropped(tmp_path):
    """A line without a newline was kept until its newline came: a writer
    that never ends its line (a binary written to the log, a stuck progress
    bar) grew the runner's memory without bound, and its message was never
    read. Past MAX_LINE_BYTES its start is reported at once with a note, the
    rest of it up to its newline dropped."""
    log = tmp_path / "guard.log"
    log.write_text("from before the run, unfinished")
    source = FileSource("guard", log)
    source.read_new()
    append(log, "x" * 100_000 + "\nstart\n")  # the baseline's partial line, however long, is not ours
    assert source.read_new() == SourceRead(lines=("start",))
    message = "oom-kill: pid 4242 " + "x" * 100_000
    append(log, message)
    read = source.read_new()
    assert read.lines == (message[:CAP],)
    assert read.notes == (
        f"a line of {log} was cut at 65,536 bytes (MAX_LINE_BYTES): its start is "
        "reported as a line, the rest of it up to its newline dropped",
    )
    append(log, "y" * 100_000)
    assert source.read_new() == SourceRead()  # still dropping, nothing kept
    append(log, "y\nnext\n" + "z" * 70_000 + "\n" + "w" * CAP + "\n")
    read = source.read_new()
    assert read.lines == ("next", "z" * CAP, "w" * CAP)  # a complete line is cut too; one of CAP bytes is not
    assert len(read.notes) == 1 and "a line of" in read.notes[0]


def test_a_line_cut_at_the_bound_makes_the_attempt_during_which_it_was_written_host(make_monitor, tmp_path):
    guard = tmp_path / "guard.log"
    guard.write_text("")
    monitor, clock, fatals = make_monitor(RealReaders(sources=[FileSource("guard", guard)]))
    wait_for(lambda: samples(monitor))
    start = clock.now()
    append(guard, "Out of memory: Killed process 4242 " + "\x00" * 200_000)  # no newline yet
    wait_for(lambda: any(line["event"] == "evidence" for line in monitor.lines))
    end = clock.now()
    assert monitor.wait_complete(end, threading.Event())
    reasons = monitor.verdict(start, end).reasons
    assert any(r.startswith("evidence guard: Out of memory: Killed process 4242") for r in reasons)
    (note,) = [line for line in monitor.lines if line["event"] == "evidence-note"]
    assert note["source"] == "guard" and "cut at 65,536 bytes" in note["note"]
    assert fatals.calls == []


def command_printing(path):
    return [sys.executable, "-c", "import sys; sys.stdout.write(open(sys.argv[1]).read())", str(path)]


def test_a_command_source_reports_only_output_lines_it_has_not_printed_before(tmp_path):
    state = tmp_path / "power.txt"
    state.write_text("Sleep 09:00\nWake 09:05\n")
    source = CommandSource("power", command_printing(state))
    assert source.read_new().lines == ()  # baseline
    assert source.read_new().lines == ()
    append(state, "Sleep 10:00\nWake 09:05\n")
    assert source.read_new().lines == ("Sleep 10:00", "Wake 09:05")  # a second copy is new
    state.write_text("Wake 09:05\nSleep 11:00\n")  # a sliding window drops old lines
    assert source.read_new().lines == ("Sleep 11:00",)


def test_a_command_output_line_past_64_kib_is_cut_with_a_note(tmp_path):
    state = tmp_path / "power.txt"
    state.write_text("Sleep 09:00\n")
    source = CommandSource("power", command_printing(state))
    source.read_new()  # baseline
    append(state, "Wake " + "z" * 100_000 + "\nSleep 10:00\n")
    read = source.read_new()
    assert read.lines == (("Wake " + "z" * 100_000)[:CAP], "Sleep 10:00")
    assert read.notes == (
        f"a line of command {command_printing(state)[0]!r}'s output was cut at 65,536 bytes "
        "(MAX_LINE_BYTES): its start is reported as a line, the rest of it up to its newline "
        "dropped",
    )
    assert source.read_new() == SourceRead()  # seen before: no line, no note


def test_a_command_that_fails_exits_nonzero_or_hangs_is_a_failed_read(tmp_path):
    with pytest.raises(ReadFailed, match="exited 3"):
        CommandSource("x", [sys.executable, "-c", "import sys; sys.exit(3)"]).read_new()
    with pytest.raises(ReadFailed, match="TimeoutExpired"):
        CommandSource("x", [sys.executable, "-c", "import time; time.sleep(5)"], timeout_s=0.3).read_new()
    with pytest.raises(ReadFailed):
        CommandSource("x", [str(tmp_path / "no-such-command")]).read_new()


def read_fails_and_leaves_no_child(
    tmp_path, script: str, *, timeout_s: float, match: str, within: float, gone_within: float = 5
) -> None:
    """`sh -c script` as a command source, where `{pid}` in the script is a
    file it writes the pid of a child of the shell to: the read fails
    (`match`) within `within` s, and that child is gone `gone_within` s later."""
    pidfile = tmp_path / "pid"
    source = CommandSource("x", ["sh", "-c", script.format(pid=shlex.quote(str(pidfile)))], timeout_s=timeout_s)
    with killed_afterwards(pidfile):
        started = time.monotonic()
        with pytest.raises(ReadFailed, match=match):
            source.read_new()
        assert time.monotonic() - started < within
        assert process_gone(int(pidfile.read_text()), timeout=gone_within)


@pytest.mark.slow
def test_a_command_behind_a_shell_that_times_out_is_stopped_with_every_process_it_started(tmp_path):
    """`sh -c "a | b"` that runs past its timeout: stopping the shell alone
    left its pipeline running (for good, with a follow-mode command), one
    more stray process at every step. Its whole process group is stopped."""
    read_fails_and_leaves_no_child(
        tmp_path, "sh -c 'echo $$ > {pid}; exec sleep 30' | cat", timeout_s=0.5, match="TimeoutExpired", within=5
    )


@pytest.mark.slow
def test_a_commands_child_that_ignores_sigterm_is_killed_after_the_grace(tmp_path):
    """The group gets SIGTERM, and SIGKILL 3 s later for what is left of it:
    here a child that outlived the shell, ignoring SIGTERM."""
    read_fails_and_leaves_no_child(
        tmp_path,
        "sh -c 'trap \"\" TERM; echo $$ > {pid}; exec sleep 30' | cat",
        timeout_s=0.5,
        match="TimeoutExpired",
        within=10,
        gone_within=1,
    )


@pytest.mark.slow
def test_a_command_that_floods_its_output_is_stopped_at_16_mib_and_is_a_failed_read(tmp_path):
    """Its output was all held in memory until the command ended or its
    timeout came (10 s of `yes`: gigabytes). Past 16 MiB of stdout the
    command is stopped with its process group and the read fails, saying why."""
    read_fails_and_leaves_no_child(
        tmp_path,
        "sleep 30 & echo $! > {pid}; head -c 40000000 /dev/zero; wait",
        timeout_s=5,
        match="its output exceeded the bound of 16,777,216 bytes",
        within=4,
    )  # stopped at the bound, not at its timeout


def test_a_command_whose_output_stays_past_the_bound_ends_the_run_as_an_evidence_failure(make_monitor):
    """The sampler retries the read, then writes evidence-failed and reports a
    runner error, as for any source that cannot be read."""
    flood = CommandSource("flood", ["head", "-c", "40000000", "/dev/zero"])
    monitor, _, fatals = make_monitor(RealReaders(sources=[flood]))
    assert fatals.wait(10)
    assert fatals.causes == ["runner-error"] and "exceeded the bound" in fatals.calls[0][1]
    (failed,) = [line for line in monitor.lines if line["event"] == "evidence-failed"]
    assert failed["source"] == "flood" and failed["tries"] == 5
    assert "its output exceeded the bound of 16,777,216 bytes" in failed["error"]


def test_sources_are_built_from_the_design_entries(tmp_path):
    built = sources_from_spec(
        [Evidence(name="guard", path=str(tmp_path / "g.log")), {"name": "power", "command": ["pmset", "-g", "log"]}]
    )
    assert [(type(s).__name__, s.name) for s in built] == [("FileSource", "guard"), ("CommandSource", "power")]
    with pytest.raises(ValueError):
        sources_from_spec([{"name": "both", "path": "a", "command": ["b"]}])


def test_the_real_sampler_writes_full_samples_and_file_evidence(make_monitor, tmp_path):
    guard = tmp_path / "guard.log"
    guard.write_text("from before the run\n")
    readers = RealReaders(sources=[FileSource("guard", guard)])
    monitor, clock, fatals = make_monitor(readers)
    wait_for(lambda: samples(monitor))
    start = clock.now()
    append(guard, "oom-kill: pid 4242\n")
    wait_for(lambda: any(line["event"] == "evidence" for line in monitor.lines))
    end = clock.now()
    assert monitor.wait_complete(end, threading.Event())
    first = samples(monitor)[0]
    assert set(first) == {
        "event",
        "t",
        "wall",
        "mono",
        "mem_pressure",
        "mem_available",
        "swap_used",
        "load1",
        "clock_back_max_s",
        "reads_began",
    }
    assert first["reads_began"] < first["t"]  # the step read its sources, then sampled
    assert [line["line"] for line in monitor.lines if line["event"] == "evidence"] == ["oom-kill: pid 4242"]
    assert any(r.startswith("evidence guard: oom-kill: pid 4242") for r in monitor.verdict(start, end).reasons)
    assert fatals.calls == []


def test_an_evidence_line_says_since_when_it_may_have_been_there(make_monitor):
    """`since` is when the source's previous read began: a line pushed between
    two reads is stamped with the span it may have appeared in."""
    source = FakeEvidenceSource("guard")
    monitor, _, fatals = make_monitor(ScriptedReaders([0.0], sources=[source]))
    wait_for(lambda: len(samples(monitor)) >= 2)  # some reads found nothing
    pushed_after = samples(monitor)[-1]["t"]
    source.push("oom-kill: python")
    wait_for(lambda: any(line["event"] == "evidence" for line in monitor.lines))
    (line,) = [x for x in monitor.lines if x["event"] == "evidence"]
    previous = [s["t"] for s in samples(monitor) if s["t"] < line["t"]]
    # the previous read began before the sample it preceded, after the one before that
    assert line["since"] < line["t"] and line["since"] <= previous[-1]
    assert len(previous) < 2 or line["since"] > previous[-2]
    assert pushed_after < line["t"]
    assert fatals.calls == []


@pytest.mark.skipif(not Path("/proc/self/mem").exists(), reason="needs /proc/self/mem")
def test_the_preflight_probe_reads_a_file_source_twice_as_the_sampler_does():
    """The first read of a file source (the baseline) only opens it and reads
    its last byte; the sampler's next read reads from there. A file whose
    baseline succeeds and whose next read fails (here /proc/self/mem: size
    0, and a read at address 0 fails with EIO; an empty directory on a file
    system that gives it size 0 is the same) passed a probe of one read."""
    from confirmatory.host.sources import FileSource, probe_source

    pauses: list[float] = []
    problem = probe_source(FileSource("mem", "/proc/self/mem"), tries=3, pause_s=0.25, sleep=pauses.append)
    assert problem == "failed 3 reads: OSError: [Errno 5] Input/output error", problem
    assert pauses == [0.25, 0.25]  # between the tries, as HostMonitor pauses
    readable = probe_source(FileSource("self", __file__), tries=3, pause_s=0.25, sleep=pauses.append)
    assert readable is None and pauses == [0.25, 0.25]


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs mkfifo")
def test_a_fifo_as_a_file_source_fails_its_read_at_once_instead_of_waiting_for_a_writer(tmp_path):
    # Opened blocking, a FIFO waits for a writer: `check`'s probe (and the
    # sampler's thread) would hang for good. It cannot be read at an offset.
    import subprocess

    from confirmatory.host.sources import FileSource, probe_source

    fifo = tmp_path / "guard.fifo"
    os.mkfifo(fifo)
    code = (
        "import sys; from confirmatory.host.sources import FileSource, probe_source; "
        "print(probe_source(FileSource('guard', sys.argv[1]), tries=2, pause_s=0))"
    )
    done = subprocess.run([sys.executable, "-c", code, str(fifo)], capture_output=True, text=True, timeout=30)
    assert done.stdout.strip() == "failed 2 reads: OSError: [Errno 29] Illegal seek", done
    assert probe_source(FileSource("guard", tmp_path / "plain.log"), tries=2, pause_s=0) is None
