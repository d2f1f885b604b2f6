"""What the environments' tests share: a wheel that installs without an index, an interpreter speaking another
protocol, a run waited for to its end, an index that stalls a build as long as a test wants."""

from __future__ import annotations

import shutil
import sys
import threading
import zipfile
from pathlib import Path

from benchd.protocol.messages import PROTOCOL_VERSION
from tests.helpers import ROOT

NEWEST = ROOT / ".venv-newest" / "bin" / "python"
SRC = ROOT / "src" / "benchd"


def probe_wheel(where: Path, requires: tuple[str, ...] = ()) -> Path:
    """A wheel of one module, written here: a requirement that installs without an index (its dependencies too,
    where the daemon's environment has them)."""
    path = where / "benchd_probe-1.0-py3-none-any.whl"
    metadata = "Metadata-Version: 2.1\nName: benchd-probe\nVersion: 1.0\n" + "".join(
        f"Requires-Dist: {r}\n" for r in requires)
    files = {"benchd_probe.py": "VALUE = 1\n",
             "benchd_probe-1.0.dist-info/METADATA": metadata,
             "benchd_probe-1.0.dist-info/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\n"
                                                 "Tag: py3-none-any\n"}
    with zipfile.ZipFile(path, "w") as wheel:
        for name, text in files.items():
            wheel.writestr(name, text)
        wheel.writestr("benchd_probe-1.0.dist-info/RECORD",
                       "".join(f"{name},,\n" for name in files) + "benchd_probe-1.0.dist-info/RECORD,,\n")
    return path


def other_protocol(where: Path) -> Path:
    """An interpreter whose benchd (a copy of this one, first on its path) speaks protocol PROTOCOL_VERSION + 1."""
    copy = where / "other" / "benchd"
    shutil.copytree(SRC, copy, ignore=shutil.ignore_patterns("__pycache__"))
    messages = copy / "protocol" / "messages.py"
    text = messages.read_text()
    assert f"PROTOCOL_VERSION = {PROTOCOL_VERSION}\n" in text
    messages.write_text(text.replace(f"PROTOCOL_VERSION = {PROTOCOL_VERSION}\n",
                                     f"PROTOCOL_VERSION = {PROTOCOL_VERSION + 1}\n"))
    python = where / "other-python"
    python.write_text(f'#!/bin/sh\nPYTHONPATH={copy.parent}:$PYTHONPATH exec {sys.executable} "$@"\n')
    python.chmod(0o755)
    return python


def finished(server, run_id: str) -> dict:
    return server.wait_status(run_id, "succeeded", "failed", timeout_s=180)


class StallingIndex:
    """A package index that holds each request until released, then has nothing: a build as long as a test wants."""

    def __init__(self) -> None:
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        self.asked, self.release = threading.Event(), threading.Event()
        index = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                index.asked.set()
                index.release.wait(120)
                self.send_error(404)

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}/simple"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.release.set()
        self.server.shutdown()
