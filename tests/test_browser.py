"""The built book in a real browser (headless Chromium, driven by Playwright, over a local HTTP server).

Skipped, with a message saying why, where Chromium (or playwright) is not installed, except under CI=true:
there a missing browser fails them, since `.ci/run` installs it and a skip would hide that they never ran.
Screenshots of the front page, a theory page and the scoreboard are saved in _build/screenshots/.
"""
import functools
import http.server
import os
import re
import shutil
import sys
import threading
from pathlib import Path

import pytest

from book import HTML, ROOT, has_maths, require_built_book, toc_pages

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
        "--disable-component-update", "--disable-sync"]
PAGES = toc_pages()


@pytest.fixture(scope="module")
def server():
    require_built_book()
    handler = functools.partial(QuietHandler, directory=str(HTML))
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()


class QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


def on_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in ("true", "1", "yes")


def missing(reason: str) -> None:
    "Skip for want of `reason`; on CI, fail instead."
    if on_ci():
        pytest.fail(f"{reason}, and CI=true: on CI the browser tests must run (.ci/run installs Chromium)")
    pytest.skip(reason)


def require_chromium() -> str:
    if CHROMIUM is None:
        missing("Chromium is not installed (Debian: apt-get install chromium): the browser tests need it")
    return CHROMIUM


def require_playwright():
    try:
        import playwright.sync_api as sync_api
    except ImportError:
        missing("playwright is not installed (pip install playwright): the browser tests need it")
    return sync_api


def test_missing_chromium_fails_on_ci_and_skips_elsewhere(monkeypatch):
    monkeypatch.setattr(sys.modules[__name__], "CHROMIUM", None)
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="Chromium is not installed.*CI=true"):
        require_chromium()
    monkeypatch.delenv("CI")
    with pytest.raises(pytest.skip.Exception, match="Chromium is not installed"):
        require_chromium()
    monkeypatch.setenv("CI", "false")
    with pytest.raises(pytest.skip.Exception):
        require_chromium()
    monkeypatch.setattr(sys.modules[__name__], "CHROMIUM", "/usr/bin/chromium")
    monkeypatch.setenv("CI", "true")
    assert require_chromium() == "/usr/bin/chromium"


@pytest.fixture(scope="module")
def browser():
    executable = require_chromium()
    sync_api = require_playwright()
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=executable, args=ARGS)
        yield b
        b.close()


class Visit:
    "One page load with everything that went wrong on the way."
    def __init__(self, browser, url):
        self.page = browser.new_page(viewport={"width": 1280, "height": 900})
        self.errors, self.failed, self.outside = [], [], []
        self.page.on("console", lambda m: m.type == "error" and self.errors.append(f"{m.text} @ {m.location}"))
        self.page.on("pageerror", lambda e: self.errors.append(str(e)))
        self.page.on("requestfailed", lambda r: self.failed.append(f"{r.url} ({r.failure})"))
        self.page.on("response", lambda r: r.status >= 400 and self.failed.append(f"{r.url} ({r.status})"))
        self.page.on("request", lambda r: not r.url.startswith(("http://127.0.0.1", "data:", "blob:"))
                     and self.outside.append(r.url))
        self.page.goto(url, wait_until="networkidle")

    def close(self):
        self.page.close()


def visit(browser, server, page):
    return Visit(browser, f"{server}/{page}.html")


@pytest.mark.parametrize("page", PAGES)
def test_page_loads_without_errors(browser, server, page):
    v = visit(browser, server, page)
    try:
        assert v.errors == [], f"console errors on {page}"
        assert v.failed == [], f"failed requests on {page}"
        assert v.outside == [], f"{page} asked the network for something: the book must work offline"
    finally:
        v.close()


@pytest.mark.parametrize("page", [p for p in PAGES if has_maths(p)])
def test_maths_renders_offline(browser, server, page):
    v = visit(browser, server, page)
    try:
        v.page.wait_for_selector("mjx-container", state="attached", timeout=15000)
        text = v.page.inner_text("article")
        assert "$$" not in text and "\\begin{" not in text, f"raw TeX left on {page}"
    finally:
        v.close()


@pytest.mark.parametrize("page", PAGES)
def test_every_image_loads(browser, server, page):
    v = visit(browser, server, page)
    try:
        widths = v.page.eval_on_selector_all("article img", "imgs => imgs.map(i => [i.src, i.naturalWidth])")
        assert [src for src, w in widths if not w] == [], f"images that did not load on {page}"
    finally:
        v.close()


def test_figures_are_rendered(browser, server):
    "The execution-statistics page always draws a figure (it is executed in every build)."
    v = visit(browser, server, "nbs/execution")
    try:
        widths = v.page.eval_on_selector_all("article img", "imgs => imgs.map(i => i.naturalWidth)")
        assert widths and min(widths) > 100
    finally:
        v.close()


def test_next_links_walk_the_whole_book(browser, server):
    v = visit(browser, server, PAGES[0])
    seen = [PAGES[0]]
    try:
        for _ in PAGES:
            nxt = v.page.query_selector("a.right-next")
            if nxt is None:
                break
            nxt.click()
            v.page.wait_for_load_state("networkidle")
            seen.append(re.sub(r"^/|\.html$", "", v.page.url.split(server, 1)[1]))
        assert seen == PAGES
        for _ in PAGES[1:]:  # and back again
            v.page.click("a.left-prev")
            v.page.wait_for_load_state("networkidle")
        assert v.page.url.endswith(f"{PAGES[0]}.html")
    finally:
        v.close()


def test_sidebar_reaches_every_page(browser, server):
    v = visit(browser, server, PAGES[0])
    try:
        hrefs = v.page.eval_on_selector_all("nav.bd-docs-nav a", "as => as.map(a => a.href)")
        reached = {re.sub(r"^/|\.html(#.*)?$", "", h.split(server, 1)[1]) for h in hrefs}
        assert set(PAGES[1:]) <= reached, f"not in the sidebar: {set(PAGES[1:]) - reached}"
    finally:
        v.close()


def title_word(page: str) -> str:
    html = (HTML / f"{page}.html").read_text(encoding="utf-8")
    title = re.search(r"<h1>(.*?)<", html, re.S).group(1)
    return max(re.findall(r"[A-Za-z]{4,}", title), key=len)


@pytest.mark.parametrize("page", PAGES[1:])
def test_search_finds_the_page_by_a_title_word(browser, server, page):
    word = title_word(page)
    v = visit(browser, server, f"search")
    try:
        v.page.goto(f"{server}/search.html?q={word}", wait_until="networkidle")
        v.page.wait_for_selector("ul.search li a", timeout=15000)
        hrefs = v.page.eval_on_selector_all("ul.search li a", "as => as.map(a => a.getAttribute('href'))")
        assert any(h.split("#")[0].endswith(f"{page}.html") for h in hrefs), f"searching {word!r} did not find {page}"
    finally:
        v.close()


def test_screenshots(browser, server):
    out = ROOT / "_build" / "screenshots"
    out.mkdir(parents=True, exist_ok=True)
    theory = next((p for p in PAGES if re.search(r"/0[1-3]_", p)), "nbs/00_core")
    for page in (PAGES[0], theory, "nbs/scoreboard"):
        v = visit(browser, server, page)
        try:
            path = out / f"{Path(page).name}.png"
            v.page.screenshot(path=str(path), full_page=True)
            assert path.stat().st_size > 10_000
        finally:
            v.close()
