"""The claim tables in a real browser: one row per chapter or claim, criteria with '|' kept in their cell.

Uses the fixtures of tests/conftest.py (a local server over the built book, one headless Chromium, every page read once).
"""
import pytest
from test_browser import CHAPTER, PAGES, visit

from icmlbook.claims import CHAPTERS, load_registry

TABLE_CELLS = """(head) => Array.from(document.querySelectorAll('article table'))
    .filter(t => t.rows.length && t.rows[0].innerText.includes(head))
    .map(t => Array.from(t.rows).map(r => Array.from(r.cells).map(c => c.innerText.trim())))"""


def test_scoreboard_has_one_row_per_chapter(browser, server):
    v = visit(browser, server, "nbs/scoreboard")
    try:
        tables = v.page.evaluate(TABLE_CELLS, "preview (development seeds")
        assert len(tables) == 1, "the scoreboard table is missing"
        rows = tables[0]
        assert len(rows) == len(CHAPTERS) + 1 and all(len(r) == 6 for r in rows), rows
        assert rows[0][2].startswith("confirmation") and rows[0][3].startswith("preview (development seeds")
        assert [r[1].split(":")[0] for r in rows[1:]] == [s for s, _ in CHAPTERS]
        assert all(r[2] for r in rows[1:]), "a chapter's confirmation cell is empty: it must say 'not confirmed' at least"
        text = v.page.inner_text("article")
        for term in ("fragile", "unequal care", "[?Re]", "missing", "incomplete", "development seeds", "not confirmed",
                     "null not recorded", "edge of grid", "grid too small", "still learning", "re-run after a look"):
            assert term in text, f"the scoreboard page does not explain {term!r}"
    finally:
        v.close()


def test_scoreboard_opens_with_the_verdict_map(browser, server):
    v = visit(browser, server, "nbs/scoreboard")
    try:
        first = v.page.evaluate("""() => {
            const els = Array.from(document.querySelectorAll('article img, article table'));
            return els.length ? {tag: els[0].tagName, w: els[0].naturalWidth || 0} : null; }""")
        assert first and first["tag"] == "IMG" and first["w"] > 300, f"the verdict map is not the page's first figure: {first}"
    finally:
        v.close()


def test_a_chapter_page_shows_its_confirmation_before_its_preview(browser, server):
    v = visit(browser, server, "nbs/02_data_pricing")
    try:
        text = v.page.inner_text("article")
        conf, prev = text.find("C1, confirmation"), text.find("C1, preview")
        assert 0 <= conf < prev, "the confirmation line of C1 must come before its preview"
        confirmed = "confirmation run of" in text[conf:prev] and "confirm seeds" in text[conf:prev]
        assert ("not confirmed" in text[conf:prev] or confirmed) and "development seeds" in text[prev:]
        assert "What we tried" in text, "the design log table is missing"
    finally:
        v.close()


def test_criteria_with_pipes_stay_in_their_cell(browser, server):
    criterion = load_registry("connectivity").claim("C2").criterion
    assert "|" in criterion
    v = visit(browser, server, "nbs/scoreboard")
    try:
        tables = v.page.evaluate(TABLE_CELLS, "criterion (registered)")  # the confirmations' claims, then the previews'
        rows = [r for t in tables for r in t]
        assert all(len(r) == 4 for r in rows), "a claim row of the scoreboard has the wrong number of cells"
        assert any(r[2] == criterion for r in rows), "the connectivity criterion with '|' is not one cell"
    finally:
        v.close()
    v = visit(browser, server, "nbs/01_connectivity")
    try:
        tables = v.page.evaluate(TABLE_CELLS, "criterion (registered)")  # per claim: the confirmation's table (once run), the preview's
        assert tables and all(len(r) == 3 for t in tables for r in t[1:])
        c2 = [[r[1] for r in t[1:] if r[0].startswith("C2")] for t in tables]
        assert all(len(rows) <= 1 for rows in c2), "a claims table repeats C2"
        assert [c for rows in c2 for c in rows] and all(c == criterion for rows in c2 for c in rows), \
            "C2's criterion is missing or split"
    finally:
        v.close()


@pytest.mark.parametrize("page", [p for p in PAGES if CHAPTER.search(p)] + ["nbs/scoreboard"])
def test_claim_tables_fit_the_content_column(reports, page):
    over = reports[page]["claim_overflow"]
    assert over and max(over) <= 1, f"a claim table on {page} is wider than the content column: {over}"
