"""``confirmatory witness serve`` and ``confirmatory key new``: thin commands over
``anchors.tlogwitness`` and ``records.keyfile`` (docs/EVIDENCE.md)."""

from __future__ import annotations

import signal
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from confirmatory.core.exits import EXIT_OK, EXIT_REFUSED


def key_new_command(name: str, out: Path, *, cosigner: bool = False) -> int:
    """Make the key file; print its verifier key (stdout). Exit 3 when refused."""
    from confirmatory.records.keyfile import KeyFileRefused, make_key_file

    try:
        vkey = make_key_file(out, name, cosigner=cosigner)
    except KeyFileRefused as exc:
        print(f"key new: {exc}", file=sys.stderr)
        return EXIT_REFUSED
    print(vkey, flush=True)
    what = "witness cosigner" if cosigner else "note signer"
    print(
        f"key new: {what} key {name} written to {out} (mode 0600); the line above is its verifier key", file=sys.stderr
    )
    return EXIT_OK


def witness_serve_command(key: Path, state: Path, host: str, port: int, logs: Sequence[str]) -> int:
    """Serve until SIGINT or SIGTERM. Prints the URL, then the witness's verifier key (stdout)."""
    from confirmatory.anchors.tlogwitness import WitnessServer, WitnessStateError, open_witness
    from confirmatory.records.keyfile import KeyFileRefused

    try:
        witness = open_witness(key, state, logs)
    except (ValueError, KeyFileRefused, WitnessStateError) as exc:
        print(f"witness serve: {exc}", file=sys.stderr)
        return EXIT_REFUSED

    # SIGINT and SIGTERM stop it, also when started with SIGINT ignored (a
    # shell's background job). The handler only raises: setting an event from
    # it could deadlock on the event's own lock.
    def stop_serving(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    old = {s: signal.signal(s, stop_serving) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        try:
            server = WitnessServer(witness, host=host, port=port).start()
        except (OSError, OverflowError) as exc:
            why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
            print(f"witness serve: cannot listen on {host} port {port}: {why}", file=sys.stderr)
            return EXIT_REFUSED
        try:
            print(server.url, flush=True)
            print(witness.cosigner.verifier, flush=True)
            print(f"witness serve: cosigning {', '.join(witness.logs)}; state in {witness.state_path}", file=sys.stderr)
            while True:
                time.sleep(3600)
        except KeyboardInterrupt:
            pass
        finally:
            server.stop()
    finally:
        for s, h in old.items():
            signal.signal(s, h)
    return EXIT_OK
