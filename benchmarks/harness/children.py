"""A measurement in a process of its own: each read in a new Spark (a new JVM and new Python
workers), so that what one read compiled or left behind weighs on no other.

The child prints its figures on one line, ``RESULT {json}``; everything else it prints (Spark's
chatter, logs) is ignored, and kept for the error when no result comes.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from typing import Any

_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_RESULT = "RESULT "


def print_result(figures: dict[str, Any]) -> None:
    """The child's answer (see the module's docstring)."""
    print(_RESULT + json.dumps(figures), flush=True)


def run_child(module: str, *arguments: str) -> dict[str, Any]:
    """``python -m module --child arguments...`` to its end; the figures it printed."""
    completed = subprocess.run([sys.executable, "-m", module, "--child", *arguments],
                               capture_output=True, text=True, cwd=_ROOT)
    for line in completed.stdout.splitlines():
        if line.startswith(_RESULT):
            return json.loads(line[len(_RESULT):])
    raise RuntimeError(f"{module} child {arguments[:3]} failed (exit {completed.returncode}): "
                       f"{completed.stderr[-2000:]}")


class Child:
    """A child that stays up between measurements (``python -m module --child arguments...``): it
    prints ``READY``, then answers each line written to its stdin with one ``RESULT`` line, until
    stdin closes. Its stderr is kept (the last 200 lines) for the error when it fails."""

    def __init__(self, module: str, *arguments: str) -> None:
        self._name = f"{module} child {' '.join(arguments[:2])}"
        self._process = subprocess.Popen([sys.executable, "-m", module, "--child", *arguments], stdin=subprocess.PIPE,
                                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=_ROOT)
        self._stderr: list[str] = []
        threading.Thread(target=self._keep_stderr, daemon=True).start()
        self._expect("READY")

    def _keep_stderr(self) -> None:
        assert self._process.stderr is not None
        for line in self._process.stderr:
            self._stderr = (self._stderr + [line])[-200:]

    def _expect(self, prefix: str) -> str:
        assert self._process.stdout is not None
        for line in self._process.stdout:
            if line.startswith(prefix):
                return line[len(prefix):].strip()
        self._process.wait()
        raise RuntimeError(f"{self._name} failed (exit {self._process.returncode}): {''.join(self._stderr)[-2000:]}")

    def ask(self, request: str) -> dict[str, Any]:
        assert self._process.stdin is not None
        self._process.stdin.write(request + "\n")
        self._process.stdin.flush()
        return json.loads(self._expect(_RESULT))

    def close(self) -> None:
        if self._process.stdin is not None:
            self._process.stdin.close()
        self._process.wait(timeout=120)


def serve(answer: Any) -> None:
    """The child's side of :class:`Child`: ``READY``, then ``answer(line)`` for each line of stdin."""
    print("READY", flush=True)
    for line in sys.stdin:
        print_result(answer(line.strip()))
