"""Running untrusted Python in a subprocess with limits.

Layers, each enough on its own for what it covers:
- resource limits (setrlimit): CPU seconds, address space, file size, no core dumps; a wall-clock
  timeout kills the whole process group;
- a fresh, empty temporary directory as the working directory and the only writable place, an
  environment with nothing from the parent's (no API keys), isolated mode (`python -I`);
- where the kernel allows it (root or user namespaces), a new network namespace with no
  interfaces, so no connection can leave even from C code;
- an audit hook installed before the user's code runs that refuses sockets, writes outside the
  temporary directory, new processes and ctypes.
"""

from __future__ import annotations

import ctypes
import functools
import os
import resource
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

CLONE_NEWNET = 0x40000000

_GUARD = r"""
import os, sys
_ROOT = os.path.realpath(os.getcwd())
_BLOCKED = ("socket.", "subprocess.", "os.system", "os.exec", "os.posix_spawn", "os.fork",
            "os.spawn", "ctypes.", "os.kill", "pty.", "webbrowser.")
_WRITES = ("os.remove", "os.rename", "os.mkdir", "os.rmdir", "os.symlink", "os.link",
           "os.truncate", "os.chmod", "os.chown", "shutil.rmtree", "shutil.copyfile")

def _inside(path):
    try:
        real = os.path.realpath(os.fsdecode(path))
    except Exception:
        return False
    return real == _ROOT or real.startswith(_ROOT + os.sep)

def _guard(event, args):
    if event.startswith(_BLOCKED):
        raise PermissionError(f"sandbox: {event} is not allowed")
    if event == "open":
        path, mode, flags = args
        writing = (mode and any(c in mode for c in "wax+")) or (flags and flags & 0o3)
        if writing and not isinstance(path, int) and not _inside(path):
            raise PermissionError(f"sandbox: writing {path!r} outside the sandbox is not allowed")
    paths = [a for a in args[:2] if isinstance(a, (str, bytes, os.PathLike))]
    if event in _WRITES and not all(_inside(p) for p in paths):
        raise PermissionError(f"sandbox: {event} outside the sandbox is not allowed")

sys.addaudithook(_guard)
del _guard
code = open("main.py", encoding="utf-8").read()
exec(compile(code, "main.py", "exec"), {"__name__": "__main__"})
"""


@dataclass(frozen=True)
class SandboxLimits:
    wall_s: float = 10.0
    cpu_s: int = 5
    memory_mb: int = 512
    file_mb: int = 16
    output_chars: int = 20_000


@dataclass
class SandboxResult:
    stdout: str
    stderr: str
    returncode: int
    timed_out: bool
    network_isolated: bool

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and not self.timed_out


def _new_network_namespace() -> bool:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.unshare(CLONE_NEWNET) == 0
    except (OSError, AttributeError):
        return False


@functools.cache
def network_namespaces_available() -> bool:
    """Whether this process may create a network namespace (checked in a throwaway child)."""
    try:
        child = os.fork()
    except OSError:
        return False
    if child == 0:
        os._exit(0 if _new_network_namespace() else 1)
    _, status = os.waitpid(child, 0)
    return os.waitstatus_to_exitcode(status) == 0


def run_python(code: str, limits: SandboxLimits = SandboxLimits()) -> SandboxResult:
    with tempfile.TemporaryDirectory(prefix="easy-sandbox-") as workdir:
        Path(workdir, "main.py").write_text(code, encoding="utf-8")
        Path(workdir, "guard.py").write_text(_GUARD, encoding="utf-8")

        def limit() -> None:  # runs in the child, before exec
            os.setsid()
            memory = limits.memory_mb * 1024 * 1024
            resource.setrlimit(resource.RLIMIT_CPU, (limits.cpu_s, limits.cpu_s + 1))
            resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
            resource.setrlimit(resource.RLIMIT_FSIZE, (limits.file_mb * 1024 * 1024,) * 2)
            resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
            _new_network_namespace()

        process = subprocess.Popen(
            [sys.executable, "-I", "-B", "guard.py"],
            cwd=workdir,
            env={"PATH": "/usr/bin:/bin", "HOME": workdir, "TMPDIR": workdir, "LANG": "C.UTF-8"},
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            preexec_fn=limit,  # noqa: PLW1509 - limits must be set in the child before exec
            text=True,
        )
        timed_out = False
        try:
            stdout, stderr = process.communicate(timeout=limits.wall_s)
        except subprocess.TimeoutExpired:
            timed_out = True
            os.killpg(process.pid, signal.SIGKILL)
            stdout, stderr = process.communicate()
        return SandboxResult(
            stdout=stdout[: limits.output_chars],
            stderr=stderr[-limits.output_chars :],
            returncode=process.returncode,
            timed_out=timed_out,
            network_isolated=network_namespaces_available(),
        )
