"""The console under test: a real `topiclake console` process, and what the tests read from headless
Chromium's pages."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from tests.support.paths import REPO
from tests.support.broker_process import free_port


CHROMIUM = "/usr/bin/chromium"


FIRST_PAINT_JS = """new Promise(resolve => {
    const loaded = () => performance.getEntriesByType('navigation')[0].domContentLoadedEventEnd;
    new PerformanceObserver(list => resolve(list.getEntries()[0].startTime))
        .observe({type: 'paint', buffered: true});
    setTimeout(() => resolve(loaded()), 2000);  // no paint entry (a page with nothing to paint): DOM ready
})"""  # the first contentful paint of the page, in ms since the navigation began


class ConsoleProcess:
    """`topiclake console` on a free loopback port, for one storage root."""

    def __init__(self, root: Path, bootstrap: str, *, args: tuple[str, ...] = (), log_path: Path | None = None):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = log_path or root.parent / "console.log"
        self.command = [sys.executable, "-m", "topiclake.cli", "console", "--data", str(root), "--bootstrap", bootstrap,
                        "--listen", f"127.0.0.1:{self.port}", "--sample-interval", "0.5", *args]
        self.proc: subprocess.Popen | None = None

    def start(self, timeout: float = 60.0) -> "ConsoleProcess":
        self._log = open(self.log_path, "ab")
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        self.proc = subprocess.Popen(self.command, stdout=self._log, stderr=subprocess.STDOUT, env=env, cwd=REPO)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"console exited with {self.proc.returncode}: {self.log()}")
            try:
                with urllib.request.urlopen(f"{self.url}/healthz", timeout=2) as response:
                    if response.status == 200:
                        return self
            except OSError:
                time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"console did not start within {timeout}s: {self.log()}")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self._log.close()

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def __enter__(self) -> "ConsoleProcess":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def screenshot(page, artifacts: Path, name: str) -> Path:
    """A full-page PNG of what the browser shows, kept as a test artifact (its path printed)."""
    path = artifacts / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    print(f"screenshot: {path}")
    return path


def cells(page, selector: str) -> list[str]:
    return [text.strip() for text in page.locator(selector).all_inner_texts()]
