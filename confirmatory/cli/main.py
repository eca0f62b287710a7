"""The ``confirmatory`` command line (also ``python scripts/confirmatory_run.py``).

Every command imports its implementation inside its body, so ``--help`` and
the light commands (check, verify, resume) never import litellm: a cold
litellm import costs seconds and hundreds of MB.
"""

from __future__ import annotations

import sys
from pathlib import Path

import click

from confirmatory.cli.exits import (  # noqa: F401 - the statuses, named where the commands are
    EXIT_CEILING,
    EXIT_FAILED,
    EXIT_OK,
    EXIT_REFUSED,
    EXIT_STOPPED,
    EXIT_USAGE,
    EXIT_WITNESS,
)


class _Group(click.Group):
    """The command list says each command's first sentence whole: click cuts it
    at 45 characters ("Validate DESIGN and print its plan without starting...")."""

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = []
        for name in self.list_commands(ctx):
            cmd = self.get_command(ctx, name)
            if cmd is not None and not cmd.hidden:
                rows.append((name, cmd.get_short_help_str(limit=1000)))
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="confirmatory")
def main() -> None:
    """Run a frozen pre-registered study design through litellm, write
    durable hash-chained records, and verify them.

    \b
    Examples:
      confirmatory demo
      confirmatory check study/design.toml && confirmatory run study/design.toml --out runs/main
    """


@main.command()
@click.argument("design", type=click.Path(path_type=Path))
@click.option("--workers", type=int, default=None, help="Must equal the design's engine workers_per_model.")
@click.option(
    "--out",
    "run_dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Also check the run directory `run --out` would create, and the witness clone it would use.",
)
def check(design: Path, workers: int | None, run_dir: Path | None) -> None:
    """Validate DESIGN and print its plan without starting anything: the
    models, caps and reserves, the attempts, and the most the run can spend.

    \b
    Examples:
      confirmatory check study/design.toml
      confirmatory check study/design.toml --out runs/main
    """
    from confirmatory import check_command

    sys.exit(check_command(design, workers=workers, run_dir=run_dir))


@main.command()
@click.argument("design", type=click.Path(path_type=Path))
@click.option(
    "--out",
    "run_dir",
    required=True,
    type=click.Path(file_okay=False, path_type=Path),
    help="The run directory to create (must not exist).",
)
@click.option("--workers", type=int, default=None, help="Must equal the design's engine workers_per_model.")
@click.option("--quiet", is_flag=True, help="No progress display.")
def run(design: Path, run_dir: Path, workers: int | None, quiet: bool) -> None:
    """Execute DESIGN into a new run directory. On a terminal the progress
    is redrawn in place; into a pipe or a file, one plain line per change.

    \b
    Examples:
      confirmatory run study/design.toml --out runs/main
      nohup confirmatory run study/design.toml --out runs/main 2> runs/main.log &
    """
    from confirmatory.cli.run import run_command

    sys.exit(run_command(design, run_dir, workers=workers, quiet=quiet, exiting=True))


@main.command()
@click.argument("run_dir", type=click.Path(file_okay=False, exists=True, path_type=Path))
@click.option("--model", required=True, help="The model slug to resume.")
def resume(run_dir: Path, model: str) -> None:
    """Ask the running runner to resume a paused model (refused, exit 3, when
    no runner runs, the run is ending, or the model is not paused).

    \b
    Examples:
      confirmatory resume runs/main --model careful
    """
    from confirmatory import resume_command

    sys.exit(resume_command(run_dir, model))


@main.command()
@click.argument("run_dir", type=click.Path(file_okay=False, exists=True, path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="Machine-readable report.")
@click.option(
    "--witness",
    type=click.Path(file_okay=False, exists=True, path_type=Path),
    default=None,
    help="A clone of the witness remote: check it holds every anchor unchanged.",
)
@click.option(
    "--households",
    type=click.Path(dir_okay=False, exists=True, path_type=Path),
    default=None,
    help="The study's households file: check it is the one design.toml pins and that every "
    "model's draw is its households in their seeded order.",
)
def verify(run_dir: Path, as_json: bool, witness: Path | None, households: Path | None) -> None:
    """Check every invariant of a run directory; exit 0 only if the run is
    complete and all hold, 1 on a violation, 3 for a run crashed or still
    running with none (its first line names the command that moves it on).

    \b
    Examples:
      confirmatory verify runs/main
      confirmatory verify runs/main --witness witness-clone --households study/households.jsonl --json
    """
    from confirmatory import verify_command

    sys.exit(verify_command(run_dir, as_json=as_json, witness=witness, households=households))


@main.command("continue")
@click.argument("run_dir", type=click.Path(file_okay=False, exists=True, path_type=Path))
@click.option("--reason", required=True, help="Why the run is carried on (written into every log).")
@click.option(
    "--design",
    type=click.Path(dir_okay=False, exists=True, path_type=Path),
    default=None,
    help="The design file, when it is no longer in the directory the run was started from.",
)
@click.option("--workers", type=int, default=None, help="Must equal the design's engine workers_per_model.")
@click.option("--quiet", is_flag=True, help="No progress display.")
def continue_(run_dir: Path, reason: str, design: Path | None, workers: int | None, quiet: bool) -> None:
    """Carry a crashed run on in its own directory, appending only (refused,
    exit 3, writing nothing, unless verify finds it crashed with no violation,
    the design and its pins unchanged and the witness holding every anchor).

    \b
    Examples:
      confirmatory continue runs/study-20261206 --reason "the machine rebooted"
      confirmatory continue runs/study-20261206 --reason "OOM kill" --design study/design.toml
    """
    from confirmatory.cli.run import continue_command

    sys.exit(continue_command(run_dir, reason=reason, design=design, workers=workers, quiet=quiet))


@main.command()
@click.argument("run_dir", type=click.Path(file_okay=False, exists=True, path_type=Path))
@click.option(
    "--out",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="The page to write (default: RUN_DIR.report.html beside the run directory, never inside it).",
)
@click.option(
    "--witness",
    type=click.Path(file_okay=False, exists=True, path_type=Path),
    default=None,
    help="A clone of the witness remote, for verify's witness check shown on the page.",
)
@click.option(
    "--households",
    type=click.Path(dir_okay=False, exists=True, path_type=Path),
    default=None,
    help="The study's households file, for verify's households check shown on the page.",
)
def report(run_dir: Path, out: Path | None, witness: Path | None, households: Path | None) -> None:
    """Write one self-contained HTML page of a run for its reviewer: verify's
    verdict, the lanes over time, spend, admission, results by class, host
    evidence, anchors and what was not pinned down. Nothing on it is fetched.
    Exit 0 when written, whatever the verdict (it is on the page).

    \b
    Examples:
      confirmatory report runs/confirmatory-1
      confirmatory report runs/confirmatory-1 --out review.html --witness WITNESS_CLONE
    """
    from confirmatory import report_command

    sys.exit(report_command(run_dir, out, witness=witness, households=households))


@main.command()
@click.argument("run_dir", metavar="RUN_DIR|FOLDER", type=click.Path(file_okay=False, exists=True, path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="Machine-readable.")
@click.option("--verify", "check", is_flag=True, help="Run verify on each run and say its verdict (slower).")
def show(run_dir: Path, as_json: bool, check: bool) -> None:
    """Say what a run directory holds: its state, study, spend, results,
    pauses, stops and anchors (a folder of runs: a table, one row each).
    show reads the records; it does not check them unless --verify is given.

    \b
    Examples:
      confirmatory show runs/reference-calculator-20261206T101500Z
      confirmatory show runs/ --verify
      confirmatory show runs/ --json
    """
    from confirmatory import show_command

    sys.exit(show_command(run_dir, as_json=as_json, verify=check))


@main.command("push-anchor")
@click.argument("run_dir", type=click.Path(file_okay=False, exists=True, path_type=Path))
@click.option(
    "--run-id",
    default=None,
    help="File the anchors under anchors/RUN_ID.jsonl instead (the witness script only; "
    "e.g. when the witness holds another run's anchors under this run's id).",
)
def push_anchor(run_dir: Path, run_id: str | None) -> None:
    """Retry pushing the final anchor after the run (logged like the others).

    \b
    Examples:
      confirmatory push-anchor runs/main
    """
    from confirmatory import push_anchor_command

    sys.exit(push_anchor_command(run_dir, run_id=run_id))


@main.command("sim-provider")
@click.option("--port", type=click.IntRange(0, 65535), default=0, help="0 picks a free port.")
@click.option(
    "--design",
    type=click.Path(dir_okay=False, exists=True, path_type=Path),
    default=None,
    help="Take the fault plan from this design's [simulator] table.",
)
def sim_provider(port: int, design: Path | None) -> None:
    """Serve the simulated OpenAI-compatible provider on 127.0.0.1.

    \b
    Examples:
      confirmatory sim-provider --port 8765
      confirmatory sim-provider --design confirmatory/demo/reference.toml
    """
    from confirmatory import serve_command

    sys.exit(serve_command(port=port, design=design))


@main.command("probe-seed")
@click.argument("model")
@click.option("--api-base", default=None, help="Provider base URL (optional).")
@click.option(
    "--registry",
    type=click.Path(dir_okay=False, path_type=Path),
    default=Path("models.json"),
    help="models.json to record the result in.",
)
def probe_seed(model: str, api_base: str | None, registry: Path) -> None:
    """Send two identical seeded temperature-0 requests; record whether they matched.

    \b
    Examples:
      confirmatory probe-seed openai/gpt-4o-mini
      confirmatory probe-seed openai/my-model --api-base http://127.0.0.1:8000/v1 --registry models.json
    """
    from confirmatory import probe_seed_command

    sys.exit(probe_seed_command(model, api_base=api_base, registry=registry))


@main.command()
@click.option(
    "--out",
    "run_dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Run directory (default: a new one under runs/).",
)
@click.option(
    "--design",
    type=click.Path(dir_okay=False, exists=True, path_type=Path),
    default=None,
    help="Another bundled or own design (default: the reference study).",
)
def demo(run_dir: Path | None, design: Path | None) -> None:
    """Run the bundled reference study on the simulated provider, then verify it.

    \b
    Examples:
      confirmatory demo
      confirmatory demo --design confirmatory/demo/operator-pause.toml --out runs/pause
    """
    from confirmatory.cli.run import demo_command

    sys.exit(demo_command(run_dir=run_dir, design=design, exiting=True))


@main.command()
@click.argument("run_dir", type=click.Path(file_okay=False, exists=True, path_type=Path))
@click.argument("log")
@click.argument("index", type=int, required=False)
@click.option(
    "--anchor",
    "anchor",
    type=int,
    default=None,
    help="The anchor line (its seq) whose root the line is proved against; default the last.",
)
@click.option(
    "--consistency",
    type=(int, int),
    default=None,
    metavar="SEQ1 SEQ2",
    help="Instead: prove that anchor SEQ2's tree of LOG extends anchor SEQ1's.",
)
@click.option("--json", "as_json", is_flag=True, help="The proof as JSON, for check-proof or any RFC 9162 verifier.")
def prove(
    run_dir: Path, log: str, index: int | None, anchor: int | None, consistency: tuple[int, int] | None, as_json: bool
) -> None:
    """Prove that line INDEX (its seq) of LOG (a path relative to RUN_DIR, as
    the anchors name it) is in the RFC 9162 Merkle tree whose root an anchor
    fixes, or that one anchor's tree of LOG extends another's. The tree is
    built once from the file and must give the anchor's root.

    \b
    Examples:
      confirmatory prove runs/r1 models/gpt-4o/run.jsonl 42 --json > proof.json
      confirmatory prove runs/r1 host.jsonl --consistency 3 9 --json > extends.json
    """
    from confirmatory import prove_command

    sys.exit(prove_command(run_dir, log, index, anchor, consistency, as_json))


@main.command("check-proof")
@click.argument("proof", type=click.Path(dir_okay=False, exists=True, path_type=Path))
@click.option(
    "--anchors",
    "anchors_file",
    type=click.Path(dir_okay=False, exists=True, path_type=Path),
    default=None,
    help="An anchors file (the witness clone's anchors/<run_id>.jsonl, say): "
    "also check that one of its anchors fixes the proof's root.",
)
@click.option(
    "--key",
    "key",
    default=None,
    metavar="VERIFIER_KEY",
    help="The study's verifier key (name+hexid+base64, as the design pins it) to check the proof's checkpoint with.",
)
@click.option(
    "--run",
    "run_dir",
    type=click.Path(file_okay=False, exists=True, path_type=Path),
    default=None,
    help="The proof's run directory: check its checkpoint with the keys its manifest pins (the study's, the witnesses').",
)
def check_proof(proof: Path, anchors_file: Path | None, key: str | None, run_dir: Path | None) -> None:
    """Verify PROOF (the JSON of `confirmatory prove --json`) by RFC 9162's
    algorithms and, when it holds one, against the signed checkpoint that
    fixes its size and root; exit 0 only if it verifies (and, with
    --anchors, an anchor there fixes its root). It says whose word the
    size and the root rest on.

    \b
    Examples:
      confirmatory check-proof proof.json --key example.org/study-1+1a2b3c4d+AeZ...
      confirmatory check-proof proof.json --anchors witness/anchors/r1.jsonl
    """
    from confirmatory import check_proof_command

    sys.exit(check_proof_command(proof, anchors_file, key=key, run_dir=run_dir))


@main.command()
@click.argument("run_dir", type=click.Path(file_okay=False, exists=True, path_type=Path))
@click.option(
    "--anchor",
    "anchor",
    type=int,
    default=None,
    metavar="SEQ",
    help="The anchor line (its seq) whose checkpoint to print; default the last.",
)
@click.option("--json", "as_json", is_flag=True, help="Its fields, cosignatures and stamps as JSON.")
def checkpoint(run_dir: Path, anchor: int | None, as_json: bool) -> None:
    """Print the signed checkpoint of an anchor of RUN_DIR: the C2SP signed
    note of anchors.jsonl's head, with the study's signature and each
    witness's cosignature.

    \b
    Examples:
      confirmatory checkpoint runs/r1
      confirmatory checkpoint runs/r1 --anchor 3 --json
    """
    from confirmatory import checkpoint_command

    sys.exit(checkpoint_command(run_dir, anchor=anchor, as_json=as_json))


@main.group(cls=_Group)
def key() -> None:
    """Make the Ed25519 keys of signed checkpoints: the study's, or a witness's.

    \b
    Examples:
      confirmatory key new example.org/study-1 --out keys/study.key
      confirmatory key new witness.example.org/w1 --out keys/witness.key --cosigner
    """


@key.command("new")
@click.argument("name")
@click.option(
    "--out",
    required=True,
    type=click.Path(dir_okay=False, path_type=Path),
    help="The private key file to create (mode 0600; never an existing file, never inside a run directory).",
)
@click.option("--cosigner", is_flag=True, help="A witness's key (cosignatures, type 0x04) instead of the study's.")
def key_new(name: str, out: Path, cosigner: bool) -> None:
    """Make a new key named NAME in a new file; print its verifier key
    (name+hexid+base64), the line a design pins.

    \b
    Examples:
      confirmatory key new example.org/study-1 --out keys/study.key
      confirmatory key new witness.example.org/w1 --out keys/witness.key --cosigner
    """
    from confirmatory import key_new_command

    sys.exit(key_new_command(name, out, cosigner=cosigner))


@main.group(cls=_Group)
def witness() -> None:
    """Run a C2SP tlog-witness v1.0.0 witness that cosigns a study's checkpoints.

    \b
    Examples:
      confirmatory witness serve --key keys/witness.key --state witness-state --port 8321 --log ORIGIN=VERIFIER_KEY
    """


@witness.command("serve")
@click.option(
    "--key",
    "key_file",
    required=True,
    type=click.Path(dir_okay=False, exists=True, path_type=Path),
    help="The witness's cosigner key file (`confirmatory key new NAME --out FILE --cosigner`).",
)
@click.option(
    "--state",
    required=True,
    type=click.Path(file_okay=False, path_type=Path),
    help="The directory of the witness's state (made if missing; kept across restarts).",
)
@click.option("--host", default="127.0.0.1", show_default=True, help="The address to listen on.")
@click.option("--port", required=True, type=click.IntRange(0, 65535), help="0 picks a free port.")
@click.option(
    "--log",
    "logs",
    multiple=True,
    required=True,
    metavar="ORIGIN=VERIFIER_KEY",
    help="A log to cosign: its checkpoints' origin and its note verifier key (repeatable).",
)
def witness_serve(key_file: Path, state: Path, host: str, port: int, logs: tuple[str, ...]) -> None:
    """Serve POST /add-checkpoint until SIGINT or SIGTERM; print the URL,
    then the witness's verifier key.

    \b
    Examples:
      confirmatory witness serve --key keys/witness.key --state witness-state --port 8321 --log ORIGIN=VERIFIER_KEY
    """
    from confirmatory import witness_serve_command

    sys.exit(witness_serve_command(key_file, state, host, port, logs))


if __name__ == "__main__":  # pragma: no cover
    main()
