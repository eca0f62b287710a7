"""The Run's set-up choices in one typed value (the library's front door:
``Run(design, run_dir, options=RunOptions(...))``, docs/LIBRARY.md).

Every field has the default a real run uses; an embedding (a study's
differential test, the command line) changes only what it needs.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class RunOptions:
    # the clock every record's time comes from (runtime.clock.Clock; a fake
    # clock such as testing.hostfakes.BackStepClock in tests)
    clock: Any = None
    # the host's memory readers (host.sampler.RealReaders; testing.hostfakes.ScriptedReaders)
    host_readers: Any = None
    # config.json's content (engine.config.build_config); None: the run writes none
    config: Mapping[str, Any] | None = None
    # take SIGINT, SIGTERM and SIGHUP over while the run runs, and put them back after
    install_signals: bool = True
    restore_signals: bool = True
    restore_to: Mapping[int, Any] | None = None
    # model name -> the api_base its calls go to (the bundled simulator's address)
    api_bases: Mapping[str, str] = field(default_factory=dict)
    # the free disk the run stops at (engine.run.DISK_FLOOR_BYTES when None)
    disk_floor_bytes: int | None = None

    def as_kwargs(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "clock": self.clock,
            "host_readers": self.host_readers,
            "config": None if self.config is None else dict(self.config),
            "install_signals": self.install_signals,
            "restore_signals": self.restore_signals,
            "restore_to": None if self.restore_to is None else dict(self.restore_to),
            "api_bases": dict(self.api_bases),
        }
        if self.disk_floor_bytes is not None:
            out["disk_floor_bytes"] = self.disk_floor_bytes
        return out
