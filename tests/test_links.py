"""Link check of the built HTML: every internal link and anchor resolves; external links are listed, not fetched."""
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit

from book import HTML, require_built_book, toc_pages


class Links(HTMLParser):
    def __init__(self):
        super().__init__()
        self.links, self.ids = [], set()

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if "id" in a:
            self.ids.add(a["id"])
        for key in ("href", "src"):
            if a.get(key) and tag in ("a", "img", "link", "script"):
                self.links.append(a[key])


def parse(path: Path) -> Links:
    p = Links()
    p.feed(path.read_text(encoding="utf-8"))
    return p


def test_internal_links_and_anchors_resolve():
    require_built_book()
    pages = [HTML / f"{page}.html" for page in toc_pages()] + [HTML / "search.html", HTML / "genindex.html"]
    broken, external, parsed = [], set(), {}
    read = lambda path: parsed[path] if path in parsed else parsed.setdefault(path, parse(path))  # each page parsed once
    for page in pages:
        for link in read(page).links:
            parts = urlsplit(link)
            if parts.scheme in ("http", "https"):
                external.add(link)
                continue
            if parts.scheme or link.startswith("javascript:"):
                continue
            target = (page.parent / unquote(parts.path)).resolve() if parts.path else page
            if target.is_dir():
                target = target / "index.html"
            if not target.exists():
                broken.append(f"{page.relative_to(HTML)} -> {link} (no such file)")
                continue
            if parts.fragment and target.suffix == ".html":
                if unquote(parts.fragment) not in read(target).ids:
                    broken.append(f"{page.relative_to(HTML)} -> {link} (no such anchor)")
    print(f"\n{len(external)} external links (listed, not fetched):\n  " + "\n  ".join(sorted(external)))
    assert not broken, "broken internal links:\n" + "\n".join(broken)
