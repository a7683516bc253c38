"""The package as its users see it: requirements, entry points, the core helpers."""
import configparser
import os
import re
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def settings():
    ini = configparser.ConfigParser(delimiters=["="])
    ini.read(ROOT / "settings.ini")
    return ini["DEFAULT"]


def test_requirements_are_ranges_never_exact_pins():
    reqs = settings()["requirements"].split() + settings()["dev_requirements"].split() + settings()["peers_requirements"].split() + settings()["colab_requirements"].split()
    assert reqs
    for r in reqs:
        assert "==" not in r, f"{r}: exact pins belong in constraints.txt, not in the package's requirements"
    torch = [r for r in settings()["requirements"].split() if re.match(r"torch[<>=!~]", r)]
    assert torch and torch[0].startswith("torch>="), "torch must be a lower bound only, so Colab keeps its torch"


def test_settings_match_the_design():
    s = settings()
    assert (s["lib_name"], s["nbs_path"], s["tst_flags"], s["min_python"]) == ("icmlbook", "nbs", "slow", "3.10")


def constraints() -> dict[str, str]:
    "The exact pins of constraints.txt, by normalized distribution name."
    pins = {}
    for line in (ROOT / "constraints.txt").read_text(encoding="utf-8").splitlines():
        line = line.split("#")[0].strip()
        if line:
            name, sep, version = line.partition("==")
            assert sep and version.strip(), f"constraints.txt: {line!r} is not an exact pin"
            pins[normalize(name)] = version.strip()
    return pins


def normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name.strip()).lower()


def test_the_environment_has_exactly_the_pinned_toolchain():
    from importlib.metadata import PackageNotFoundError, version
    pins = constraints()
    for name in ("nbdev", "execnb", "fastcore", "jupyter-book", "sphinx", "myst-nb", "myst-parser", "sphinx-book-theme",
                 "sphinx-proof", "sphinxcontrib-bibtex", "jupyter-cache", "nbclient", "playwright", "pytest-socket"):
        assert name in pins, f"{name} must be pinned in constraints.txt"
    wrong = {}
    for name, pinned in pins.items():
        try:
            installed = version(name)
        except PackageNotFoundError:
            installed = None
        if installed != pinned:
            wrong[name] = (pinned, installed)
    assert not wrong, f"installed versions differ from constraints.txt (pinned, installed): {wrong}; run `make install`"


def test_pins_live_in_constraints_txt_only():
    "No other file that installs or declares packages pins one of the constrained packages."
    pinned = set(constraints())
    assert "-c constraints.txt" in (ROOT / "Makefile").read_text(), "make must install under constraints.txt"
    for f in ("settings.ini", "setup.py", "pyproject.toml", "Makefile", ".ci/run"):
        path = ROOT / f
        if not path.exists():
            continue
        for m in re.finditer(r"([A-Za-z0-9][A-Za-z0-9._-]*)\s*(===?|~=)\s*[0-9]", path.read_text(encoding="utf-8")):
            assert normalize(m.group(1)) not in pinned, f"{f} pins {m.group(0)!r}: pins belong in constraints.txt only"


def test_ci_installs_chromium_and_npm_when_missing(tmp_path):
    "Runs .ci/run with stand-ins for apt-get and make, on a PATH without chromium and npm, then with both."
    bin_dir, log = tmp_path / "bin", tmp_path / "calls.log"
    bin_dir.mkdir()
    for tool in ("bash", "dirname", "cat", "env"):
        (bin_dir / tool).symlink_to(shutil.which(tool))
    for tool in ("apt-get", "make"):
        (bin_dir / tool).write_text(f'#!{shutil.which("bash")}\necho "{tool} $*" >> {log}\n')
        (bin_dir / tool).chmod(0o755)
    env = {"PATH": str(bin_dir), "HOME": str(tmp_path)}
    r = subprocess.run([shutil.which("bash"), str(ROOT / ".ci" / "run")], env=env, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    calls = log.read_text().splitlines()
    assert calls[0] == "apt-get update -qq", calls
    assert len(calls) == 3 and calls[1].startswith("apt-get install") and calls[2] == "make test", calls
    assert set(calls[1].split()) >= {"chromium", "npm"}, calls
    for tool in ("chromium", "npm"):
        (bin_dir / tool).write_text("#!/bin/true\n")
        (bin_dir / tool).chmod(0o755)
    log.unlink()
    r = subprocess.run([shutil.which("bash"), str(ROOT / ".ci" / "run")], env=env, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert log.read_text().splitlines() == ["make test"], "nothing to install, so no apt-get"


STATUSES = ("not written", "not run", "stale", "ran", "incomplete", "missing")


def test_claims_command_prints_the_scoreboard(tmp_path):
    "With an empty ledger: one row per chapter in the book's order, none of them run, the unwritten ones marked so."
    from icmlbook.claims import CHAPTERS, notebook_name
    env = {**os.environ, "ICMLBOOK_LEDGER": str(tmp_path)}
    r = subprocess.run([sys.executable, "-m", "icmlbook.claims"], capture_output=True, text=True, env=env, cwd=ROOT)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("|"))
    rows = []
    for line in lines[header + 2:]:  # after the header and its |---| line, up to the end of the table
        if not line.startswith("|"):
            break
        rows.append(line)
    assert len(rows) == len(CHAPTERS), r.stdout
    status_re = re.compile(r"\|\s*(" + "|".join(STATUSES) + r")\b[^|]*\|")
    for row, (slug, _) in zip(rows, CHAPTERS):
        assert re.search(rf"\b{re.escape(slug)}\b", row), f"row for {slug} expected, got {row}"
        m = status_re.search(row)
        assert m, f"no status out of {STATUSES} in {row}"
        written = (ROOT / "nbs" / notebook_name(slug)).exists()
        assert m.group(1) in (("not run", "missing") if written else ("not written",)), row


def test_scale_rejects_unknown_values():
    env = {**os.environ, "ICMLBOOK_SCALE": "medium"}
    r = subprocess.run([sys.executable, "-c", "from icmlbook.core import scale; scale()"],
                       capture_output=True, text=True, env=env)
    assert r.returncode != 0 and "ICMLBOOK_SCALE must be one of ('ci', 'full')" in r.stderr


def test_network_is_blocked_during_tests():
    from pytest_socket import SocketConnectBlockedError
    with pytest.raises(SocketConnectBlockedError):
        socket.create_connection(("192.0.2.1", 80), timeout=1)  # TEST-NET-1: never routable


def test_loopback_stays_open_for_distributed_tests():
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(1)
        with socket.create_connection(server.getsockname(), timeout=2):
            pass


def test_the_bitsandbytes_hub_kernel_warnings_are_dropped_and_nothing_else():
    "bitsandbytes' CPU backend warns that it cannot fetch (or check) a 4-bit kernel from a hub; those records alone are dropped."
    import logging
    import icmlbook
    kept = []

    class Keep(logging.Handler):
        def emit(self, record):
            kept.append((record.name, record.getMessage()))
    cases = []
    for name, start in icmlbook.BITSANDBYTES_CPU_NOISE.items():
        cases += [(name, start + ": more text"), (name, "other"), ("icmlbook.test", start)]
    for name, text in cases:
        log, h = logging.getLogger(name), Keep()
        log.addHandler(h)
        try:
            log.warning(text)
        finally:
            log.removeHandler(h)
    assert kept == [c for c in cases if not c[1].endswith(": more text")]
