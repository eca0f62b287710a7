"""The manifests against design.toml, the manifest's rules taken as they are,
names that must be slugs, and files that are not regular files.

A forger who edits a manifest and re-chains every log from its new seed
leaves chains and anchors that hold. What must catch the edit is the run's
own design.toml: every field the design fixes is recomputed from it, by the
mapping the runner wrote the manifests with (``confirmatory.records.manifests``),
and compared (invariant 11). A rule of the wrong kind is reported, never
replaced by a value made from it, and never a traceback. A path that names a
FIFO or a device is reported without being read: reading could block for
ever, or never end.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap

import pytest
from test_violations import reseal

from confirmatory.records.manifests import differences
from confirmatory.testing.rungen import Plan, generate_run
from confirmatory.verify import verify_run

PLAN = Plan(households=10, anchor_every_s=600, harness=None, operator=None)


@pytest.fixture(scope="module")
def pristine(tmp_path_factory):
    root = tmp_path_factory.mktemp("manifest") / "run"
    generate_run(root, PLAN)
    return root


@pytest.fixture
def run(pristine, tmp_path):
    root = tmp_path / "run"
    shutil.copytree(pristine, root)
    return root


def edit_json(path, fn):
    obj = json.loads(path.read_bytes())
    fn(obj)
    path.write_text(json.dumps(obj, sort_keys=True))


def messages(report, invariant):
    return [v.message for r in report.results if r.invariant == invariant for v in r.first]


def test_the_pristine_run_verifies(pristine):
    report = verify_run(pristine)
    assert report.ok, report.to_table()


# -- the manifest's rules, of the wrong kind -------------------------------------------------------
WRONG_RULES = [
    (("max_reruns_per_arm",), None),
    (("max_reruns_per_arm",), "two"),
    (("max_reruns_per_arm",), "2"),
    (("max_reruns_per_arm",), 2.9),
    (("max_reruns_per_arm",), True),
    (("max_reruns_per_arm",), float("inf")),
    (("inconclusive_household_limit",), []),
    (("stop_follow_s",), {}),
    (("stop_follow_s",), "5"),
    (("rerun_wait_s",), -1),
    (("rerun_wait_s",), "15"),
    (("rerun_wait_s",), float("nan")),
    (("precedence",), []),
    (("precedence",), ["ok"] * 8),
    (("class_lists",), {}),
    (("host", "max_gap_s"), "45s"),
    (("host", "pressure_threshold"), 101),
    (("host",), {}),
    ((), "rules"),
]


@pytest.mark.parametrize("path,value", WRONG_RULES, ids=[f"{'.'.join(p) or 'rules'}={v!r}" for p, v in WRONG_RULES])
def test_a_rule_of_the_wrong_kind_fails_invariant_11_by_name_and_is_not_used(run, path, value):
    def plant(man):
        if not path:
            man["rules"] = value
            return
        table = man["rules"]
        for key in path[:-1]:
            table = table[key]
        table[path[-1]] = value

    edit_json(run / "manifest.json", plant)
    reseal(run)
    report = verify_run(run)  # a report, whatever the value: never a traceback
    name = "rules" if not path else "rules." + ".".join(path)
    assert any(m.startswith(name) and "used in the checks" in m for m in messages(report, 11)), report.to_table()


def test_the_verify_command_reports_a_rule_of_the_wrong_kind_without_a_traceback(run):
    edit_json(run / "manifest.json", lambda man: man["rules"].update(max_reruns_per_arm=None))
    reseal(run)
    out = subprocess.run(
        [sys.executable, "-m", "confirmatory.cli.main", "verify", str(run)], capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 1 and "Traceback" not in out.stdout + out.stderr, out.stderr[-2000:]
    assert "rules.max_reruns_per_arm is None" in out.stdout


@pytest.mark.parametrize("arms", [5, True, "alone", [1, 2]])
def test_run_manifest_arms_that_are_not_a_list_of_names_fail_invariant_11(run, arms):
    edit_json(run / "manifest.json", lambda man: man.update(arms=arms))
    reseal(run)
    assert any(m.startswith("arms is") for m in messages(verify_run(run), 11))


# -- the manifests against the design ---------------------------------------------------------------
MISMATCHES = [
    ("manifest.json", ("ceiling_nusd",), 2 * 10**12, "ceiling_nusd"),
    ("manifest.json", ("spend_before_nusd",), 0, "spend_before_nusd"),
    ("manifest.json", ("spend_before_nusd",), 5e8, "spend_before_nusd"),  # money is an integer
    ("manifest.json", ("spend_before_nusd",), "500000000", "spend_before_nusd"),
    ("manifest.json", ("rules", "max_reruns_per_arm"), 3, "rules.max_reruns_per_arm"),
    ("manifest.json", ("rules", "attempt_deadline_s"), 10, "rules.attempt_deadline_s"),
    ("manifest.json", ("rules", "host", "max_gap_s"), 90.0, "rules.host.max_gap_s"),
    ("manifest.json", ("arms",), ["alone", "calculator"], "arms"),
    ("manifest.json", ("engine", "factory"), "other.engine:start", "engine.factory"),
    ("manifest.json", ("harness", "entry"), "other.harness:run", "harness.entry"),
    ("models/alpha/manifest.json", ("cap_nusd",), 3 * 10**9, "cap_nusd"),
    ("models/alpha/manifest.json", ("cap_nusd",), 1e9, "cap_nusd"),
    ("models/beta/manifest.json", ("reserve_nusd",), 1, "reserve_nusd"),
    ("models/beta/manifest.json", ("litellm_model",), "openai/other", "litellm_model"),
]


@pytest.mark.parametrize(
    "rel,path,value,name",
    MISMATCHES,
    ids=[f"{r.split('/')[-2] if '/' in r else 'run'}:{n}={v!r}" for r, _, v, n in MISMATCHES],
)
def test_a_manifest_field_that_is_not_the_designs_fails_invariant_11(run, rel, path, value, name):
    def plant(man):
        table = man
        for key in path[:-1]:
            table = table[key]
        table[path[-1]] = value

    edit_json(run / rel, plant)
    reseal(run)
    report = verify_run(run)
    assert any(
        v.file == rel and v.message.startswith(f"{name} is") and "the design gives" in v.message
        for r in report.results
        if r.invariant == 11
        for v in r.first
    ), report.to_table()


def test_a_design_edited_to_match_a_forged_manifest_fails_on_its_hash(run):
    text = (run / "design.toml").read_text()
    (run / "design.toml").write_text(text.replace("max_gap_s = 45.0", "max_gap_s = 90.0"))
    reseal(run)
    assert "design_sha256 is not design.toml's" in messages(verify_run(run), 11)


def test_a_design_that_does_not_validate_fails_invariant_11(run):
    text = (run / "design.toml").read_text()
    (run / "design.toml").write_text(text.replace("stop_follow_s = 5", "stop_follow_s = -5"))
    edit_json(
        run / "manifest.json",
        lambda man: man.update(
            design_sha256=__import__("hashlib").sha256((run / "design.toml").read_bytes()).hexdigest()
        ),
    )
    reseal(run)
    assert any(m.startswith("not a valid design: rules.stop_follow_s") for m in messages(verify_run(run), 11)), (
        verify_run(run).to_table()
    )


def test_numbers_of_equal_value_match_except_money_which_is_an_integer():
    assert differences({"a": 5, "b": {"c": 60.0}}, {"a": 5.0, "b": {"c": 60}}) == []
    assert differences({"cap_nusd": 5}, {"cap_nusd": 5.0}) == ["cap_nusd is 5.0, the design gives 5"]
    assert differences({"a": 1}, {"a": True}) == ["a is True, the design gives 1"]
    assert differences({"a": [1, 2]}, {"a": [1]}) == ["a is [1], the design gives [1, 2]"]
    assert differences({"a": 1, "s": 2}, {"a": 1}, optional=frozenset({"s"})) == []
    assert differences({"a": 1, "s": 2}, {"s": 2}) == ["a is missing (the design gives 1)"]


# -- names that must be slugs -------------------------------------------------------------------------
def test_a_household_name_that_is_not_a_slug_fails_invariant_11(run):
    edit_json(run / "models/alpha/manifest.json", lambda man: man["draw"].__setitem__(0, "../h 0"))
    reseal(run)
    assert any(m.startswith("household name must be a slug") and "'../h 0'" in m for m in messages(verify_run(run), 11))


def test_model_and_arm_names_that_are_not_slugs_fail_invariant_11(run):
    edit_json(
        run / "manifest.json",
        lambda man: man.update(arms=["alöne", *man["arms"][1:]], models=["al pha", *man["models"][1:]]),
    )
    (run / "models" / "alpha").rename(run / "models" / "al pha")
    edit_json(run / "models" / "al pha" / "manifest.json", lambda man: man.update(model="al pha"))
    anchors = run / "anchors.jsonl"
    anchors.write_bytes(anchors.read_bytes().replace(b'"models/alpha/', b'"models/al pha/'))
    reseal(run)
    found = messages(verify_run(run), 11)
    assert any(m.startswith("arm name must be a slug") for m in found), found
    assert any(m.startswith("model name must be a slug") for m in found), found


# -- paths that are not regular files ---------------------------------------------------------------------
VERIFY_CHILD = textwrap.dedent("""
    import sys
    from confirmatory.verify import verify_run
    report = verify_run(sys.argv[1], workers=int(sys.argv[2]))
    print(report.ok, sorted(report.failed()))
    print(report.to_table(shown=50))
""")


def verify_in_child(root, workers=1):
    """verify in a child under a memory limit and a timeout: a fault here
    blocks for ever (a FIFO) or reads for ever (a device)."""
    limit = "import resource; resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))\n"
    try:
        out = subprocess.run(
            [sys.executable, "-c", limit + VERIFY_CHILD, str(root), str(workers)],
            capture_output=True,
            text=True,
            timeout=90,
        )
    except subprocess.TimeoutExpired:
        pytest.fail("verify did not return within 90 s")
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout


def a_record(run):
    return next((run / "models" / "alpha" / "records").rglob("*.json"))


def test_a_record_that_is_a_fifo_is_reported_not_read(run):
    path = a_record(run)
    path.unlink()
    os.mkfifo(path)
    out = verify_in_child(run)
    assert out.startswith("False [1]") and "is not a regular file" in out, out


def test_a_record_that_names_a_device_is_reported_not_read_to_its_end(run):
    path = a_record(run)
    path.unlink()
    path.symlink_to("/dev/zero")
    out = verify_in_child(run)
    assert out.startswith("False [1]") and "is not a regular file" in out, out


def test_a_record_that_is_a_folder_is_reported(run):
    path = a_record(run)
    path.unlink()
    path.mkdir()
    out = verify_in_child(run)
    assert "is not a regular file" in out, out


@pytest.mark.parametrize(
    "rel,workers",
    [
        ("models/alpha/run.jsonl", 1),
        ("models/beta/admission.jsonl", 1),
        ("host.jsonl", 1),
        ("host.jsonl", 2),
        ("run.jsonl", 2),
        ("models/alpha/manifest.json", 1),
        ("design.toml", 1),
    ],
)
def test_a_log_manifest_or_design_that_is_a_fifo_is_reported_not_read(run, rel, workers):
    (run / rel).unlink()
    os.mkfifo(run / rel)
    out = verify_in_child(run, workers)
    assert out.startswith("False") and "not a regular file" in out, out


# -- what the report says of how the run ended -------------------------------------------------------
def test_a_damaged_manifest_is_not_told_as_a_run_that_never_ended(run):
    (run / "manifest.json").write_text("{bad")
    report = verify_run(run)
    assert report.outcome.startswith("no close line among run.jsonl's chain-valid lines"), report.outcome
    assert "killed" not in report.outcome


def test_a_run_without_its_close_line_is_told_as_one_that_never_ended(run):
    lines = (run / "run.jsonl").read_bytes().split(b"\n")[:-1]
    assert b'"event":"close"' in lines[-1]
    (run / "run.jsonl").write_bytes(b"\n".join(lines[:-1]) + b"\n")  # a chain-valid prefix
    report = verify_run(run)
    assert report.outcome.startswith("no close line (the runner did not end the run"), report.outcome
