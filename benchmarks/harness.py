"""The benchmark harness: median wall times with warm-up excluded, ratios against a reference, one JSON.

Each case is a function `case(size) -> list[dict]` registered with `@case("name", sizes=..., tiny=...)`.
A row names a `variant`, the `size`, the measured `seconds` (median) and, where the case has one, the
`reference` variant it is compared with; the harness adds `ratio = seconds / reference's seconds` for the
same size. Other keys (bytes, estimates) are kept as they are.
"""
from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
import platform
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "_build" / "bench"


@dataclass
class Case:
    name: str
    fn: Callable[[int], list[dict]]
    sizes: list[int]
    tiny: list[int]
    what: str
    sources: list[str] = field(default_factory=list)  # files whose change makes the results stale


CASES: dict[str, Case] = {}


def case(name: str, sizes: list[int], tiny: list[int], what: str, sources: list[str] = ()):
    "Register a benchmark case."
    def register(fn):
        CASES[name] = Case(name, fn, list(sizes), list(tiny), what, list(sources))
        return fn
    return register


def median_time(fn: Callable[[], object], repeat: int = 7, warmup: int = 2, min_time: float = 0.0) -> float:
    "Median wall time of `fn()` over `repeat` runs after `warmup` runs that are not counted."
    if repeat < 1 or warmup < 0:
        raise ValueError(f"repeat must be >= 1 and warmup >= 0, got {repeat}, {warmup}")
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def add_ratios(rows: list[dict]) -> list[dict]:
    "Add `ratio` = seconds / seconds of the row's reference variant at the same size."
    by_key = {(r["variant"], r["size"]): r for r in rows}
    for r in rows:
        ref = by_key.get((r.get("reference"), r["size"]))
        if ref is not None and ref.get("seconds") and r.get("seconds") is not None:
            r["ratio"] = r["seconds"] / ref["seconds"]
        r.pop("reference", None)
    return rows


def slopes(rows: list[dict]) -> dict[str, float]:
    "Scaling exponent of each variant measured at two or more sizes: the least-squares log-log slope."
    import numpy as np
    out = {}
    for variant in dict.fromkeys(r["variant"] for r in rows):
        pts = [(r["size"], r["seconds"]) for r in rows if r["variant"] == variant and r["size"] > 0 and r.get("seconds")]
        if len({s for s, _ in pts}) >= 2:
            x, y = np.log([p[0] for p in pts]), np.log([p[1] for p in pts])
            out[variant] = float(np.polyfit(x, y, 1)[0])
    return out


def sources_hash(paths: list[str]) -> str:
    h = hashlib.sha256()
    for p in sorted(paths):
        f = ROOT / p
        h.update(p.encode() + (f.read_bytes() if f.exists() else b"<missing>"))
    return h.hexdigest()


def machine() -> dict:
    import numpy, torch
    cpu = platform.processor() or platform.machine()
    try:
        cpu = next(l.split(":", 1)[1].strip() for l in Path("/proc/cpuinfo").read_text().splitlines()
                   if l.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return {"cpu": cpu, "cores": os.cpu_count(), "torch_threads": torch.get_num_threads(),
            "python": platform.python_version(), "torch": torch.__version__, "numpy": numpy.__version__}


def run(names: list[str] | None = None, tiny: bool = False, out: Path | None = None, log=print) -> dict:
    "Run the cases (all by default) and write bench.json and bench.md under `out`; return the results."
    unknown = set(names or []) - set(CASES)
    if unknown:
        raise ValueError(f"unknown benchmark cases {sorted(unknown)}; known: {sorted(CASES)}")
    results = {"date": dt.datetime.now().isoformat(timespec="seconds"), "tiny": tiny, "machine": machine(),
               "cases": {}}
    for c in (CASES[n] for n in (names or CASES)):
        rows = []
        for size in (c.tiny if tiny else c.sizes):
            log(f"{c.name}: size {size}")
            rows += c.fn(size)
        results["cases"][c.name] = {"what": c.what, "rows": add_ratios(rows), "slopes": slopes(rows),
                                    "sources_hash": sources_hash(c.sources), "sources": c.sources}
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        (out / "bench.json").write_text(json.dumps(results, indent=1), encoding="utf-8")
        (out / "bench.md").write_text(markdown(results), encoding="utf-8")
    return results


def _fmt(v) -> str:
    if v is None:
        return ""
    if isinstance(v, float):
        return f"{v:.3g}"
    return str(v)


def markdown(results: dict) -> str:
    "The results as Markdown: one table per case."
    m = results["machine"]
    out = [f"Measured {results['date']} on {m['cpu']} ({m['cores']} cores, {m['torch_threads']} torch threads); "
           f"Python {m['python']}, torch {m['torch']}, numpy {m['numpy']}."
           + (" **Tiny sizes (a smoke run), not for reading.**" if results.get("tiny") else "")]
    for name, c in results["cases"].items():
        keys = list(dict.fromkeys(k for r in c["rows"] for k in r))
        out += ["", f"### {name}", "", c["what"], "", "| " + " | ".join(keys) + " |", "|" + "---|" * len(keys)]
        out += ["| " + " | ".join(_fmt(r.get(k, "")) for k in keys) + " |" for r in c["rows"]]
        if c.get("slopes"):
            out += ["", "Scaling exponent (log-log slope of time against size): "
                    + "; ".join(f"{v} {k:.2f}" for v, k in c["slopes"].items()) + "."]
    return "\n".join(out) + "\n"
