"""Planted faults in the runner, and the test that must catch each (docs/MUTANTS.md).

Each mutant is a text substitution in one module of the package; the
mutation test applies it to a copy of the project and runs the named test,
which must then fail. A mutant whose ``old`` text is no longer in the module
fails the suite too: the list must follow the code.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Mutant:
    name: str
    path: str
    old: str
    new: str
    test: str


RULES = "tests/test_run_rules.py"
VIOLATIONS = "tests/test_verify_violations.py"

MUTANTS = (
    Mutant("skip a provider rerun", "confirmatory/lanes.py",
           "for arm in rules.next_pass_arms(order, actions)\n",
           "for arm in rules.next_pass_arms(order, actions)[1:]\n",
           f"{RULES}::test_a_provider_failure_is_rerun_in_the_next_pass"),
    Mutant("admit past the cap", "confirmatory/lanes.py",
           "cap_nusd=m.cap_nusd,\n                )",
           "cap_nusd=m.cap_nusd * 3,\n                )",
           f"{RULES}::test_admission_refuses_past_the_cap_and_then_refuses_forever"),
    Mutant("ignore a harness failure", "confirmatory/lanes.py",
           "        if cls == rules.Cls.HARNESS:\n            a.acted = True",
           "        if False:\n            a.acted = True",
           f"{RULES}::test_a_harness_failure_stops_its_model_within_five_seconds"),
    Mutant("log the ceiling late", "confirmatory/run.py",
           'line = {"event": "ceiling", "t": t,',
           'line = {"event": "ceiling", "t": t + 1.0,',
           f"{RULES}::test_crossing_the_ceiling_mid_pass_ends_conversations_under_way"),
    Mutant("let a lane stop deciding", "confirmatory/lanes.py",
           "for k, household in enumerate(self.m.draw):",
           "for k, household in enumerate(self.m.draw[:2]):",
           f"{RULES}::test_a_clean_run_completes_and_verifies"),
    Mutant("start an attempt after a stop", "confirmatory/lanes.py",
           "return self.m.stopped or self.run.stopped or self.run.spend.crossed.is_set()",
           "return self.run.stopped or self.run.spend.crossed.is_set()",
           f"{RULES}::test_a_harness_failure_stops_its_model_within_five_seconds"),
    Mutant("drop a late cost", "confirmatory/spend.py",
           "if late and nusd:",
           "if False:",
           f"{RULES}::test_an_attempt_past_its_deadline_is_abandoned_and_its_late_costs_counted"),
    Mutant("overlap two attempts on a lane", "confirmatory/lanes.py",
           "running = Running(aspend, household, arm, pass_index, self.index, start,",
           "start -= 0.5; running = Running(aspend, household, arm, pass_index, self.index, start,",
           f"{RULES}::test_a_clean_run_completes_and_verifies"),
    Mutant("miss the host evidence", "confirmatory/lanes.py",
           "self.classify_with(a, tuple(verdict.reasons))",
           "self.classify_with(a, ())",
           f"{RULES}::test_memory_pressure_inside_an_attempt_makes_it_host_and_reruns_it"),
    Mutant("accept a stale resume", "confirmatory/run.py",
           'accepted = m.paused and m.pause_t is not None and req["t"] > m.pause_t',
           "accepted = m.paused",
           f"{RULES}::test_an_operator_failure_pauses_until_a_fresh_resume_and_a_stale_one_is_rejected"),
    Mutant("classify before the host evidence is in", "confirmatory/lanes.py",
           "monitor.wait_complete(last_end, self.m.halt)",
           "pass",
           f"{RULES}::test_a_clean_run_completes_and_verifies"),
    Mutant("forget the inconclusive stop", "confirmatory/lanes.py",
           'if d.stop_cause == "inconclusive":',
           "if False:",
           f"{RULES}::test_one_inconclusive_signature_in_more_than_five_households_stops_the_model"),
    Mutant("count a household's spend twice", "confirmatory/lanes.py",
           "m.finished_nusd += spend",
           "m.finished_nusd += 2 * spend",
           f"{RULES}::test_admission_refuses_past_the_cap_and_then_refuses_forever"),
    Mutant("time deadlines on the wall clock", "confirmatory/run.py",
           "if now - r.start_mono >= deadline", "if self.clock.now() - r.start >= deadline",
           "tests/test_run_faults.py::test_a_wall_clock_jumping_forward_does_not_abandon_attempts_before_their_deadline"),
    Mutant("count a pass pending only once its record is on disk", "confirmatory/lanes.py",
           "            with self.run.spend.ordered() as end:\n                self._count_pending(running)",
           "            with self.run.spend.ordered() as end:\n                pass",
           "tests/test_run_faults.py::test_no_admission_decision_while_a_pass_waits_for_its_record_on_a_slow_disk"),
    Mutant("count a guard line at its read time only", "confirmatory/hostrules.py",
           "if lo <= t and since <= hi:", "if lo <= t <= hi:",
           "tests/test_hostrules.py::test_an_evidence_line_read_after_the_attempt_counts_for_it_if_it_may_have_appeared_during_it"),
    Mutant("complete an attempt by a sample whose reads began before its end", "confirmatory/hostrules.py",
           "        if completion_key(line) > end:", "        if line[\"t\"] > end:",
           "tests/test_hostrules.py::test_a_sample_whose_step_began_reading_before_the_attempt_ended_does_not_complete_it"),
    Mutant("let a failed write at the run's end raise", "confirmatory/run.py",
           "        except (ChainError, OSError) as exc:\n            text = str(exc)",
           "        except ZeroDivisionError as exc:\n            text = str(exc)",
           "tests/test_run_faults.py::test_logs_that_can_no_longer_be_written_end_the_run_with_a_report_not_a_traceback"),
    Mutant("never look at the free disk", "confirmatory/run.py",
           "        self._check_disk()\n", "",
           "tests/test_run_faults.py::test_a_disk_below_the_floor_stops_the_run_while_its_end_can_still_be_written"),
    # verify: gaps an audit found, each closed by a check that these undo
    Mutant("skip a control line with a nested event", "confirmatory/verify/model.py",
           "(_SKIP[0] in raw or _SKIP[1] in raw) and raw.count(b'\"event\":') == 1",
           "(_SKIP[0] in raw or _SKIP[1] in raw)",
           f"{VIOLATIONS}::test_a_stop_with_a_nested_event_field_is_still_a_stop_invariant_6"),
    Mutant("accept a control line without a time", "confirmatory/verify/model.py",
           "        self.control_times()\n", "",
           f"{VIOLATIONS}::test_a_stop_whose_t_is_not_a_number_fails_invariant_9"),
    Mutant("accept a line of no known event", "confirmatory/verify/model.py",
           "elif seq not in control or type(ev) is not str or ev not in CONTROL_EVENTS:", "elif False:",
           f"{VIOLATIONS}::test_a_line_of_no_known_event_fails_invariant_1"),
    Mutant("answer a trigger with an earlier stop", "confirmatory/verify/timeline.py",
           'and t <= s["t"] <= t + follow', 'and s["t"] <= t + follow',
           f"{VIOLATIONS}::test_a_trigger_is_not_answered_by_a_stop_before_it_invariant_9"),
    Mutant("leave run-scope stops unchecked", "confirmatory/verify/__init__.py",
           '    guarded(f, 9, "run.jsonl", check_run_stops, ctx, states)\n', "",
           f"{VIOLATIONS}::test_a_run_stop_missing_from_a_model_log_fails_invariant_9"),
    Mutant("widen call slack by any later clock step", "confirmatory/verify/model.py",
           'back = self.back_until(a["end"])', "back = self.ctx.host.back_max",
           f"{VIOLATIONS}::test_a_backward_clock_step_reported_after_an_attempt_does_not_excuse_its_calls_invariant_5"),
    Mutant("trust an attempt's host_lines", "confirmatory/verify/model.py",
           "        self.short_prefixes()\n", "",
           f"{VIOLATIONS}::test_a_clean_attempt_relabelled_host_on_a_short_host_prefix_fails_invariant_2"),
    Mutant("ignore dot-named record files", "confirmatory/verify/model.py",
           'not (n[:1] == "." and _TMP_NAME.fullmatch(n))', 'n[:1] != "."',
           f"{VIOLATIONS}::test_records_in_a_dot_named_household_folder_are_not_ignored_invariant_1"),
    Mutant("accept control fields of any kind", "confirmatory/verify/model.py",
           "for name, (ok, kind) in CONTROL_FIELDS.get(ev, {}).items() if type(ev) is str else ():",
           "for name, (ok, kind) in ():",
           f"{VIOLATIONS}::test_a_control_or_push_line_field_of_the_wrong_kind_fails_its_invariant"),
    Mutant("accept money written as a float", "confirmatory/verify/model.py",
           'if type(hl.get("spend_nusd")) is not int or hl.get("spend_nusd") != spend:',
           'if hl.get("spend_nusd") != spend:',
           f"{VIOLATIONS}::test_money_written_as_a_float_fails_invariant_7"),
    Mutant("accept host sample fields of any kind", "confirmatory/verify/__init__.py",
           "problem = sample_problem(obj)", "problem = None",
           f"{VIOLATIONS}::test_a_host_sample_field_of_the_wrong_kind_fails_invariant_2"),
)
