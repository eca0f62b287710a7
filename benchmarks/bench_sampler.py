"""What the real host sampler costs: CPU as a share of one core.

Runs `HostMonitor` with the real readers (PSI or the psutil fallback), a real
followed file, a real `Clock` and a real `ChainWriter` (one fsync per line)
in a temporary directory, for `--seconds` at `--interval`, then prints:

* the sampler thread's CPU time (`time.thread_time()` inside the thread),
* the whole process's CPU time over the same span (the main thread only
  sleeps, so the difference is interpreter and fsync bookkeeping),
* CPU per sampler step, and the share of one core that cost makes at a 1 s
  interval (the target is < 1 %).

A faster interval (e.g. `--interval 0.1`) measures more steps in less time;
the per-step cost is what scales.  `--command` adds a command source; the
children's CPU is then reported too (a process spawn per interval is usually
the dominant cost, and it is the design's choice, not the sampler's).

    python benchmarks/bench_sampler.py --seconds 60 --interval 1
"""

from __future__ import annotations

import argparse
import resource
import shlex
import tempfile
import threading
import time
from pathlib import Path

from confirmatory.core.hostrules import HostParams
from confirmatory.host.sampler import CommandSource, FileSource, HostMonitor, RealReaders
from confirmatory.runtime.clock import Clock
from confirmatory.testing.hostfakes import open_host_log


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--interval", type=float, default=1.0)
    parser.add_argument(
        "--psi-path", default="/proc/pressure/memory", help="a missing path measures the psutil fallback"
    )
    parser.add_argument("--command", help="also run this command (one shell-quoted string) every interval")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        guard = Path(tmp) / "guard.log"
        guard.write_text("")
        sources = [FileSource("guard", guard)]
        if args.command:
            sources.append(CommandSource("cmd", shlex.split(args.command)))
        readers = RealReaders(psi_path=args.psi_path, sources=sources)
        clock = Clock()
        writer = open_host_log(Path(tmp) / "host.jsonl", clock)
        spec = HostParams(sample_interval_s=args.interval, max_gap_s=max(45.0, 3 * args.interval))
        fatal: list[tuple[str, str]] = []
        monitor = HostMonitor(writer, clock, spec, on_fatal=lambda c, d: fatal.append((c, d)), readers=readers)

        self_before = resource.getrusage(resource.RUSAGE_SELF)
        kids_before = resource.getrusage(resource.RUSAGE_CHILDREN)
        wall_before = time.monotonic()
        monitor.start()
        stop = threading.Event()
        # An evidence line now and then, so the follow path is exercised too.
        while not stop.wait(min(5.0, args.seconds / 4)) and time.monotonic() - wall_before < args.seconds:
            with open(guard, "a") as f:
                f.write("bench: a guard line\n")
        monitor.stop()
        monitor.join()
        wall = time.monotonic() - wall_before
        self_after = resource.getrusage(resource.RUSAGE_SELF)
        kids_after = resource.getrusage(resource.RUSAGE_CHILDREN)
        writer.close()

    steps = sum(1 for line in monitor.lines if line["event"] in ("sample", "sample-failed"))
    thread_cpu = monitor.sampler_cpu_s
    process_cpu = (self_after.ru_utime + self_after.ru_stime) - (self_before.ru_utime + self_before.ru_stime)
    kids_cpu = (kids_after.ru_utime + kids_after.ru_stime) - (kids_before.ru_utime + kids_before.ru_stime)
    per_step = thread_cpu / max(1, steps)
    print(f"pressure source        {readers.pressure_source}")
    print(f"interval / wall        {args.interval:g} s / {wall:.1f} s, {steps} steps")
    print(f"sampler thread CPU     {thread_cpu * 1e3:.1f} ms = {100 * thread_cpu / wall:.3f} % of one core")
    print(f"process CPU (all)      {process_cpu * 1e3:.1f} ms = {100 * process_cpu / wall:.3f} % of one core")
    if args.command:
        print(f"command children CPU   {kids_cpu * 1e3:.1f} ms = {100 * kids_cpu / wall:.3f} % of one core")
    print(f"CPU per step           {per_step * 1e3:.3f} ms")
    print(f"at a 1 s interval      {100 * per_step / 1.0:.3f} % of one core (target < 1 %)")
    if fatal:
        print(f"fatal reports: {fatal}")


if __name__ == "__main__":
    main()
