"""The same numbers on any x86-64 CPU with AVX2: torch's and numpy's kernels are pinned to AVX2 in notebook runs.

Each check runs a small torch training and numpy BLAS work in a fresh process (the pins act at library load) and
compares the bytes of the results."""
import os
import re
import subprocess
import sys

import pytest

from icmlbook.claims import KERNEL_PINS, _machine

ROOT = __import__("pathlib").Path(__file__).resolve().parent.parent
WORK = """
import hashlib, numpy as np, torch
torch.manual_seed(0)
m = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.GELU(), torch.nn.LayerNorm(128), torch.nn.Linear(128, 10))
opt = torch.optim.AdamW(m.parameters(), 1e-3)
X, y = torch.randn(256, 64), torch.randint(0, 10, (256,))
for _ in range(30):
    opt.zero_grad(); torch.nn.functional.cross_entropy(m(X), y).backward(); opt.step()
conv = torch.nn.functional.conv2d(torch.randn(4, 3, 33, 33), torch.randn(8, 3, 5, 5))
A = np.random.default_rng(0).normal(size=(300, 300))
parts = [p.detach().numpy().tobytes() for p in m.parameters()] + [conv.numpy().tobytes(), (A @ A).tobytes()]
print(torch.backends.cpu.get_cpu_capability(), hashlib.sha256(b"".join(parts)).hexdigest())
"""
# what an AVX2-only CPU would run: every library told to use no more than AVX2
AVX2_MACHINE = {"ATEN_CPU_CAPABILITY": "avx2", "MKL_ENABLE_INSTRUCTIONS": "AVX2", "ONEDNN_MAX_CPU_ISA": "AVX2",
                "OPENBLAS_CORETYPE": "Haswell"}


def run(**env) -> tuple[str, str]:
    base = {k: v for k, v in os.environ.items() if k not in KERNEL_PINS and k != "MKL_ENABLE_INSTRUCTIONS"}
    out = subprocess.run([sys.executable, "-c", WORK], env={**base, **env}, capture_output=True, text=True, check=True)
    level, digest = out.stdout.split()
    return level, digest


def avx512() -> bool:
    return "avx512f" in open("/proc/cpuinfo").read() if os.path.exists("/proc/cpuinfo") else False


def test_makefile_exports_the_pins_of_the_ledger():
    make = (ROOT / "Makefile").read_text()
    assert dict(re.findall(r"^export (\w+) \?= (\S+)$", make, re.M)).items() >= KERNEL_PINS.items()


def test_a_pinned_run_gives_the_same_numbers_whatever_the_native_instruction_set():
    native = run(**KERNEL_PINS)
    emulated = run(**{**AVX2_MACHINE, **KERNEL_PINS})  # the same pinned run, on an emulated AVX2-only CPU
    assert native == emulated and native[0] == "AVX2"


@pytest.mark.skipif(not avx512(), reason="needs an AVX-512 CPU, where unpinned kernels differ from an AVX2 one")
def test_without_the_pins_the_numbers_depend_on_the_cpu():
    "The check above can fail: unpinned, this AVX-512 CPU and an emulated AVX2 one give different numbers."
    assert run() != run(**AVX2_MACHINE)


def test_the_ledger_records_the_cpu_and_the_pinned_level(monkeypatch):
    for k, v in KERNEL_PINS.items():
        monkeypatch.setenv(k, v)
    m = _machine()
    assert "cores" in m and "pinned: ATEN_CPU_CAPABILITY=avx2, MKL_CBWR=AVX2" in m, m
    for k in KERNEL_PINS:
        monkeypatch.delenv(k)
    assert "kernels not pinned" in _machine()
