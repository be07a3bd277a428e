"""``vvm report``: one static page, opened from the file in a real browser, offline.

Debian's Chromium, driven by Playwright (as ``tests/test_browser.py`` drives JupyterLab), opens
the page with every network request refused: the summary, the figures (inline images that
decode), and the inspector, which shows a decision's prompt and reply and moves to another step
and agent by its menus and arrows. Markup a run recorded shows as text. A file that is not a
report is never written over.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from vivarium import Experiment
from vivarium.errors import TraceError
from vivarium.facade import Run

CHROMIUM = "/usr/bin/chromium"


@pytest.fixture(scope="module")
def page_file(tmp_path_factory: pytest.TempPathFactory) -> tuple[Run, Path]:
    folder = tmp_path_factory.mktemp("report")
    run = Experiment(name="rep", policy="cognitive", agents=2, steps=3, seed=5).run(
        folder / "rep.sqlite", progress=False
    )
    return run, run.report(folder / "rep.html")


def test_the_page_holds_everything_itself(page_file: tuple[Run, Path], tmp_path: Path) -> None:
    run, page = page_file
    text = page.read_text()
    assert run.run_id in text
    assert "http://" not in text.replace("http://www.w3.org", "") and "https://" not in text
    assert text.count("data:image/png;base64,") == 2  # behaviour timeline and token use
    assert run.report(page) == page  # a report is replaced by the same report
    mine = tmp_path / "notes.html"
    mine.write_text("<p>my notes, which mention a vivarium-report</p>")
    with pytest.raises(TraceError, match="is not a Vivarium report"):
        run.report(mine)
    assert mine.read_text() == "<p>my notes, which mention a vivarium-report</p>"


def _playwright() -> Any:
    if not Path(CHROMIUM).exists():
        if os.environ.get("VIVARIUM_REQUIRE_BROWSER"):
            pytest.fail("Chromium is not installed (make test installs it)")
        pytest.skip("Chromium is not installed (make test installs it)")
    sync_api = pytest.importorskip("playwright.sync_api")
    return sync_api.sync_playwright()


def _offline(route: Any) -> None:
    if route.request.url.startswith(("file:", "data:")):
        route.continue_()
    else:
        route.abort()


def test_the_page_works_offline_in_a_browser(page_file: tuple[Run, Path], tmp_path: Path) -> None:
    run, page_path = page_file
    with _playwright() as pw:
        browser = pw.chromium.launch(
            executable_path=CHROMIUM,
            headless=True,
            args=["--no-sandbox", "--disable-gpu", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update"],
        )  # fmt: skip
        try:
            page = browser.new_page(viewport={"width": 1200, "height": 900})
            requests: list[str] = []
            page.on("request", lambda r: requests.append(r.url))
            page.route("**/*", _offline)
            page.goto(page_path.as_uri())
            assert page.locator("#summary").inner_text().count(run.run_id) == 1
            widths = page.eval_on_selector_all(
                "figure img", "imgs => imgs.map(i => i.naturalWidth)"
            )
            assert len(widths) == 2 and all(w > 100 for w in widths)
            where = page.locator("#where")
            pane = page.locator("#pane")
            assert where.inner_text() == "decision 1 of 6"
            assert "agent_000" in pane.inner_text() and "LLM calls" in pane.inner_text()
            assert page.locator("#pane .vvm-decision").count() == 1
            page.click("#next")
            assert where.inner_text() == "decision 2 of 6" and "agent_001" in pane.inner_text()
            page.select_option("#step", "2")
            assert where.inner_text() == "decision 5 of 6"
            page.select_option("#agent", "agent_001")
            assert where.inner_text() == "decision 6 of 6"
            page.click("#prev")
            assert where.inner_text() == "decision 5 of 6"
            page.screenshot(path=str(tmp_path / "report.png"), full_page=True)
            assert requests and all(u.startswith(("file:", "data:")) for u in requests), requests
        finally:
            browser.close()


def test_markup_a_run_recorded_stays_text(page_file: tuple[Run, Path], tmp_path: Path) -> None:
    run, _ = page_file
    copy = tmp_path / "markup.sqlite"
    shutil.copyfile(run.path, copy)
    con = sqlite3.connect(copy)
    con.execute("UPDATE decisions SET action = '<script>alert(1)</script>' WHERE id = 0")
    con.commit()
    con.close()
    text = Run.open(copy).report(tmp_path / "markup.html").read_text()
    assert "<script>alert(1)" not in text  # neither in the page nor in its data
    assert "&lt;script&gt;alert(1)&lt;" in text


def test_vvm_report(page_file: tuple[Run, Path], tmp_path: Path) -> None:
    run, _ = page_file
    out = tmp_path / "cli.html"
    done = subprocess.run(
        [sys.executable, "-m", "vivarium.cli", "report", str(run.path), "--out", str(out)],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert out.read_text().startswith("<!DOCTYPE html>")
