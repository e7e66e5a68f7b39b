"""The console's tests: a real `topiclake console` process, and headless Chromium (Debian's
`chromium`, bin/_env.sh) driven by Playwright. Screenshots of the pages go to
artifacts/console/ in the checkout (ignored by git; $TOPICLAKE_ARTIFACTS overrides)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.support.paths import REPO
from tests.support.console import CHROMIUM


@pytest.fixture(scope="session")
def artifacts() -> Path:
    directory = Path(os.environ.get("TOPICLAKE_ARTIFACTS", REPO / "artifacts")) / "console"
    directory.mkdir(parents=True, exist_ok=True)
    return directory


@pytest.fixture(scope="package")
def chromium():
    """Headless Chromium from Debian's package (never a Playwright browser download). Package
    scope: Playwright's sync API runs an event loop on the main thread while it is open, and every
    later test that calls asyncio.run (aiokafka's) would find it running."""
    if not Path(CHROMIUM).exists():
        pytest.fail(f"{CHROMIUM} is missing: run bin/test as root once (bin/_env.sh installs Debian's chromium), "
                    "or apt-get install chromium")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True,
                                             args=["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"])
        yield browser
        browser.close()


@pytest.fixture
def page(chromium):
    """A fresh browser page (its own context, 1280x900) for one test; the module's fixture starts the
    console it visits."""
    context = chromium.new_context(viewport={"width": 1280, "height": 900})
    yield context.new_page()
    context.close()
