"""Every built page shows its readers clean outputs: no warning, no traceback and no library noise in any cell output.

A test that expects a warning catches it and asserts on it (warnings.catch_warnings(record=True)); it never prints it."""
import html
import re

import pytest

from book import HTML, require_built_book, toc_pages

OUTPUT = re.compile(r'<div class="output (?P<kind>[a-z_]+)[^"]*"[^>]*>(?P<body>.*?)</pre>', re.S)
NOISE = re.compile(r"Traceback \(most recent call last\)|<ipython-input-|\b\w*Warning\b:|^\s*warnings\.warn\(|"
                   r"Failed to load |DeprecationWarning|FutureWarning", re.M)


def outputs(page: str) -> list[tuple[str, str]]:
    "The (kind, text) of every cell output on a built page: kind is stream, stderr, traceback, text_plain, ..."
    text = (HTML / f"{page}.html").read_text(encoding="utf-8")
    return [(m["kind"], html.unescape(re.sub(r"<[^>]+>", "", m["body"]))) for m in OUTPUT.finditer(text)]


def test_the_reader_recognises_noise():
    sample = ('<div class="output stderr highlight"><div class="highlight"><pre><span>/x/epidiff.py:293: UserWarning: '
              'fit_sir_map: L-BFGS-B stopped early\n  warnings.warn(</span></pre></div></div>')
    (kind, body), = [(m["kind"], html.unescape(re.sub(r"<[^>]+>", "", m["body"]))) for m in OUTPUT.finditer(sample)]
    assert kind == "stderr" and NOISE.search(body)
    assert not NOISE.search("C1 [Re] (2/2 checks hold)\nvalidation loss 1.23")


@pytest.mark.parametrize("page", toc_pages())
def test_no_page_shows_a_warning_or_a_traceback(page):
    require_built_book()
    bad = [f"{kind}: {body.strip()[:200]}" for kind, body in outputs(page)
           if kind in ("stderr", "traceback", "error") or NOISE.search(body)]
    assert bad == [], f"{page} shows {len(bad)} noisy output(s); the first: {bad[0] if bad else ''}"
