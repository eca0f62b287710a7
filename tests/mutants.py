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


RULES = "tests/engine/test_run_rules.py"
VIOLATIONS = "tests/verify/test_violations.py"
CONTINUE = "tests/engine/test_continue.py"
RAYPOOL = "tests/engine/test_raypool.py"
REPORT = "tests/report/test_report_browser.py"

MUTANTS = (
    Mutant(
        "skip a provider rerun",
        "confirmatory/engine/lanes.py",
        "for arm in rules.next_pass_arms(order, actions)\n",
        "for arm in rules.next_pass_arms(order, actions)[1:]\n",
        f"{RULES}::test_a_provider_failure_is_rerun_in_the_next_pass",
    ),
    Mutant(
        "admit past the cap",
        "confirmatory/engine/lanes.py",
        "cap_nusd=m.cap_nusd,\n                )",
        "cap_nusd=m.cap_nusd * 3,\n                )",
        f"{RULES}::test_admission_refuses_past_the_cap_and_then_refuses_forever",
    ),
    Mutant(
        "ignore a harness failure",
        "confirmatory/engine/classify.py",
        "        if cls == rules.Cls.HARNESS:\n            a.acted = True",
        "        if False:\n            a.acted = True",
        f"{RULES}::test_a_harness_failure_stops_its_model_within_five_seconds",
    ),
    Mutant(
        "log the ceiling late",
        "confirmatory/engine/events.py",
        'line = {"event": "ceiling", "t": t,',
        'line = {"event": "ceiling", "t": t + 1.0,',
        f"{RULES}::test_crossing_the_ceiling_mid_pass_ends_conversations_under_way",
    ),
    Mutant(
        "let a lane stop deciding",
        "confirmatory/engine/lanes.py",
        "for k, household in enumerate(self.m.draw):",
        "for k, household in enumerate(self.m.draw[:2]):",
        f"{RULES}::test_a_clean_run_completes_and_verifies",
    ),
    Mutant(
        "start an attempt after a stop",
        "confirmatory/engine/lanes.py",
        "return self.m.stopped or self.run.stopped or self.run.spend.crossed.is_set()",
        "return self.run.stopped or self.run.spend.crossed.is_set()",
        f"{RULES}::test_a_harness_failure_stops_its_model_within_five_seconds",
    ),
    Mutant(
        "drop a late cost",
        "confirmatory/engine/spend.py",
        "if late and nusd:",
        "if False:",
        f"{RULES}::test_an_attempt_past_its_deadline_is_abandoned_and_its_late_costs_counted",
    ),
    Mutant(
        "bound call times by the attempt's opening alone",
        "confirmatory/engine/spend.py",
        "lo = min(opened, now - elapsed) - CALL_TIME_TOLERANCE_S",
        "lo = opened - CALL_TIME_TOLERANCE_S",
        "tests/engine/test_run_faults.py::test_a_wall_clock_stepping_back_ten_minutes_inside_a_call_is_no_harness_error",
    ),
    Mutant(
        "let a refused ceiling line reach the harness",
        "confirmatory/engine/events.py",
        "            except (ChainError, OSError) as exc:\n                refused.append(",
        "            except ZeroDivisionError as exc:\n                refused.append(",
        "tests/engine/test_run_faults.py::"
        "test_a_ceiling_line_the_disk_refuses_stops_the_run_as_a_runner_error_not_a_harness_failure",
    ),
    Mutant(
        "index a reply without choices",
        "confirmatory/engine/llm/chat.py",
        "    if not choices:\n",
        "    if False:\n",
        "tests/engine/test_harness_contract.py::"
        "test_a_billed_reply_without_choices_is_rerun_as_a_provider_failure_and_its_cost_is_counted",
    ),
    Mutant(
        "drop the cost a failed call carries",
        "confirmatory/engine/spend.py",
        "if cost_usd is None and cost_nusd is None and isinstance(error, BaseException):",
        "if False:",
        "tests/engine/test_llm_faults.py::"
        "test_a_billed_reply_without_choices_is_a_provider_failure_that_carries_its_times_and_its_cost",
    ),
    Mutant(
        "set the wake event in the signal handler",
        "confirmatory/engine/run.py",
        "        self.signals_received += 1\n",
        "        self.signals_received += 1\n        self._wake.set()\n",
        "tests/engine/test_run_faults.py::"
        "test_a_signal_that_lands_while_the_main_thread_holds_the_wake_events_lock_stops_the_run",
    ),
    Mutant(
        "let a signal at the runner's exit end it by the signal",
        "confirmatory/commands/run.py",
        "        finally:\n            from confirmatory.engine.signals import ignore_interrupts\n\n            ignore_interrupts()\n",
        "        finally:\n            pass\n",
        "tests/cli/test_run_process.py::"
        "test_signals_after_the_first_change_nothing_while_the_runner_stops_and_exits[one]",
    ),
    Mutant(
        "put the signal handlers back before the runner exits",
        "confirmatory/engine/run.py",
        "        if self._restore_signals:\n",
        "        if True:\n",
        "tests/engine/test_run_faults.py::"
        "test_a_run_in_process_puts_the_signal_handlers_back_at_its_very_end_unless_its_caller_exits",
    ),
    Mutant(
        "let a push without a temporary file end the push worker",
        "confirmatory/anchors/command.py",
        "        out = tempfile.TemporaryFile()\n    except OSError as exc:\n",
        "        out = tempfile.TemporaryFile()\n    except ZeroDivisionError as exc:\n",
        "tests/engine/test_run_faults.py::"
        "test_a_temporary_directory_that_cannot_take_a_pushs_output_is_a_failed_push_not_a_stopped_run",
    ),
    Mutant(
        "keep a git lock file a killed git left in the witness clone",
        "confirmatory/anchors/witness.py",
        "            if age <= STALE_GIT_LOCK_S:\n",
        "            if True:\n",
        "tests/anchors/test_anchors.py::"
        "test_a_git_lock_file_left_in_the_witness_clone_by_a_killed_git_does_not_fail_every_later_push",
    ),
    Mutant(
        "let push-anchor wait for a hung push for good",
        "confirmatory/anchors/push.py",
        "cwd, timeout=PUSH_ANCHOR_TIMEOUT_S)",
        "cwd, timeout=None)",
        "tests/anchors/test_anchors.py::test_push_anchor_stops_a_push_that_hangs_and_frees_the_runs_lock",
    ),
    Mutant(
        "call a clone mid-rebase only detached",
        "confirmatory/anchors/git.py",
        'if (gitdir / "rebase-merge").is_dir() or (gitdir / "rebase-apply").is_dir():',
        "if False:",
        "tests/anchors/test_witness.py::test_a_clone_left_in_the_middle_of_a_rebase_is_refused_with_the_way_out",
    ),
    Mutant(
        "stop only the command, not its process group",
        "confirmatory/runtime/children.py",
        "        os.killpg(proc.pid, sig)\n",
        "        os.kill(proc.pid, sig)\n",
        "tests/host/test_host.py::"
        "test_a_command_behind_a_shell_that_times_out_is_stopped_with_every_process_it_started",
    ),
    Mutant(
        "hold an evidence command's output without bound",
        "confirmatory/runtime/children.py",
        "            if self._stdout_bytes > self._max_stdout:\n",
        "            if False:\n",
        "tests/host/test_host.py::test_a_command_that_floods_its_output_is_stopped_at_16_mib_and_is_a_failed_read",
    ),
    Mutant(
        "let an evidence file's unfinished line grow without bound",
        "confirmatory/host/sources.py",
        "        if len(rest) > MAX_LINE_BYTES:\n",
        "        if False:\n",
        "tests/host/test_host.py::test_a_file_line_that_passes_64_kib_is_reported_at_once_cut_and_its_rest_dropped",
    ),
    Mutant(
        "report a command's long output line whole",
        "confirmatory/host/sources.py",
        "output = _decode_lines([line[:MAX_LINE_BYTES] for line in raw])",
        "output = _decode_lines(raw)",
        "tests/host/test_host.py::test_a_command_output_line_past_64_kib_is_cut_with_a_note",
    ),
    Mutant(
        "let a push fill the temporary directory with its output",
        "confirmatory/runtime/children.py",
        "            return OUTPUT if os.fstat(out.fileno()).st_size > max_output else None\n",
        "            return None\n",
        "tests/anchors/test_anchors.py::"
        "test_a_push_that_floods_its_output_is_stopped_at_8_mib_and_retried_at_the_next_anchor",
    ),
    Mutant(
        "overlap two attempts on a lane",
        "confirmatory/engine/lanes.py",
        "running = Running(\n                            aspend,",
        "start -= 0.5\n                        running = Running(\n                            aspend,",
        f"{RULES}::test_a_clean_run_completes_and_verifies",
    ),
    Mutant(
        "miss the host evidence",
        "confirmatory/engine/classify.py",
        "self.classify_with(a, tuple(verdict.reasons))",
        "self.classify_with(a, ())",
        f"{RULES}::test_memory_pressure_inside_an_attempt_makes_it_host_and_reruns_it",
    ),
    Mutant(
        "accept a stale resume",
        "confirmatory/engine/events.py",
        'accepted = m.paused and m.pause_t is not None and req["t"] > m.pause_t',
        "accepted = m.paused",
        f"{RULES}::test_an_operator_failure_pauses_until_a_fresh_resume_and_a_stale_one_is_rejected",
    ),
    Mutant(
        "lose the usage of a reply litellm cannot read",
        "confirmatory/engine/llm/chat.py",
        '        _carry_billed_usage(model, "chat", exc)\n',
        "        pass\n",
        "tests/engine/test_llm_faults.py::test_a_billed_reply_litellm_cannot_read_still_counts_what_it_cost[chat]",
    ),
    Mutant(
        "keep an earlier call's raw replies",
        "confirmatory/engine/llm/calls.py",
        "    _ours.bodies = []  # the provider's",
        "    _ours.bodies = getattr(_ours, 'bodies', None) or []  # the provider's",
        "tests/engine/test_llm_faults.py::test_a_failed_call_after_a_billed_one_carries_no_cost_of_the_earlier_reply",
    ),
    Mutant(
        "take SIGHUP under nohup",
        "confirmatory/engine/run.py",
        "for s in INTERRUPT_SIGNALS if not _inherited_ignore(s)\n",
        "for s in INTERRUPT_SIGNALS if True\n",
        "tests/cli/test_run_process.py::test_a_run_started_under_nohup_outlives_its_terminal",
    ),
    Mutant(
        "take a slug of any length",
        "confirmatory/design/model.py",
        "    if len(value) > MAX_SLUG_CHARS:\n",
        "    if False:\n",
        "tests/design/test_design.py::test_a_slug_of_128_characters_is_one_and_of_129_is_refused_naming_its_length",
    ),
    Mutant(
        "keep the last of two equal household keys",
        "confirmatory/design/load.py",
        "parse_float=_finite_float, object_pairs_hook=_unique_keys\n",
        "parse_float=_finite_float\n",
        "tests/design/test_design_refusals.py::"
        "test_check_and_run_refuse_a_bad_design_naming_the_key_before_a_run_directory_exists"
        "[a household line with a key given twice]",
    ),
    Mutant(
        "take a call timeout of any length",
        "confirmatory/design/model.py",
        "    timeout_s: Num = Field(default=120.0, gt=0, le=MAX_DURATION_S)",
        "    timeout_s: Num = Field(default=120.0, gt=0)",
        "tests/design/test_design_refusals.py::"
        "test_check_and_run_refuse_a_bad_design_naming_the_key_before_a_run_directory_exists"
        "[a call timeout beyond the operating system's timers]",
    ),
    Mutant(
        "let a signal before the run kill the command",
        "confirmatory/commands/run.py",
        "        take_early_interrupts()\n",
        "",
        "tests/cli/test_run_process.py::"
        "test_a_signal_before_the_run_starts_ends_the_command_in_one_line_with_nothing_made[SIGTERM]",
    ),
    Mutant(
        "name the pause demo from the repository root only",
        "confirmatory/commands/demo.py",
        "        return str(path.relative_to(Path.cwd().resolve()))\n    except ValueError:\n        return str(path)",
        "        return str(path.relative_to(Path.cwd().resolve()))\n    except ValueError:\n"
        "        return 'confirmatory/demo/' + path.name",
        "tests/study/test_reference_study.py::test_the_demo_guide_offers_the_pause_demo_only_to_a_run_that_did_not_pause",
    ),
    Mutant(
        "start a run whose evidence cannot be read",
        "confirmatory/engine/preflight.py",
        "    problems.extend(evidence_problems(loaded))\n",
        "",
        "tests/design/test_design_refusals.py::test_check_and_run_refuse_an_evidence_source_that_cannot_be_read_before_a_"
        "run_directory_exists[evidence_path_that_is_a_directory]",
    ),
    Mutant(
        "probe a file source by its first read only",
        "confirmatory/host/sources.py",
        "        for _ in range(2):\n            error = None",
        "        for _ in range(1):\n            error = None",
        "tests/host/test_host.py::test_the_preflight_probe_reads_a_file_source_twice_as_the_sampler_does",
    ),
    Mutant(
        "take any number of lanes",
        "confirmatory/design/model.py",
        "    lanes: StrictInt = Field(default=2, ge=1, le=MAX_LANES)",
        "    lanes: StrictInt = Field(default=2, ge=1)",
        "tests/design/test_design_refusals.py::"
        "test_check_and_run_refuse_a_bad_design_naming_the_key_before_a_run_directory_exists[lanes past the bound]",
    ),
    Mutant(
        "let a household nested too deep raise",
        "confirmatory/design/load.py",
        "        except RecursionError:\n",
        "        except ZeroDivisionError:\n",
        "tests/design/test_design_refusals.py::"
        "test_check_and_run_refuse_a_bad_design_naming_the_key_before_a_run_directory_exists"
        "[a household nested deeper than the JSON reader allows]",
    ),
    Mutant(
        "take an anchor interval of a nanosecond",
        "confirmatory/design/model.py",
        "Field(default=900, ge=MIN_ANCHOR_INTERVAL_S,",
        "Field(default=900, gt=0,",
        "tests/design/test_design_refusals.py::"
        "test_check_and_run_refuse_a_bad_design_naming_the_key_before_a_run_directory_exists"
        "[an anchor interval of a nanosecond]",
    ),
    Mutant(
        "let the demo take up a run directory the run refuses",
        "confirmatory/commands/demo.py",
        "    problems = run_dir_problems(run_dir)\n",
        "    problems = []\n",
        "tests/study/test_reference_study.py::"
        "test_the_demo_refuses_a_run_directory_the_run_would_refuse_before_making_a_witness[an earlier run]",
    ),
    Mutant(
        "let a port in use end the simulator in a traceback",
        "confirmatory/sim/server.py",
        "        except (OSError, OverflowError) as exc:\n",
        "        except () as exc:\n",
        "tests/study/test_sim_provider.py::test_the_sim_provider_command_says_in_one_line_that_its_port_is_in_use",
    ),
    Mutant(
        "take any port number",
        "confirmatory/cli/main.py",
        '"--port", type=click.IntRange(0, 65535),',
        '"--port", type=int,',
        "tests/study/test_sim_provider.py::test_the_sim_provider_command_refuses_a_port_out_of_range_as_a_usage_error",
    ),
    Mutant(
        "protect a local witness only when it is made",
        "confirmatory/anchors/witness.py",
        "    # At every call, not only at creation",
        "    if remote.exists():\n        return work\n    # At every call, not only at creation",
        "tests/anchors/test_witness.py::test_a_local_witness_whose_set_up_was_cut_short_is_protected_at_the_next_call",
    ),
    Mutant(
        "send the placeholder key to every loopback server",
        "confirmatory/engine/llm/boundary.py",
        "    return None if _env_key_found[key] else SIM_API_KEY",
        "    return SIM_API_KEY",
        "tests/engine/test_llm_faults.py::"
        "test_a_loopback_gateway_gets_the_environments_key_and_the_simulator_never_does[sk-local-gateway-key-0123456789]",
    ),
    Mutant(
        "send the environment's key to the simulator",
        "confirmatory/engine/llm/boundary.py",
        '    if api_base.rstrip("/") in _sim_bases:\n        return SIM_API_KEY\n',
        "",
        "tests/engine/test_llm_faults.py::"
        "test_a_loopback_gateway_gets_the_environments_key_and_the_simulator_never_does[sk-local-gateway-key-0123456789]",
    ),
    Mutant(
        "keep quiet about a model without an observation",
        "confirmatory/commands/run.py",
        "        if not any(counts.get(c) for c in OBSERVED_CLASSES):",
        "        if False:",
        "tests/cli/test_run_process.py::test_the_end_summary_says_when_a_model_has_no_observation_at_all",
    ),
    Mutant(
        "let a torn resume.jsonl raise",
        "confirmatory/engine/resume.py",
        "    except (TornTail, ChainBroken) as exc:",
        "    except (ChainBroken,) as exc:",
        "tests/cli/test_ops_commands.py::"
        "test_a_resume_whose_write_is_cut_off_and_every_later_resume_are_refused_in_a_sentence",
    ),
    Mutant(
        "classify before the host evidence is in",
        "confirmatory/engine/classify.py",
        "monitor.wait_complete(last_end, self.m.halt)",
        "pass",
        f"{RULES}::test_a_clean_run_completes_and_verifies",
    ),
    Mutant(
        "forget the inconclusive stop",
        "confirmatory/engine/classify.py",
        'if d.stop_cause == "inconclusive":',
        "if False:",
        f"{RULES}::test_one_inconclusive_signature_in_more_than_five_households_stops_the_model",
    ),
    Mutant(
        "count a household's spend twice",
        "confirmatory/engine/lanes.py",
        "m.finished_nusd += spend",
        "m.finished_nusd += 2 * spend",
        f"{RULES}::test_admission_refuses_past_the_cap_and_then_refuses_forever",
    ),
    Mutant(
        "time deadlines on the wall clock",
        "confirmatory/engine/run.py",
        "if now - r.start_mono >= deadline",
        "if self.clock.now() - r.start >= deadline",
        "tests/engine/test_run_faults.py::test_a_wall_clock_jumping_forward_does_not_abandon_attempts_before_their_deadline",
    ),
    Mutant(
        "count a pass pending only once its record is on disk",
        "confirmatory/engine/lanes.py",
        "            with self.run.spend.ordered() as end:\n                self._count_pending(running)",
        "            with self.run.spend.ordered() as end:\n                pass",
        "tests/engine/test_run_faults.py::test_no_admission_decision_while_a_pass_waits_for_its_record_on_a_slow_disk",
    ),
    Mutant(
        "count a guard line at its read time only",
        "confirmatory/core/hostrules.py",
        "if lo <= t and since <= hi:",
        "if lo <= t <= hi:",
        "tests/core/test_hostrules.py::test_an_evidence_line_read_after_the_attempt_counts_for_it_if_it_may_have_appeared_during_it",
    ),
    Mutant(
        "complete an attempt by a sample whose reads began before its end",
        "confirmatory/core/hostrules.py",
        "        if completion_key(line) > end:",
        '        if line["t"] > end:',
        "tests/core/test_hostrules.py::test_a_sample_whose_step_began_reading_before_the_attempt_ended_does_not_complete_it",
    ),
    Mutant(
        "let a failed write at the run's end raise",
        "confirmatory/engine/lines.py",
        "        except (ChainError, OSError) as exc:\n            text = str(exc)",
        "        except ZeroDivisionError as exc:\n            text = str(exc)",
        "tests/engine/test_run_faults.py::test_a_stop_line_a_failed_log_refuses_still_reaches_every_other_log",
    ),
    Mutant(
        "never look at the free disk",
        "confirmatory/engine/run.py",
        "        self._check_disk()\n",
        "",
        "tests/engine/test_run_faults.py::test_a_disk_below_the_floor_stops_the_run_while_its_end_can_still_be_written",
    ),
    Mutant(
        "trust the harness to report every call",
        "confirmatory/engine/lanes.py",
        "        breach = unreported_breach(aspend)\n",
        "        breach = None\n",
        "tests/engine/test_harness_contract.py::test_a_reply_the_harness_did_not_report_is_counted_and_stops_its_model",
    ),
    Mutant(
        "ignore litellm calls made around confirmatory.engine.llm",
        "confirmatory/engine/llm/boundary.py",
        "                    attempt.note_direct_call()",
        "                    pass",
        "tests/engine/test_harness_contract.py::test_a_harness_calling_litellm_directly_is_stopped_at_its_first_attempt",
    ),
    Mutant(
        "let a lost deadline record lose its spend",
        "confirmatory/engine/deadlines.py",
        '            r.record_lost = f"record not written: {exc!r}"\n',
        "            raise\n",
        "tests/engine/test_run_faults.py::test_a_deadline_record_the_disk_refuses_is_a_runner_error_with_its_spend_kept",
    ),
    Mutant(
        "stop a finished model for its idle pool",
        "confirmatory/engine/run.py",
        " and len(m.lane_ends) < m.spec.lanes and not m.pool.alive()",
        " and not m.pool.alive()",
        "tests/engine/test_run_faults.py::test_the_engine_pool_of_a_model_that_has_finished_dying_does_not_stop_the_run",
    ),
    Mutant(
        "count a household ended before its lines are written",
        "confirmatory/engine/lanes.py",
        "            try:\n                for line in lines:\n",
        "            m.households_done += 1\n            try:\n                for line in lines:\n",
        "tests/engine/test_run_faults.py::test_after_a_failed_write_the_table_and_the_summary_count_only_what_is_on_disk",
    ),
    Mutant(
        "count a decision made before its line is written",
        "confirmatory/engine/lanes.py",
        "        m.admission_log.append(line)\n        with m.cond:\n            m.decided += 1\n",
        "                m.decided += 1\n        m.admission_log.append(line)\n",
        "tests/engine/test_run_faults.py::test_a_decision_whose_line_the_disk_refuses_is_not_counted_as_decided",
    ),
    Mutant(
        "count the attempt lines of a household whose household line is not on disk",
        "confirmatory/commands/run.py",
        "last = {key: cls for key, cls in last.items() if key[0] in ended}",
        "last = dict(last)",
        "tests/engine/test_run_faults.py::test_the_summary_leaves_out_the_attempt_lines_of_a_household_whose_household_line_was_torn",
    ),
    Mutant(
        "call a model done whose lane-end line was not written",
        "confirmatory/cli/progress.py",
        "        and m.lane_end_lines >= m.spec.lanes\n",
        "",
        "tests/engine/test_run_faults.py::test_a_model_whose_lane_end_line_the_disk_refuses_is_not_shown_done",
    ),
    Mutant(
        "keep quiet about a model's log that failed",
        "confirmatory/cli/progress.py",
        '        if getattr(log, "failed", False)\n    ]',
        "        if False\n    ]",
        "tests/engine/test_run_faults.py::test_a_decision_whose_line_the_disk_refuses_is_not_counted_as_decided",
    ),
    # verify: gaps an audit found, each closed by a check that these undo
    Mutant(
        "skip a control line with a nested event",
        "confirmatory/verify/model.py",
        "(_SKIP[0] in raw or _SKIP[1] in raw) and raw.count(b'\"event\":') == 1",
        "(_SKIP[0] in raw or _SKIP[1] in raw)",
        f"{VIOLATIONS}::test_a_stop_with_a_nested_event_field_is_still_a_stop_invariant_6",
    ),
    Mutant(
        "accept a control line without a time",
        "confirmatory/verify/model.py",
        "        self.control_times()\n",
        "",
        f"{VIOLATIONS}::test_a_stop_whose_t_is_not_a_number_fails_invariant_9",
    ),
    Mutant(
        "accept a line of no known event",
        "confirmatory/verify/model.py",
        "elif seq not in control or type(ev) is not str or ev not in CONTROL_EVENTS:",
        "elif False:",
        f"{VIOLATIONS}::test_a_line_of_no_known_event_fails_invariant_1",
    ),
    Mutant(
        "answer a trigger with an earlier stop",
        "confirmatory/verify/timeline.py",
        "                k = bisect.bisect_left(ts, t)\n",
        "                k = 0\n",
        f"{VIOLATIONS}::test_a_trigger_is_not_answered_by_a_stop_before_it_invariant_9",
    ),
    Mutant(
        "leave run-scope stops unchecked",
        "confirmatory/verify/verification.py",
        '    guarded(f, 9, "run.jsonl", check_run_stops, ctx, states)\n',
        "",
        f"{VIOLATIONS}::test_a_run_stop_missing_from_a_model_log_fails_invariant_9",
    ),
    Mutant(
        "widen call slack by any later clock step",
        "confirmatory/verify/attempts.py",
        'back = self.back_through(a["end"])',
        "back = self.ctx.host.back_max",
        f"{VIOLATIONS}::test_a_backward_clock_step_reported_after_an_attempt_does_not_excuse_its_calls_invariant_5",
    ),
    Mutant(
        "trust an attempt's host_lines",
        "confirmatory/verify/model.py",
        "        self.short_prefixes()\n",
        "",
        f"{VIOLATIONS}::test_a_clean_attempt_relabelled_host_on_a_short_host_prefix_fails_invariant_2",
    ),
    Mutant(
        "ignore dot-named record files",
        "confirmatory/verify/attempts.py",
        'not (n[:1] == "." and _TMP_NAME.fullmatch(n))',
        'n[:1] != "."',
        f"{VIOLATIONS}::test_records_in_a_dot_named_household_folder_are_not_ignored_invariant_1",
    ),
    Mutant(
        "accept control fields of any kind",
        "confirmatory/verify/model.py",
        "for name, (ok, kind) in CONTROL_FIELDS.get(ev, {}).items() if type(ev) is str else ():",
        "for name, (ok, kind) in ():",
        f"{VIOLATIONS}::test_a_control_or_push_line_field_of_the_wrong_kind_fails_its_invariant",
    ),
    Mutant(
        "accept money written as a float",
        "confirmatory/verify/procedure.py",
        'if type(hl.get("spend_nusd")) is not int or hl.get("spend_nusd") != spend:',
        'if hl.get("spend_nusd") != spend:',
        f"{VIOLATIONS}::test_money_written_as_a_float_fails_invariant_7",
    ),
    Mutant(
        "accept host sample fields of any kind",
        "confirmatory/verify/hostlog.py",
        "problem = sample_problem(obj)",
        "problem = None",
        f"{VIOLATIONS}::test_a_host_sample_field_of_the_wrong_kind_fails_invariant_2",
    ),
    # verify's host sample columns (memory flat in host.jsonl's lines)
    Mutant(
        "look an attempt's completing sample up in the wrong block",
        "confirmatory/records/column.py",
        "return (j - 1) * self.block + _bisect_right(self._block(j - 1), x)",
        "return (j - 1) * self.block + _bisect_right(self._block(max(j - 2, 0)), x)",
        "tests/verify/test_verify.py::test_the_host_summary_gives_the_verdict_of_the_log_or_its_prefix",
    ),
    Mutant(
        "keep every host sample in memory",
        "confirmatory/records/hostindex.py",
        "    def _settle(self) -> None:\n",
        "    def _settle(self) -> None:\n        return\n",
        "tests/records/test_column.py::test_the_host_summary_keeps_little_of_its_samples_in_memory",
    ),
    # the error signature's linear hex-id path (a long run of hex letters and dashes)
    Mutant(
        "miss a digit just after a hex run",
        "confirmatory/core/rules.py",
        "if (digit >= q or (r < n and _DIGIT.match(msg, r))) and edge >= q + 8:",
        "if digit >= q and edge >= q + 8:",
        "tests/core/test_rules.py::test_the_linear_hex_id_substitution_is_the_pattern_s",
    ),
    # verify against forged manifests, designs and procedure (a third audit)
    Mutant(
        "accept a manifest that is not its design's",
        "confirmatory/records/manifests.py",
        '    return [] if same else [f"{key} is {actual!r}, the design gives {expected!r}"]',
        "    return []",
        "tests/verify/test_manifest.py::test_a_manifest_field_that_is_not_the_designs_fails_invariant_11",
    ),
    Mutant(
        "take a rule of the wrong kind",
        "confirmatory/verify/context.py",
        "good = value is not _MISSING and ok(value)",
        "good = value is not _MISSING",
        "tests/verify/test_manifest.py::test_a_rule_of_the_wrong_kind_fails_invariant_11_by_name_and_is_not_used",
    ),
    Mutant(
        "compare a record with its line on fewer fields",
        "confirmatory/verify/attempts.py",
        '_AS_LINE = ("household", "arm", "pass", "lane", "start", "end", "cost_nusd")',
        '_AS_LINE = ("household", "arm", "pass", "start", "end", "cost_nusd")',
        "tests/verify/test_money_time.py::"
        "test_a_record_that_disagrees_with_its_attempt_line_on_one_field_fails_invariant_1[lane]",
    ),
    Mutant(
        "read a device as a record",
        "confirmatory/verify/attempts.py",
        "    if not _is_regular(_fstat(fd).st_mode):",
        "    if False:",
        "tests/verify/test_manifest.py::test_a_record_that_names_a_device_is_reported_not_read_to_its_end",
    ),
    Mutant(
        "let a credential into the design",
        "confirmatory/design/load.py",
        "    problems.extend(credential_problems(data))",
        "    pass",
        "tests/engine/test_config.py::test_a_credential_in_the_design_is_refused_by_name",
    ),
    Mutant(
        "let a credential into a design comment",
        "confirmatory/design/load.py",
        "    problems.extend(raw_problems)",
        "    pass",
        "tests/design/test_design_refusals.py::test_a_credential_in_a_comment_or_a_key_name_is_refused_by_line_"
        "without_echoing_it[a comment holding an sk- token]",
    ),
    Mutant(
        "accept a pause attempt without its pause",
        "confirmatory/verify/procedure.py",
        "        if found:\n            return\n        self.f.fail(\n            6,",
        "        if True:\n            return\n        self.f.fail(\n            6,",
        "tests/verify/test_procedure.py::test_a_paused_attempt_without_its_pause_line_fails_invariant_6",
    ),
    Mutant(
        "date the ceiling by its event alone",
        "confirmatory/verify/money.py",
        "        known += st.ceiling_known_nusd",
        "        known += 0",
        "tests/verify/test_money_time.py::test_a_ceiling_event_dated_after_the_spend_crossed_fails_invariant_6",
    ),
    Mutant(
        "take the whole spend as counted at the ceiling",
        "confirmatory/verify/money.py",
        "        upper += st.ceiling_upper_nusd",
        "        upper += st.attempt_cost",
        "tests/verify/test_money_time.py::test_a_ceiling_event_dated_before_its_crossing_call_fails_invariant_6",
    ),
    Mutant(
        "let a pause go without its paused attempt",
        "confirmatory/verify/procedure.py",
        "        for key, lines in self.pause_of.items():\n            f.checked[6] += len(lines)",
        "        for key, lines in {}.items():\n            f.checked[6] += len(lines)",
        "tests/verify/test_procedure.py::test_a_pause_line_for_an_attempt_that_did_not_pause_fails_invariant_6",
    ),
    Mutant(
        "let each model have its own draw",
        "confirmatory/verify/draws.py",
        "    for name, draw in draws[1:]:\n        f.check(3)\n        if draw != want:",
        "    for name, draw in draws[1:]:\n        f.check(3)\n        if False:",
        "tests/verify/test_procedure.py::test_a_model_whose_draw_left_out_households_fails_invariant_3",
    ),
    Mutant(
        "take any draw as the households file's",
        "confirmatory/verify/draws.py",
        "            if draw != want:\n                try:\n                    missing, extra = len(set(ids) -",
        "            if False:\n                try:\n                    missing, extra = len(set(ids) -",
        "tests/verify/test_households.py::test_a_study_whose_draws_all_left_out_households_fails_invariant_11",
    ),
    Mutant(
        "skip host lines of no known event",
        "confirmatory/verify/hostlog.py",
        '        elif obj.get("event") not in _HOST_OTHER or (obj.get("event") == "open") != (seq == 0):',
        "        elif False:",
        "tests/verify/test_violations.py::test_a_host_line_the_monitor_never_writes_fails_invariant_2",
    ),
    Mutant(
        "take a reported step back as the whole step",
        "confirmatory/verify/clocks.py",
        "    return back + unseen if back > 0 else 0.0",
        "    return back",
        "tests/engine/test_run_faults.py::test_a_wall_clock_stepping_back_3_s_inside_a_call_after_1_5_s_unread_verifies",
    ),
    Mutant(
        "forget the gap at a seam of the host spans",
        "confirmatory/verify/clocks.py",
        "            out.unseen = max(out.unseen, later.first_mono - self.last_mono)",
        "            pass",
        "tests/verify/test_money_time.py::test_the_unseen_part_of_a_step_back_joined_from_spans_is_the_wholes",
    ),
    Mutant(
        "never read the deadline",
        "confirmatory/verify/attempts.py",
        "        elif end - start > self.deadline_over and not self.past_deadline_excused(start, end):",
        "        elif False:",
        "tests/verify/test_money_time.py::test_attempts_past_a_short_deadline_not_abandoned_fail_invariant_2",
    ),
    # a fourth audit of verify
    Mutant(
        "let a lane end anywhere",
        "confirmatory/verify/timeline.py",
        "        if halted or lane in lane_closed:\n            continue  # refused",
        "        if True:\n            continue  # refused",
        "tests/verify/test_procedure.py::test_a_lanes_last_household_dropped_from_the_records_fails_invariant_3",
    ),
    Mutant(
        "take any lane-end reason",
        "confirmatory/verify/timeline.py",
        "        if ok is not None and not ok():",
        "        if False:",
        "tests/verify/test_procedure.py::test_a_lane_end_reason_that_is_not_what_ended_the_lane_fails_invariant_3",
    ),
    Mutant(
        "take any close status",
        "confirmatory/verify/money.py",
        "            if status not in want:",
        "            if False:",
        "tests/verify/test_procedure.py::test_a_run_with_a_model_stopped_closed_as_completed_fails_invariant_7",
    ),
    # a fifth audit of verify
    Mutant(
        "accept a resume that ends no pause",
        "confirmatory/verify/timeline.py",
        "            if not paused:\n                f.fail(\n                    10,",
        "            if False:\n                f.fail(\n                    10,",
        "tests/verify/test_violations.py::test_a_second_accepted_resume_of_one_pause_fails_invariant_10",
    ),
    Mutant(
        "answer a resume request twice",
        "confirmatory/verify/timeline.py",
        "        if answered[key] > ctx.resume_requests[key]:",
        "        if False:",
        "tests/verify/test_violations.py::test_one_request_answered_twice_fails_invariant_10",
    ),
    Mutant(
        "take a refused resume as it says",
        "confirmatory/verify/timeline.py",
        "        elif accepted is False and paused and _num(req) and req > pause_t:",
        "        elif False:",
        "tests/verify/test_violations.py::test_a_resume_rejected_while_the_rule_accepts_it_fails_invariant_10",
    ),
    Mutant(
        "take evidence from any source",
        "confirmatory/verify/hostlog.py",
        "    if sources is not None and source not in sources:",
        "    if False:",
        "tests/verify/test_violations.py::test_an_evidence_line_of_a_source_the_design_lacks_fails_invariant_2",
    ),
    Mutant(
        "let the first anchor come after decisions",
        "confirmatory/verify/logs.py",
        "                if self.anchor_count == 1 and n > 1 + conts and rel.endswith(",
        "                if False and rel.endswith(",
        "tests/verify/test_violations.py::test_a_first_anchor_made_after_the_first_decisions_fails_invariant_8",
    ),
    Mutant(
        "let an anchor predate what it counts",
        "confirmatory/verify/logs.py",
        "and lt > at:\n",
        "and False:\n",
        "tests/verify/test_violations.py::test_an_anchor_dated_before_lines_it_counts_fails_invariant_8",
    ),
    # the end of a run whose witness push hangs
    Mutant(
        "sum up a final push that never ran by its rc",
        "confirmatory/anchors/anchorer.py",
        "        if how == _NOT_RUN:",
        "        if False:",
        "tests/anchors/test_anchors.py::test_the_end_summary_says_what_the_records_say_of_the_final_push[from the start]",
    ),
    Mutant(
        "keep quiet while the run's end waits for a push",
        "confirmatory/cli/progress.py",
        '        wait = getattr(anchorer, "end_wait", None)',
        "        wait = None",
        "tests/anchors/test_anchors.py::"
        "test_the_end_says_which_witness_push_it_waits_for_and_for_how_long_at_most[from the start]",
    ),
    Mutant(
        "name an internal timeout in the output of a push the run's end killed",
        "confirmatory/anchors/anchorer.py",
        'output = (output + f"\\n[killed by the runner: {self._give_up_why}]")',
        'output = (output + "\\n[killed by the runner after finish()\'s push_timeout]")',
        "tests/anchors/test_anchors.py::"
        "test_the_records_of_a_push_the_runs_end_killed_or_never_ran_say_so_plainly_as_the_docs_do",
    ),
    # leftovers: what the end of a run and its pushes say
    Mutant(
        "call a run completed whose witness lacks the final anchor",
        "confirmatory/commands/run.py",
        '    if result.status == "completed" and unwitnessed and not result.write_failures:',
        "    if False:",
        "tests/anchors/test_anchors.py::test_the_headline_of_a_run_whose_witness_lacks_the_final_anchor_says_so_and_how_to_retry"
        "[from the start]",
    ),
    Mutant(
        "say a push killed at its timeout was killed twice",
        "confirmatory/anchors/anchorer.py",
        "        if stopped in (children.TIMEOUT, children.OUTPUT, _END):",
        "        if stopped == _END:",
        "tests/anchors/test_anchors.py::"
        "test_a_push_that_hangs_during_the_run_is_killed_at_its_timeout_and_retried_at_the_next_anchor",
    ),
    Mutant(
        "leave the design file out of the simulator's one line",
        "confirmatory/sim/server.py",
        '        print(f"sim-provider: {design}: {what}{why}", file=sys.stderr)',
        '        print(f"sim-provider: {what}{why}", file=sys.stderr)',
        "tests/study/test_sim_provider.py::"
        "test_the_sim_provider_command_names_the_design_file_and_its_problem_in_one_line[a TOML syntax error]",
    ),
    Mutant(
        "let a simulator number of the wrong kind raise a TypeError",
        "confirmatory/sim/faults.py",
        '    except (TypeError, ValueError, OverflowError):\n        raise ValueError(f"{key}:',
        '    except (ValueError, OverflowError):\n        raise ValueError(f"{key}:',
        "tests/study/test_sim_provider.py::"
        "test_the_sim_provider_command_names_the_design_file_and_its_problem_in_one_line[a seed that is a list]",
    ),
    Mutant(
        "give the pushes a failed final anchor cut short an internal name",
        "confirmatory/anchors/anchorer.py",
        '"the final anchor could not be written, and the run ended"',
        '"_abandon_pushes"',
        "tests/anchors/test_anchors.py::test_the_pushes_of_a_run_whose_final_anchor_could_not_be_written_say_so",
    ),
    Mutant(
        "say a push the run's close never ran was spent on an earlier push",
        "confirmatory/anchors/anchorer.py",
        'output = f"not run: {end_time(self._end_timeout)} was spent on anchor {spent[0]}\'s push"',
        'output = "not run: finish()\'s push_timeout was spent on an earlier push"',
        "tests/anchors/test_anchors.py::"
        "test_a_run_closed_without_its_main_loop_waits_for_its_pushes_for_the_close_time_and_says_so",
    ),
    # the demo and early signals
    Mutant(
        "leave the demo's run without the early handler",
        "confirmatory/commands/demo.py",
        "    handlers = take_early_interrupts()\n",
        "    handlers = {}\n",
        "tests/cli/test_run_process.py::test_a_signal_before_the_demos_run_starts_ends_the_demo_as_it_ends_run[SIGTERM]",
    ),
    Mutant(
        "let the demo's run put the early handler back as it closes",
        "confirmatory/commands/run.py",
        "        restore_signals=not exiting,\n        restore_to=restore_to,\n        continuation=continuation,",
        "        restore_signals=not exiting,\n        restore_to=None,\n        continuation=continuation,",
        "tests/cli/test_run_process.py::test_a_signal_as_the_demos_run_closes_is_not_called_one_before_the_run",
    ),
    Mutant(
        "refuse the demo's existing run directory without the design's problems",
        "confirmatory/commands/demo.py",
        "            problems = _design_problems(design) + problems\n",
        "",
        "tests/study/test_reference_study.py::"
        "test_the_demo_refusing_an_existing_run_directory_also_lists_the_designs_problems",
    ),
    # signals that arrive together, or many
    Mutant(
        "set the other signals to SIG_IGN inside the early handler",
        "confirmatory/commands/run.py",
        "    global _early_taken\n    if _early_taken:\n        return\n    _early_taken = True\n",
        "    import signal\n\n    for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):\n"
        "        signal.signal(s, signal.SIG_IGN)\n",
        "tests/cli/test_run_process.py::"
        "test_signals_that_arrive_together_before_the_run_starts_end_it_in_one_line[names0]",
    ),
    Mutant(
        "name the latest signal in the stop line",
        "confirmatory/engine/run.py",
        "        if self._signal is None:\n            self._signal = signum\n",
        "        self._signal = signum\n",
        f"{RULES}::test_the_stop_line_names_the_first_of_two_signals",
    ),
    # the wait before a rerun pass
    Mutant(
        "rerun at once, without the design's wait",
        "confirmatory/engine/lanes.py",
        "if wait > 0 and (self.m.halt.wait(wait) or self._halted()):",
        "if False:",
        f"{RULES}::test_a_rerun_pass_waits_the_designs_rerun_wait_doubled_each_pass",
    ),
    Mutant(
        "sleep through a stop before a rerun pass",
        "confirmatory/engine/lanes.py",
        "if wait > 0 and (self.m.halt.wait(wait) or self._halted()):",
        "if wait > 0 and (time.sleep(wait) or self._halted()):",
        f"{RULES}::test_a_stop_ends_a_lanes_wait_before_a_rerun_pass_at_once",
    ),
    Mutant(
        "ignore the wait a provider asked for",
        "confirmatory/engine/lanes.py",
        "retry_after_s=_asked_wait(ended, arms))",
        "retry_after_s=0.0)",
        "tests/study/test_reference_study.py::test_the_reference_study_completes_verifies_and_shows_reruns_and_keeps",
    ),
    Mutant(
        "keep no Retry-After in the record",
        "confirmatory/core/errors.py",
        '        out["retry_after_s"] = asked',
        "        pass",
        "tests/engine/test_llm_faults.py::test_the_wait_a_rate_limit_asks_for_is_kept_in_its_error[chat]",
    ),
    Mutant(
        "accept a rerun pass started before its wait",
        "confirmatory/verify/procedure.py",
        "                if wait_base > 0:\n",
        "                if False:\n",
        "tests/verify/test_procedure.py::test_a_rerun_pass_started_before_the_designs_wait_fails_invariant_3",
    ),
    # the run's lock asked about by a reader
    Mutant(
        "open the run's lock file for writing to ask whether it is held",
        "confirmatory/records/lock.py",
        "fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK",
        "fd = os.open(path, os.O_RDWR | os.O_NONBLOCK",
        "tests/cli/test_ops_commands.py::"
        "test_verify_of_a_finished_run_the_reviewer_may_not_write_to_is_not_called_still_running",
    ),
    Mutant(
        "make the run's lock file to ask whether it is held",
        "confirmatory/records/lock.py",
        "    except (FileNotFoundError, NotADirectoryError):\n        return False  # nobody can hold a lock whose file was never made\n",
        "    except (FileNotFoundError, NotADirectoryError):\n        return _held_by_filelock(path)\n",
        "tests/records/test_lock.py::test_nobody_holds_the_lock_of_a_run_nobody_runs_and_asking_leaves_no_file",
    ),
    # config.json: whose checkout
    Mutant(
        "record the commit of a repository that does not track the runner",
        "confirmatory/engine/config.py",
        'if head is None or git("ls-files", "--error-unmatch", "--", source_file) is None:',
        "if head is None:",
        "tests/engine/test_config.py::test_the_runner_and_the_harness_carry_the_commit_of_the_checkout_that_tracks_them",
    ),
    Mutant(
        "leave the harness's checkout out of config.json",
        "confirmatory/engine/config.py",
        '        out["git_commit"], out["git_dirty"] = git_state(source_path.parent, source_path.name)\n',
        "        pass\n",
        "tests/engine/test_config.py::test_the_runner_and_the_harness_carry_the_commit_of_the_checkout_that_tracks_them",
    ),
    # the witness check on a shallow clone
    Mutant(
        "check only the versions a shallow witness clone holds",
        "confirmatory/anchors/check.py",
        'unshallow = ["--unshallow"] if shallow() else []',
        "unshallow = []",
        "tests/anchors/test_witness.py::test_a_shallow_clone_of_the_witness_is_checked_over_the_whole_history",
    ),
    Mutant(
        "say nothing of a shallow witness clone that could not fetch its history",
        "confirmatory/anchors/check.py",
        "    if shallow():\n        problems.append(",
        "    if False:\n        problems.append(",
        "tests/anchors/test_witness.py::test_a_shallow_clone_of_the_witness_is_checked_over_the_whole_history",
    ),
    # check and the keys
    Mutant(
        "keep quiet in check about a key this environment lacks",
        "confirmatory/engine/preflight.py",
        "        elif missing and notes is not None:\n",
        "        elif False:\n",
        "tests/study/test_reference_study.py::test_check_says_which_keys_this_environment_lacks_though_it_passes",
    ),
    # verify --json's documented shape
    Mutant(
        "add a key its page does not document to verify --json",
        "confirmatory/verify/report.py",
        '                "run_dir": self.run_dir,\n                "ok": self.ok,',
        '                "run_dir": self.run_dir,\n                "format": 1,\n                "ok": self.ok,',
        "tests/cli/test_ops_commands.py::test_verify_json_has_exactly_the_keys_its_page_documents",
    ),
    # the model registry read before anything starts
    Mutant(
        "let run start with a model registry it cannot read",
        "confirmatory/engine/preflight.py",
        "    problems.extend(registry_problems(Path(design_path) if design_path is not None else loaded.path))\n",
        "",
        "tests/engine/test_config.py::test_a_model_registry_the_run_cannot_read_is_refused_by_check_and_run_naming_it",
    ),
    Mutant(
        "send the seed probe before reading its registry",
        "confirmatory/commands/probe.py",
        '        if problem is not None:\n            print(f"probe-seed: the registry',
        '        if False:\n            print(f"probe-seed: the registry',
        "tests/cli/test_probe.py::test_a_registry_the_outcome_cannot_be_written_into_is_refused_before_any_request",
    ),
    Mutant(
        "fetch into a witness clone already at origin's tip",
        "confirmatory/anchors/check.py",
        "current = before is not None and not unshallow and remote_tip() == before",
        "current = False",
        "tests/anchors/test_witness.py::test_a_witness_clone_already_at_origins_tip_is_checked_without_writing_to_it",
    ),
    # verify's outcome line and a model with no observation
    Mutant(
        "keep NO OBSERVATION out of verify's outcome line",
        "confirmatory/verify/outcome.py",
        "        if st.results and not st.observed:\n",
        "        if False:\n",
        "tests/cli/test_run_process.py::test_the_end_summary_says_when_a_model_has_no_observation_at_all",
    ),
    # nothing the runner starts outlives it
    Mutant(
        "let engine workers outlive a killed runner",
        "confirmatory/engine/pool.py",
        "    _watch_parent()\n",
        "",
        "tests/runtime/test_orphans.py::test_a_runner_killed_with_sigkill_leaves_no_engine_worker_or_command_running",
    ),
    Mutant(
        "let commands outlive a killed runner",
        "confirmatory/runtime/children.py",
        '    _tell_reaper(f"+{proc.pid}")\n',
        "",
        "tests/runtime/test_orphans.py::test_a_runner_killed_with_sigkill_leaves_no_engine_worker_or_command_running",
    ),
    # the engine pool on Ray (tests/engine/test_raypool.py): a dead actor, an abandoned call
    Mutant(
        "leave a Ray pool alive when an actor died",
        "confirmatory/engine/raypool.py",
        "        if done:\n            dead = next(",
        "        if False:\n            dead = next(",
        f"{RAYPOOL}::test_an_idle_actor_killed_makes_the_pool_not_alive",
    ),
    Mutant(
        "hand the harness Ray's error for an actor killed mid-call",
        "confirmatory/engine/raypool.py",
        "        self._mark_broken(why)\n        return PoolFailure(why)",
        "        self._mark_broken(why)\n        return RuntimeError(why)",
        f"{RAYPOOL}::test_a_killed_actor_breaks_the_pool_and_fails_the_call_in_flight",
    ),
    Mutant(
        "deliver an abandoned attempt's late engine result",
        "confirmatory/engine/raypool.py",
        "            ended = _ended(attempt)\n            if ended is not None:\n                self._discard(",
        "            ended = None\n            if ended is not None:\n                self._discard(",
        f"{RAYPOOL}::test_an_ended_attempt_stops_waiting_and_its_late_result_is_discarded",
    ),
    Mutant(
        "lend a Ray actor whose abandoned call still runs",
        "confirmatory/engine/raypool.py",
        "            self._late.append((ref, actor))",
        "            self._idle.put(actor)",
        f"{RAYPOOL}::test_an_ended_attempt_stops_waiting_and_its_late_result_is_discarded",
    ),
    # a run cut short: what only the crash explains, and nothing more
    Mutant(
        "take any household never ended as the crash's",
        "confirmatory/verify/timeline.py",
        "        if last_on_lane.get(lane) == seq:\n",
        "        if True:\n",
        "tests/verify/test_states.py::test_a_household_never_ended_that_its_lane_decided_past_is_still_a_violation",
    ),
    Mutant(
        "report a crash's torn tail as tampering",
        "confirmatory/verify/logs.py",
        "        if not check.ok and check.torn is not None and self.stage is not None:\n",
        "        if False:\n",
        "tests/verify/test_states.py::test_a_torn_last_line_is_the_crashs_with_its_offset_length_and_hash",
    ),
    # RFC 9162 Merkle roots: the verifier's checks and the proof verifiers
    Mutant(
        "skip verify's check of an anchor's Merkle root",
        "confirmatory/verify/anchored.py",
        "        if n in computed and stored != computed[n]:\n",
        "        if False:\n",
        "tests/verify/test_roots.py::test_a_changed_log_whose_heads_were_re_anchored_fails_the_root_check",
    ),
    Mutant(
        "take any two anchors' trees as consistent",
        "confirmatory/verify/anchored.py",
        "ok = (m, n) not in proofs or verify_consistency(m, n, proofs[(m, n)], root0, stored)",
        "ok = True",
        "tests/verify/test_roots.py::test_an_anchor_whose_root_was_changed_fails_the_root_check_and_both_consistency_proofs",
    ),
    Mutant(
        "check only the run's anchors' roots, not the witness's",
        "confirmatory/verify/logs.py",
        '        settle_roots(rel, fixed, valid, trees or [], f, where="witness", whose="the witness\'s ")\n',
        "",
        "tests/verify/test_roots.py::test_a_changed_log_fails_the_root_check_against_the_witnesss_anchors",
    ),
    Mutant(
        "let an inclusion proof end short of the root",
        "confirmatory/core/merkle.py",
        "    return sn == 0 and r == root_hash\n",
        "    return r == root_hash\n",
        "tests/core/test_merkle.py::test_every_published_inclusion_probe_gets_its_expected_verdict",
    ),
    Mutant(
        "skip the first root's check in a consistency proof",
        "confirmatory/core/merkle.py",
        "    return fr == first_root and sr == second_root and sn == 0\n",
        "    return sr == second_root and sn == 0\n",
        "tests/core/test_merkle.py::test_every_published_consistency_probe_gets_its_expected_verdict",
    ),
    Mutant(
        "accept equal sizes whatever the proof",
        "confirmatory/core/merkle.py",
        "        return not path and first_root == second_root\n",
        "        return first_root == second_root\n",
        "tests/core/test_merkle.py::test_every_published_consistency_probe_gets_its_expected_verdict",
    ),
    Mutant(
        "let check-proof pass a proof that fails",
        "confirmatory/records/proofs.py",
        "        if not merkle.verify_inclusion(merkle.leaf_hash(leaf), index, size, steps, root):\n",
        "        if False:\n",
        "tests/cli/test_prove.py::test_an_inclusion_proof_of_every_line_checks_by_check_proof_and_by_the_documented_python",
    ),
    Mutant(
        "let check-proof take a proof's size and root without its signed anchor line's",
        "confirmatory/records/binding.py",
        "        if held != (size, root.hex()):\n",
        "        if False:\n",
        "tests/records/test_binding.py::test_every_proof_with_its_tree_size_raised_by_one_is_refused_with_its_checkpoint",
    ),
    Mutant(
        "show the logged evidence on the report, not verify's",
        "confirmatory/report/evidence.py",
        "    if report is not None:\n        return list(report.anchors), True\n",
        "    if False:\n        return list(report.anchors), True\n",
        "tests/report/test_report_evidence.py::"
        "test_a_forged_cosignature_is_not_shown_as_proof_and_a_run_without_evidence_says_git_only",
    ),
    Mutant(
        "call a run cut short complete",
        "confirmatory/verify/verification.py",
        "    if stage is None or (stage == CLOSED and not logs.final_missing):\n",
        "    if True:\n",
        "tests/verify/test_states.py::test_a_run_killed_at_any_point_verifies_as_crashed_with_no_violation[first attempt line]",
    ),
    Mutant(
        "retry a log's failed fsync once",
        "confirmatory/records/writer.py",
        "                    os.fsync(self._fd)  # once: a failed fsync is never retried (the module docstring)\n"
        "                except OSError as exc:\n",
        "                    os.fsync(self._fd)  # once: a failed fsync is never retried (the module docstring)\n"
        "                except OSError as exc:\n                    os.fsync(self._fd)\n",
        "tests/cli/test_disk_faults.py::test_eio_on_an_fsync_stops_the_run_and_no_failed_descriptor_is_fsynced_again[log]",
    ),
    Mutant(
        "acknowledge a line before its batch's fsync",
        "confirmatory/records/writer.py",
        "                    killpoint.in_flight(self.path, len(batch))  # written, not yet fsynced\n",
        "                    killpoint.in_flight(self.path, len(batch))  # written, not yet fsynced\n"
        "                with self._lock:\n"
        "                    self.lines = first + len(batch)\n"
        "                    self._cond.notify_all()\n",
        "tests/records/test_group_commit.py::test_lines_appended_while_a_batch_is_in_flight_share_the_next_fsync_and_wait_for_it",
    ),
    Mutant(
        "retry a failed batch fsync in the next batch",
        "confirmatory/records/writer.py",
        '                    raise self._fail("fsync", first, exc) from exc\n',
        "                    with self._lock:\n"
        "                        self._queue[:0] = batch\n"
        '                    raise ChainWriteFailed(f"{self.path}: fsync failed") from exc\n',
        "tests/records/test_group_commit.py::test_a_failed_batch_fsync_refuses_every_line_in_and_behind_it_and_is_never_retried",
    ),
    Mutant(
        "retry a record's failed fsync once",
        "confirmatory/records/writer.py",
        "                os.fsync(fd)  # once: a failed fsync is never retried (the module docstring)\n"
        "            except OSError as exc:\n",
        "                os.fsync(fd)  # once: a failed fsync is never retried (the module docstring)\n"
        "            except OSError as exc:\n                os.fsync(fd)\n",
        "tests/cli/test_disk_faults.py::test_eio_on_an_fsync_stops_the_run_and_no_failed_descriptor_is_fsynced_again[every-thread]",
    ),
    Mutant(
        "drop the errno's name from a disk failure",
        "confirmatory/records/writer.py",
        "    return f\"{errno.errorcode.get(code, f'errno {code}')} ({exc.strerror or os.strerror(code)})\"",
        '    return f"({exc.strerror or os.strerror(code)})"',
        "tests/cli/test_disk_faults.py::test_a_file_size_limit_stops_the_run_naming_efbig_and_verify_says_so",
    ),
    Mutant(
        "keep a record whose directory fsync failed",
        "confirmatory/records/writer.py",
        "        path.unlink(missing_ok=True)\n        raise _failed(",
        "        raise _failed(",
        "tests/cli/test_disk_faults.py::test_eio_on_an_fsync_stops_the_run_and_no_failed_descriptor_is_fsynced_again[record-directory]",
    ),
    Mutant(
        "call a host.jsonl write failure a sampler failure",
        "confirmatory/host/sampler.py",
        "            if isinstance(exc, ChainWriteFailed):",
        "            if False:",
        "tests/cli/test_disk_faults.py::test_eio_on_an_fsync_stops_the_run_and_no_failed_descriptor_is_fsynced_again[host-log]",
    ),
    Mutant(
        "draw no rerun on the report's timeline",
        "confirmatory/report/charts.py",
        'and a.get("lane") in index\n    ]',
        'and a.get("lane") in index and not a.get("pass")\n    ]',
        f"{REPORT}::test_an_operator_pause_is_drawn_until_its_accepted_resume_and_the_stale_one_is_shown",
    ),
    Mutant(
        "show the attempts as the report's arm results",
        "confirmatory/report/sections.py",
        'table("results", "results", "arm results")',
        'table("attempts", "results", "arm results")',
        f"{REPORT}::test_an_operator_pause_is_drawn_until_its_accepted_resume_and_the_stale_one_is_shown",
    ),
    Mutant(
        "let an arm's first attempt stand in verify's tallies",
        "confirmatory/verify/procedure.py",
        "    for cls in standing.values():\n        st.standing[str(cls)] += 1\n",
        '    for cls in {str(a["arm"]): a["class"] for _, a in reversed(attempts)}.values():\n'
        "        st.standing[str(cls)] += 1\n",
        f"{REPORT}::test_an_operator_pause_is_drawn_until_its_accepted_resume_and_the_stale_one_is_shown",
    ),
    Mutant(
        "never say verify failed on the report's banner",
        "confirmatory/report/sections.py",
        '    if failed:\n        kind = "failed"\n',
        '    if False:\n        kind = "failed"\n',
        f"{REPORT}::test_a_tampered_run_says_verify_failed_and_names_the_invariant",
    ),
    Mutant(
        "mark the ceiling a second late on the report",
        "confirmatory/report/charts.py",
        'vline("ceiling", ceiling_t, ',
        'vline("ceiling", ceiling_t + 1.0, ',
        f"{REPORT}::test_the_ceiling_marker_is_where_the_records_put_the_crossing",
    ),
    Mutant(
        "escape only a closing tag in the report's hover data",
        "confirmatory/report/charts.py",
        '.replace("<", "\\\\u003c")',
        '.replace("</", "<\\\\/")',
        f"{REPORT}::test_markup_planted_in_the_records_stays_text_and_fetches_nothing",
    ),
    # confirmatory continue (docs/RUN.md "Continuing a crashed run")
    Mutant(
        "drop the in-flight spend from a continuation",
        "confirmatory/engine/continuation.py",
        "        pos.spend_nusd += pos.lost_nusd\n",
        "        pos.spend_nusd += 0\n",
        f"{CONTINUE}::test_the_cost_of_calls_in_flight_at_the_kill_is_counted_by_the_continuation",
    ),
    Mutant(
        "rewrite an acknowledged line when a torn tail is moved aside",
        "confirmatory/engine/continuation.py",
        "os.ftruncate(fd, offset)",
        "os.ftruncate(fd, max(0, offset - 1))",
        f"{CONTINUE}::test_a_torn_last_line_is_moved_aside_whole_and_the_run_carried_on[middle]",
    ),
    Mutant(
        "restart a continued lane at the wrong household",
        "confirmatory/engine/continuation.py",
        "pos.lane_start[lane] = k  # the household runs again whole",
        "pos.lane_start[lane] = k + lanes  # the household runs again whole",
        f"{CONTINUE}::test_a_continuation_killed_in_its_turn_is_continued_again",
    ),
    Mutant(
        "let a continuation's clock go back below the crash",
        "confirmatory/engine/run.py",
        'self.clock.start_above(self.continuation["position"].crash_t)',
        "self.clock.start_above(0.0)",
        f"{CONTINUE}::test_the_continuation_clock_starts_above_every_recorded_time_when_the_wall_clock_is_behind",
    ),
    Mutant(
        "forget a pause across a crash",
        "confirmatory/engine/continuation.py",
        'pos.paused, pos.pause_t = True, o.get("t")',
        "pos.paused, pos.pause_t = False, None",
        f"{CONTINUE}::test_a_model_paused_at_the_kill_stays_paused_until_a_fresh_resume",
    ),
    Mutant(
        "date the crash before its last durable line",
        "confirmatory/engine/continuation.py",
        "crash_t = math.nextafter(latest, math.inf)",
        "crash_t = latest - 1.0",
        f"{CONTINUE}::test_a_continuation_killed_in_its_turn_is_continued_again",
    ),
    # the plan's worst case, the live display, show's figures
    Mutant(
        "state the ceiling as the run's bound",
        "confirmatory/engine/check.py",
        "    return ceiling_nusd + sum(lanes * c for lanes, c in lanes_calls if c is not None)",
        "    return ceiling_nusd",
        "tests/cli/test_check_bound.py::test_a_run_that_crosses_the_ceiling_never_spends_more_than_the_bound_check_printed",
    ),
    Mutant(
        "count one call in flight for the whole run",
        "confirmatory/engine/check.py",
        "    return ceiling_nusd + sum(lanes * c for lanes, c in lanes_calls if c is not None)",
        "    return ceiling_nusd + max(c for lanes, c in lanes_calls if c is not None)",
        "tests/cli/test_check.py::test_the_plan_states_the_runs_worst_case_from_lanes_and_the_costliest_call",
    ),
    Mutant(
        "price the costliest call without max_tokens' repeat",
        "confirmatory/engine/check.py",
        "        tokens = 2 * asked if provider_max is None else min(2 * asked, provider_max)",
        "        tokens = asked",
        "tests/cli/test_check.py::test_the_plan_states_the_runs_worst_case_from_lanes_and_the_costliest_call",
    ),
    Mutant(
        "redraw the region below the last one",
        "confirmatory/cli/progress.py",
        '            parts.append(f"\\r\\x1b[{self._drawn}A")',
        '            parts.append("\\r")',
        "tests/cli/test_display_tty.py::test_the_reference_demo_is_redrawn_in_place_and_its_last_screen_is_what_the_records_say",
    ),
    Mutant(
        "fit the region to a wider terminal than it is",
        "confirmatory/cli/progress.py",
        "        lines = fit(lines, cols - 1)[: rows - 1]",
        "        lines = fit(lines, cols + 40)[: rows - 1]",
        "tests/cli/test_display_tty.py::test_a_resized_terminal_gets_the_region_redrawn_to_its_new_width",
    ),
    Mutant(
        "break a fitted line inside a word",
        "confirmatory/core/text.py",
        "            pieces = textwrap.wrap(\n                phrase,",
        "            pieces = [phrase[i : i + width] for i in range(0, len(phrase), width)] or textwrap.wrap(\n"
        "                phrase,",
        "tests/cli/test_progress.py::test_fitted_lines_break_between_words_and_never_pass_the_width",
    ),
    Mutant(
        "leave the starting line off the screen",
        "confirmatory/cli/progress.py",
        "        self.tick()\n        while not self._stop.wait(EVENT_POLL_S):",
        "        while not self._stop.wait(EVENT_POLL_S):",
        "tests/cli/test_progress.py::test_the_display_says_the_run_is_starting_before_its_first_wait",
    ),
    Mutant(
        "break a live line between any two words, not between phrases",
        "confirmatory/core/text.py",
        'PHRASE = re.compile(r" {2,}")',
        'PHRASE = re.compile(r" +")',
        "tests/cli/test_progress.py::test_fitted_lines_break_between_phrases_where_each_fits",
    ),
    Mutant(
        "count a continued run's household lines, not its households",
        "confirmatory/cli/progress.py",
        '        if getattr(self.run, "continuation", None) is None:\n            return m.decided',
        "        if True:\n            return m.decided",
        "tests/cli/test_display_tty.py::test_at_80_columns_a_continued_run_never_counts_more_households_than_its_draw",
    ),
    Mutant(
        "leave the time left out of the frames before the pace is known",
        "confirmatory/cli/progress.py",
        '        return left or "time left: not known yet (no household has ended since the start)"',
        "        return left",
        "tests/cli/test_progress.py::"
        "test_the_region_has_the_time_left_in_every_frame_bars_of_work_done_and_no_stale_wait_at_the_end",
    ),
    Mutant(
        "draw a model's bar as spend against its cap",
        "confirmatory/cli/progress.py",
        "ended {bar(done, n, 10)}",
        "ended {bar(used, m.cap_nusd, 10)}",
        "tests/cli/test_progress.py::"
        "test_the_region_has_the_time_left_in_every_frame_bars_of_work_done_and_no_stale_wait_at_the_end",
    ),
    Mutant(
        "round the time left down to ~0:00:00",
        "confirmatory/cli/progress.py",
        "max(1, math.ceil((total - ended) * elapsed_s / ended))",
        "int((total - ended) * elapsed_s / ended)",
        "tests/cli/test_progress.py::test_time_left_is_the_remaining_households_at_the_pace_so_far",
    ),
    Mutant(
        "suggest the page without the witness verify checked",
        "confirmatory/verify/report.py",
        '            words += ["--witness", self.witness]',
        "            pass",
        "tests/verify/test_report_hint.py::test_the_report_command_verify_suggests_repeats_its_witness_and_households",
    ),
    Mutant(
        "say nothing of the runs verify fails in show's table",
        "confirmatory/report/show.py",
        '        return "FAILS " + ",".join(str(i) for i in sorted(report.failed()))',
        '        return "holds"',
        "tests/report/test_show.py::"
        "test_show_of_a_folder_is_an_aligned_table_that_says_it_did_not_verify_and_with_verify_marks_a_failure",
    ),
    Mutant(
        "count a cut-short household's results in show",
        "confirmatory/report/show.py",
        "        if key[0] in ended:\n",
        "        if True:\n",
        "tests/report/test_show.py::"
        "test_show_leaves_out_a_household_whose_attempt_lines_are_on_disk_but_not_its_household_line",
    ),
    Mutant(
        "take an arm's first class as its result in show",
        "confirmatory/report/show.py",
        '            standing[key] = str(a.get("class"))',
        '            standing.setdefault(key, str(a.get("class")))',
        "tests/report/test_show.py::test_show_on_a_paused_then_resumed_run",
    ),
    Mutant(
        "name a rerun by its own class in show",
        "confirmatory/report/show.py",
        '            why = str(before.get(key, "unknown"))',
        '            why = str(a.get("class"))',
        "tests/report/test_show.py::test_show_on_a_paused_then_resumed_run",
    ),
    Mutant(
        "close a run whose files could not be written",
        "confirmatory/engine/run.py",
        "        if self.disk_failed is not None:\n            return self._finish_as_crash(total)\n",
        "        if False:\n            return self._finish_as_crash(total)\n",
        "tests/cli/test_disk_faults.py::test_a_file_size_limit_stops_the_run_naming_efbig_and_verify_says_so",
    ),
    Mutant(
        "keep a runner error's stop after a continuation",
        "confirmatory/engine/continuation.py",
        'ENDED_BY_CONTINUATION = (CRASH, "runner-error")',
        "ENDED_BY_CONTINUATION = (CRASH,)",
        "tests/engine/test_run_faults.py::"
        "test_a_record_the_disk_refuses_ends_the_run_as_a_crash_and_continue_carries_it_on",
    ),
    Mutant(
        "explain no later round's records of a household under way",
        "confirmatory/verify/attempts.py",
        "if self.ctx.logs.stage == UNDER_WAY and self._round_under_way(h, rel):",
        "if False:",
        "tests/engine/test_continue_again.py::"
        "test_a_continuation_killed_at_this_step_is_continued_to_a_complete_run[a round-1 record on disk]",
    ),
    Mutant(
        "take a half-written continuation as a whole one",
        "confirmatory/verify/continuations.py",
        "        if all(have):\n            continue\n",
        "        if True:\n            continue\n",
        "tests/verify/test_continuation_lines.py::"
        "test_a_continuation_line_missing_from_a_log_before_one_that_has_it_is_a_violation",
    ),
    Mutant(
        "forget the torn tails a killed continuation moved aside",
        "confirmatory/commands/continue_run.py",
        '    torn = kept_before(run_dir, rels, k, {t["log"] for t in tails})\n',
        "    torn = []\n",
        "tests/engine/test_continue_again.py::"
        "test_a_continuation_killed_at_this_step_is_continued_to_a_complete_run[the first torn tail moved aside]",
    ),
    Mutant(
        "forget a household an earlier continuation cut",
        "confirmatory/engine/continuation.py",
        'elif (h, r) in ended and ended[(h, r)].get("cut_by") == CRASH:',
        "elif False:",
        "tests/engine/test_continue_again.py::"
        "test_a_continuation_killed_at_this_step_is_continued_to_a_complete_run[its first anchor, not pushed]",
    ),
    Mutant(
        "look up a runner-error stop only in the model's log",
        "confirmatory/verify/procedure.py",
        'for _, s in (*st.events("stop"), *self.ctx.run_events)',
        'for _, s in st.events("stop")',
        "tests/cli/test_disk_faults.py::"
        "test_a_runner_error_stop_in_run_jsonl_only_explains_the_late_cost_of_the_record_it_lost",
    ),
    Mutant(
        "leave lost costs out of admission's finished spend",
        "confirmatory/engine/continuation.py",
        "        pos.finished_nusd += pos.lost_nusd\n",
        "",
        f"{CONTINUE}::test_the_cost_of_calls_in_flight_at_the_kill_is_counted_by_the_continuation",
    ),
    Mutant(
        "leave lost costs out of the admission replay",
        "confirmatory/verify/timeline.py",
        "            leaves.append((crash_t, lost, 0))\n",
        "            pass\n",
        f"{CONTINUE}::test_the_cost_of_calls_in_flight_at_the_kill_is_counted_by_the_continuation",
    ),
    Mutant(
        "config.json hash not checked",
        "confirmatory/verify/files.py",
        "        elif got != want:\n",
        "        elif False:\n",
        "tests/verify/test_files.py::test_config_json_with_not_pinned_down_erased_is_a_named_violation",
    ),
    Mutant(
        "fail a run closed before its first push had run",
        "confirmatory/verify/logs.py",
        "            if self.stage is not None:\n                # cut short before the first push",
        "            if self.stage == UNDER_WAY:\n                # cut short before the first push",
        "tests/verify/test_states.py::test_a_run_closed_and_cut_short_before_its_first_push_had_run_is_crashed_not_failed",
    ),
    Mutant(
        "ask the final anchor for one stamp whatever the design asks",
        "confirmatory/verify/evidence.py",
        "            if len(stamped) < stamps_required:\n",
        "            if len(stamped) < min(1, stamps_required):\n",
        "tests/anchors/test_evidence_run.py::test_a_tsa_down_for_the_whole_run_fails_it_unless_the_design_needs_fewer_stamps",
    ),
    Mutant(
        "take the manifest's evidence keys without the design's pins",
        "confirmatory/verify/study.py",
        "    check_evidence_pins(f, design, man)\n",
        "    pass\n",
        "tests/anchors/test_evidence_run.py::test_a_manifest_whose_evidence_is_not_the_designs_fails_invariant_11_naming_the_field",
    ),
    Mutant(
        "judge no stamp line",
        "confirmatory/verify/evidence.py",
        '        for s in lines.get("stamp", []):\n            if s.get("ok") is not True:\n',
        '        for s in lines.get("stamp", []):\n            if True:\n',
        "tests/anchors/test_evidence_run.py::test_one_byte_flipped_in_any_file_of_an_evidenced_run_fails_verify",
    ),
    Mutant(
        "stamp imprint not checked",
        "confirmatory/core/timestamps.py",
        "    expected = hashlib.sha256(message).digest()\n",
        "    expected = imprint.message\n",
        "tests/core/test_timestamps.py::test_a_stamp_of_another_message_is_refused_naming_it",
    ),
    Mutant(
        "witness accepts without a proof",
        "confirmatory/anchors/tlogwitness.py",
        "            elif not verify_consistency(old, cp.size, proof, held_root, cp.root):\n",
        "            elif False:\n",
        "tests/anchors/test_tlog_witness.py::test_a_checkpoint_that_does_not_extend_the_last_one_is_422",
    ),
    Mutant(
        "price cached tokens as input",
        "confirmatory/core/billing.py",
        '"input": max(0, _count(usage, prompt) - cached),\n            "cached_input": cached,',
        '"input": _count(usage, prompt),\n            "cached_input": 0,',
        "tests/core/test_billing.py::test_openai_chat_bills_cached_prompt_tokens_and_reasoning_apart",
    ),
    Mutant(
        "drop reasoning tokens",
        "confirmatory/core/billing.py",
        '            "reasoning": reasoning,\n        }\n    if shape == "anthropic":',
        '            "reasoning": 0,\n        }\n    if shape == "anthropic":',
        "tests/core/test_billing.py::test_responses_bills_input_and_output_details",
    ),
    Mutant(
        "drop cache writes",
        "confirmatory/core/billing.py",
        '"cache_write": _count(usage, "cache_creation_input_tokens"),',
        '"cache_write": 0,',
        "tests/core/test_billing.py::test_anthropic_bills_its_three_input_counts_each_once",
    ),
    Mutant(
        "drop Gemini thoughts",
        "confirmatory/core/billing.py",
        '"reasoning": _count(usage, "thoughtsTokenCount"),',
        '"reasoning": 0,',
        "tests/core/test_billing.py::test_gemini_bills_cached_content_and_thoughts",
    ),
    Mutant(
        "the ceiling counts litellm's cost",
        "confirmatory/engine/llm/calls.py",
        "    cost_usd = b.runner_usd\n",
        "    cost_usd = litellm_cost\n",
        "tests/engine/test_cost.py::"
        "test_a_wrong_litellm_price_does_not_move_the_spend_and_each_call_records_the_disagreement",
    ),
    Mutant(
        "count the simulator's cache reads and writes at its input price",
        "confirmatory/core/billing.py",
        "        return PriceTable(**SIM_PRICE_TABLE[served])\n",
        "        pass\n",
        "tests/engine/test_invoice.py::"
        "test_each_shapes_spend_in_its_close_line_equals_the_simulators_invoice_exactly[chat-tools]",
    ),
    Mutant(
        "read a failed call's raw usage by OpenAI's rule on every API",
        "confirmatory/engine/llm/calls.py",
        "    kinds = billing.tokens_by_kind(shape, usage)\n",
        '    kinds = billing.tokens_by_kind("chat", usage)\n',
        "tests/sim/test_shapes.py::"
        "test_a_billed_reply_litellm_cannot_read_is_counted_from_its_own_apis_usage_fields[anthropic]",
    ),
    Mutant(
        "take Anthropic's empty content for the model's answer",
        "confirmatory/engine/llm/chat.py",
        "    if _empty_anthropic_content(model):\n",
        "    if False:\n",
        "tests/sim/test_shapes.py::"
        "test_a_billed_200_with_nothing_in_it_is_a_provider_failure_carrying_its_cost_on_every_shape[anthropic]",
    ),
    Mutant(
        "leave Gemini's retry wait in its body unread",
        "confirmatory/core/errors.py",
        "        found = _RETRY_DELAY.search(str(err))\n",
        "        found = None\n",
        "tests/sim/test_shapes.py::"
        "test_anthropics_retry_after_header_and_geminis_retry_delay_in_the_body_are_both_kept",
    ),
    Mutant(
        "leave the cost disagreements out of verify's figures",
        "confirmatory/verify/verification.py",
        '        f.figures["cost_disagreements"] = cost_disagreements(root, [st.name for st in states])\n',
        "        pass\n",
        "tests/verify/test_cost_disagreements.py::"
        "test_a_wrong_litellm_cached_price_moves_no_spend_and_verify_and_the_report_list_each_call",
    ),
    Mutant(
        "bound a simulated call by its input price alone",
        "confirmatory/engine/check.py",
        "        in_price = max(x for x in (t.input, t.cached_input, t.cache_write) if x is not None)\n"
        '        out_price = max(t.output, t.price("reasoning") or 0.0)\n'
        "        usd = (in_price * max_in + out_price * out_tokens) / 1e6\n"
        "        price = f\"the simulator's",
        "        in_price, out_price = t.input, t.output\n"
        "        usd = (in_price * max_in + out_price * out_tokens) / 1e6\n"
        "        price = f\"the simulator's",
        "tests/cli/test_check_bound.py::"
        "test_a_ceiling_run_on_the_anthropic_and_gemini_shapes_stops_within_the_bound_check_printed[anthropic/sim-claude]",
    ),
    Mutant(
        "round dollars half to even",
        "confirmatory/core/money.py",
        "    if rest >= 500:\n",
        "    if rest > 500 or (rest == 500 and micro % 2 == 1):\n",
        "tests/core/test_money.py::test_dollars_are_shown_to_the_micro_dollar",
    ),
    Mutant(
        "leave a crashed run's journaled calls in flight out of its spend",
        "confirmatory/core/money.py",
        "for key, nusd in journal.items() if key[0] not in settled",
        "for key, nusd in journal.items() if False",
        "tests/core/test_money.py::test_the_spend_of_a_crashed_model_counts_its_journaled_calls_in_flight_once",
    ),
    Mutant(
        "genTime window not checked",
        "confirmatory/verify/evidence.py",
        "    if not _num(t) or not in_window(stamp, after=float(t), before=before):\n",
        "    if not _num(t):\n",
        "tests/anchors/test_evidence_run.py::test_an_anchor_dated_after_its_stamp_fails_verify_naming_the_window",
    ),
    Mutant(
        "cosignature key not checked",
        "confirmatory/verify/evidence.py",
        '        cos: Cosignature = verify_cosignature(key, body, Signature.parse_line(str(c.get("line"))))\n',
        '        cos: Cosignature = Cosignature.from_signature(Signature.parse_line(str(c.get("line"))))\n',
        "tests/anchors/test_evidence_run.py::test_a_forged_cosignature_fails_verify_naming_it",
    ),
)
