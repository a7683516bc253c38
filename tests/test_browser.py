"""The built book in a real browser (headless Chromium, driven by Playwright, over a local HTTP server).

Skipped, with a message saying why, where Chromium (or playwright) is not installed, except under CI=true:
there a missing browser fails them, since `.ci/run` installs it and a skip would hide that they never ran.
Screenshots of the front page, a theory page and the scoreboard are saved in _build/screenshots/.
"""
import os
import posixpath
import re
import shutil
import sys
from pathlib import Path

import pytest

from book import HTML, ROOT, has_maths, toc_pages

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
        "--disable-component-update", "--disable-sync"]
PAGES = toc_pages()


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


class Visit:
    "One page load with everything that went wrong on the way; `wait=False` starts the load and returns at once."
    def __init__(self, browser, url, wait: bool = True):
        self.page = browser.new_page(viewport={"width": 1280, "height": 900})
        self.errors, self.failed, self.outside = [], [], []
        self.page.on("console", lambda m: m.type == "error" and self.errors.append(f"{m.text} @ {m.location}"))
        self.page.on("pageerror", lambda e: self.errors.append(str(e)))
        self.page.on("requestfailed", lambda r: self.failed.append(f"{r.url} ({r.failure})"))
        self.page.on("response", lambda r: r.status >= 400 and self.failed.append(f"{r.url} ({r.status})"))
        self.page.on("request", lambda r: not r.url.startswith(("http://127.0.0.1", "data:", "blob:"))
                     and self.outside.append(r.url))
        self.page.goto(url, wait_until="networkidle" if wait else "commit")

    def close(self):
        self.page.close()


def visit(browser, server, page):
    return Visit(browser, f"{server}/{page}.html")


CLAIM_TABLES = ("() => Array.from(document.querySelectorAll('article table'))"
                ".filter(t => t.innerText.includes('verdict') || t.innerText.includes('mean ± sd'))")
CHAPTER = re.compile(r"/(?!00)\d\d_")


def report(v: Visit, page: str) -> dict:
    "What the tests check on one loaded page, read once."
    p, out = v.page, {"maths": None, "claim_overflow": None}
    if has_maths(page):
        try:
            p.wait_for_selector("mjx-container", state="attached", timeout=15000)
            out["maths"] = True
        except Exception:
            out["maths"] = False
    if CHAPTER.search(page) or page == "nbs/scoreboard":
        try:  # on a loaded machine the layout can lag behind "networkidle": wait (up to 15 s) for a laid-out claim table
            p.wait_for_function(CLAIM_TABLES + ".length > 0", timeout=15000)
            out["claim_overflow"] = p.evaluate(CLAIM_TABLES + ".map(t => t.scrollWidth - t.parentElement.clientWidth)")
        except Exception:
            out["claim_overflow"] = []
    out["text"] = p.inner_text("article")
    out["images"] = p.eval_on_selector_all("article img", "imgs => imgs.map(i => [i.src, i.naturalWidth])")
    out["next"], out["prev"] = (p.eval_on_selector(sel, "a => a.getAttribute('href')") if p.query_selector(sel) else None
                                for sel in ("a.right-next", "a.left-prev"))
    out.update(errors=list(v.errors), failed=list(v.failed), outside=list(v.outside))
    return out


def load_all(browser, urls: dict, read, tabs: int = 6) -> dict:
    "Load the pages `urls` (key -> url) a few tabs at a time in one browser; `read(visit, key)` reads each when it is idle."
    out, keys = {}, list(urls)
    for i in range(0, len(keys), tabs):
        group = [(k, Visit(browser, urls[k], wait=False)) for k in keys[i:i + tabs]]
        for k, v in group:
            try:
                v.page.wait_for_load_state("networkidle")
                out[k] = read(v, k)
            finally:
                v.close()
    return out


@pytest.mark.parametrize("page", PAGES)
def test_page_loads_without_errors(reports, page):
    r = reports[page]
    assert r["errors"] == [], f"console errors on {page}"
    assert r["failed"] == [], f"failed requests on {page}"
    assert r["outside"] == [], f"{page} asked the network for something: the book must work offline"


@pytest.mark.parametrize("page", [p for p in PAGES if has_maths(p)])
def test_maths_renders_offline(reports, page):
    r = reports[page]
    assert r["maths"], f"MathJax rendered nothing on {page}"
    assert "$$" not in r["text"] and "\\begin{" not in r["text"], f"raw TeX left on {page}"


@pytest.mark.parametrize("page", PAGES)
def test_every_image_loads(reports, page):
    assert [src for src, w in reports[page]["images"] if not w] == [], f"images that did not load on {page}"


def test_figures_are_rendered(reports):
    "The execution-statistics page always draws a figure (it is executed in every build)."
    widths = [w for _, w in reports["nbs/execution"]["images"]]
    assert widths and min(widths) > 100


def test_next_links_walk_the_whole_book(reports):
    "Following 'next' from the front page visits every page in the table of contents' order, and 'previous' walks back."
    href = lambda page, key: reports[page][key] and re.sub(r"\.html(#.*)?$", "", posixpath.normpath(
        posixpath.join(posixpath.dirname(page), reports[page][key])))
    seen = [PAGES[0]]
    while (nxt := href(seen[-1], "next")) and len(seen) <= len(PAGES):
        seen.append(nxt)
    assert seen == PAGES
    back = [PAGES[-1]]
    while (prv := href(back[-1], "prev")) and len(back) <= len(PAGES):
        back.append(prv)
    assert back == PAGES[::-1]


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


def search_hits(v: Visit, page: str) -> list[str]:
    v.page.wait_for_selector("ul.search li a", timeout=15000)
    return v.page.eval_on_selector_all("ul.search li a", "as => as.map(a => a.getAttribute('href'))")


SEARCH = """words => Object.fromEntries(Object.entries(words).map(([page, word]) =>
    [page, Search._performSearch(...Search._parseQuery(word)).map(hit => hit[0])]))"""  # each hit's docname


@pytest.fixture(scope="session")
def searches(browser, server):
    """The book's search, asked for one title word of every page. The search page runs the first word as a reader
    does (its hits listed as links); once its index is loaded, every word goes through the same engine that page
    calls (Sphinx's Search._parseQuery and _performSearch), rather than one page load per word: the page fetches
    every hit's page for its summary, which made one search page per word take most of a minute in all."""
    words = {p: title_word(p) for p in PAGES[1:]}
    v = Visit(browser, f"{server}/search.html?q={words[PAGES[1]]}")
    try:
        listed = search_hits(v, PAGES[1])
        v.page.wait_for_function("() => Search.hasIndex()", timeout=15000)
        found = v.page.evaluate(SEARCH, words)
    finally:
        v.close()
    return {"listed": listed, "found": found, "words": words}


def test_the_search_page_lists_the_hits_as_links(searches):
    assert any(h.split("#")[0].endswith(f"{PAGES[1]}.html") for h in searches["listed"]), \
        f"the search page, asked for {searches['words'][PAGES[1]]!r}, did not list {PAGES[1]}"


@pytest.mark.parametrize("page", PAGES[1:])
def test_search_finds_the_page_by_a_title_word(searches, page):
    assert page in searches["found"][page], f"searching {searches['words'][page]!r} did not find {page}"


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
