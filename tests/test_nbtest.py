"""tools/nbtest.py, tools/cachekey.py and tools/book.py: the machinery that runs the notebooks as tests and
decides what the book executes. Each test runs the real tool on a small notebook written to a temporary folder."""
import json
import os
import subprocess
import sys
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parent.parent


def load_tool(name: str):
    "A module of tools/, under a name of its own (tests/book.py is `book` for the browser tests)."
    import importlib.util
    spec = importlib.util.spec_from_file_location(f"icmlbook_tools_{name}", ROOT / "tools" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


book, cachekey, nbtool = load_tool("book"), load_tool("cachekey"), load_tool("nbtest")


def write_notebook(path: Path, *cells: str) -> Path:
    nb = nbformat.v4.new_notebook(metadata={"kernelspec": {"display_name": "python3", "language": "python",
                                                           "name": "python3"}})
    nb.cells = [nbformat.v4.new_code_cell(c) for c in cells]
    nbformat.write(nb, path)
    return path


def nbtest(notebook: Path, tmp_path: Path, *flags: str, **env) -> subprocess.CompletedProcess:
    "Run tools/nbtest.py on one notebook, its execution cache in tmp_path."
    env = {**os.environ, "ICMLBOOK_CACHE_ROOT": str(tmp_path / "cache"), "ICMLBOOK_SCALE": "ci", **env}
    env.pop("ICMLBOOK_NB_TIMEOUT", None)
    return subprocess.run([sys.executable, str(ROOT / "tools" / "nbtest.py"), "--path", str(notebook),
                           "--n_workers", "0", *flags], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=240)


# ---------------------------------------------------------------- the network guard (issue 16)

def test_a_notebook_that_reaches_the_network_fails(tmp_path):
    nb = write_notebook(tmp_path / "reaches_out.ipynb",
                        "import socket",
                        "socket.create_connection(('192.0.2.1', 80), timeout=5)  # TEST-NET-1")
    r = nbtest(nb, tmp_path)
    assert r.returncode != 0, r.stdout + r.stderr
    assert "NetworkBlockedError" in r.stderr and "192.0.2.1:80" in r.stderr, r.stderr
    assert "the network is blocked while notebooks run" in r.stderr
    assert "reaches_out.ipynb" in r.stderr
    assert not (tmp_path / "cache").exists() or not list((tmp_path / "cache").rglob("*.ipynb")), \
        "a failing notebook must not be cached"


def test_loopback_works_and_child_processes_are_guarded_too(tmp_path):
    child = ("import socket\n"
             "try:\n"
             "    socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b'x', ('192.0.2.1', 53))\n"
             "except RuntimeError as e:\n"
             "    print(type(e).__name__, e)\n")
    nb = write_notebook(
        tmp_path / "loopback.ipynb",
        "import socket, subprocess, sys",
        # a server and a client on 127.0.0.1, and on ::1 where this machine has IPv6
        "with socket.socket() as server:\n"
        "    server.bind(('127.0.0.1', 0)); server.listen(1)\n"
        "    with socket.create_connection(server.getsockname(), timeout=5): pass\n"
        "with socket.socket() as server:\n"
        "    server.bind(('127.0.0.1', 0)); server.listen(1)\n"
        "    with socket.create_connection(('localhost', server.getsockname()[1]), timeout=5): pass\n"
        "if socket.has_ipv6:\n"
        "    try:\n"
        "        server = socket.socket(socket.AF_INET6); server.bind(('::1', 0))\n"
        "    except OSError:\n"
        "        server = None\n"
        "    if server is not None:\n"
        "        server.listen(1)\n"
        "        with server, socket.create_connection(server.getsockname()[:2], timeout=5): pass",
        # a process the notebook starts is guarded as well
        f"r = subprocess.run([sys.executable, '-c', {child!r}], capture_output=True, text=True)\n"
        "assert r.returncode == 0, r.stderr\n"
        "assert r.stdout.startswith('NetworkBlockedError') and '192.0.2.1:53' in r.stdout, r.stdout",
    )
    r = nbtest(nb, tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "Success." in r.stdout
    from jupyter_cache import get_cache
    folder = tmp_path / "cache" / f"ci-{cachekey.cache_key('ci')[:12]}"
    records = get_cache(str(folder)).list_cache_records()
    assert [r.uri for r in records] == [str(nb)], "the notebook that passed is in the keyed execution cache"


# ---------------------------------------------------------------- the time limit (issue 16)

def test_a_notebook_over_its_cpu_time_limit_fails_naming_it(tmp_path):
    nb = write_notebook(
        tmp_path / "burner.ipynb",
        "import time\ndef burn(s):\n    t = time.process_time()\n    while time.process_time() - t < s: pass",
        # catching the first NotebookTimeout does not help: it is raised again
        "try:\n    burn(60)\nexcept Exception:\n    pass",
        "burn(60)",
    )
    start = time.monotonic()
    r = nbtest(nb, tmp_path, "--timeout", "1")
    assert r.returncode != 0, r.stdout + r.stderr
    assert time.monotonic() - start < 45, "the limit did not stop the notebook"
    assert "NotebookTimeout" in r.stderr and "burner.ipynb ran longer than its time limit of 1 s of CPU time" in r.stderr, r.stderr


def test_a_sleeping_notebook_meets_the_wall_clock_cap(tmp_path):
    nb = write_notebook(tmp_path / "sleeper.ipynb", "import time", "time.sleep(60)")
    start = time.monotonic()
    r = nbtest(nb, tmp_path, "--timeout", "1", ICMLBOOK_NB_WALL_FACTOR="3")
    assert r.returncode != 0 and time.monotonic() - start < 45, r.stdout + r.stderr
    assert "sleeper.ipynb ran past its wall-clock cap of 3 s (3 x its CPU time limit of 1 s" in r.stderr, r.stderr


def test_a_loaded_machine_slows_a_notebook_without_failing_it(tmp_path):
    "Four busy processes on two cores: a notebook needing 3 CPU seconds takes well over 4 wall seconds, and passes."
    nb = write_notebook(tmp_path / "busy.ipynb",
                        "import os, time\nt0, c0 = time.monotonic(), time.process_time()\n"
                        "while time.process_time() - c0 < 3: pass\n"
                        "open(os.environ['ICMLBOOK_TRACE'], 'w').write(str(time.monotonic() - t0))")
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(4)]
    try:
        r = nbtest(nb, tmp_path, "--timeout", "4", ICMLBOOK_NB_WALL_FACTOR="10", ICMLBOOK_TRACE=str(tmp_path / "wall"))
    finally:
        for h in hogs:
            h.kill()
    assert r.returncode == 0, r.stdout + r.stderr
    wall = float((tmp_path / "wall").read_text())
    assert wall > 4, f"the hogs did not slow the notebook ({wall:.1f} s): a wall-clock limit of 4 s would have passed too"


def test_a_notebook_that_cannot_be_interrupted_ends_the_run(tmp_path):
    nb = write_notebook(tmp_path / "stuck.ipynb",
                        "import signal, time",
                        "signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGALRM})  # as if stuck in C code\n"
                        "time.sleep(60)")
    start = time.monotonic()
    r = nbtest(nb, tmp_path, "--timeout", "1", ICMLBOOK_NB_TIMEOUT_GRACE="1", ICMLBOOK_NB_WALL_FACTOR="2")
    assert r.returncode != 0 and time.monotonic() - start < 45, r.stdout + r.stderr
    assert "FAILED: stuck.ipynb ran past its wall-clock cap of 2 s" in r.stderr, r.stderr


def test_the_time_limit_defaults_by_scale_and_the_environment_overrides_it(monkeypatch):
    monkeypatch.delenv("ICMLBOOK_NB_TIMEOUT", raising=False)
    monkeypatch.setenv("ICMLBOOK_SCALE", "ci")
    assert nbtool.notebook_timeout() == 400
    monkeypatch.setenv("ICMLBOOK_SCALE", "full")
    assert nbtool.notebook_timeout() == 0
    monkeypatch.setenv("ICMLBOOK_NB_TIMEOUT", "12.5")
    assert nbtool.notebook_timeout() == 12.5


# ---------------------------------------------------------------- the cache key (issue 15, item 6)

def make_project(root: Path) -> Path:
    (root / "icmlbook").mkdir(parents=True)
    (root / "nbs" / "claims").mkdir(parents=True)
    (root / "icmlbook" / "core.py").write_text("core = 1\n")
    (root / "icmlbook" / "claims.py").write_text("claims = 1\n")
    (root / "nbs" / "claims" / "bas.yml").write_text("claims: []\n")
    (root / "nbs" / "claims" / "cell.yml").write_text("claims: []\n")
    return root


def test_the_cache_key_depends_on_the_scale_and_on_core_claims_and_every_registry(tmp_path, monkeypatch):
    monkeypatch.delenv("ICMLBOOK_CACHE_ROOT", raising=False)
    root = make_project(tmp_path)
    seen = {cachekey.cache_key("ci", root)}
    assert cachekey.cache_key("full", root) not in seen
    assert cachekey.cache_key("ci", root) in seen, "the key is deterministic"
    for f in ("icmlbook/core.py", "icmlbook/claims.py", "nbs/claims/bas.yml", "nbs/claims/cell.yml"):
        (root / f).write_text((root / f).read_text() + "# changed\n")
        key = cachekey.cache_key("ci", root)
        assert key not in seen, f"changing {f} did not change the key"
        seen.add(key)
    (root / "nbs" / "claims" / "new.yml").write_text("claims: []\n")
    assert cachekey.cache_key("ci", root) not in seen, "a new registry file did not change the key"
    unrelated = root / "icmlbook" / "bas.py"
    unrelated.write_text("x = 1\n")
    key = cachekey.cache_key("ci", root)
    unrelated.write_text("x = 2\n")
    assert cachekey.cache_key("ci", root) == key, "a chapter's module is keyed by jupyter-cache itself, not here"
    monkeypatch.setenv("ICMLBOOK_SCALE", "full")
    expected = root / "_build" / ".jupyter_cache" / f"full-{cachekey.cache_key('full', root)[:12]}"
    assert cachekey.cache_dir(root=root) == expected
    monkeypatch.setenv("ICMLBOOK_SCALE", "../x")
    with pytest.raises(ValueError, match="cannot name a cache folder"):
        cachekey.cache_dir(root=root)


def test_the_book_config_names_the_keyed_cache(tmp_path, monkeypatch):
    "tools/book.py writes the keyed folder into the config it builds with (nbtest's side: the loopback test)."
    monkeypatch.setenv("ICMLBOOK_CACHE_ROOT", str(tmp_path))
    monkeypatch.setenv("ICMLBOOK_SCALE", "full")
    config = book.book_config("cache")
    assert config["execute"]["execute_notebooks"] == "cache"
    assert config["execute"]["cache"] == str(tmp_path / f"full-{cachekey.cache_key('full')[:12]}")


def build_page(notebook: Path, tmp_path: Path, scale: str, *flags: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "ICMLBOOK_CACHE_ROOT": str(tmp_path / "cache"), "ICMLBOOK_SCALE": scale,
           "ICMLBOOK_TRACE": str(tmp_path / "trace.txt"), "ICMLBOOK_LEDGER": str(tmp_path / "ledger"),
           "ICMLBOOK_FIXTURE_REGISTRY": str(tmp_path / "bas.yml")}
    return subprocess.run([sys.executable, str(ROOT / "tools" / "book.py"), "--execute", "cache", *flags,
                           "--page", str(notebook)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)


def test_a_full_scale_build_executes_again_and_then_comes_from_the_cache(tmp_path):
    (tmp_path / "pages").mkdir()
    (tmp_path / "bas.yml").write_text("chapter: bas\nseeds: {ci: [100], confirm: [1000, 1001, 1002, 1003, 1004]}\nclaims:\n  C1:\n"
                                      "    claim: c\n    criterion: ratio <= 1\n    checks: [ratio <= 1]\n")
    nb = write_notebook(tmp_path / "pages" / "scaled.ipynb",
                        "import os\nfrom icmlbook.claims import ChapterRun\n"
                        "run = ChapterRun('bas', registry=os.environ['ICMLBOOK_FIXTURE_REGISTRY'], show=False)",
                        "with open(os.environ['ICMLBOOK_TRACE'], 'a') as f:\n"
                        "    f.write(os.environ['ICMLBOOK_SCALE'] + '\\n')\n"
                        "run.record('C1', {'ratio': [0.5] * len(run.seeds('C1'))}, run.seeds('C1'))\nrun.finish()")
    trace = tmp_path / "trace.txt"
    record = lambda scale: json.loads((tmp_path / "ledger" / scale / "bas.json").read_text())
    r = build_page(nb, tmp_path, "ci")
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert trace.read_text().split() == ["ci"] and record("ci")["claims"][0]["scale"] == "ci"
    r = build_page(nb, tmp_path, "full", "--expect-cached")
    assert trace.read_text().split() == ["ci", "full"], "the full scale rendered the default scale's outputs"
    assert r.returncode != 0 and "executed scaled.ipynb" in r.stderr, "--expect-cached missed the execution"
    assert record("full")["scale"] == "full" and record("full")["claims"][0]["seeds"] == [1000, 1001, 1002, 1003, 1004]
    r = build_page(nb, tmp_path, "full", "--expect-cached")
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert trace.read_text().split() == ["ci", "full"], "the second full-scale build executed the page again"
    assert sorted(p.name.split("-")[0] for p in (tmp_path / "cache").iterdir()) == ["ci", "full"]


# ---------------------------------------------------------------- --expect-cached from the cache's records (issue 16)

def cache_with(tmp_path: Path):
    from jupyter_cache import get_cache
    return get_cache(str(tmp_path / "jc"))


def test_executed_notebooks_are_read_from_the_cache_records(tmp_path):
    from jupyter_cache.base import CacheBundleIn
    cache = cache_with(tmp_path)
    a = write_notebook(tmp_path / "a.ipynb", "1 + 1")
    b = write_notebook(tmp_path / "b.ipynb", "2 + 2")
    c = write_notebook(tmp_path / "c.ipynb", "3 + 3")

    def executed(nb_path: Path, failed: bool = False):
        "What myst-nb does when it executes a notebook in `cache` mode (myst_nb/core/execute/cache.py)."
        record = cache.add_nb_to_project(str(nb_path))
        if failed:
            from jupyter_cache.cache.db import NbProjectRecord
            NbProjectRecord.set_traceback(record.uri, "Traceback: boom", cache.db)
        else:
            cache.cache_notebook_bundle(CacheBundleIn(nbformat.read(nb_path, as_version=4), str(nb_path)),
                                        check_validity=False, overwrite=True)

    # tools/nbtest.py cached a and b
    for p in (a, b):
        cache.cache_notebook_file(str(p), uri=str(p), check_validity=False, overwrite=True)
    before = book.cache_snapshot(tmp_path / "jc")
    assert len(before.cache) == 2
    # a build that renders both from the cache leaves the records as they were (a lookup is not an execution)
    for p in (a, b):
        cache.match_cache_notebook(nbformat.read(p, as_version=4))
    assert book.executed_notebooks(before, book.cache_snapshot(tmp_path / "jc")) == []
    # a build that executes b again (same code, so the same hash: its record is replaced) and c for the first time
    time.sleep(0.01)
    executed(b)
    executed(c)
    after = book.cache_snapshot(tmp_path / "jc")
    assert book.executed_notebooks(before, after) == [str(b), str(c)]
    # a build in which c fails to execute: no new cache record, but its project record gets the traceback
    executed(c, failed=True)
    assert book.executed_notebooks(after, book.cache_snapshot(tmp_path / "jc")) == [str(c)]
    # no cache folder at all before the build: everything in it afterwards was executed by the build
    assert book.executed_notebooks(book.cache_snapshot(tmp_path / "absent"), after) == [str(a), str(b), str(c)]
    assert not (tmp_path / "absent").exists(), "taking a snapshot must not create a cache"


def test_identical_records_are_told_apart_by_their_creation_time():
    t = datetime(2026, 1, 1, tzinfo=timezone.utc)
    before = book.Snapshot(cache={(1, "h", t.isoformat()): "x.ipynb"}, project={})
    same = book.Snapshot(cache={(1, "h", t.isoformat()): "x.ipynb"}, project={})
    again = book.Snapshot(cache={(1, "h", (t + timedelta(seconds=1)).isoformat()): "x.ipynb"}, project={})
    assert book.executed_notebooks(before, same) == []
    assert book.executed_notebooks(before, again) == ["x.ipynb"]


def test_forced_notebooks_may_execute(tmp_path):
    nb = write_notebook(tmp_path / "board.ipynb", "1")
    assert not book.forced(nb)
    data = json.loads(nb.read_text())
    data["metadata"]["mystnb"] = {"execution_mode": "force"}
    nb.write_text(json.dumps(data))
    assert book.forced(nb)
