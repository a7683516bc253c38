"""The package as its users see it: requirements, entry points, the core helpers."""
import configparser
import os
import re
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
    reqs = settings()["requirements"].split() + settings()["dev_requirements"].split()
    assert reqs
    for r in reqs:
        assert "==" not in r, f"{r}: exact pins belong in constraints.txt, not in the package's requirements"
    torch = [r for r in settings()["requirements"].split() if re.match(r"torch[<>=!~]", r)]
    assert torch and torch[0].startswith("torch>="), "torch must be a lower bound only, so Colab keeps its torch"


def test_settings_match_the_design():
    s = settings()
    assert (s["lib_name"], s["nbs_path"], s["tst_flags"], s["min_python"]) == ("icmlbook", "nbs", "slow", "3.10")


def test_nbdev_toolchain_pinned_in_one_place():
    pins = (ROOT / "constraints.txt").read_text().split()
    for pin in ("nbdev==2.4.14", "execnb==0.1.18", "fastcore==1.14.5"):
        assert pin in pins
    assert "-c constraints.txt" in (ROOT / "Makefile").read_text()


def test_claims_command_prints_the_scoreboard(tmp_path):
    env = {**os.environ, "ICMLBOOK_LEDGER": str(tmp_path)}
    r = subprocess.run([sys.executable, "-m", "icmlbook.claims"], capture_output=True, text=True, env=env, cwd=ROOT)
    assert r.returncode == 0, r.stderr
    assert "| 04 | bas:" in r.stdout and "not " in r.stdout


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
