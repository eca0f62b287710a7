"""Bad designs the audit found accepted (or crashing): each is refused by `check`
AND by `run`, before a run directory exists, with one line naming the key.

One case per defect, table-driven: a plant (what to change in the bundled
minimal design, copied with a harness module of its own), and the exact line
the refusal must hold. Every case first proves that the same design without
the plant passes `check`.
"""

from __future__ import annotations

import hashlib
import os
import stat
import sys
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from click.testing import CliRunner
from runhelpers import minimal_design

from confirmatory.cli.main import main
from confirmatory.cli.run import run_command
from confirmatory.design.load import load_design, ray_installed

HARNESS_SRC = (
    "SYSTEM = 'a prompt'\n\ndef run(model, household, arm, pool, spend, clock):\n    return {'answer': None}\n"
)


@dataclass
class Study:
    """A copied minimal design in ``dir``: its harness module's name and how to edit it."""

    dir: Path
    design: Path
    module: str

    def edit(self, old: str, new: str, count: int = 1) -> None:
        text = self.design.read_text()
        assert old in text, f"the plant did not apply: {old!r}"
        self.design.write_text(text.replace(old, new, count))

    def add_household_line(self, line: str) -> None:
        households = self.dir / "minimal-households.jsonl"
        old = hashlib.sha256(households.read_bytes()).hexdigest()
        households.write_text(households.read_text() + line + "\n")
        self.edit(old, hashlib.sha256(households.read_bytes()).hexdigest())

    def harness(self, src: str) -> None:
        """A harness module with this source in place of the old one, pinned (the pin is not the point).

        Under a new name: the clean check imported the old one, and an imported module is cached.
        """
        old_path = self.dir / f"{self.module}.py"
        old_pin = hashlib.sha256(old_path.read_bytes()).hexdigest()
        module = f"refusal_harness_{uuid.uuid4().hex[:8]}"
        path = self.dir / f"{module}.py"
        path.write_text(src)
        self.edit(f'"{self.module}:run"', f'"{module}:run"')
        self.edit(
            f'"{self.module}.py" = "{old_pin}"', f'"{module}.py" = "{hashlib.sha256(path.read_bytes()).hexdigest()}"'
        )
        old_path.unlink()
        self.module = module

    def package(self, init_src: str, module_src: str) -> str:
        """A package beside the design (a unique name) holding one module ``m``."""
        pkg = f"pkg_{uuid.uuid4().hex[:8]}"
        (self.dir / pkg).mkdir()
        (self.dir / pkg / "__init__.py").write_text(init_src)
        (self.dir / pkg / "m.py").write_text(module_src)
        return pkg


def make_study(tmp_path: Path) -> Study:
    # A unique module name: an imported module is cached under its name.
    module = f"refusal_harness_{uuid.uuid4().hex[:8]}"
    tmp_path.mkdir(parents=True, exist_ok=True)
    design = minimal_design(tmp_path, module, HARNESS_SRC)
    return Study(tmp_path, design, module)


def syntax_error(s: Study) -> str:
    s.harness("def run(model)\n    return 1\n")
    return f"harness.entry: importing \"{s.module}\" raised SyntaxError: expected ':' ({s.module}.py, line 1)"


def raises_on_import(s: Study) -> str:
    s.harness("raise RuntimeError('needs STUDY_DATA in the environment')\n")
    return f'harness.entry: importing "{s.module}" raised RuntimeError: needs STUDY_DATA in the environment'


def missing_attribute(s: Study) -> str:
    s.edit(f"{s.module}:run", f"{s.module}:runn")
    return f'harness.entry: module "{s.module}" has no attribute "runn"'


def not_callable(s: Study) -> str:
    s.edit(f"{s.module}:run", f"{s.module}:SYSTEM")
    return f'harness.entry: "SYSTEM" in module "{s.module}" is not callable (it is a str)'


def harness_in_a_package_whose_init_has_a_syntax_error(s: Study) -> str:
    pkg = s.package("def (\n", HARNESS_SRC)
    s.edit(f'entry = "{s.module}:run"', f'entry = "{pkg}.m:run"')
    pin = hashlib.sha256((s.dir / pkg / "m.py").read_bytes()).hexdigest()
    s.edit("[harness.pins]\n", f'[harness.pins]\n"{pkg}/m.py" = "{pin}"\n')
    return f'harness.entry: importing "{pkg}.m" raised SyntaxError: invalid syntax (__init__.py, line 1)'


def engine_in_a_package_whose_init_raises(s: Study) -> str:
    pkg = s.package("raise RuntimeError('the package cannot be imported')\n", "def start(workers):\n    return None\n")
    s.edit('factory = "confirmatory.demo.engine:start"', f'factory = "{pkg}.m:start"')
    return f'engine.factory: importing "{pkg}.m" raised RuntimeError: the package cannot be imported'


def engine_missing_attribute(s: Study) -> str:
    s.edit('factory = "confirmatory.demo.engine:start"', 'factory = "confirmatory.demo.engine:begin"')
    return 'engine.factory: module "confirmatory.demo.engine" has no attribute "begin"'


def harness_shadowed_by_the_standard_library(s: Study) -> str:
    (s.dir / "json.py").write_text(HARNESS_SRC)
    pin = hashlib.sha256((s.dir / "json.py").read_bytes()).hexdigest()
    s.edit(f'entry = "{s.module}:run"', 'entry = "json:run"')
    s.edit("[harness.pins]\n", f'[harness.pins]\n"json.py" = "{pin}"\n')
    import json

    return (
        f'harness.entry: "json" is already imported from {json.__file__}, so {s.dir.resolve() / "json.py"}'
        " in the design's directory would not run; give the module a name of its own"
    )


def evidence_command_not_installed(s: Study) -> str:
    s.edit("[anchors]", '[[host.evidence]]\nname = "power"\ncommand = ["no-such-tool-3f9a", "-g", "log"]\n\n[anchors]')
    return 'host.evidence[0].command: executable "no-such-tool-3f9a" not found on PATH'


def evidence_command_relative_path_missing(s: Study) -> str:
    s.edit("[anchors]", '[[host.evidence]]\nname = "guard"\ncommand = ["bin/probe.sh"]\n\n[anchors]')
    return (
        f'host.evidence[0].command: executable "bin/probe.sh" not found ({s.dir.resolve()}/bin/probe.sh is not a file)'
    )


def evidence_path_that_is_a_directory(s: Study) -> str:
    # Before: check passed, and the run started, admitted and paid for its
    # first households, then stopped (runner-error: "evidence source 'guard'
    # failed 5 reads: IsADirectoryError") at the sampler's first step.
    (s.dir / "logs").mkdir()
    s.edit("[anchors]", '[[host.evidence]]\nname = "guard"\npath = "logs"\n\n[anchors]')
    return (
        f"host.evidence[0]: 'guard' (path {s.dir}/logs) cannot be read: failed 5 reads: "
        "IsADirectoryError: [Errno 21] Is a directory; the run would stop with runner-error at its first host sample"
    )


def evidence_command_that_fails_here(s: Study) -> str:
    # A program that exists but fails on this machine (pmset on Linux,
    # journalctl without the permission): the same stop, before.
    s.edit("[anchors]", '[[host.evidence]]\nname = "power"\ncommand = ["cat", "no-such-log"]\n\n[anchors]')
    return (
        "host.evidence[0]: 'power' (command ['cat', 'no-such-log']) cannot be read: failed 5 reads: "
        "ReadFailed: command 'cat' exited 1: cat: no-such-log: No such file or directory;"
        " the run would stop with runner-error at its first host sample"
    )


def anchor_command_not_installed(s: Study) -> str:
    s.edit('command = ["{python}", "-m", "confirmatory.anchors.witness"', 'command = ["no-such-anchor-tool-3f9a"')
    return 'anchors.command: executable "no-such-anchor-tool-3f9a" not found on PATH'


def anchor_placeholder_typo(s: Study) -> str:
    s.edit('"{run_dir}/../.witness/clone"', '"{rundir}/../.witness/clone"')
    return 'anchors.command[4]: unknown placeholder "{rundir}" (the runner substitutes {python}, {run_dir})'


def with_fault(s: Study, lines: str) -> None:
    s.edit("[simulator]\nseed = 0", "[simulator]\nseed = 0\n[[simulator.faults]]\n" + lines)


CASES: dict[str, tuple[Callable[[Study], str | None], str]] = {
    # 1. the spend before the stage leaves no room under the ceiling
    "spend before the stage at the ceiling": (
        lambda s: s.edit("spend_before_stage_usd = 0.0", "spend_before_stage_usd = 3.5"),
        "study.spend_before_stage_usd: $3.500000 already spent is at or above the ceiling $3.500000"
        " (overall_cap_usd $3.000000 + margin_usd $0.500000); the stage's first cost would cross it,"
        " so no household could run",
    ),
    "spend before the stage above the ceiling": (
        lambda s: s.edit("spend_before_stage_usd = 0.0", "spend_before_stage_usd = 100"),
        "study.spend_before_stage_usd: $100.000000 already spent is at or above the ceiling $3.500000",
    ),
    "a ceiling of zero": (
        lambda s: (
            s.edit("overall_cap_usd = 3.0", "overall_cap_usd = 0"),
            s.edit("margin_usd = 0.5", "margin_usd = 0"),
        ),
        "ceiling.overall_cap_usd: the ceiling $0.000000 (overall_cap_usd $0.000000 + margin_usd $0.000000) leaves"
        " no room: the stage's first cost would cross it, so no household could run",
    ),
    # 2. households that Python's json reads but JSON does not allow
    "NaN in a household": (
        lambda s: s.add_household_line('{"id": "m-07", "housing_cost": NaN}'),
        'households.path: "minimal-households.jsonl" line 7: not JSON (NaN is not a JSON number)',
    ),
    "-Infinity in a household": (
        lambda s: s.add_household_line('{"id": "m-07", "housing_cost": -Infinity}'),
        'households.path: "minimal-households.jsonl" line 7: not JSON (-Infinity is not a JSON number)',
    ),
    "a number too large for a float in a household": (
        lambda s: s.add_household_line('{"id": "m-07", "housing_cost": 1e999}'),
        'households.path: "minimal-households.jsonl" line 7: not JSON (1e999 is too large for a finite number)',
    ),
    # 3. free-form tables must be recordable as JSON; nan says "finite"
    "nan temperature": (
        lambda s: s.edit("temperature = 0.0", "temperature = nan"),
        "models[0].params.temperature: must be a finite number (got nan)",
    ),
    "a date in params": (
        lambda s: s.edit("max_tokens = 512, seed = 7 }", "max_tokens = 512, seed = 7, frozen = 2026-01-01 }"),
        "models[0].params.frozen: dates cannot be recorded as JSON (got the TOML date 2026-01-01);"
        " write it as a string",
    ),
    "a datetime in features": (
        lambda s: s.edit("features = { tools = [] }", "features = { tools = [], frozen = 2026-01-01T00:00:00Z }"),
        "arms[0].features.frozen: dates cannot be recorded as JSON (got the TOML datetime"
        " 2026-01-01T00:00:00+00:00); write it as a string",
    ),
    "inf nested in features": (
        lambda s: s.edit("features = { tools = [] }", 'features = { tools = [], "w x" = [1.0, inf] }'),
        'arms[0].features["w x"][1]: must be a finite number (got inf)',
    ),
    "nan cap": (
        lambda s: s.edit("cap_usd = 0.5", "cap_usd = nan"),
        "models[0].cap_usd: must be a finite number (got nan)",
    ),
    "nan fault rate": (
        lambda s: with_fault(s, 'kind = "auth"\nrate = nan'),
        "simulator.faults[0].rate: must be a finite number (got nan)",
    ),
    # 4. the harness and the engine must import and name a callable
    "harness with a SyntaxError": (syntax_error, ""),
    "harness raising on import": (raises_on_import, ""),
    "harness entry naming no attribute": (missing_attribute, ""),
    "harness entry naming a string": (not_callable, ""),
    "harness in a package whose __init__ has a SyntaxError": (harness_in_a_package_whose_init_has_a_syntax_error, ""),
    "engine in a package whose __init__ raises": (engine_in_a_package_whose_init_raises, ""),
    "engine factory naming no attribute": (engine_missing_attribute, ""),
    "harness module shadowed by the standard library": (harness_shadowed_by_the_standard_library, ""),
    # 4b. the engine's backend (docs/ENGINE.md)
    "engine with a factory and a target": (
        lambda s: s.edit(
            'factory = "confirmatory.demo.engine:start"',
            'factory = "confirmatory.demo.engine:start"\ntarget = "confirmatory.demo.engine:serve"',
        ),
        "engine.target: give factory or target, not both",
    ),
    "engine with neither a factory nor a target": (
        lambda s: s.edit('factory = "confirmatory.demo.engine:start"\n', ""),
        "engine.factory: missing (or give engine.target",
    ),
    "engine target naming no attribute": (
        lambda s: s.edit('factory = "confirmatory.demo.engine:start"', 'target = "confirmatory.demo.engine:serv"'),
        'engine.target: module "confirmatory.demo.engine" has no attribute "serv"',
    ),
    "engine backend unknown": (
        lambda s: s.edit("workers_per_model = 2", 'workers_per_model = 2\nbackend = "dask"'),
        "engine.backend: must be one of 'processes' or 'ray' (got 'dask')",
    ),
    "ray backend with a factory": (
        lambda s: s.edit("workers_per_model = 2", 'workers_per_model = 2\nbackend = "ray"\naddress = "auto"'),
        'engine.factory: backend "ray" runs engine.target in Ray actors',
    ),
    "ray backend without an address": (
        lambda s: s.edit(
            'factory = "confirmatory.demo.engine:start"', 'target = "confirmatory.demo.engine:serve"\nbackend = "ray"'
        ),
        'engine.address: missing: backend "ray" needs a cluster address',
    ),
    "ray address holding a password": (
        lambda s: s.edit(
            'factory = "confirmatory.demo.engine:start"',
            'target = "confirmatory.demo.engine:serve"\nbackend = "ray"\n'
            'address = "ray://ops:hunter2@head.example:10001"',
        ),
        "engine.address: holds a user or password before '@'",
    ),
    "num_cpus for the process backend": (
        lambda s: s.edit("workers_per_model = 2", "workers_per_model = 2\nnum_cpus = 0.5"),
        'engine.num_cpus: only for backend = "ray" (the backend is "processes")',
    ),
    "negative num_cpus": (
        lambda s: s.edit(
            'factory = "confirmatory.demo.engine:start"',
            'target = "confirmatory.demo.engine:serve"\nbackend = "ray"\naddress = "auto"\nnum_cpus = -1',
        ),
        "engine.num_cpus: must be >= 0.0 (got -1)",
    ),
    # 5. commands that cannot start
    "evidence command not installed": (evidence_command_not_installed, ""),
    "evidence command at a relative path that is missing": (evidence_command_relative_path_missing, ""),
    "anchor command not installed": (anchor_command_not_installed, ""),
    "anchor command with an unknown placeholder": (anchor_placeholder_typo, ""),
    # 6. a simulated model the simulator does not serve
    "simulator model it does not serve": (
        lambda s: s.edit('litellm_model = "openai/sim-careful"', 'litellm_model = "openai/gpt-4o"'),
        'models[0].litellm_model: the simulator serves no model "gpt-4o"'
        ' (api_base = "simulator" serves sim-careful, sim-sloppy, sim-truncates, sim-reasoner, sim-claude, sim-gemini)',
    ),
    "simulator model with no name": (
        lambda s: s.edit('litellm_model = "openai/sim-careful"', 'litellm_model = "openai/"'),
        'models[0].litellm_model: the simulator serves no model ""',
    ),
    # 7. the rest
    "household without an id": (
        lambda s: s.add_household_line('{"name": "no id"}'),
        'households.path: "minimal-households.jsonl" line 7: "id" is missing',
    ),
    "fault spelling pass as pass_": (
        lambda s: with_fault(s, 'kind = "auth"\npass_ = 0'),
        "simulator.faults[0].pass_: unknown key",
    ),
    "model names differing only in case": (
        lambda s: s.edit('name = "sloppy"', 'name = "Careful"'),
        'models[1].name: "Careful" differs from models[0].name "careful" only in case;'
        " as paths they collide on a case-insensitive filesystem",
    ),
    "arm names differing only in case": (
        lambda s: s.edit('name = "calculator"\n', 'name = "ALONE"\n'),
        'arms[1].name: "ALONE" differs from arms[0].name "alone" only in case;'
        " as paths they collide on a case-insensitive filesystem",
    ),
    "household ids differing only in case": (
        lambda s: s.add_household_line('{"id": "M-01"}'),
        'households.path: "minimal-households.jsonl" line 7: household id "M-01" differs from "m-01" (line 1)'
        " only in case; as paths they collide on a case-insensitive filesystem",
    ),
    # Before: check passed, run raised OSError "File name too long" (a model)
    # or stopped every model at that household's first attempt (a household).
    "a model name longer than a path component takes": (
        lambda s: s.edit('name = "sloppy"', f'name = "{"s" * 300}"'),
        "models[1].name: must be at most 128 characters, as it becomes a path component of the run records (got 300: ",
    ),
    "a household id longer than a path component takes": (
        lambda s: s.add_household_line(f'{{"id": "{"h" * 303}"}}'),
        'households.path: "minimal-households.jsonl" line 7: "id" must be at most 128 characters',
    ),
    # Before: json kept the last of two equal keys, so the harness saw a
    # household other than the line a reviewer reads.
    "a household line with a key given twice": (
        lambda s: s.add_household_line('{"id": "m-07", "income": 1, "income": 2}'),
        'households.path: "minimal-households.jsonl" line 7: not JSON (the key "income" appears twice in one object)',
    ),
    "a household id given twice in one line": (
        lambda s: s.add_household_line('{"id": "m-07", "x": {"id": 1}, "id": "m-08"}'),
        'households.path: "minimal-households.jsonl" line 7: not JSON (the key "id" appears twice in one object)',
    ),
    "a key given twice in a nested object of a household": (
        lambda s: s.add_household_line('{"id": "m-07", "x": {"a": 1, "a": 1}}'),
        'households.path: "minimal-households.jsonl" line 7: not JSON (the key "a" appears twice in one object)',
    ),
    # Before: check passed, and every call failed locally ("timestamp out of
    # range for platform time_t"), classed provider; a wait given such a
    # timeout raises OverflowError.
    "a call timeout beyond the operating system's timers": (
        lambda s: s.edit("timeout_s = 10.0", "timeout_s = 1e12"),
        "models[0].timeout_s: must be at most 2592000 s (30 days), the longest duration a design may give"
        " (got 1000000000000.0)",
    ),
    "an attempt deadline of a year": (
        lambda s: s.edit("attempt_deadline_s = 60", "attempt_deadline_s = 31536000"),
        "rules.attempt_deadline_s: must be at most 2592000 s (30 days)",
    ),
    "a negative wait before a rerun pass": (
        lambda s: s.edit("rerun_wait_s = 0.25", "rerun_wait_s = -1"),
        "rules.rerun_wait_s: must be >= 0.0 (got -1)",
    ),
    "a host sample interval in milliseconds by mistake past 30 days": (
        lambda s: s.edit("sample_interval_s = 1", "sample_interval_s = 3000000"),
        "host.sample_interval_s: must be at most 2592000 s (30 days)",
    ),
    # Before: check started engine workers without end (248 after 20 s) for a
    # slip like 100000; lanes 100000 passed check (100,000 threads a model).
    "engine workers past the bound": (
        lambda s: s.edit("workers_per_model = 2", "workers_per_model = 100000"),
        "engine.workers_per_model: must be <= 256 (got 100000)",
    ),
    "lanes past the bound": (
        lambda s: s.edit("lanes = 2", "lanes = 100000"),
        "models[0].lanes: must be <= 256 (got 100000)",
    ),
    # Before: accepted; the anchorer then wrote anchors as fast as it could
    # fsync (213 in a 2-second run), about 14 GB a day.
    "an anchor interval of a nanosecond": (
        lambda s: s.edit("interval_s = 5", "interval_s = 0.000000001"),
        "anchors.interval_s: must be >= 0.05 (got 1e-09)",
    ),
    "a host sample interval of a nanosecond": (
        lambda s: s.edit("sample_interval_s = 1", "sample_interval_s = 1e-9"),
        "host.sample_interval_s: must be >= 0.01 (got 1e-09)",
    ),
    # Before: a traceback (RecursionError), exit 1.
    "a household nested deeper than the JSON reader allows": (
        lambda s: s.add_household_line('{"id": "m-07", "x": ' + "[" * 1500 + "]" * 1500 + "}"),
        'households.path: "minimal-households.jsonl" line 7: nested deeper than Python\'s JSON reader allows'
        " (about 1,000 levels)",
    ),
    "an anchor interval past 30 days": (
        lambda s: s.edit("interval_s = 5", "interval_s = 1e10"),
        "anchors.interval_s: must be at most 2592000 s (30 days)",
    ),
}


def check(design: Path):
    return CliRunner().invoke(main, ["check", str(design)])


@pytest.mark.parametrize("name", sorted(CASES))
def test_check_and_run_refuse_a_bad_design_naming_the_key_before_a_run_directory_exists(tmp_path, capsys, name):
    plant, expected = CASES[name]
    study = make_study(tmp_path / "study")
    assert check(study.design).exit_code == 0  # the same design without the plant passes
    returned = plant(study)
    expected = expected or returned
    prefix = f"{study.design}: "

    result = check(study.design)
    assert result.exit_code == 3, result.output
    assert "Traceback" not in result.output
    lines = result.output.splitlines()
    assert any(line.startswith(prefix + expected) for line in lines), result.output
    assert lines[-1].startswith(f"{prefix}refused (")

    runs = tmp_path / "runs"
    capsys.readouterr()
    assert run_command(study.design, runs / "r1", quiet=True) == 3
    err = capsys.readouterr().err
    assert any(line.startswith(f"  {prefix}{expected}") for line in err.splitlines()), err
    assert not runs.exists(), "a refused run leaves nothing behind"


@pytest.mark.slow
@pytest.mark.parametrize("plant", [evidence_path_that_is_a_directory, evidence_command_that_fails_here])
def test_check_and_run_refuse_an_evidence_source_that_cannot_be_read_before_a_run_directory_exists(
    tmp_path, capsys, plant
):
    study = make_study(tmp_path / "study")
    assert check(study.design).exit_code == 0
    expected = plant(study)

    result = check(study.design)
    assert result.exit_code == 3, result.output
    assert f"{study.design}: {expected}" in result.output.splitlines(), result.output

    runs = tmp_path / "runs"
    capsys.readouterr()
    assert run_command(study.design, runs / "r1", quiet=True) == 3
    err = capsys.readouterr().err
    assert f"  {expected}" in err.splitlines(), err
    assert not runs.exists(), "a refused run leaves nothing behind"


def test_check_notes_an_evidence_file_that_does_not_exist_yet_and_passes(tmp_path):
    study = make_study(tmp_path / "study")
    study.edit("[anchors]", '[[host.evidence]]\nname = "guard"\npath = "guard.log"\n\n[anchors]')
    result = check(study.design)
    assert result.exit_code == 0, result.output
    assert (
        f"note: host.evidence[0]: 'guard': {study.dir}/guard.log does not exist (yet); "
        "the run reads it from its start if it appears"
    ) in result.output.splitlines(), result.output
    (study.dir / "guard.log").write_text("an old line\n")
    result = check(study.design)
    assert result.exit_code == 0 and "guard.log does not exist" not in result.output, result.output


def test_the_root_cause_comes_before_its_follow_on(tmp_path):
    study = make_study(tmp_path)
    study.edit('name = "careful"\n', "")  # models[1] is matched_with "careful"
    lines = check(study.design).output.splitlines()
    assert lines[0] == f"{study.design}: models[0].name: missing"
    assert lines[1] == f'{study.design}: models[1].matched_with: no model is named "careful"'


def test_a_misspelt_models_table_does_not_also_blame_the_simulator_faults(tmp_path):
    study = make_study(tmp_path)
    with_fault(study, 'kind = "auth"\nmodel = "sim-sloppy"')
    assert check(study.design).exit_code == 0  # the fault names a served model
    study.edit("[[models]]", "[[model]]", count=3)
    lines = check(study.design).output.splitlines()
    assert f"{study.design}: models: missing" in lines, lines
    assert not any("simulator.faults" in line for line in lines), lines


def test_a_bad_item_of_an_array_is_not_also_reported_as_an_empty_array(tmp_path):
    # pydantic reports an array whose items all failed as too short as well.
    from confirmatory.design.model import DesignError

    study = make_study(tmp_path)
    study.edit("cap_usd = 0.5", "cap_usd = -1.0")
    study.edit('name = "sloppy"', 'name = "bad slug"')
    with pytest.raises(DesignError) as info:
        load_design(study.design)
    assert info.value.problems == [
        "models[0].cap_usd: must be >= 0.0 (got -1.0)",
        "models[1].name: must be a slug of [A-Za-z0-9._-] (got 'bad slug')",
    ]


def test_an_empty_array_is_still_reported_as_empty(tmp_path):
    study = make_study(tmp_path)
    text = study.design.read_text()
    start = text.index("[[arms]]")
    end = text.index("[[models]]")
    study.design.write_text("arms = []\n" + text[:start] + text[end:])  # a top-level key goes first in TOML
    output = check(study.design).output
    assert f"{study.design}: arms: must not be empty" in output, output


def test_the_problems_of_different_kinds_are_all_listed_in_one_pass(tmp_path):
    study = make_study(tmp_path)
    study.edit(f"{study.module}:run", f"{study.module}:runn")
    study.edit('factory = "confirmatory.demo.engine:start"', 'factory = "confirmatory.demo.engine:begin"')
    study.edit("temperature = 0.0", "temperature = nan")
    study.edit('"{run_dir}/../.witness/clone"', '"{rundir}/../.witness/clone"')
    study.edit("spend_before_stage_usd = 0.0", "spend_before_stage_usd = 9.0")
    result = check(study.design)
    assert result.exit_code == 3
    for key in (
        "harness.entry:",
        "engine.factory:",
        "models[0].params.temperature:",
        "anchors.command[4]:",
        "study.spend_before_stage_usd:",
    ):
        assert f"{study.design}: {key}" in result.output
    assert result.output.splitlines()[-1] == f"{study.design}: refused (5 problems)"


def test_spend_just_below_the_ceiling_is_accepted(tmp_path):
    study = make_study(tmp_path)
    study.edit("spend_before_stage_usd = 0.0", "spend_before_stage_usd = 3.499999999")
    assert check(study.design).exit_code == 0


def test_commands_that_can_start_are_accepted(tmp_path):
    study = make_study(tmp_path)
    script = study.dir / "bin" / "push.sh"
    script.parent.mkdir()
    script.write_text("#!/bin/sh\nexit 0\n")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    # A relative program is the design directory's; "${HOME}" is the shell's, not a placeholder.
    study.edit(
        'command = ["{python}", "-m", "confirmatory.anchors.witness", "--clone", "{run_dir}/../.witness/clone"]',
        'command = ["bin/push.sh", "{run_dir}", "${HOME}"]',
    )
    study.edit(
        "[anchors]",
        '[[host.evidence]]\nname = "guard"\ncommand = ["bin/push.sh"]\n\n'
        '[[host.evidence]]\nname = "power"\ncommand = ["sh", "-c", "true"]\n\n[anchors]',
    )
    result = check(study.design)
    assert result.exit_code == 0, result.output


def test_a_relative_program_that_is_not_executable_is_refused(tmp_path):
    study = make_study(tmp_path)
    (study.dir / "push.sh").write_text("#!/bin/sh\n")
    study.edit('command = ["{python}", "-m", "confirmatory.anchors.witness"', 'command = ["./push.sh"')
    result = check(study.design)
    assert (
        f'{study.design}: anchors.command: "./push.sh" is not executable ({study.dir.resolve()}/push.sh)'
        in result.output
    )


def test_the_anchor_placeholders_the_loader_knows_are_the_ones_the_runner_substitutes(tmp_path):
    from confirmatory.design.load import ANCHOR_PLACEHOLDERS
    from confirmatory.records.rundir import expand_command

    expanded = expand_command(["{" + p + "}" for p in ANCHOR_PLACEHOLDERS] + ["{other}"], tmp_path)
    assert expanded[:-1] == [sys.executable, str(tmp_path.resolve())]
    assert expanded[-1] == "{other}"  # anything else is left as written: hence the loader's refusal


def test_relative_evidence_is_taken_from_the_design_directory_not_the_working_directory(tmp_path, monkeypatch):
    from confirmatory.host.sources import CommandSource, FileSource, sources_from_spec

    study = make_study(tmp_path / "study")
    study.edit(
        "[anchors]",
        '[[host.evidence]]\nname = "guard"\npath = "logs/guard.log"\n\n'
        '[[host.evidence]]\nname = "power"\ncommand = ["sh", "-c", "cat power.log"]\n\n[anchors]',
    )
    (study.dir / "logs").mkdir()
    guard = study.dir / "logs" / "guard.log"
    guard.write_text("before the run\n")
    (study.dir / "power.log").write_text("slept\n")
    loaded = load_design(study.design)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)

    file_source, command_source = sources_from_spec(loaded.design.host.evidence)
    assert isinstance(file_source, FileSource) and file_source.path == study.dir.resolve() / "logs" / "guard.log"
    assert file_source.read_new().lines == ()  # the baseline
    with guard.open("a") as fh:
        fh.write("oom-kill\n")
    assert file_source.read_new().lines == ("oom-kill",)
    file_source.close()

    assert isinstance(command_source, CommandSource)
    assert command_source.read_new().lines == ()  # ran in the design's directory: cat found power.log
    with (study.dir / "power.log").open("a") as fh:
        fh.write("woke\n")
    assert command_source.read_new().lines == ("woke",)
    assert os.getcwd() == str(elsewhere)


def test_a_run_directory_under_a_file_is_refused_before_anything_is_written(tmp_path, capsys):
    from confirmatory.cli.run import run_command

    blocker = tmp_path / "afile"
    blocker.write_text("not a directory")
    design = Path(__file__).resolve().parents[2] / "confirmatory" / "demo" / "minimal.toml"
    assert run_command(design, blocker / "sub" / "run", quiet=True) == 3
    assert f"{blocker} is a file, not a directory" in capsys.readouterr().err
    assert blocker.read_text() == "not a directory"


@pytest.mark.slow
def test_check_with_out_also_checks_the_witness_clone_and_the_run_directory(tmp_path):
    from confirmatory.anchors.witness import init_local_witness

    study = make_study(tmp_path / "study")
    run_dir = tmp_path / "runs" / "r1"  # the design's clone: {run_dir}/../.witness/clone
    plain = check(study.design)
    assert plain.exit_code == 0 and "witness: not checked (check --out RUN_DIR" in plain.output
    missing = CliRunner().invoke(main, ["check", str(study.design), "--out", str(run_dir)])
    assert missing.exit_code == 3
    assert any(
        line.startswith(f"{study.design}: anchors.command: ") and "every push would fail" in line
        for line in missing.output.splitlines()
    ), missing.output
    init_local_witness(tmp_path / "runs" / ".witness")
    ready = CliRunner().invoke(main, ["check", str(study.design), "--out", str(run_dir)])
    assert ready.exit_code == 0, ready.output
    assert "witness: not checked" not in ready.output
    run_dir.mkdir()
    exists = CliRunner().invoke(main, ["check", str(study.design), "--out", str(run_dir)])
    assert exists.exit_code == 3 and "the run directory already exists" in exists.output


@pytest.mark.parametrize(
    "factory, expected",
    [
        (
            "confirmatory.testing.fakes:unusable_engine",
            "engine.factory: the engine factory confirmatory.testing.fakes:"
            "unusable_engine returned function, which has no call, alive, close",
        ),
        (
            "confirmatory.testing.fakes:broken_engine",
            "engine.factory: starting a pool raised PoolFailure: engine worker 0 did not start",
        ),
    ],
)
def test_an_engine_factory_that_cannot_start_a_pool_is_refused_before_the_run(tmp_path, capsys, factory, expected):
    study = make_study(tmp_path / "study")
    study.edit('factory = "confirmatory.demo.engine:start"', f'factory = "{factory}"')
    result = check(study.design)
    assert result.exit_code == 3 and f"{study.design}: {expected}" in result.output, result.output
    runs = tmp_path / "runs"
    assert run_command(study.design, runs / "r1", quiet=True) == 3
    assert expected in capsys.readouterr().err
    assert not runs.exists()


@pytest.mark.parametrize(
    "describe, expected",
    [
        (
            "DESCRIBE = {'prompts': ['Be exact.']}",
            "harness DESCRIBE['prompts']: must be a dict of name -> text or JSON value (got list)",
        ),
        ("DESCRIBE = {'prompt': {'system': 'Be exact.'}}", "harness DESCRIBE: unknown key 'prompt'"),
        ("DESCRIBE = {'documents': {'rules': {1, 2}}}", "harness DESCRIBE['documents']['rules']: not JSON"),
    ],
)
def test_a_malformed_harness_describe_is_refused_by_check_and_run(tmp_path, capsys, describe, expected):
    study = make_study(tmp_path / "study")
    study.harness(describe + "\n\n" + HARNESS_SRC)
    result = check(study.design)
    assert result.exit_code == 3 and f"{study.design}: {expected}" in result.output, result.output
    runs = tmp_path / "runs"
    assert run_command(study.design, runs / "r1", quiet=True) == 3
    assert expected in capsys.readouterr().err and not runs.exists()


@pytest.mark.slow
def test_a_module_beside_the_design_that_the_harness_imports_unpinned_is_named(tmp_path):
    from confirmatory.engine.config import build_config

    study = make_study(tmp_path / "study")
    sibling = f"prompts_{uuid.uuid4().hex[:8]}"
    (study.dir / f"{sibling}.py").write_text("SYSTEM = 'Always answer 0.'\n")
    study.harness(f"import {sibling}\n\n" + HARNESS_SRC)
    result = check(study.design)
    assert result.exit_code == 0, result.output
    assert (
        f"note: not pinned, though the harness or engine imports them from beside the design: {sibling}.py"
        in result.output
    )
    cfg = build_config(load_design(study.design), argv=[], registry_path=tmp_path / "none.json")
    assert any(f"not pinned, so nothing holds them fixed: {sibling}.py" in s for s in cfg["not_pinned_down"])
    # once pinned, not named
    pin = hashlib.sha256((study.dir / f"{sibling}.py").read_bytes()).hexdigest()
    study.edit("[harness.pins]\n", f'[harness.pins]\n"{sibling}.py" = "{pin}"\n')
    assert "note: not pinned" not in check(study.design).output


def test_unpinned_files_are_found_through_lazy_imports_and_the_engine_workers_module(tmp_path):
    study = make_study(tmp_path / "study")
    lazy, factory, worker, unrelated = (
        f"{kind}_{uuid.uuid4().hex[:8]}" for kind in ("lazy", "factory", "worker", "unrelated")
    )
    (study.dir / f"{lazy}.py").write_text("PROMPT = 'x'\n")
    (study.dir / f"{unrelated}.py").write_text("print('a script nobody imports')\n")
    # the workers run a module the factory names only in a string
    (study.dir / f"{worker}.py").write_text("def serve(op, payload, features):\n    return 1\n")
    (study.dir / f"{factory}.py").write_text(
        "from confirmatory.engine.pool import ProcessEnginePool\n\n"
        f"def start(workers):\n    return ProcessEnginePool('{worker}:serve', workers)\n"
    )
    # the harness imports its helper only when it runs
    study.harness(
        HARNESS_SRC.replace("    return {'answer': None}", f"    import {lazy}\n    return {{'answer': None}}")
    )
    study.edit('factory = "confirmatory.demo.engine:start"', f'factory = "{factory}:start"')
    output = check(study.design).output
    (note,) = [line for line in output.splitlines() if line.startswith("note: not pinned")]
    for name in (lazy, factory, worker):
        assert f"{name}.py" in note, (name, note)
    assert unrelated not in note, note


SECRET = "sk-test-SECRET123"


def _comment_with_a_token(s: Study, monkeypatch) -> int:
    s.edit("[study]\n", f'[study]\n# old: api_key = "{SECRET}"\n')
    return s.design.read_text().splitlines().index(f'# old: api_key = "{SECRET}"') + 1


def _comment_with_an_environment_secret(s: Study, monkeypatch) -> int:
    # No token shape: only the environment's value can find it.
    monkeypatch.setenv("STUDY_SERVICE_TOKEN", "a1b2c3d4e5f6a7b8c9d0")
    s.edit("[study]\n", "[study]\n# the service wants a1b2c3d4e5f6a7b8c9d0 in its header\n")
    return s.design.read_text().splitlines().index("# the service wants a1b2c3d4e5f6a7b8c9d0 in its header") + 1


def _table_key_with_a_token(s: Study, monkeypatch) -> int:
    s.edit("features = { tools = [] }", f'features = {{ tools = [], "{SECRET}" = true }}')
    return s.design.read_text().splitlines().index(f'features = {{ tools = [], "{SECRET}" = true }}') + 1


RAW_CASES = {
    "a comment holding an sk- token": (_comment_with_a_token, SECRET, "holds an API key (sk-…)"),
    "a comment holding an environment secret's value": (
        _comment_with_an_environment_secret,
        "a1b2c3d4e5f6a7b8c9d0",
        "holds the value of the environment variable STUDY_SERVICE_TOKEN",
    ),
    "a table key holding an sk- token": (_table_key_with_a_token, SECRET, "holds an API key (sk-…)"),
}


@pytest.mark.parametrize("name", sorted(RAW_CASES))
def test_a_credential_in_a_comment_or_a_key_name_is_refused_by_line_without_echoing_it(
    tmp_path, capsys, monkeypatch, name
):
    """design.toml is published byte for byte, comments and key names with it:
    the parsed values are not all of it."""
    plant, secret, what = RAW_CASES[name]
    study = make_study(tmp_path / "study")
    assert check(study.design).exit_code == 0
    number = plant(study, monkeypatch)
    expected = f"{study.design}: line {number}: {what}; remove it: the design file is copied byte for byte"

    result = check(study.design)
    assert result.exit_code == 3, result.output
    assert any(line.startswith(expected) for line in result.output.splitlines()), result.output
    assert secret not in result.output

    runs = tmp_path / "runs"
    capsys.readouterr()
    assert run_command(study.design, runs / "r1", quiet=True) == 3
    err = capsys.readouterr().err
    assert any(line.startswith(f"  {expected}") for line in err.splitlines()), err
    assert secret not in err
    assert not runs.exists(), "a refused run leaves nothing behind"


def test_pins_prose_and_short_environment_values_in_a_design_are_not_taken_for_credentials(tmp_path, monkeypatch):
    study = make_study(tmp_path)
    pin = study.design.read_text().split('sha256 = "')[1][:64]
    # A secret-named variable whose value is a piece of a pin in the design: not a whole word there.
    monkeypatch.setenv("STUDY_SERVICE_TOKEN", pin[10:30])
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-not-in-the-design-0123")
    study.edit(
        "[study]\n", "[study]\n# Basic allowance and higher rate; Bearer bonds; a task-runner; disk-image-2024\n"
    )
    assert check(study.design).exit_code == 0, check(study.design).output


@pytest.mark.parametrize(
    "design", sorted(p.name for p in (Path(__file__).parents[2] / "confirmatory" / "demo").glob("*.toml"))
)
def test_the_bundled_designs_still_load(design, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-openai-0123456789abcdef")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test-0123456789abcdef")
    load_design(Path(__file__).parents[2] / "confirmatory" / "demo" / design)


def test_check_and_run_refuse_backend_ray_without_ray_naming_the_extra(tmp_path, capsys, monkeypatch):
    """ray is an optional extra: a design that needs it is refused, before
    anything starts, with the line that installs it."""
    study = make_study(tmp_path / "study")
    study.edit(
        'factory = "confirmatory.demo.engine:start"',
        'target = "confirmatory.demo.engine:serve"\nbackend = "ray"\naddress = "local"',
    )
    monkeypatch.setitem(sys.modules, "ray", None)  # as where it is not installed: importing it fails
    expected = "engine.backend: \"ray\" needs the ray package, which is not installed here: pip install -e '.[ray]'"
    result = check(study.design)
    assert result.exit_code == 3 and f"{study.design}: {expected}" in result.output, result.output
    runs = tmp_path / "runs"
    capsys.readouterr()
    assert run_command(study.design, runs / "r1", quiet=True) == 3
    assert expected in capsys.readouterr().err and not runs.exists()


def test_check_plans_a_ray_design_without_contacting_a_cluster(tmp_path):
    study = make_study(tmp_path / "study")
    study.edit(
        'factory = "confirmatory.demo.engine:start"',
        'target = "confirmatory.demo.engine:serve"\nbackend = "ray"\naddress = "ray://head.invalid:10001"\n'
        "num_cpus = 0.5",
    )
    if not ray_installed():
        pytest.skip("ray is not installed: pip install -e '.[test,ray]'")
    result = check(study.design)
    assert result.exit_code == 0, result.output
    assert (
        "engine: confirmatory.demo.engine:serve in 2 Ray actor(s) per model, 0.5 CPU each, on the cluster at "
        "'ray://head.invalid:10001' (check does not contact it)"
    ) in result.output
