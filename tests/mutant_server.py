"""A fork server for the mutation test (tests/test_mutants.py).

Each mutant's named test must run in a process of its own that imports the
mutated package afresh. Most of such a process's life went to importing the
same third-party libraries again (litellm alone takes seconds and ~190 MB):
this server imports them once, never imports ``confirmatory`` or a test
module, and forks one child per request. The child changes to the project
copy, puts it first on ``sys.path`` and runs pytest there, so everything of
the project it imports is read from the (mutated) files on disk.

Protocol, one JSON object per line: the request on stdin
``{"project": DIR, "args": [...], "out": FILE, "timeout": SECONDS}``; the
reply on stdout ``{"rc": N}`` (pytest's exit code, ``-9`` when the child
was killed at its timeout). The child's output goes to ``out``.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time


def preload() -> None:
    """Import what the named tests import anyway, the way the package does."""
    # as confirmatory.engine.llm.boundary imports it: offline, TIKTOKEN_CACHE_DIR kept
    os.environ["LITELLM_OFFLINE_MODE"] = "true"
    saved_tiktoken = os.environ.get("TIKTOKEN_CACHE_DIR")
    import litellm  # noqa: F401, PLC0415

    if saved_tiktoken is None:
        os.environ.pop("TIKTOKEN_CACHE_DIR", None)
    else:
        os.environ["TIKTOKEN_CACHE_DIR"] = saved_tiktoken
    for name in ("pytest", "hypothesis", "httpx", "psutil", "click", "filelock", "pydantic", "freezegun"):
        __import__(name)


def _child(project: str, args: list[str], out: str) -> None:
    os.setpgid(0, 0)  # its own group: a timeout kills the test's children too
    fd = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
    os.chdir(project)
    sys.path.insert(0, project)
    os.environ["PYTHONPATH"] = project  # for the processes the test starts
    import pytest  # noqa: PLC0415

    try:
        rc = int(pytest.main(args))
    except BaseException:  # noqa: BLE001 - whatever happened is the run's outcome
        import traceback  # noqa: PLC0415

        traceback.print_exc()
        rc = 3
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(rc)


def _wait(pid: int, timeout: float) -> int:
    deadline = time.monotonic() + timeout
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        if time.monotonic() > deadline:
            try:
                os.killpg(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            os.waitpid(pid, 0)
            return -9
        time.sleep(0.02)


def main() -> None:
    sys.dont_write_bytecode = True
    preload()
    replies = sys.stdout
    for line in sys.stdin:
        request = json.loads(line)
        pid = os.fork()
        if pid == 0:
            _child(request["project"], request["args"], request["out"])
        rc = _wait(pid, float(request["timeout"]))
        replies.write(json.dumps({"rc": rc}) + "\n")
        replies.flush()


if __name__ == "__main__":
    main()
