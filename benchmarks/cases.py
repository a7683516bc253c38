"""The benchmark cases of the Performance appendix; each compares a method with what a reader would use instead."""
from __future__ import annotations

import json

import numpy as np

from harness import ROOT, case, median_time


@case("connectivity", sizes=[250, 500, 1000, 2000], tiny=[40],
      what="Reachability of one sparse random graph (mean degree 3) with n vertices: the constructive algorithm "
           "(repeated squaring of I + A, ceil(log2 D) + 1 Boolean products) against scipy's breadth-first "
           "connected components; both return the full n x n matrix R.",
      sources=["icmlbook/connectivity.py"])
def connectivity(n: int) -> list[dict]:
    from icmlbook.connectivity import connectivity_matrix, reachability_bfs
    rng = np.random.default_rng(0)
    U = np.triu(rng.random((n, n)) < 3 / n, 1)
    A = (U | U.T).astype(np.float32)
    R, products = connectivity_matrix(A, return_products=True)
    assert np.array_equal(R.numpy(), reachability_bfs(A).numpy())
    rep = 3 if n >= 1000 else 7
    return [{"variant": "scipy connected components", "size": n, "seconds": median_time(lambda: reachability_bfs(A), rep)},
            {"variant": "repeated squaring", "size": n, "reference": "scipy connected components", "products": products,
             "seconds": median_time(lambda: connectivity_matrix(A), rep)}]


@case("leontief", sizes=[10, 100, 1000, 10000], tiny=[10],
      what="The Leontief market with m sellers and 10^4 buyer types: computing the closed-form equilibrium and "
           "verifying it exactly (O(m + T)) against the grid search a reader would otherwise run, every seller's "
           "best response over a 100-price grid (run up to m = 1000; it grows as m^2).",
      sources=["icmlbook/data_pricing.py"])
def leontief(m: int) -> list[dict]:
    from icmlbook.data_pricing import best_response, leontief_equilibrium, verify_leontief_equilibrium
    rng = np.random.default_rng(0)
    a, v, B, n = rng.uniform(0.5, 2.0, m), 1.0, rng.uniform(0.5, 1.5, 10_000), np.ones(10_000)
    p = leontief_equilibrium(a, v, 1.0, 1.0).p
    closed = lambda: verify_leontief_equilibrium(leontief_equilibrium(a, v, 1.0, 1.0).p, a, v, B, n)
    assert closed()["equilibrium"]
    rows = [{"variant": "closed form + exact check", "size": m, "seconds": median_time(closed)}]
    if m <= 1000:
        grid = np.linspace(0.01, 2.0, 100) * p.max()
        search = lambda: [best_response(j, p, grid, a, 1.0, 1.0, "leontief", v) for j in range(m)]
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
