"""moto's S3 server as a subprocess on 127.0.0.1: the real S3 endpoint the S3 tests talk to."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def moto_server() -> Iterator[int]:
    """Start `python -m moto.server` on a free loopback port, wait until it accepts connections (~1-3 s),
    yield the port, stop it afterwards. Every bucket lives in its memory: a restart is an empty S3."""
    pytest.importorskip("moto")
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.time() + 30
        while True:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                    break
            except OSError:
                if time.time() > deadline:
                    pytest.fail("moto server did not start")
                time.sleep(0.2)
        yield port
    finally:
        proc.terminate()
        proc.wait(timeout=10)
