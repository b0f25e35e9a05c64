"""The web UI from a test: dagster-webserver on loopback, its GraphQL API, and headless Chromium.

Chromium is Debian's (`chromium`); without it the browser parts of a test skip. Screenshots go to
$PLATFORM_TEST_ARTIFACTS (default <repo>/test-artifacts/ui/, git-ignored), kept after the run so CI
can upload them.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
SELECTOR = {"repositoryLocationName": "platform_assets.definitions", "repositoryName": "__repository__"}
WINDOW = (1600, 1000)
# Grey-level standard deviation of a screenshot: the pages the tests save measure 15.9 (backfill page,
# mostly white) to 56.8 (the card dialog over the dimmed page); a blank or single-colour page measures 0.
MIN_PIXEL_STD = 8.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def graphql(port: int, query: str, variables: dict | None = None) -> dict:
    req = urllib.request.Request(f"http://127.0.0.1:{port}/graphql", method="POST",
                                 data=json.dumps({"query": query, "variables": variables or {}}).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as resp:
        body = json.loads(resp.read())
    assert "errors" not in body, body
    return body["data"]


def start_webserver(env: dict, port: int, timeout: float = 120) -> subprocess.Popen:
    """dagster-webserver for the code location on 127.0.0.1:port, returned once it answers."""
    server = subprocess.Popen([str(BIN / "dagster-webserver"), "-m", "platform_assets.definitions",
                               "-h", "127.0.0.1", "-p", str(port)], env=env, cwd=REPO,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + timeout
    while True:
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/server_info", timeout=2)
            return server
        except OSError:
            if time.time() > deadline or server.poll() is not None:
                stop(server)
                pytest.fail("dagster-webserver did not come up")
            time.sleep(1)


def stop(proc: subprocess.Popen, timeout: float = 30) -> None:
    """Terminate a process we started (SIGTERM, then SIGKILL after `timeout`)."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=timeout)


def chromium_or_skip() -> str:
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        pytest.skip("Debian chromium not installed (scripts/setup.sh installs it with PLATFORM_SYSTEM_DEPS=1)")
    return chromium


_CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                   "--disable-background-networking", "--disable-component-update", "--disable-sync",
                   "--hide-scrollbars"]


def rendered_dom(chromium: str, url: str, profile: Path) -> str:
    """The page's DOM after its JavaScript ran, from Debian's headless Chromium (no network but loopback)."""
    return subprocess.run(
        [chromium, *_CHROMIUM_FLAGS, f"--user-data-dir={profile}", "--virtual-time-budget=20000", "--dump-dom", url],
        capture_output=True, text=True, timeout=120).stdout


def artifacts_dir() -> Path:
    out = Path(os.environ.get("PLATFORM_TEST_ARTIFACTS") or REPO / "test-artifacts" / "ui")
    out.mkdir(parents=True, exist_ok=True)
    return out


def assert_screenshot(path: Path, size: tuple[int, int] = WINDOW) -> None:
    """A PNG Pillow opens, of the window's size, with something drawn on it."""
    from PIL import Image, ImageStat

    with Image.open(path) as img:
        assert img.format == "PNG" and img.size == size, (path, img.format, img.size)
        std = ImageStat.Stat(img.convert("L")).stddev[0]
    assert std > MIN_PIXEL_STD, f"{path} looks blank (pixel std {std:.1f})"


class Browser:
    """Headless Chromium driven over the DevTools protocol (CDP).

    `--screenshot`/`--dump-dom` only see a page as it loads; some of what the UI shows sits behind a
    click held in React state, not in the URL (the asset overview's Table/Plots toggle, a markdown
    metadata entry over 1,000 characters behind "[Show Markdown]"). Here a test waits until the page
    shows given text (bounded polling, no fixed sleeps), clicks, and saves what is on screen.
    """

    def __init__(self, chromium: str, profile: Path, size: tuple[int, int] = WINDOW, timeout: float = 60):
        from websockets.sync.client import connect  # uvicorn[standard], a dagster-webserver dependency

        profile.mkdir(parents=True, exist_ok=True)
        port_file = profile / "DevToolsActivePort"
        port_file.unlink(missing_ok=True)
        self.size = size
        self.proc = subprocess.Popen(
            [chromium, *_CHROMIUM_FLAGS, f"--user-data-dir={profile}", f"--window-size={size[0]},{size[1]}",
             "--remote-debugging-address=127.0.0.1", "--remote-debugging-port=0", "about:blank"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            # port 0: Chromium picks a free port and writes it as the file's first line
            deadline = time.time() + timeout
            while not (port_file.exists() and port_file.read_text().strip()):
                if time.time() > deadline or self.proc.poll() is not None:
                    raise RuntimeError("chromium did not open its DevTools port")
                time.sleep(0.2)
            port = int(port_file.read_text().split()[0])
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=10) as resp:
                page = next(t for t in json.loads(resp.read()) if t["type"] == "page")
            self._closing = contextlib.ExitStack()
            self.ws = self._closing.enter_context(
                connect(page["webSocketDebuggerUrl"], max_size=None, proxy=None, open_timeout=timeout))
        except BaseException:
            stop(self.proc)
            raise
        self._id = 0
        self.send("Page.enable")
        self.send("Emulation.setDeviceMetricsOverride", width=size[0], height=size[1], deviceScaleFactor=1,
                  mobile=False)

    def send(self, method: str, timeout: float = 60, **params) -> dict:
        self._id += 1
        self.ws.send(json.dumps({"id": self._id, "method": method, "params": params}))
        deadline = time.time() + timeout
        while True:  # events arrive in between; the reply carries our id
            msg = json.loads(self.ws.recv(timeout=max(0.1, deadline - time.time())))
            if msg.get("id") == self._id:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                return msg["result"]

    def evaluate(self, expression: str):
        result = self.send("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in result:
            raise RuntimeError(f"{expression}: {result['exceptionDetails']}")
        return result["result"].get("value")

    def text(self) -> str:
        return self.evaluate("document.body ? document.body.innerText : ''") or ""

    def dialog_text(self) -> str:
        """The visible text of the open dialogs (Blueprint's, role=dialog)."""
        return self.evaluate(
            "[...document.querySelectorAll('[role=dialog]')].map(d => d.innerText).join('\\n')") or ""

    def shows_name(self, name: str) -> bool:
        """`name` on screen whole, or as the graph draws a long one: middle-truncated ("dedupli…_documents")."""
        return any(line == name or ("…" in line and name.startswith(line.split("…")[0])
                                    and name.endswith(line.split("…")[-1]) and len(line) > 8)
                   for line in (x.strip() for x in self.text().splitlines()))

    def dom(self) -> str:
        return self.evaluate("document.documentElement.outerHTML") or ""

    def _missing(self, texts: tuple[str, ...]) -> list[str]:
        # visible text, or markup (a link's target, an image's data URI)
        shown, dom = self.text(), self.dom()
        return [t for t in texts if t not in shown and t not in dom]

    def wait_for(self, *texts: str, timeout: float = 90) -> str:
        """Poll until the page's visible text or DOM holds every one of `texts`, then until its DOM
        stops changing (charts draw after their data arrives); returns the DOM."""
        deadline = time.time() + timeout
        while missing := self._missing(texts):
            if time.time() > deadline:
                raise AssertionError(f"page never showed {missing}; it shows: {self.text()[-3000:]}")
            time.sleep(0.5)
        # at most 10 s more: the UI refreshes live data (relative times, run status) every few seconds
        settle = min(deadline, time.time() + 10)
        previous, dom = None, self.dom()
        while dom != previous and time.time() < settle:
            time.sleep(1)
            previous, dom = dom, self.dom()
        return dom

    def open(self, url: str, *texts: str, timeout: float = 90) -> str:
        self.send("Page.navigate", url=url)
        return self.wait_for(*texts, timeout=timeout)

    def click(self, text: str, selector: str = "button", row: str | None = None) -> None:
        """Click the first `selector` element whose visible text is exactly `text`; with `row`, the one
        in the table row whose first cell reads `row` (a metadata entry's label)."""
        scope = ("document" if row is None else
                 f"[...document.querySelectorAll('tr')].find(r => r.cells.length &&"
                 f" r.cells[0].innerText.trim() === {json.dumps(row)})")
        found = self.evaluate(
            f"(() => {{ const scope = {scope}; const el = scope && [...scope.querySelectorAll({json.dumps(selector)})]"
            f".find(e => e.innerText.trim() === {json.dumps(text)}); if (el) {{ el.scrollIntoView(); el.click(); }}"
            f" return !!el; }})()")
        assert found, f"no {selector} reading {text!r} (row {row!r}) on {self.evaluate('location.href')}"

    def scroll_to(self, text: str, block: str = "center") -> None:
        """Scroll the innermost element whose visible text holds `text` into view."""
        found = self.evaluate(
            f"(() => {{ const els = [...document.querySelectorAll('body *')]"
            f".filter(e => e.innerText && e.innerText.includes({json.dumps(text)}));"
            f" const el = els[els.length - 1]; if (el) el.scrollIntoView({{block: {json.dumps(block)}}});"
            f" return !!el; }})()")
        assert found, f"nothing reads {text!r} on {self.evaluate('location.href')}"

    def screenshot(self, path: Path) -> Path:
        data = self.send("Page.captureScreenshot", format="png")["data"]
        path.write_bytes(base64.b64decode(data))
        return path

    def close(self) -> None:
        try:
            self._closing.close()
        finally:
            stop(self.proc, timeout=10)

    def __enter__(self) -> Browser:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
