import functools
import http.server
import os
import threading
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


@pytest.fixture
def root() -> Path:
    return ROOT


class QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


@pytest.fixture(scope="session")
def server():
    "The built book over HTTP on 127.0.0.1, for the whole test run."
    from book import HTML, require_built_book
    require_built_book()
    handler = functools.partial(QuietHandler, directory=str(HTML))
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()


@pytest.fixture(scope="session")
def browser():
    "One headless Chromium for the whole test run."
    from test_browser import ARGS, require_chromium, require_playwright
    executable = require_chromium()
    sync_api = require_playwright()
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=executable, args=ARGS)
        yield b
        b.close()


@pytest.fixture(scope="session")
def reports(browser, server):
    "Every page of the book, loaded once for the whole run (several tabs at a time) and read for all the page tests."
    from test_browser import PAGES, load_all, report
    return load_all(browser, {p: f"{server}/{p}.html" for p in PAGES}, report)
