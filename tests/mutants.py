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
           "running = Running(aspend, household, arm, pass_index, self.index, start)",
           "start -= 0.5; running = Running(aspend, household, arm, pass_index, self.index, start)",
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
)
