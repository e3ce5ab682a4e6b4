"""The python tool's sandbox: no network, no writes outside its directory, killed at its time
and memory limits, no secrets from the parent environment."""

from __future__ import annotations

import socket
import uuid
from pathlib import Path

import pytest

from easy_core.core.schemas import StepRequest
from easy_core.executors.python_tool import PythonToolExecutor, extract_code
from easy_core.world.sandbox import SandboxLimits, run_python
from easy_core.world.suites.sim import generate_task
from tests.conftest import run
from tests.helpers import python_tool_profile


def test_runs_code_and_returns_what_it_printed():
    result = run_python("import math\nprint(math.factorial(10))")
    assert result.ok and result.stdout.strip() == "3628800"


def test_cannot_open_a_network_connection():
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        listener.settimeout(1.0)
        port = listener.getsockname()[1]
        code = (
            "import socket\n"
            f"s = socket.create_connection(('127.0.0.1', {port}), timeout=2)\n"
            "s.sendall(b'leak')\nprint('connected')\n"
        )
        result = run_python(code)
        assert not result.ok and "connected" not in result.stdout
        with pytest.raises(TimeoutError):
            listener.accept()


def test_cannot_write_outside_its_directory(tmp_path):
    target = tmp_path / f"escape-{uuid.uuid4().hex}"
    for code in (
        f"open({str(target)!r}, 'w').write('x')",
        f"import os\nos.close(os.open({str(target)!r}, os.O_WRONLY | os.O_CREAT))",
        f"import pathlib\npathlib.Path({str(target)!r}).write_text('x')",
        f"import os\nos.remove({str(Path(__file__))!r})",
    ):
        result = run_python(code)
        assert not result.ok and "sandbox" in result.stderr, code
    assert not target.exists() and Path(__file__).exists()
    inside = run_python("open('notes.txt', 'w').write('kept')\nprint(open('notes.txt').read())")
    assert inside.ok and inside.stdout.strip() == "kept"


def test_cannot_start_processes():
    result = run_python("import subprocess\nsubprocess.run(['ls', '/'])")
    assert not result.ok and "sandbox" in result.stderr


def test_is_killed_at_its_time_limits():
    busy = run_python("while True:\n    pass", SandboxLimits(wall_s=10, cpu_s=1))
    assert not busy.ok and busy.returncode < 0  # SIGXCPU / SIGKILL from the CPU limit
    sleeper = run_python("import time\ntime.sleep(30)", SandboxLimits(wall_s=1))
    assert sleeper.timed_out and not sleeper.ok


def test_is_stopped_at_its_memory_limit():
    result = run_python(
        "x = bytearray(2 * 1024**3)\nprint('allocated')", SandboxLimits(memory_mb=256)
    )
    assert not result.ok and "MemoryError" in result.stderr and "allocated" not in result.stdout


def test_sees_no_secret_of_the_parent(monkeypatch):
    monkeypatch.setenv("EASY_CANARY_API_KEY", "sk-canary-123")
    result = run_python(
        "import os\nprint(sorted(os.environ))\nprint(os.environ.get('EASY_CANARY_API_KEY'))"
    )
    assert result.ok and "sk-canary-123" not in result.stdout


def test_python_tool_executor_step():
    tool = PythonToolExecutor(python_tool_profile(), SandboxLimits(wall_s=5))
    task = generate_task(0, "test", 0)
    ok = run(
        tool.run(StepRequest("s1", "Compute:\n```python\nprint(sum(range(101)))\n```", task)),
        "wall",
    )
    assert ok.status == "ok" and ok.output == "5050"
    bad = run(tool.run(StepRequest("s2", "raise ValueError('nope')", task)), "wall")
    assert bad.status == "failed" and "ValueError: nope" in bad.error
    assert extract_code("no fence here") == "no fence here"
