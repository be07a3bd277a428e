"""A real browser: JupyterLab on 127.0.0.1, Debian's Chromium driven by Playwright.

Opens 05_controls, runs it, clicks Run in the panel, checks that the progress bar completes and
the figure appears, and saves a screenshot in the test's output folder. ``make test`` installs
Chromium (``apt-get install chromium``); no browser is downloaded.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import ROOT

CHROMIUM = "/usr/bin/chromium"
TOKEN = "vivarium-test"


def _skip_or_fail(reason: str) -> None:
    if os.environ.get("VIVARIUM_REQUIRE_BROWSER"):
        pytest.fail(reason)
    pytest.skip(reason)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _run_all(pw: Any, port: int, notebook: str) -> tuple[Any, Any]:
    """Chromium on JupyterLab's ``notebook``, every cell run: the browser and the page."""
    browser = pw.chromium.launch(
        executable_path=CHROMIUM,
        headless=True,
        args=[
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
        ],
    )
    page = browser.new_page(viewport={"width": 1280, "height": 1000})
    page.goto(f"http://127.0.0.1:{port}/lab/tree/{notebook}?token={TOKEN}")
    page.wait_for_selector(".jp-NotebookPanel", timeout=90_000)
    page.wait_for_selector(".jp-Notebook-cell", timeout=60_000)
    time.sleep(2)  # let the kernel connect
    page.click("li.lm-MenuBar-item:has-text('Run')", timeout=20_000)
    page.click("li.lm-Menu-item:has-text('Run All Cells')", timeout=20_000)
    return browser, page


@pytest.mark.timeout(300)
def test_controls_notebook_in_jupyterlab(tmp_path: Path) -> None:
    if not Path(CHROMIUM).exists():
        _skip_or_fail(f"{CHROMIUM} is missing (make test installs Debian's chromium)")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        _skip_or_fail("playwright is not installed (pip install -e '.[dev]')")
    shutil.copy(ROOT / "notebooks" / "05_controls.ipynb", tmp_path / "05_controls.ipynb")
    shot = tmp_path / "controls.png"
    with _jupyterlab(tmp_path) as port, sync_playwright() as pw:
        browser, page = _run_all(pw, port, "05_controls.ipynb")
        button = page.wait_for_selector("button.jupyter-button:has-text('Run')", timeout=120_000)
        # The notebook itself ran the panel once (5 steps); set 7 steps in the form and
        # click, so what we see next can only come from the click.
        page.wait_for_selector(".widget-html:has-text('15 decisions')", timeout=120_000)
        steps = page.locator(".widget-text:has(label:text-is('steps')) input")
        steps.fill("7")
        steps.press("Enter")
        button.click()
        page.wait_for_selector(".widget-html:has-text('21 decisions')", timeout=120_000)
        bar = page.wait_for_selector(".progress-bar-success", timeout=30_000)
        assert bar is not None
        image = page.wait_for_selector(".widget-output img", timeout=60_000)
        assert image is not None and image.bounding_box()["width"] > 100
        progress = page.inner_text(".widget-inline-hbox:has(.progress)")
        assert "7 steps" in progress

        page.screenshot(path=str(shot), full_page=True)
        browser.close()
    assert shot.stat().st_size > 10_000
    print(f"screenshot: {shot}")


# -- the decision inspector -----------------------------------------------------------------------
INSPECT_CELLS = [
    "from vivarium import Experiment\n"
    "exp = Experiment(name='inspect', policy='cognitive', agents=3, steps=4, seed=1,"
    " llm={'mock': True})\n"
    "run = exp.run('inspect.sqlite', progress=False)\n"
    "run.inspect()",
]


def _notebook(path: Path, cells: list[str]) -> None:
    """A notebook of code cells, for JupyterLab to open and run."""
    import json

    nb = {
        "cells": [
            {
                "cell_type": "code",
                "execution_count": None,
                "metadata": {},
                "outputs": [],
                "source": source,
            }
            for source in cells
        ],
        "metadata": {
            "kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"}
        },
        "nbformat": 4,
        "nbformat_minor": 5,
    }
    path.write_text(json.dumps(nb))


@contextlib.contextmanager
def _jupyterlab(root: Path) -> Iterator[int]:
    """JupyterLab serving ``root`` on a free local port (the port), stopped afterwards."""
    port = _free_port()
    env = {**os.environ, "VIVARIUM_PROGRESS": "0", "JUPYTER_CONFIG_DIR": str(root / "cfg")}
    lab = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "jupyterlab",
            "--no-browser",
            "--allow-root",
            f"--port={port}",
            "--ServerApp.ip=127.0.0.1",
            f"--ServerApp.token={TOKEN}",
            f"--ServerApp.root_dir={root}",
            "--LabApp.news_url=",
        ],
        stdout=open(root / "jupyterlab.log", "wb"),  # noqa: SIM115
        stderr=subprocess.STDOUT,
        env=env,
        cwd=root,
    )
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/api?token={TOKEN}", timeout=2)
                break
            except OSError:
                assert lab.poll() is None, (root / "jupyterlab.log").read_text()[-2000:]
                assert time.monotonic() < deadline, "JupyterLab did not start"
                time.sleep(0.5)
        yield port
    finally:
        lab.terminate()
        try:
            lab.wait(timeout=20)
        except subprocess.TimeoutExpired:
            lab.kill()


@pytest.mark.timeout(300)
def test_inspector_cell_click_shows_the_prompt(tmp_path: Path) -> None:
    if not Path(CHROMIUM).exists():
        _skip_or_fail(f"{CHROMIUM} is missing (make test installs Debian's chromium)")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        _skip_or_fail("playwright is not installed (pip install -e '.[dev]')")
    _notebook(tmp_path / "inspect.ipynb", INSPECT_CELLS)
    shot = tmp_path / "inspector.png"
    with _jupyterlab(tmp_path) as port, sync_playwright() as pw:
        browser, page = _run_all(pw, port, "inspect.ipynb")
        # The inspector opens on agent_000 at step 0; the prompt seen next can only come from
        # the click on agent_002's cell at step 3.
        page.wait_for_selector(".vvm-decision:has-text('You are agent_000')", timeout=120_000)
        cell = page.locator("button.vvm-cell[title^='agent_002 \u00b7 step 3: ']")
        cell.click()
        detail = page.wait_for_selector(
            ".vvm-decision:has-text('You are agent_002')", timeout=60_000
        )
        text = detail.inner_text()
        assert "Current step: 3." in text and "You are agent_000" not in text
        page.screenshot(path=str(shot), full_page=True)
        browser.close()
    assert shot.stat().st_size > 10_000
    print(f"screenshot: {shot}")
