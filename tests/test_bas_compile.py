"""Chapter 04 (BAS): the step under torch.compile and on CUDA, and an offline, quiet import of the bitsandbytes peer.

The notebook checks `bas_multi_tensor_step` eagerly against the default step (cheap); compiling costs tens of seconds of CPU,
so the compiled checks live here: `torch.compile(opt.step, fullgraph=True)` traces one graph with no break and follows the
eager step, `fused=True` does too (a learning rate held in a tensor changes without recompiling), and on a CUDA device the
same holds with no host sync."""
import copy
import os
import subprocess
import sys

import pytest
import torch
from torch import nn

from icmlbook.bas import BAS


def _model(device="cpu"):
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(16, 64), nn.Tanh(), nn.Linear(64, 70)).to(device)  # 64 x 70 = 4480 entries: an FP8 moment


def _grads(model, t):
    g = torch.Generator().manual_seed(t)
    return [torch.randn(p.shape, generator=g).to(p.device) * 10.0 ** (t % 3 - 1) for p in model.parameters()]


def _compare(ma, oa, mb, ob):
    for a, b in zip(ma.parameters(), mb.parameters()):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-6)
    for sa, sb in zip(oa.state.values(), ob.state.values()):
        assert float(sa["step"]) == float(sb["step"])
        torch.testing.assert_close(sa["exp_avg_sq"], sb["exp_avg_sq"], rtol=1e-5, atol=0)
        if sa["exp_avg"].dtype == torch.float8_e4m3fn:
            torch.testing.assert_close(sa["exp_avg_scale"], sb["exp_avg_scale"], rtol=1e-5, atol=0)
            differ = (sa["exp_avg"].view(torch.uint8) != sb["exp_avg"].view(torch.uint8)).float().mean()
            assert differ <= 0.01, differ  # a rounding tie may fall the other way


def _run(step_a, step_b, ma, mb, steps=4):
    for t in range(steps):
        grads = _grads(ma, t)
        for m, step in ((ma, step_a), (mb, step_b)):
            for p, g in zip(m.parameters(), grads):
                p.grad = g.clone()
            step(t)


def test_compile_opt_step_fullgraph_no_break_and_matches_eager():
    torch._dynamo.reset()
    ma = _model(); mb = copy.deepcopy(ma)
    oa = BAS(ma.parameters(), lr=1e-2, weight_decay=0.1)
    ob = BAS(mb.parameters(), lr=1e-2, weight_decay=0.1)
    for p in mb.parameters():
        p.grad = torch.zeros_like(p)
    probe = BAS(copy.deepcopy(mb).parameters(), lr=1e-2)  # explain runs the step: on a copy
    for p, q in zip(probe.param_groups[0]["params"], mb.parameters()):
        p.grad = q.grad.clone()
    explained = torch._dynamo.explain(probe.step)()
    assert (explained.graph_count, explained.graph_break_count) == (1, 0), explained.break_reasons
    compiled = torch.compile(ob.step, fullgraph=True)  # fullgraph: any graph break raises
    _run(lambda t: oa.step(), lambda t: compiled(), ma, mb)
    _compare(ma, oa, mb, ob)


def test_fused_flag_matches_eager_and_tensor_lr_does_not_recompile():
    torch._dynamo.reset()
    ma = _model(); mb = copy.deepcopy(ma)
    oa = BAS(ma.parameters(), lr=1e-2, weight_decay=0.1)
    lr = torch.tensor(1e-2)
    ob = BAS(mb.parameters(), lr=lr, weight_decay=0.1, fused=True)
    def step_b(t):
        lr.fill_(1e-2 * (1 - 0.1 * t))
        ob.step()
    def step_a(t):
        oa.param_groups[0]["lr"] = float(torch.tensor(1e-2 * (1 - 0.1 * t)))
        oa.step()
    from torch._dynamo.utils import counters
    counters.clear()
    _run(step_a, step_b, ma, mb)
    _compare(ma, oa, mb, ob)
    assert counters["stats"]["unique_graphs"] == 1, dict(counters["stats"])


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device here: the CUDA step is tested where there is one")
def test_cuda_compiled_step_matches_cpu():
    torch._dynamo.reset()
    ma = _model("cpu"); mb = _model("cuda")
    oa = BAS(ma.parameters(), lr=1e-2, weight_decay=0.1)
    ob = BAS(mb.parameters(), lr=torch.tensor(1e-2, device="cuda"), weight_decay=0.1, fused=True)
    _run(lambda t: oa.step(), lambda t: ob.step(), ma, mb)
    for a, b in zip(ma.parameters(), mb.parameters()):
        torch.testing.assert_close(a, b.cpu(), rtol=0, atol=1e-5)
    for p in mb.parameters():
        p.grad = torch.randn_like(p)
    torch.cuda.set_sync_debug_mode("error")  # any host sync in the step raises
    try:
        ob.step()
    finally:
        torch.cuda.set_sync_debug_mode("default")


def test_bitsandbytes_peer_imports_offline_and_quietly():
    pytest.importorskip("bitsandbytes")
    code = ("import socket, sys\n"
            "def refuse(*a, **k): raise RuntimeError('network used')\n"
            "socket.socket.connect = refuse\n"
            "from icmlbook.bas import peer_optimizer\n"
            "peer_optimizer('bnb-adamw8bit')\n"
            "import bitsandbytes; print(bitsandbytes.__version__)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600,
                         env={**os.environ, "HF_HUB_OFFLINE": "0"})
    assert out.returncode == 0, out.stderr
    assert "gemm_4bit" not in out.stderr and "kernels-community" not in out.stderr, out.stderr
