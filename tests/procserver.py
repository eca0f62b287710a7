"""Runner processes for the tests, forked from a server that has litellm imported.

The kill suites start hundreds of runner processes (``run``, ``continue``,
``demo``), each of which spent most of its life importing litellm (about
3 s of CPU, more than the run itself). ``popen`` and ``run`` here start the
same script with the same arguments, environment, working directory and
standard streams as ``subprocess.Popen``, in a real process of its own that a
test can SIGKILL, but forked from a server (this file run as a script, one
per test process) that imported the third-party libraries once, as
``confirmatory.engine.llm.boundary`` imports litellm, and never imports
``confirmatory``: each child reads the package afresh from its own
``sys.path`` (the script's folder, then ``PYTHONPATH``), so a mutated copy
(tests/test_mutants.py) is what it runs.

Protocol over a Unix socket pair, one request and its answer at a time:
``{"argv", "cwd", "env"}`` with the child's three standard streams as file
descriptors (SCM_RIGHTS), answered ``{"pid": N}``; ``{"status": N}``,
answered ``{"code": C}``, C as ``Popen.returncode`` (``-9`` for a SIGKILL)
once the child has ended (and is then reaped), else null. The server ends,
killing its children, when the client's end closes.
"""

from __future__ import annotations

import atexit
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

_HERE = Path(__file__).resolve()


# ---------------------------------------------------------------- the server


def _serve(fd: int) -> None:
    from mutant_server import preload  # noqa: PLC0415 - the same third-party imports

    preload()
    # a fresh interpreter's path, without this file's folder (the tests')
    base_path = [p for p in sys.path if Path(p or ".").resolve() != _HERE.parent]
    sock = socket.socket(fileno=fd)
    children: set[int] = set()
    pending: list[int] = []  # descriptors received, three per spawn request in order
    buf = b""
    try:
        while True:
            data, fds, _, _ = socket.recv_fds(sock, 1 << 16, 3)
            if not data:
                return
            buf += data
            pending += fds
            while b"\n" in buf:
                line, buf = buf.split(b"\n", 1)
                request = json.loads(line)
                if "status" in request:
                    # Reaped only here, when the client asks and is told: as
                    # with a Popen child, a kill before that reaches the
                    # process or its zombie, never a process that took its pid.
                    pid = request["status"]
                    done, status = os.waitpid(pid, os.WNOHANG)
                    code = os.waitstatus_to_exitcode(status) if done else None
                    if done:
                        children.discard(pid)
                    sock.sendall(json.dumps({"code": code}).encode() + b"\n")
                    continue
                pid = os.fork()
                if pid == 0:
                    sock.close()
                    _child(request, pending[:3], base_path)
                for f in pending[:3]:
                    os.close(f)
                del pending[:3]
                children.add(pid)
                sock.sendall(json.dumps({"pid": pid}).encode() + b"\n")
    finally:
        for pid in children:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        os._exit(0)  # not litellm's exit handlers: they take seconds and hold nothing of ours


def _child(request: dict[str, Any], fds: list[int], base_path: list[str]) -> None:
    code = 1
    try:
        for target, f in enumerate(fds):
            os.dup2(f, target)
            os.close(f)
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        argv = request["argv"]
        extra = [p for p in request["env"].get("PYTHONPATH", "").split(os.pathsep) if p]
        sys.stdin = open(0, closefd=False)  # noqa: SIM115
        sys.stdout = open(1, "w", closefd=False)  # noqa: SIM115
        sys.stderr = open(2, "w", closefd=False)  # noqa: SIM115
        import runpy  # noqa: PLC0415

        if argv[0] == "-c":
            sys.argv = ["-c", *argv[2:]]
            sys.path[:] = ["", *extra, *base_path]
            exec(compile(argv[1], "<string>", "exec"), {"__name__": "__main__"})  # noqa: S102 - as python -c
        elif argv[0] == "-m":
            sys.argv = [argv[1], *argv[2:]]
            sys.path[:] = [request["cwd"], *extra, *base_path]
            runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
        else:
            sys.argv = list(argv)
            sys.path[:] = [str(Path(argv[0]).resolve().parent), *extra, *base_path]
            runpy.run_path(argv[0], run_name="__main__")
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        if exc.code is not None and not isinstance(exc.code, int):
            print(exc.code, file=sys.stderr)
    except BaseException:  # noqa: BLE001 - as the interpreter would: a traceback, exit 1
        import traceback  # noqa: PLC0415

        traceback.print_exc()
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:  # noqa: BLE001
                pass
        os._exit(code)


# ---------------------------------------------------------------- the client


class _Server:
    def __init__(self) -> None:
        ours, theirs = socket.socketpair()
        self.sock = ours
        self.proc = subprocess.Popen(
            [sys.executable, str(_HERE), str(theirs.fileno())], pass_fds=[theirs.fileno()], close_fds=True
        )
        theirs.close()
        self.lock = threading.Lock()
        self.buf = b""

    def spawn(self, argv: list[str], cwd: str, env: dict[str, str], fds: list[int]) -> int:
        with self.lock:
            request = json.dumps({"argv": argv, "cwd": cwd, "env": env}).encode() + b"\n"
            socket.send_fds(self.sock, [request], fds)
            return int(self._reply()["pid"])

    def _reply(self) -> dict[str, Any]:
        """The server's answer to the one request in flight (the lock held)."""
        while b"\n" not in self.buf:
            data = self.sock.recv(1 << 16)
            if not data:
                raise RuntimeError(f"the process server ended (rc {self.proc.poll()})")
            self.buf += data
        line, self.buf = self.buf.split(b"\n", 1)
        reply: dict[str, Any] = json.loads(line)
        return reply

    def exit_code(self, pid: int, timeout: float | None) -> int | None:
        """The child's exit code once it has ended (the server then reaps
        it), else None after ``timeout`` (0: asked once)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            with self.lock:
                self.sock.sendall(json.dumps({"status": pid}).encode() + b"\n")
                code = self._reply()["code"]
            if code is not None:
                return int(code)
            if deadline is not None and time.monotonic() >= deadline:
                return None
            time.sleep(0.01 if deadline is None else max(0.0, min(0.01, deadline - time.monotonic())))

    def close(self) -> None:
        self.sock.close()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()


_server: _Server | None = None


def _the_server() -> _Server:
    global _server
    if _server is None or _server.proc.poll() is not None:
        _server = _Server()
        atexit.register(_server.close)
    return _server


class ServedProcess:
    """What a test uses of ``subprocess.Popen``: pid, poll, wait, communicate, kill."""

    def __init__(self, argv: list[str], *, env: dict[str, str] | None, cwd: Any, stdout: Any, stderr: Any, text: bool):
        assert argv[0] == sys.executable, "the process server runs Python scripts and modules only"
        self.args = argv
        self.returncode: int | None = None
        self.stdout: Any = None
        self.stderr: Any = None
        theirs: list[int] = [os.open(os.devnull, os.O_RDONLY)]
        close_after = [theirs[0]]
        for target, which in ((1, stdout), (2, stderr)):
            if which == subprocess.PIPE:
                r, w = os.pipe()
                theirs.append(w)
                close_after.append(w)
                setattr(self, "stdout" if target == 1 else "stderr", os.fdopen(r, "r" if text else "rb"))
            elif which == subprocess.DEVNULL:
                theirs.append(os.open(os.devnull, os.O_WRONLY))
                close_after.append(theirs[-1])
            elif which == subprocess.STDOUT:
                theirs.append(theirs[1])
            elif which is None:
                theirs.append(target)  # the test's own, as a Popen child inherits it
            else:
                theirs.append(which.fileno() if hasattr(which, "fileno") else int(which))
        self.server = _the_server()
        try:
            here = str(cwd or os.getcwd())
            self.pid = self.server.spawn(argv[1:], here, dict(os.environ if env is None else env), theirs)
        finally:
            for f in close_after:
                os.close(f)

    def poll(self) -> int | None:
        if self.returncode is None:
            self.returncode = self.server.exit_code(self.pid, 0)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            self.returncode = self.server.exit_code(self.pid, timeout)
            if self.returncode is None:
                raise subprocess.TimeoutExpired(self.args, timeout or 0)
        return self.returncode

    def communicate(self, timeout: float | None = None) -> tuple[Any, Any]:
        out: dict[str, Any] = {}

        def drain(name: str, pipe: Any) -> None:
            out[name] = pipe.read()
            pipe.close()

        readers = [
            threading.Thread(target=drain, args=(name, pipe), daemon=True)
            for name, pipe in (("out", self.stdout), ("err", self.stderr))
            if pipe is not None
        ]
        for r in readers:
            r.start()
        deadline = None if timeout is None else time.monotonic() + timeout
        for r in readers:
            r.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
            if r.is_alive():
                raise subprocess.TimeoutExpired(self.args, timeout or 0)
        self.wait(None if deadline is None else max(0.0, deadline - time.monotonic()))
        return out.get("out"), out.get("err")

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            os.kill(self.pid, sig)  # not reaped yet: at worst its zombie

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)


def popen(argv: list[str], *, env=None, cwd=None, stdout=None, stderr=None, text=False) -> ServedProcess:
    """``subprocess.Popen(argv, ...)`` for ``[sys.executable, SCRIPT, ...]``, forked from the server."""
    return ServedProcess(list(map(str, argv)), env=env, cwd=cwd, stdout=stdout, stderr=stderr, text=text)


def run(argv: list[str], *, env=None, cwd=None, capture_output=False, text=False, timeout=None):
    """``subprocess.run`` of the same, forked from the server."""
    pipe = subprocess.PIPE if capture_output else None
    proc = popen(argv, env=env, cwd=cwd, stdout=pipe, stderr=pipe, text=text)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        raise
    return subprocess.CompletedProcess(argv, proc.returncode, out, err)


if __name__ == "__main__":
    sys.dont_write_bytecode = bool(os.environ.get("PYTHONDONTWRITEBYTECODE"))
    _serve(int(sys.argv[1]))
