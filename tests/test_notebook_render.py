"""The walkthrough notebook, executed and rendered to HTML with nbconvert, shows review cards
and results (not printed ids) in a real browser: Debian's Chromium takes a screenshot (the
docs/reviewing.md shows it; `GRAPHKIT_SCREENSHOTS=1 make test` refreshes it)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"


def test_the_executed_walkthrough_renders_cards_in_a_browser(tmp_path: Path) -> None:
    import nbformat
    from nbclient import NotebookClient
    from nbconvert import HTMLExporter
    from playwright.sync_api import sync_playwright

    notebook = nbformat.read(ROOT / "notebooks" / "walkthrough.ipynb", as_version=4)
    NotebookClient(notebook, timeout=120, kernel_name="python3",
                   resources={"metadata": {"path": str(tmp_path)}}).execute()
    html, _ = HTMLExporter().from_notebook_node(notebook)
    assert "graphkit-result" in html and "Send build 1.4.2 to prod?" in html
    assert "class='card'" in html and "Run `rm -r /srv/tmp`?" in html
    # each review widget, which needs a kernel, comes after its static page: the commands
    assert 'class="graphkit-review"' in html and "Decided: Run `rm -r /srv/tmp`?" in html
    # the graph, drawn without network: nbconvert embeds the SVG as a data: image
    import base64
    import re

    drawn = [base64.b64decode(m).decode() for m in
             re.findall(r"data:image/svg\+xml;base64,([A-Za-z0-9+/=]+)", html)]
    assert any(">approval_gate<" in svg for svg in drawn)
    page_file = tmp_path / "walkthrough.html"
    page_file.write_text(html)
    shots = ROOT / "docs" / "screenshots" if os.environ.get("GRAPHKIT_SCREENSHOTS") else tmp_path
    shots.mkdir(parents=True, exist_ok=True)
    shot = shots / "notebook.png"
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True,
                                    args=["--no-sandbox", "--disable-gpu"])
        try:
            page = browser.new_page(viewport={"width": 1100, "height": 900})
            page.goto(page_file.as_uri())
            card = page.locator(".graphkit-result").first
            card.scroll_into_view_if_needed()
            assert "suspended" in card.inner_text()
            page.screenshot(path=str(shot))
        finally:
            browser.close()
    assert shot.stat().st_size > 10_000
