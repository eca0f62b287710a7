"""Regenerate docs/report-demo.png: the top of the demo's report page, as chromium draws it.

    python scripts/report_screenshot.py            # writes docs/report-demo.png
    python scripts/report_screenshot.py --out FILE

Runs `confirmatory demo` in a temporary folder (about 15 seconds), builds
the run's page again there with the households file copied beside it (so
that the page names no folder of this machine: the demo's own page names
the installed package's), and takes chromium's headless screenshot of it.
Needs Debian's chromium package (apt-get install -y chromium).
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "report-demo.png")
    ap.add_argument("--height", type=int, default=1500, help="Pixels of the page's top to show.")
    args = ap.parse_args()
    chromium = shutil.which("chromium")
    if chromium is None:
        print("report_screenshot: needs Debian's chromium package (apt-get install -y chromium)", file=sys.stderr)
        return 3
    script = ROOT / "scripts" / "confirmatory_run.py"
    with tempfile.TemporaryDirectory(prefix="report-shot-") as tmp:
        work = Path(tmp)
        subprocess.run(
            [sys.executable, str(script), "demo", "--out", "runs/demo"], cwd=work, check=True, stdout=subprocess.DEVNULL
        )
        shutil.copy(ROOT / "confirmatory" / "demo" / "households.jsonl", work / "households.jsonl")
        subprocess.run(
            [
                sys.executable,
                str(script),
                "report",
                "runs/demo",
                "--witness",
                "runs/.witness/clone",
                "--households",
                "households.jsonl",
            ],
            cwd=work,
            check=True,
        )
        page = work / "runs" / "demo.report.html"
        subprocess.run(
            [
                chromium,
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--hide-scrollbars",
                f"--window-size=1280,{args.height}",
                f"--screenshot={args.out.resolve()}",
                page.as_uri(),
            ],
            check=True,
            capture_output=True,
        )
    print(f"report_screenshot: {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
