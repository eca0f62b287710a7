"""One check, used on every kind of run the tests make: the page's, show's
and verify's money agree to the nano-dollar (so to the micro-dollar shown),
part by part, and each prints the total the same way (core.money.format_usd)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from confirmatory.core.money import format_usd
from confirmatory.report.page import build_page
from confirmatory.report.show import read_run, render
from confirmatory.verify import verify_run


def money_agrees(run_dir: Path, report: Any = None) -> dict[str, Any]:
    """Assert the three agree; verify's figures (its ``spend`` by part)."""
    run_dir = Path(run_dir)
    report = report if report is not None else verify_run(run_dir)
    fig = report.figures
    info = read_run(run_dir)
    assert info["spend_total_nusd"] == fig["spend_total_nusd"], (info["spend"], fig["spend"])
    assert info["spend"] == fig["spend"]
    for name, m in fig["models"].items():
        assert info["models"][name]["spend"] == m["spend"], name
        assert info["models"][name]["spend_nusd"] == m["spend_nusd"], name
    html, _ = build_page(run_dir, run_dir.parent / f"{run_dir.name}.check.html")
    total = re.search(r'<b class="total" data-nusd="(\d+)">([^<]*)</b>', html)
    assert total is not None
    assert int(total[1]) == fig["spend_total_nusd"] and total[2] == format_usd(fig["spend_total_nusd"])
    for part in ("recorded", "late", "lost", "in-flight", "before"):
        got = re.search(rf'data-part="{part}" data-nusd="(\d+)"', html)
        assert got is not None and int(got[1]) == fig["spend"][part.replace("-", "_") + "_nusd"], part
    for name, m in fig["models"].items():
        row = re.search(rf'<tr data-model="{re.escape(name)}"><td>[^<]*</td><td class="num" data-nusd="(\d+)">', html)
        assert row is not None and int(row[1]) == m["spend_nusd"], name
    shown = format_usd(fig["spend_total_nusd"])
    assert f"spend: {shown} of ceiling" in render(info)
    assert f": {shown} = recorded " in report.to_table()
    if not report.ok:  # figures of records that fail verify are marked so, everywhere they are shown
        assert 'class="warn tainted"' in html
        assert "(read from records that FAIL verify)" in report.to_table()
    return fig
