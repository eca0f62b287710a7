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
        "for cmd in ['check', 'run', 'verify', 'resume', 'demo', 'report']:\n"
        "    r = CliRunner().invoke(main, [cmd, '--help'])\n"
        "    assert r.exit_code == 0, r.output\n"
        "print('litellm' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_script_help_answers():
    out = subprocess.run(
        [sys.executable, "scripts/confirmatory_run.py", "--help"], capture_output=True, text=True
    )
    assert out.returncode == 0
    assert "verify" in out.stdout
