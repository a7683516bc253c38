"""The benchmark cases of the Performance appendix; each compares a method with what a reader would use instead."""
from __future__ import annotations

import json

import numpy as np

from harness import ROOT, case, median_time


@case("connectivity", sizes=[250, 500, 1000, 2000], tiny=[40],
      what="Reachability of one sparse random graph (mean degree 3) with n vertices: the constructive algorithm "
           "(repeated squaring of I + A, ceil(log2 D) + 1 Boolean products) against scipy's breadth-first "
           "connected components; both return the full n x n matrix R. The 'batch' rows take n Erdős–Rényi graphs "
           "of 16 vertices (p ~ U[0.05, 0.3]) instead: batched repeated squaring against one scipy call on the "
           "block-diagonal union of the n graphs (the reference), and against a Python loop of one scipy call per graph.",
      sources=["icmlbook/connectivity.py"])
def connectivity(n: int) -> list[dict]:
    from icmlbook.connectivity import connectivity_matrix, reachability_bfs, sample_graphs
    rng = np.random.default_rng(0)
    U = np.triu(rng.random((n, n)) < 3 / n, 1)
    A = (U | U.T).astype(np.float32)
    R, products = connectivity_matrix(A, return_products=True)
    assert np.array_equal(R.numpy(), reachability_bfs(A).numpy())
    rep = 3 if n >= 1000 else 7
    G = sample_graphs(16, n, seed=0)  # a batch of n small graphs
    assert np.array_equal(connectivity_matrix(G).numpy(), reachability_bfs(G).numpy())
    union = "batch: scipy on the block-diagonal union"
    return [{"variant": "scipy connected components", "size": n, "seconds": median_time(lambda: reachability_bfs(A), rep)},
            {"variant": "repeated squaring", "size": n, "reference": "scipy connected components", "products": products,
             "seconds": median_time(lambda: connectivity_matrix(A), rep)},
            {"variant": union, "size": n, "seconds": median_time(lambda: reachability_bfs(G), rep)},
            {"variant": "batch: repeated squaring", "size": n, "reference": union,
             "seconds": median_time(lambda: connectivity_matrix(G), rep)},
            {"variant": "batch: scipy, one call per graph", "size": n, "reference": union,
             "seconds": median_time(lambda: reachability_bfs(G, per_graph=True), 3, 1)}]


@case("leontief", sizes=[100, 1000, 100_000, 1_000_000, 4_000_000], tiny=[10],
      what="The Leontief market with m sellers and 10^4 buyer types: computing the closed-form equilibrium and "
           "verifying it exactly (O(m + T)) against the grid search a reader would otherwise run, every seller's "
           "best response over a 100-price grid (run up to m = 1000). Chapter 02's C4 fits the closed form's "
           "log-log slope over m from 10^5 to 4 10^6.",
      sources=["icmlbook/data_pricing.py"])
def leontief(m: int) -> list[dict]:
    from icmlbook.data_pricing import Market, best_response, leontief_equilibrium, verify_leontief_equilibrium
    rng = np.random.default_rng(0)
    market = Market(rng.uniform(0.5, 2.0, m), B=rng.uniform(0.5, 1.5, 10_000), n=1.0, utility="leontief", v=1.0)
    p = leontief_equilibrium(market).p
    closed = lambda: verify_leontief_equilibrium(market, leontief_equilibrium(market).p)
    assert closed()["equilibrium"]
    rows = [{"variant": "closed form + exact check", "size": m, "seconds": median_time(closed)}]
    if m <= 1000:
        grid = np.linspace(0.01, 2.0, 100) * p.max()
        one_type = Market(market.a, B=1.0, n=1.0, utility="leontief", v=1.0)   # the homogeneous market: one revenue per price
        search = lambda: [best_response(one_type, j, p, grid) for j in range(m)]
        rows.insert(0, {"variant": "grid best-response search", "size": m, "seconds": median_time(search, 3, 1)})
        rows[1]["reference"] = "grid best-response search"
    return rows


@case("book", sizes=[0], tiny=[0],
      what="Each chapter's wall time at the default scale, from the claims ledger of the last run, and the last "
           "`make test` on this machine (_build/make_test_seconds).",
      sources=[])
def book(_: int) -> list[dict]:
    from icmlbook.claims import scoreboard
    rows = [{"variant": r["notebook"], "size": 0, "seconds": r["wall_time"]} for r in scoreboard()
            if r["wall_time"] is not None]
    f = ROOT / "_build" / "make_test_seconds"
    if f.exists():
        rows.append({"variant": "make test (total)", "size": 0, "seconds": float(f.read_text())})
    return rows


def _mlp(numel: int):
    "Eight square linear layers holding about `numel` parameters, with random gradients."
    import torch
    width = max(8, int((numel / 8) ** 0.5))
    torch.manual_seed(0)
    model = torch.nn.Sequential(*[torch.nn.Linear(width, width) for _ in range(8)])
    for p in model.parameters():
        p.grad = torch.randn_like(p)
    return model


@case("bas_step", sizes=[10_000_000], tiny=[20_000],
      what="One optimizer step on a model of eight square linear layers (size = parameters; the width a multiple of 16, "
           "so that torchao's blocks of 256 tile every weight), gradients fixed: BAS with the FP8 and the fp32 first "
           "moment against torch's AdamW (foreach, and fused where supported); the low-bit peers a reader would pick "
           "instead, torchao's AdamW8bit, AdamWFp8 and AdamW4bit and bitsandbytes' AdamW8bit (when the `peers` extra "
           "is installed; made for GPUs, timed here on the CPU, torchao after its first, compiling step); Signum and "
           "torch's Adafactor for context. `state_bytes` is the optimizer state (icmlbook.bas.state_bytes: every "
           "storage once, scales and quantisation maps included), `state_ratio` its ratio to AdamW's; `ratio` and "
           "`ratio_fused` are the step time over AdamW foreach's and fused's. "
           "Targets of issue 3: eager BAS-FP8 <= 1.5 x AdamW foreach; BAS-FP8 fused (compiled) <= 1.0 x AdamW fused; state 0.125-0.14.",
      sources=["icmlbook/bas.py"])
def bas_step(numel: int) -> list[dict]:
    import inspect
    import torch
    from icmlbook.bas import BAS, Signum, peer_optimizer, peers_available, quiet_peer_steps, state_bytes
    kw = dict(lr=1e-3, weight_decay=0.01)
    width = 16 * max(1, round((numel / 8) ** 0.5 / 16))

    def model_():
        model = _mlp(8 * width * width)  # _mlp's width is int(sqrt(numel / 8)): exactly `width`
        assert model[0].in_features == width
        return model
    arms = {"AdamW foreach": lambda ps: torch.optim.AdamW(ps, foreach=True, **kw)}
    try:
        torch.optim.AdamW([torch.zeros(1, requires_grad=True)], fused=True)
        arms["AdamW fused"] = lambda ps: torch.optim.AdamW(ps, fused=True, **kw)
    except (RuntimeError, ValueError):
        pass
    arms["BAS-FP8"] = lambda ps: BAS(ps, **kw)
    arms["BAS-FP32"] = lambda ps: BAS(ps, state_dtype=torch.float32, **kw)
    if "fused" in inspect.signature(BAS).parameters:  # the multi-tensor step compiled once per param group (torch.compile, fullgraph)
        arms["BAS-FP8 fused"] = lambda ps: BAS(ps, fused=True, **kw)
    peer_names = {"ao-adamw8bit": "torchao AdamW8bit", "ao-adamwfp8": "torchao AdamWFp8",
                  "ao-adamw4bit": "torchao AdamW4bit", "bnb-adamw8bit": "bitsandbytes AdamW8bit"}
    for peer in peers_available():
        arms[peer_names[peer]] = lambda ps, cls=peer_optimizer(peer): cls(ps, **kw)
    arms["Signum"] = lambda ps: Signum(ps, lr=1e-3)
    if hasattr(torch.optim, "Adafactor"):
        arms["Adafactor"] = lambda ps: torch.optim.Adafactor(ps, lr=1e-2)
    rows, ref_bytes = [], None
    for name, make in arms.items():
        model = model_()
        opt = make(list(model.parameters()))
        with quiet_peer_steps():
            opt.step()  # creates the state (and compiles, for a compiled step)
            sb = state_bytes(opt)
            ref_bytes = ref_bytes or sb
            rows.append({"variant": name, "size": sum(p.numel() for p in model.parameters()),
                         "seconds": median_time(opt.step, 9 if numel > 1e6 else 5, 2), "state_bytes": sb,
                         "state_ratio": sb / ref_bytes, "reference": None if name == "AdamW foreach" else "AdamW foreach"})
    fused = next((r["seconds"] for r in rows if r["variant"] == "AdamW fused"), None)
    for r in rows:
        r["ratio_fused"] = r["seconds"] / fused if fused else None
    return rows


@case("bas_vote_bytes", sizes=[2], tiny=[2],
      what="The communication-efficient BAS: bytes one worker sends per step (packed 1-bit signs + fp32 block "
           "scalars), measured in a real 2-process gloo run on 127.0.0.1, against an fp32 gradient all-reduce of "
           "the same parameters; and the same count for a 10M-parameter model. `ratio` here is bytes over bytes.",
      sources=["icmlbook/bas.py"])
def bas_vote_bytes(world: int) -> list[dict]:
    import socket
    import tempfile
    import torch
    import torch.multiprocessing as mp
    from icmlbook.bas import majority_vote_worker, vote_bytes, vote_demo_model
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with tempfile.TemporaryDirectory() as tmp:
        out = f"{tmp}/rank0.pt"
        mp.spawn(majority_vote_worker, args=(world, f"tcp://127.0.0.1:{port}", 3, out), nprocs=world, join=True)
        sent = torch.load(out, weights_only=True)["bytes_sent"]
    demo = vote_bytes(vote_demo_model().parameters())
    big = vote_bytes(_mlp(10_000_000).parameters())
    return [{"variant": "fp32 all-reduce (demo MLP)", "size": world, "bytes": demo["fp32_allreduce"], "seconds": None},
            {"variant": "BAS vote, measured (demo MLP)", "size": world, "bytes": sent, "seconds": None,
             "ratio": sent / demo["fp32_allreduce"]},
            {"variant": "fp32 all-reduce (10M model)", "size": world, "bytes": big["fp32_allreduce"], "seconds": None},
            {"variant": "BAS vote (10M model)", "size": world, "bytes": big["vote_total"], "seconds": None,
             "ratio": big["vote_total"] / big["fp32_allreduce"]}]


@case("datashifts", sizes=[500, 1000, 2000, 5000], tiny=[60],
      what="Two Gaussian samples (d = 10, true shift 2) of `size` points each, no subsampling: one entropic plan of the "
           "chapter's solver (`entropic_ot`, log-domain Sinkhorn with eps-annealing and a truncated kernel, eps = 0.01, "
           "its mass and marginals checked) and the whole DataShifts estimate (split-half S_Cov and S_Cpt, n_max = size), "
           "against POT's exact `ot.emd2` on the same cost matrix; `estimate` is the plan's transport cost, the exact W1 "
           "and S_Cov respectively.",
      sources=["icmlbook/datashifts.py"])
def datashifts(n: int) -> list[dict]:
    import ot
    from icmlbook.datashifts import datashifts as estimate, entropic_ot, gibbs_plan
    rng = np.random.default_rng(0)
    d, T = 10, np.r_[2.0, np.zeros(9)]
    x1, x2 = rng.normal(size=(n, d)), rng.normal(size=(n, d)) + T
    u, C = np.full(n, 1 / n), ot.dist(x1, x2, metric="euclidean")
    rep, warm = (3, 1) if n <= 2000 else (1, 0)
    emd = lambda: ot.emd2(u, u, C, numItermax=100_000_000)
    _, f, g = entropic_ot(u, u, C)
    pi = gibbs_plan(u, u, C, f, g, 0.01)
    assert abs(pi.sum() - 1) < 1e-6 and np.abs(pi.sum(1) - u).sum() < 1e-3, "entropic plan misses its marginals"
    full = lambda: estimate(x1, x2, x1[:, 1], x2[:, 1], n_max=n)
    return [{"variant": "ot.emd2 (exact W1)", "size": n, "seconds": median_time(emd, rep, warm), "estimate": float(emd())},
            {"variant": "entropic_ot plan (eps = 0.01)", "size": n, "seconds": median_time(lambda: entropic_ot(u, u, C), rep, warm),
             "estimate": float((pi * C).sum()), "reference": "ot.emd2 (exact W1)"},
            {"variant": "datashifts (S_Cov and S_Cpt)", "size": n, "seconds": median_time(full, rep, warm),
             "estimate": float(full()[0]), "reference": "ot.emd2 (exact W1)"}]


@case("epidiff_map", sizes=[8, 32, 128, 512], tiny=[4],
      what="MAP fits of the 3-parameter SIR posterior for `size` region-windows of 14 days (synthetic world of seed 0): "
           "one L-BFGS-B run on the sum of the independent objectives, against one L-BFGS-B run per window (what "
           "a reader would write; run up to 128 windows). Both use 4 starts and the exact gradient.",
      sources=["icmlbook/epidiff.py"])
def epidiff_map(n: int) -> list[dict]:
    from icmlbook.epidiff import fit_sir_map, make_windows, synthetic_world
    w = synthetic_world(0)
    origins = np.arange(14, 14 + -(-n // 8) * 2, 2)
    hist, _, s0 = make_windows(w.epidemic.reported, w.population, origins)
    y, pop, s0 = hist.reshape(-1, 14)[:n], np.tile(w.population, len(origins))[:n], s0.ravel()[:n]
    batched = lambda: fit_sir_map(y, pop, s0)
    rows = []
    if n <= 128:
        loop = lambda: [fit_sir_map(y[i:i + 1], pop[i], s0[i]) for i in range(n)]
        f_loop = np.concatenate([f for _, f in loop()])
        assert np.allclose(batched()[1], f_loop, atol=1e-5), "batched and per-window fits disagree"
        rows.append({"variant": "one L-BFGS-B per window", "size": n, "seconds": median_time(loop, 3, 1)})
    rows.append({"variant": "batched L-BFGS-B", "size": n, "seconds": median_time(batched, 3, 1),
                 "reference": "one L-BFGS-B per window" if n <= 128 else None})
    return rows
