"""`--help` must stay fast: it must not import litellm (seconds, ~190 MB)."""

import subprocess
import sys


def test_help_does_not_import_litellm():
    code = (
        "import sys\n"
        "from click.testing import CliRunner\n"
        "from confirmatory.cli.main import main\n"
        "r = CliRunner().invoke(main, ['--help'])\n"
        "assert r.exit_code == 0, r.output\n"
        "for cmd in ['check', 'run', 'verify', 'resume', 'demo', 'report', 'show', 'continue']:\n"
        "    r = CliRunner().invoke(main, [cmd, '--help'])\n"
        "    assert r.exit_code == 0, r.output\n"
        "print('litellm' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_script_help_answers():
    out = subprocess.run([sys.executable, "scripts/confirmatory_run.py", "--help"], capture_output=True, text=True)
    assert out.returncode == 0
    assert "verify" in out.stdout


def test_every_command_shows_examples_and_the_list_cuts_no_description():
    from click.testing import CliRunner

    from confirmatory.cli.main import main

    top = CliRunner().invoke(main, ["--help"]).output
    listed = top.split("Commands:\n", 1)[1]
    assert "..." not in listed, listed
    for name in main.commands:
        out = CliRunner().invoke(main, [name, "--help"]).output
        assert "Examples:\n" in out, (name, out)
        examples = out.split("Examples:\n", 1)[1].split("\n\n", 1)[0].splitlines()
        assert examples and all(
            line.startswith("    ") and f"confirmatory {name}" in line or line.lstrip().startswith("nohup confirmatory")
            for line in examples
        ), (name, out)
        # the list says what the command's own help begins with, whole
        first = " ".join(out.split("\n\n", 2)[1].split()).split(". ")[0].rstrip(".")
        assert first[:60] in " ".join(listed.split()), (name, first)
