"""The bundled reference study, end to end: real litellm calls to the simulated provider.

Each run here uses the bundled designs unchanged, the reference harness and
calculator in a real process pool, litellm over HTTP to the simulated
provider on 127.0.0.1, and is checked by the verifier.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from runhelpers import events, of, verified

from confirmatory.anchors.witness import init_local_witness
from confirmatory.commands.demo import REFERENCE_DESIGN
from confirmatory.design.load import load_design
from confirmatory.engine import llm
from confirmatory.engine.resume import request_resume
from confirmatory.engine.run import Run
from confirmatory.sim.faults import FaultPlan
from confirmatory.sim.server import SimProvider

DEMO = REFERENCE_DESIGN.parent
ROOT = Path(__file__).resolve().parents[2]


def run_bundled(design: Path, run_dir: Path, *, operator: bool = False):
    """Run a bundled design in-process against a simulated provider the test can inspect."""
    loaded = load_design(design)
    init_local_witness(run_dir.parent / ".witness")
    sim = SimProvider(FaultPlan.from_table(loaded.design.simulator)).start()
    try:
        llm.prepare(loaded.design.models)
        run = Run(loaded, run_dir, install_signals=False, api_bases={m.name: sim.url for m in loaded.design.models})
        run.start()
        done = threading.Event()

        def person():
            # Resumes a paused model once, as an operator would after fixing the key.
            answered = set()
            while not done.is_set():
                for name, m in run.models.items():
                    if m.paused and m.waiting_resume and (name, m.pause_t) not in answered:
                        answered.add((name, m.pause_t))
                        request_resume(run_dir, name)
                done.wait(0.05)

        helper = threading.Thread(target=person, daemon=True)
        if operator:
            helper.start()
        try:
            result = run.wait()
        finally:
            done.set()
        return result, sim.invoice()
    finally:
        sim.stop()


@pytest.mark.slow
def test_the_reference_study_completes_verifies_and_shows_reruns_and_keeps(tmp_path):
    result, invoice = run_bundled(DEMO / "reference.toml", tmp_path / "runs" / "ref")
    run_dir = tmp_path / "runs" / "ref"
    assert result.status == "completed"
    verified(run_dir)
    attempts = [a for m in ("careful", "sloppy", "truncates") for a in of(events(run_dir, m), "attempt")]
    provider_reruns = [a for a in attempts if a["class"] == "provider" and a["action"] == "rerun"]
    model_keeps = [a for a in attempts if a["class"] == "model" and a["action"] == "keep"]
    assert provider_reruns, "the fault plan's 429/5xx/hang/malformed faults appear as provider reruns"
    assert model_keeps, "a truncation that survived escalation or a bad answer is kept as a model failure"
    # Every pass-1 attempt reruns a pass-0 provider failure.
    assert all(a["pass"] > 0 for a in attempts if a["reruns_used"] > 0)
    # The simulator's 429 asks for a second (Retry-After: 1): the record keeps
    # it, and the rerun pass waited that long, not the design's 0.25 s.
    for m in ("careful", "sloppy", "truncates"):
        mine = of(events(run_dir, m), "attempt")
        for a in mine:
            err = json.loads((run_dir / "models" / m / a["record"]).read_text())["error"] or {}
            if err.get("type") != "litellm.exceptions.RateLimitError":
                continue
            assert err["retry_after_s"] == 1.0, err
            household = [b for b in mine if b["household"] == a["household"]]
            ended = max(b["end"] for b in household if b["pass"] == a["pass"])
            rerun = min(b["start"] for b in household if b["pass"] == a["pass"] + 1)
            assert rerun - ended >= 1.0, (a, rerun - ended)
            break
        else:
            continue
        break
    else:
        raise AssertionError("the fault plan's 429 was not met")

    # The costs add up: the run's spend is the simulator's invoice (usage by kind times its prices).
    (close,) = of(events(run_dir), "close")
    assert close["spend_total_nusd"] == sum(m["nusd"] for m in invoice.values()) > 0


@pytest.mark.slow
def test_the_operator_pause_design_pauses_on_an_auth_failure_and_resumes(tmp_path):
    run_dir = tmp_path / "runs" / "pause"
    result, _ = run_bundled(DEMO / "operator-pause.toml", run_dir, operator=True)
    assert result.status == "completed"
    verified(run_dir)
    paused = [(m, p) for m in ("careful", "sloppy", "truncates") for p in of(events(run_dir, m), "pause")]
    assert paused
    model, pause = paused[0]
    resumes = of(events(run_dir, model), "resume", accepted=True)
    assert resumes and resumes[0]["request_t"] > pause["t"]
    auth = [a for a in of(events(run_dir, model), "attempt") if a["class"] == "operator"]
    assert auth and auth[0]["action"] == "pause"


def test_a_real_provider_design_without_its_key_is_refused_before_anything_starts(tmp_path, monkeypatch):
    from confirmatory.cli.run import run_command

    for var in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY"):
        monkeypatch.delenv(var, raising=False)
    run_dir = tmp_path / "runs" / "real"
    rc = run_command(DEMO / "real-provider.toml", run_dir, quiet=True)
    assert rc == 3
    assert not run_dir.exists(), "nothing half-written is left behind"
    assert not any((tmp_path / "runs").iterdir()) if (tmp_path / "runs").exists() else True


def test_the_real_provider_design_names_dated_snapshots_litellm_prices_and_models_json_describes():
    from confirmatory.design.load import load_design
    from confirmatory.engine.config import load_registry
    from confirmatory.engine.preflight import model_problems, registry_path

    design = DEMO / "real-provider.toml"
    loaded = load_design(design)
    assert model_problems(loaded, keys=False) == []  # routable and priced by the pinned litellm
    registry = load_registry(registry_path(design))
    for m in loaded.design.models:
        entry = registry.get(m.litellm_model)
        assert entry is not None, f"{m.litellm_model} has no models.json entry"
        assert entry["snapshot"] and m.litellm_model.endswith(entry["snapshot"]), entry


@pytest.mark.slow
def test_the_refusal_names_the_missing_environment_variable(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY")}
    proc = subprocess.run(
        [
            sys.executable,
            str(ROOT / "scripts" / "confirmatory_run.py"),
            "run",
            str(DEMO / "real-provider.toml"),
            "--out",
            str(tmp_path / "run"),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert proc.returncode == 3
    assert "ANTHROPIC_API_KEY" in proc.stderr and "OPENAI_API_KEY" in proc.stderr
    assert not (tmp_path / "run").exists()


@pytest.mark.slow
def test_check_says_which_keys_this_environment_lacks_though_it_passes(tmp_path):
    # check printed the plan, exit 0, and nothing of the keys; run then
    # refused (exit 3) for want of them. The keys may be set only where the
    # run runs, so check still passes, with a note naming each.
    script = [sys.executable, str(ROOT / "scripts" / "confirmatory_run.py"), "check", str(DEMO / "real-provider.toml")]
    env = {k: v for k, v in os.environ.items() if k not in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY")}
    proc = subprocess.run(
        script, capture_output=True, text=True, env={**env, "OPENAI_API_KEY": "sk-set-here"}, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    notes = [line for line in proc.stdout.splitlines() if "API_KEY" in line]
    assert notes == [
        "note: models[0].litellm_model: anthropic/claude-sonnet-4-5-20250929 needs ANTHROPIC_API_KEY "
        "in the environment, and it is not set here: run refuses to start without it"
    ], proc.stdout


@pytest.mark.slow
def test_the_main_job_with_no_arguments_runs_the_demo_and_verifies_it(tmp_path):
    proc = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "confirmatory_run.py")],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:] + proc.stdout[-3000:]
    assert "ALL INVARIANTS HOLD" in proc.stdout + proc.stderr
    # ... against the witness too: the demo shows the whole machinery.
    witness = tmp_path / "runs" / ".witness" / "clone"
    assert f"witness: {witness} holds every anchor of the run, unchanged" in proc.stdout, proc.stdout[-3000:]
    runs = [p for p in (tmp_path / "runs").iterdir() if not p.name.startswith(".") and p.is_dir()]
    assert len(runs) == 1 and (runs[0] / "manifest.json").is_file()
    # ... and its page for a reviewer beside it (docs/REPORT.md)
    page = runs[0].parent / f"{runs[0].name}.report.html"
    # ... and the simulator's invoice, which every model's spend equals (its closing lines say so)
    invoice_file = runs[0].parent / f"{runs[0].name}.sim-invoice.json"
    listed = sorted(p for p in (tmp_path / "runs").iterdir() if not p.name.startswith("."))
    assert listed == sorted([runs[0], page, invoice_file])
    invoice = json.loads(invoice_file.read_text())
    for model, served in (("careful", "sim-careful"), ("gemini", "sim-gemini")):
        (close,) = of(events(runs[0], model), "close")
        assert close["spend_nusd"] == invoice[served]["nusd"] > 0
        assert f"  {model} ({served}): spent " in proc.stdout
    tokens = invoice["sim-gemini"]["tokens"]
    assert tokens["cached_input"] > 0 and tokens["reasoning"] > 0  # the demo caches and thinks
    assert proc.stdout.rstrip().endswith("every model's spend equals the simulator's invoice, to the nano-dollar")
    # The same again into that directory: refused, and the finished run (the
    # witness beside it holds its anchors) is not reported on as this demo's.
    again = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "confirmatory_run.py"), "demo", "--out", str(runs[0])],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert again.returncode == 3, again.stderr[-3000:]
    assert "the run directory already exists" in again.stderr
    assert "confirmatory demo: the run did not start (exit status 3)" in again.stderr
    assert "INVARIANTS" not in again.stdout + again.stderr and "Run:" not in again.stdout, again.stdout[-3000:]


@pytest.mark.parametrize("case", ["an earlier run", "a file in its path"])
def test_the_demo_refuses_a_run_directory_the_run_would_refuse_before_making_a_witness(tmp_path, case):
    # An existing directory is some earlier run's (perhaps of another design):
    # the demo used to verify it after the run's refusal ("ALL INVARIANTS
    # HOLD", or VERIFY FAILED for a valid run of another design) and make its
    # witness beside it; under a file, the witness set-up raised.
    runs = tmp_path / "runs"
    if case == "an earlier run":
        out = runs / "old"
        out.mkdir(parents=True)
        (out / "manifest.json").write_text('{"format": "confirmatory-run/1"}\n')
        problem = "the run directory already exists"
    else:
        runs.write_text("not a directory\n")
        out = runs / "new"
        problem = "is a file, not a directory"
    before = sorted((p.relative_to(tmp_path), p.read_bytes() if p.is_file() else None) for p in tmp_path.rglob("*"))
    proc = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "confirmatory_run.py"), "demo", "--out", str(out)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 3, proc.stderr[-3000:]
    assert problem in proc.stderr, proc.stderr
    assert "confirmatory demo: the run did not start (exit status 3)" in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr
    # Nothing verified, no guide, nothing made or changed.
    assert proc.stdout == "" and "INVARIANT" not in proc.stderr, proc.stdout[-3000:]
    assert (
        sorted((p.relative_to(tmp_path), p.read_bytes() if p.is_file() else None) for p in tmp_path.rglob("*"))
        == before
    )


@pytest.mark.slow
def test_the_minimal_design_runs_and_its_careful_model_answers_every_attempt(tmp_path):
    run_dir = tmp_path / "runs" / "minimal"
    result, _ = run_bundled(DEMO / "minimal.toml", run_dir)
    assert result.status == "completed"
    verified(run_dir)
    careful = of(events(run_dir, "careful"), "attempt")
    assert careful and {a["class"] for a in careful} == {"ok"}


def test_the_demo_guide_offers_the_pause_demo_only_to_a_run_that_did_not_pause(tmp_path, monkeypatch):
    from confirmatory.commands.demo import guide

    log = tmp_path / "run" / "models" / "careful" / "run.jsonl"
    log.parent.mkdir(parents=True)
    log.write_text('{"event":"open","prev":"x","seq":0,"t":1.0}\n')
    monkeypatch.chdir(DEMO.parent.parent)  # the repository's root, as the README's command runs it
    text = guide(tmp_path / "run", run_rc=0, verify_rc=0)
    assert "See a pause:   confirmatory demo --design confirmatory/demo/operator-pause.toml" in text
    # Elsewhere the relative path named nothing: it is then absolute, and the file.
    monkeypatch.chdir(tmp_path)
    text = guide(tmp_path / "run", run_rc=0, verify_rc=0)
    shown = text.split("See a pause:   confirmatory demo --design ")[1].split("\n")[0]
    assert Path(shown).is_absolute() and Path(shown).is_file(), shown
    assert Path(shown) == DEMO / "operator-pause.toml"
    log.write_text(
        log.read_text() + '{"arm":"alone","event":"pause","household":"h","pass":0,"prev":"y","seq":1,"t":2.0}\n'
    )
    text = guide(tmp_path / "run", run_rc=0, verify_rc=0)
    assert "See a pause" not in text and "its pause and resume lines are in models/careful/run.jsonl" in text


def test_the_demo_refusing_an_existing_run_directory_also_lists_the_designs_problems(tmp_path):
    # It said only that the directory exists; a second try, into a new one,
    # then found the design bad. `run` lists both at once.
    out = tmp_path / "runs" / "old"
    out.mkdir(parents=True)
    design = tmp_path / "bad.toml"
    design.write_text("[study]\nid = 3\n")
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    proc = subprocess.run(
        [
            sys.executable,
            str(ROOT / "scripts" / "confirmatory_run.py"),
            "demo",
            "--design",
            str(design),
            "--out",
            str(out),
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 3, proc.stderr[-3000:]
    lines = proc.stderr.splitlines()
    refused = lines.index("refused to start:")
    assert lines[refused + 1] == f"  {design}: study.id: must be a string (got 3)", proc.stderr
    assert f"  {out}: the run directory already exists; a run never writes into an old one" in lines, proc.stderr
    assert lines[-1] == "confirmatory demo: the run did not start (exit status 3)", proc.stderr
    assert "Traceback" not in proc.stderr and proc.stdout == ""
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == before  # no witness made


def test_the_demos_invoice_lines_say_by_how_much_a_spend_differs_from_the_invoice(tmp_path):
    from confirmatory.commands.demo import invoice_lines, invoice_path

    run_dir = tmp_path / "runs" / "r"
    for model, spend in (("careful", 1_500), ("gemini", 2_000)):
        (run_dir / "models" / model).mkdir(parents=True)
        line = json.dumps({"event": "close", "spend_nusd": spend}, separators=(",", ":"))  # as the runner writes
        (run_dir / "models" / model / "run.jsonl").write_text(line + "\n")
    design = tmp_path / "d.toml"
    design.write_text(
        '[[models]]\nname = "careful"\nlitellm_model = "openai/sim-careful"\napi_base = "simulator"\n'
        '[[models]]\nname = "gemini"\nlitellm_model = "gemini/sim-gemini"\napi_base = "simulator"\n'
    )
    assert invoice_lines(run_dir, design)[1].startswith("Invoice: the simulator's invoice was not written")
    bill = {"calls": 1, "tokens": {"input": 3}, "nusd": 1_500}
    invoice_path(run_dir).write_text(json.dumps({"sim-careful": bill, "sim-gemini": {**bill, "nusd": 1_990}}))
    lines = invoice_lines(run_dir, design)
    assert lines[2].endswith(": equal (input 3 tokens)")
    assert "gemini (sim-gemini): spent $0.000002, invoiced $0.000002: DIFFERS by +10 nano-dollars" in lines[3]
    assert lines[-1] == "  1 model(s) whose spend is not the simulator's invoice"
