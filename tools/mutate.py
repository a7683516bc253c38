"""Mutation testing of a chapter's own tests (`make mutate SLUG=<slug>`; never part of `make test` or CI).

    python tools/mutate.py SLUG [--budget SECONDS] [--workers N] [--seed K] [--max-mutants N] [--timeout SECONDS]

Mutants of the chapter's exported module icmlbook/<slug>.py come from cosmic-ray (pinned below, installed into
the running environment on first use): every default operator of its `core` provider, i.e. arithmetic, bitwise,
comparison and unary operator replacement, numbers +1 and -1, True/False, and/or, added `not`, break/continue,
exception handlers that never match, removed decorators and for loops that run zero times. Under
`from __future__ import annotations` an annotation is never evaluated, so mutants inside annotations cannot
change behaviour and are left out (and counted).

Each mutant is tested by the chapter's own test cells: the notebook's code cells before its "## Experiment"
heading, in order, with every `#| export` cell replaced by the mutated module's code for that cell (the
module's `# %% ... #<cell id>` markers say which), `default_exp` cells and cells flagged with a settings.ini
`tst_flags` flag (`#| slow`) or `#| eval: false` skipped. The experiments never run. The namespace is also
registered as `icmlbook.<slug>`, so a test cell that imports from the module gets the mutant. A mutant is
*killed* when a cell raises, *survives* when every cell passes, and *times out* after --timeout seconds
(default: four times the unmutated run, at least 20 s); a timed-out mutant counts as detected, as in
cosmic-ray. The cells run as in `nbdev_test`: working folder nbs/, IPython-style `__future__` flags carried
from cell to cell, the claims ledger in a temporary folder, one thread per worker.

Coverage first, as mutmut does: one traced, unmutated run records which lines of the module each test cell
runs, and which lines the experiment cells run at the default scale (the claim check: the lines that compute a
registered quantity; reused from the last result while the module and the experiment cells are unchanged, and
skipped by --no-experiment). A mutant then runs only the cells that reach its line, the later cells that read a
name those assigned, and the earlier cells they need (a module-level line runs every cell). Each such selection
must pass unmutated before a failure under it counts, and a mutant that survives its selection is judged again
with every cell, so the selection saves time without changing a verdict. A mutant on a line no test cell runs
survives without a run (the first ten are run anyway, with every cell, to check the map; if one of them is
killed, all such survivors are judged again). Mutants on claim lines are tried first. The result reports the
claim-line mutants (candidates, tried, detected), the lines the tests run, the score's 95% Wilson interval, and
the functions defined in experiment cells (never mutated: they belong in the module).

The parent process imports what the cells import once. The cells before the export cell a mutant changes run
the same code for it as for the unmutated module, so they run once (a snapshot) for all the mutants of that
export cell in a round, and each mutant is forked from that snapshot to run only the later cells (--workers
snapshots at a time). The candidates are shuffled by a fixed seed and tried in that order (claim lines first), in
rounds sized to the time left, until --max-mutants or the time budget (default 840 s: one chapter in at most 15
minutes on a 2-core machine) runs out, so the mutants tried are a seeded, uniform sample of each group, and the
same prefix of one permutation on every run of the same code.

After tests are added, `--retest` judges the same sample again without a whole new run: every survivor, every
timed-out mutant (on a loaded machine a survivor can time out), and a seeded spot check of the killed mutants
(30 by default) to confirm the added tests did not stop an earlier kill. It refuses when the module changed
(the mutants would differ); the result keeps a record of each retest.

Mutants that a review found surviving are kept in results/mutation/review.yml as exact text replacements; every
run (and retest) of the chapter runs them first, outside the sample and its score, and records their outcomes
under "review" (`--review-only` runs just them and prints, for quick work on a test; `--only ID,ID` does the same
for sampled mutants named by their ids).

The result goes to results/mutation/<slug>.json: counts, the module's sha256 (a result whose module changed
is stale, and so is one whose test cells changed), the date and wall time, every mutant tried with its
outcome, and each survivor's line and diff. results/mutation/<slug>.equivalent.yml, kept by hand and across
runs, maps a survivor's id to a one-line reason why it cannot change behaviour; the score is
(killed + timeouts) / (tried - equivalent). The book's "Test strength" page (nbs/mutation.ipynb) shows it all
through `load_results` and the table functions at the end of this file, which need only the standard library
and PyYAML.
"""
from __future__ import annotations

import __future__ as future_features
import argparse
import ast
import configparser
import datetime
import difflib
import hashlib
import json
import os
import random
import re
import signal
import subprocess
import sys
import tempfile
import time
import types
import warnings
from dataclasses import dataclass, field
from functools import reduce
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LIBRARY, LIBRARY_VERSION = "cosmic-ray", "8.7.0"
RESULTS_DIR = Path("results") / "mutation"
DEFAULT_BUDGET = 840.0  # seconds for one chapter, start to finish (the target is 15 minutes)
EXPERIMENT = re.compile(r"^##\s+Experiments?\b", re.M | re.I)
MARKER = re.compile(r"^# %% (\S+) #(\S+)[ \t]*$", re.M)  # nbdev's '# %% ../nbs/02_x.ipynb #<cell id>'
FUTURE_MASK = reduce(lambda a, b: a | b, (getattr(future_features, f).compiler_flag
                                          for f in future_features.all_feature_names))
EXPORT = {"export", "exports", "exporti"}


# ----------------------------------------------------------------------------------------------------------
# The test cells of a notebook

@dataclass
class Step:
    "One code cell that runs against every mutant: as written ('cell') or replaced by the module ('export')."
    kind: str
    label: str  # 'cell 27' (the cell's index in the notebook)
    source: str
    cell_id: str | None = None


@dataclass
class Piece:
    "Code to execute: a test cell, or the part of the (mutated) module that an export cell produced."
    label: str
    filename: str
    code: str


def directives(source: str) -> dict[str, str]:
    "nbdev's `#| name args` lines of a cell, as {name: args}."
    out = {}
    for line in source.splitlines():
        if line.startswith("#|") and line[2:].strip():
            name, _, args = line[2:].strip().partition(" ")
            out[name.rstrip(":")] = args.strip()
    return out


def test_flags(root: Path = ROOT) -> set[str]:
    "settings.ini's `tst_flags`: cells flagged with one of them are skipped by `nbdev_test`, and here."
    ini = configparser.ConfigParser(delimiters=["="])
    ini.read(root / "settings.ini")
    return set(ini["DEFAULT"].get("tst_flags", "").split()) if "DEFAULT" in ini else set()


def test_plan(nb: dict, flags: set[str] = frozenset()) -> list[Step]:
    "The code cells before the notebook's Experiment heading that run against each mutant."
    steps = []
    for i, cell in enumerate(nb["cells"]):
        src = "".join(cell["source"])
        if cell["cell_type"] == "markdown" and EXPERIMENT.search(src):
            late = [f"cell {k}" for k, c in enumerate(nb["cells"][i:], i)
                    if c["cell_type"] == "code" and EXPORT & set(directives("".join(c["source"])))]
            if late:  # the tests never run that code, so its mutants would survive whatever the tests say
                raise ValueError(f"export cells after the Experiment heading ({', '.join(late)}): move them, with "
                                 "their tests, before it")
            return steps
        if cell["cell_type"] != "code":
            continue
        d = directives(src)
        if "default_exp" in d or d.get("eval", "").lower() == "false" or flags & set(d):
            continue
        steps.append(Step("export" if EXPORT & set(d) else "cell", f"cell {i}", src, cell.get("id")))
    raise ValueError("the notebook has no '## Experiment' heading: cannot tell its tests from its experiments")


def experiment_plan(nb: dict, flags: set[str] = frozenset()) -> list[Step]:
    "The code cells from the notebook's Experiment heading on (skipped as in test_plan): they compute the claims."
    steps, on = [], False
    for i, cell in enumerate(nb["cells"]):
        src = "".join(cell["source"])
        if cell["cell_type"] == "markdown" and EXPERIMENT.search(src):
            on = True
        if not on or cell["cell_type"] != "code":
            continue
        d = directives(src)
        if d.get("eval", "").lower() == "false" or flags & set(d):
            continue
        steps.append(Step("experiment", f"experiment cell {i}", src, cell.get("id")))
    return steps


def experiment_defs(steps: list[Step]) -> list[str]:
    "Functions and classes defined in experiment cells: code no mutant reaches (export it, with its tests)."
    out = []
    for s in steps:
        try:
            tree = ast.parse(s.source)
        except SyntaxError:
            continue
        out += [n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))]
    return out


def tests_hash(steps: list[Step]) -> str:
    "sha256 of the test cells' code (export cells excluded: the module's hash covers them)."
    text = "\n# ---\n".join(s.source for s in steps if s.kind == "cell")
    return hashlib.sha256(text.encode()).hexdigest()


def module_chunks(source: str) -> dict[str, tuple[int, str]]:
    "The module split at nbdev's cell markers: notebook cell id -> (first line, code). Text before the first"
    " marker and non-notebook chunks (nbdev's `__all__`) join the chunk before them."
    lines = source.splitlines(keepends=True)
    starts = [(source.count("\n", 0, m.start()), m.group(2)) for m in MARKER.finditer(source)
              if m.group(1).endswith(".ipynb")]
    if not starts:
        return {}
    starts[0] = (0, starts[0][1])
    bounds = [s for s, _ in starts] + [len(lines)]
    return {cid: (bounds[k] + 1, "".join(lines[bounds[k]:bounds[k + 1]])) for k, (_, cid) in enumerate(starts)}


def program(steps: list[Step], module_source: str, module_file: str) -> list[Piece]:
    """The pieces to execute for one module source: test cells as written, and each export cell replaced by the
    module's code for that cell (padded so that tracebacks give the module's line numbers). When the markers do
    not match the notebook's export cells, the whole module replaces the first export cell."""
    chunks = module_chunks(module_source)
    exports = [s for s in steps if s.kind == "export"]
    mapped = bool(exports) and all(s.cell_id in chunks for s in exports)
    pieces, placed = [], False
    for s in steps:
        if s.kind == "cell":
            pieces.append(Piece(s.label, f"<{s.label}>", s.source))
        elif mapped:
            first, code = chunks[s.cell_id]
            pieces.append(Piece(f"{s.label} (export)", module_file, "\n" * (first - 1) + code))
        else:  # one piece per step: the whole module at the first export step, nothing at the later ones
            pieces.append(Piece(f"{s.label} (export)", module_file, "" if placed else module_source))
            placed = True
    if not exports:
        raise ValueError("the notebook has no export cell before its Experiment heading")
    return pieces


# ----------------------------------------------------------------------------------------------------------
# Coverage: which test cells run a line, and which of the other cells a run of them needs

def executable_lines(source: str) -> set[int]:
    "Every line of `source` that holds code (the line table of each of its code objects)."
    lines, stack = set(), [compile(source, "<module>", "exec", dont_inherit=True)]
    while stack:
        code = stack.pop()
        lines |= {ln for _, _, ln in code.co_lines() if ln}
        stack += [c for c in code.co_consts if isinstance(c, types.CodeType)]
    return lines


@dataclass
class CellNames:
    binds: set[str]  # every name the cell binds (assignments, imports, defs): what later cells may need from it
    state: set[str]  # the names it assigns data to: what can carry a mutant's effect to a later cell
    loads: set[str]  # the names it reads and does not bind itself
    opaque: bool = False  # not parsable as Python: treated as needing, and affecting, everything


def cell_names(source: str) -> CellNames:
    "The names a test cell binds, assigns and reads (over-approximated: function bodies count too)."
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return CellNames(set(), set(), set(), opaque=True)
    binds, state, loads = set(), set(), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            if isinstance(node.ctx, ast.Load):
                loads.add(node.id)
            else:
                binds.add(node.id)
                state.add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            binds.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            binds |= {(a.asname or a.name).split(".")[0] for a in node.names if a.name != "*"}
            if any(a.name == "*" for a in node.names):
                return CellNames(set(), set(), set(), opaque=True)
        elif isinstance(node, (ast.Global, ast.Nonlocal)):
            binds |= set(node.names)
            state |= set(node.names)
    # A name the cell binds itself (a loop variable, a temporary) is taken to be the cell's own, not a value read
    # from an earlier cell: reused temporaries would otherwise tie every cell to every other. A cell that updates a
    # value from an earlier cell (`x = x + 1`) can then be left out of a selection: the unmutated check of the
    # selection, and the judging of survivors with every cell, catch that.
    return CellNames(binds, state, loads - binds)


def select_steps(steps: list[Step], names: list[CellNames | None], covering: set[int]) -> list[int]:
    """The steps a mutant whose line the test steps `covering` run must execute: every export step; the covering
    cells; every later cell that reads a name an affected cell assigned (the mutant's effect reaches it that way:
    `r = experiment(...)` in one cell, `assert r > 0` in the next); and every earlier cell that binds a name a
    selected cell reads. An unparsable cell makes all cells selected. The selection is an optimisation only
    (an effect passed on in place, `model.fit()` in one cell and a check of `model` in another, is not followed):
    mutate_chapter checks that the unmutated selection passes, and judges every survivor again with all steps."""
    if any(n is not None and n.opaque for n in names):
        return list(range(len(steps)))
    affected, tainted = set(), set()
    for i in range(min(covering), len(steps)) if covering else ():
        n = names[i]
        if n is None:
            continue
        if i in covering or n.loads & tainted:
            affected.add(i)
            tainted |= n.state
    needed, stack = set(affected), list(affected)
    while stack:
        j = stack.pop()
        for k in range(j):
            if names[k] is not None and k not in needed and names[k].binds & names[j].loads:
                needed.add(k)
                stack.append(k)
    return sorted(needed | {i for i, s in enumerate(steps) if s.kind == "export"})


@dataclass
class Coverage:
    "The lines of the module each step runs, unmutated; and the lines the experiment (the claims) runs."
    steps: dict[int, set[int]]  # step index -> module lines it ran
    claim_lines: set[int]  # module lines the experiment cells ran (they compute the registered quantities)

    def plan(self, steps: list[Step], names: list[CellNames | None], line: int) -> list[int] | None:
        """Step indices to run for a mutant on `line`: [] when no test cell runs it, None (all steps) when it runs
        at import (a module-level line: every cell depends on it), else select_steps' choice."""
        if any(line in self.steps.get(i, ()) for i, s in enumerate(steps) if s.kind == "export"):
            return None
        covering = {i for i, s in enumerate(steps) if s.kind == "cell" and line in self.steps.get(i, ())}
        return select_steps(steps, names, covering) if covering else []

    def test_lines(self) -> set[int]:
        return set().union(*self.steps.values()) if self.steps else set()


def wilson(k: int, n: int, z: float = 1.96) -> tuple[float, float] | None:
    "Wilson's 95% interval for a proportion k/n (None when n = 0)."
    if n <= 0:
        return None
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * (p * (1 - p) / n + z * z / (4 * n * n)) ** 0.5 / (1 + z * z / n)
    return round(max(0.0, centre - half), 4), round(min(1.0, centre + half), 4)


# ----------------------------------------------------------------------------------------------------------
# Running the cells against one module source, in a forked process

class CosmicRayTestingException(Exception):
    "The exception cosmic-ray's ExceptionReplacer writes into `except` clauses: raised by nothing."


def line_tracer(filename: str, hit: set[int]):
    "A sys.settrace function that adds to `hit` every line of code compiled from `filename` that runs."
    def local(frame, event, arg):
        if event == "line":
            hit.add(frame.f_lineno)
        return local

    def calls(frame, event, arg):
        return local if frame.f_code.co_filename == filename else None
    return calls


def run_program(pieces: list[Piece], module_name: str, trace: str | None = None) -> dict:
    """Execute the pieces in one fresh namespace registered as `module_name`; the first failure kills the mutant.
    With `trace` (the module's filename), also record which of the module's lines each piece ran: "lines",
    {piece label: sorted line numbers} (threads included; child processes not)."""
    import importlib
    import threading
    if _SNAPSHOT is not None and _SNAPSHOT["module"] == module_name:  # forked from a snapshot: go on from its state
        ns, flags = _SNAPSHOT["ns"], _SNAPSHOT["flags"]
    else:
        mod = types.ModuleType(module_name)
        sys.modules[module_name] = mod
        package, _, leaf = module_name.rpartition(".")
        if package:
            setattr(importlib.import_module(package), leaf, mod)
        ns, flags = mod.__dict__, 0
        ns["CosmicRayTestingException"] = CosmicRayTestingException
    lines = {}
    for p in pieces:
        if trace:
            tracer = line_tracer(trace, lines.setdefault(p.label, set()))
            threading.settrace(tracer)
            sys.settrace(tracer)
        try:
            code = compile(p.code, p.filename, "exec", flags=flags, dont_inherit=True)
            flags |= code.co_flags & FUTURE_MASK  # a __future__ import holds for later cells, as in IPython
            exec(code, ns)
        except BaseException as e:  # noqa: BLE001 (SystemExit too: any cell that does not finish kills)
            msg = str(e).strip().splitlines()
            return {"passed": False, "step": p.label, "error": f"{type(e).__name__}: {msg[0] if msg else ''}"[:200],
                    **({"lines": {k: sorted(v) for k, v in lines.items()}} if trace else {})}
        finally:
            if trace:
                sys.settrace(None)
                threading.settrace(None)
    return {"passed": True, "flags": flags, **({"lines": {k: sorted(v) for k, v in lines.items()}} if trace else {})}


def warm_imports(pieces: list[Piece], skip: str) -> None:
    "Import, once in the parent, every module the pieces import, so that each forked mutant starts warm."
    import importlib
    for p in pieces:
        try:
            tree = ast.parse(p.code)
        except SyntaxError:
            continue
        for node in ast.walk(tree):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module] if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module else []
            for name in names:
                if name != skip and name != "__future__":
                    try:
                        importlib.import_module(name)
                    except Exception:  # noqa: BLE001 (the cell itself will report it)
                        pass


@dataclass
class Job:
    key: str
    pieces: list[Piece]
    outcome: dict = field(default_factory=dict)
    trace: str | None = None  # the module's filename: record the lines each piece runs (unmutated runs only)


def run_jobs(jobs, module_name: str, workers: int, timeout: float, deadline: float, expected: float,
             cwd: Path) -> list[Job]:
    """Run jobs (an iterable of Job, consumed lazily) in forked processes, `workers` at a time. A job is
    launched only while `now + expected` is before `deadline`; one still running at the deadline is killed
    and not counted. Each finished job gets outcome 'killed', 'survived' or 'timeout' with its seconds."""
    jobs, running, done = iter(jobs), {}, []
    tmp = Path(tempfile.mkdtemp(prefix="mutate-"))
    exhausted = False
    while True:
        while not exhausted and len(running) < workers and time.monotonic() + expected < deadline:
            job = next(jobs, None)
            if job is None:
                exhausted = True
                break
            out = tmp / f"{len(done) + len(running)}.json"
            pid = os.fork()
            if pid == 0:  # the mutant's process: its own group (so a timeout kills its children too), silent
                try:
                    os.setpgid(0, 0)
                    fd = os.open(os.devnull, os.O_WRONLY)
                    os.dup2(fd, 1), os.dup2(fd, 2)
                    os.chdir(cwd)
                    out.write_text(json.dumps(run_program(job.pieces, module_name, job.trace)))
                finally:
                    os._exit(0)
            running[pid] = (job, time.monotonic(), out)
        if not running:  # all done, or no time left to start another
            break
        time.sleep(0.02)
        now = time.monotonic()
        for pid, (job, start, out) in list(running.items()):
            finished, status = os.waitpid(pid, os.WNOHANG)
            over = now - start > timeout
            if not finished and not over and now < deadline:
                continue
            if not finished:
                _kill(pid)
            del running[pid]
            if not finished and not over:
                continue  # cut by the deadline: not counted
            seconds = round(now - start, 2)
            if not finished:
                job.outcome = {"outcome": "timeout", "seconds": seconds}
            elif out.exists():
                r = json.loads(out.read_text())
                job.outcome = {"outcome": "survived" if r["passed"] else "killed", "seconds": seconds,
                               **({} if r["passed"] else {"step": r["step"], "error": r["error"]}),
                               **({"lines": r["lines"]} if "lines" in r else {})}
            else:
                job.outcome = {"outcome": "killed", "seconds": seconds, "step": "process",
                               "error": f"the process died (status {status})"}
            done.append(job)
    for f in tmp.iterdir():
        f.unlink()
    tmp.rmdir()
    return done


def _kill(pid: int) -> None:
    for target in (lambda: os.killpg(pid, signal.SIGKILL), lambda: os.kill(pid, signal.SIGKILL)):
        try:
            target()
        except ProcessLookupError:
            pass
    os.waitpid(pid, 0)


# ----------------------------------------------------------------------------------------------------------
# Snapshots: the cells before a mutant's export cell run once, in a process its mutants are forked from

_SNAPSHOT: dict | None = None  # in a snapshot process: the namespace and compiler flags after the shared prefix


def prefix_index(steps: list[Step], source: str, mutated: str) -> int:
    """The index of the export step whose module code the mutant changes. Every step before it runs the same code
    for the mutant as for the unmutated module, so those steps can run once for all the mutants of that export
    cell. 0 (nothing shared) when the module's cell markers do not map onto the notebook's export cells."""
    a, b = module_chunks(source), module_chunks(mutated)
    if not all(s.cell_id in a for s in steps if s.kind == "export"):
        return 0
    return next((i for i, s in enumerate(steps) if s.kind == "export" and a[s.cell_id] != b.get(s.cell_id)), 0)


@dataclass
class SnapItem:
    "One mutant to judge from a snapshot at step `prefix`: its source, the steps it runs from there, and why."
    key: str
    source: str
    prefix: int
    sel: list[int] | None  # the selected steps from `prefix` on, or None: every step from `prefix` on
    kind: str  # 'selected', 'all', or how an uncovered mutant is judged


def _snapshot_group(prefix: int, items: list[SnapItem], steps: list[Step], base: list[Piece], module_file: str,
                    module_name: str, timeout: float, deadline: float, expected: float, cwd: Path) -> list[dict]:
    """In a snapshot process: run the unmutated steps before `prefix` once, then judge each item in a process forked
    from here, as `mutate_chapter` would from scratch: a selection must first pass unmutated, and a survivor of a
    selection is judged again with every step. One entry per item: key, outcome, cells (or error, if the prefix
    failed, or dropped, if the deadline came before a survivor of a selection was judged again)."""
    global _SNAPSHOT
    r = run_program(base[:prefix], module_name)
    if not r["passed"]:
        return [{"key": it.key, "error": f"{r['step']}: {r['error']}"} for it in items]
    _SNAPSHOT = {"module": module_name, "ns": sys.modules[module_name].__dict__, "flags": r["flags"]}
    full = tuple(range(prefix, len(steps)))
    sels = sorted({tuple(it.sel) for it in items if it.sel is not None and tuple(it.sel) != full})
    checked = run_jobs([Job(f"check {k}", [base[i] for i in s]) for k, s in enumerate(sels)], module_name, 1,
                       timeout, deadline, expected, cwd)
    valid = {sels[int(j.key.split()[1])] for j in checked if j.outcome.get("outcome") == "survived"}
    jobs, how, pieces = [], {}, {}
    for it in items:
        mp = program(steps, it.source, module_file)
        pieces[it.key] = [mp[i] for i in full]
        use = tuple(it.sel) if it.sel is not None and tuple(it.sel) in valid else None
        how[it.key] = it.kind if it.kind != "selected" else "selected" if use else "all"
        jobs.append(Job(it.key, [mp[i] for i in use] if use else pieces[it.key]))
    out = {j.key: j.outcome for j in run_jobs(jobs, module_name, 1, timeout, deadline, expected, cwd)}
    again = [k for k, o in out.items() if o["outcome"] == "survived" and how[k] == "selected"]
    rerun = {j.key: j.outcome for j in run_jobs((Job(k, pieces[k]) for k in again), module_name, 1, timeout, deadline,
                                                 expected, cwd)}
    entries = []
    for k, o in out.items():
        if k in again and k not in rerun:
            entries.append({"key": k, "dropped": True})
        else:
            entries.append({"key": k, "outcome": rerun.get(k, o), "cells": how[k] + (", then every cell" if k in rerun else "")})
    return entries


def run_snapshots(items: list[SnapItem], steps: list[Step], base: list[Piece], module_file: str, module_name: str,
                  workers: int, timeout: float, deadline: float, expected: float, cwd: Path, on_done=None) -> list[dict]:
    """Judge `items`, grouped by their prefix step: one snapshot process per group (`workers` at a time), each
    running its group's mutants one at a time. Returns `_snapshot_group`'s entries, calling `on_done` on each."""
    groups: dict[int, list[SnapItem]] = {}
    for it in items:
        groups.setdefault(it.prefix, []).append(it)
    pending, running, entries = list(groups.items()), {}, []  # in the order of their first mutant (claim lines first)
    tmp = Path(tempfile.mkdtemp(prefix="mutate-snap-"))
    while pending or running:
        while pending and len(running) < workers and time.monotonic() + expected < deadline:
            prefix, group = pending.pop(0)
            out = tmp / f"{prefix}.json"
            pid = os.fork()
            if pid == 0:
                try:
                    os.setpgid(0, 0)
                    fd = os.open(os.devnull, os.O_WRONLY)
                    os.dup2(fd, 1), os.dup2(fd, 2)
                    os.chdir(cwd)
                    out.write_text(json.dumps(_snapshot_group(prefix, group, steps, base, module_file, module_name,
                                                              timeout, deadline, expected, cwd)))
                finally:
                    os._exit(0)
            running[pid] = (group, out)
        if not running:
            break
        time.sleep(0.05)
        for pid, (group, out) in list(running.items()):
            finished, _ = os.waitpid(pid, os.WNOHANG)
            if not finished and time.monotonic() < deadline + timeout + 30:
                continue
            if not finished:
                _kill(pid)
            del running[pid]
            got = json.loads(out.read_text()) if finished and out.exists() else \
                [{"key": it.key, "dropped": True} for it in group]
            for e in got:
                entries.append(e)
                if on_done and "outcome" in e:
                    on_done(e)
    for f in tmp.iterdir():
        f.unlink()
    tmp.rmdir()
    return entries


# ----------------------------------------------------------------------------------------------------------
# Mutants (cosmic-ray)

@dataclass
class Mutant:
    operator: str  # cosmic-ray's name, e.g. 'core/ReplaceComparisonOperator_LtE_Lt'
    occurrence: int  # cosmic-ray's index of this site among the operator's sites in the module
    line: int
    id: str = ""
    source: str | None = None  # the mutated module; None until made

    @property
    def op(self) -> str:
        return self.operator.split("/", 1)[-1]


def ensure_library() -> None:
    "Install the pinned cosmic-ray into the running environment if another version (or none) is there."
    from importlib import metadata
    try:
        if metadata.version(LIBRARY) == LIBRARY_VERSION:
            return
    except metadata.PackageNotFoundError:
        pass
    print(f"installing {LIBRARY}=={LIBRARY_VERSION} (mutation testing only; not a requirement of `make test`)")
    cmd = [sys.executable, "-m", "pip", "install", "-q", f"{LIBRARY}=={LIBRARY_VERSION}"]
    if (ROOT / "constraints.txt").exists():
        cmd += ["-c", str(ROOT / "constraints.txt")]
    subprocess.run(cmd, check=True)


def _annotation_spans(tree) -> list[tuple[tuple[int, int], tuple[int, int]]]:
    spans, stack = [], [tree]
    while stack:
        n = stack.pop()
        ann = None
        if n.type in ("param", "funcdef"):
            ann = n.annotation
        elif n.type == "annassign":
            ann = n.children[1]
        if ann is not None:
            spans.append((ann.start_pos, ann.end_pos))
        stack.extend(getattr(n, "children", []))
    return spans


def enumerate_mutants(source: str) -> tuple[list[Mutant], int]:
    """Every mutant cosmic-ray's default operators make of `source` (those that take no arguments, as its
    `init` does), in cosmic-ray's order; and how many were left out for sitting in a never-evaluated
    annotation. Ids are stable under edits elsewhere in the module: operator, the stripped line and the
    column within it, and a counter for identical lines."""
    import cosmic_ray.plugins
    from cosmic_ray.ast import ast_nodes, get_ast
    tree = get_ast(source)
    lazy = re.search(r"^from __future__ import .*\bannotations\b", source, re.M) is not None
    spans = _annotation_spans(tree) if lazy else []
    lines = source.splitlines()
    mutants, skipped, seen = [], 0, {}
    for name in cosmic_ray.plugins.operator_names():
        cls = cosmic_ray.plugins.get_operator(name)
        if cls.arguments():
            continue
        op = cls()
        occurrence = 0
        for node in ast_nodes(tree):
            for start, end in op.mutation_positions(node):
                k = occurrence
                occurrence += 1
                if any(a <= start and end <= b for a, b in spans):
                    skipped += 1
                    continue
                text = lines[start[0] - 1]
                key = f"{name}|{text.strip()}|{start[1] - (len(text) - len(text.lstrip()))}"
                n = seen[key] = seen.get(key, -1) + 1
                mid = hashlib.sha1(f"{key}|{n}".encode()).hexdigest()[:10]
                mutants.append(Mutant(name, k, start[0], mid))
    return mutants, skipped


def make_mutant(source: str, m: Mutant) -> str | None:
    "The module with mutant `m` applied (cosmic-ray's own mutation visitor); None if nothing changed."
    import cosmic_ray.plugins
    from cosmic_ray.mutating import mutate_code
    out = mutate_code(source, cosmic_ray.plugins.get_operator(m.operator)(), m.occurrence)
    return None if out is None or out == source else out


def enclosing(source: str, line: int) -> str:
    "The function or class (qualified, e.g. 'BAS.step') that holds `line` of `source`; '' at module level."
    names, nodes = [], ast.parse(source).body
    while True:
        inner = [n for n in nodes if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
                 and n.lineno <= line <= n.end_lineno]
        if not inner:
            return ".".join(names)
        names.append(inner[0].name)
        nodes = list(ast.walk(inner[0]))[1:]


def line_diff(before: str, after: str) -> tuple[int, str]:
    "First changed line (1-based, in `before`) and the changed lines as '-old' / '+new'."
    a, b = before.splitlines(), after.splitlines()
    ops = [o for o in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes() if o[0] != "equal"]
    if not ops:
        return 0, ""
    out = []
    for _, i1, i2, j1, j2 in ops:
        out += [f"-{l}" for l in a[i1:i2]] + [f"+{l}" for l in b[j1:j2]]
    return ops[0][1] + 1, "\n".join(out)


# ----------------------------------------------------------------------------------------------------------
# One chapter

def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def chapter_paths(slug: str, root: Path = ROOT) -> tuple[Path, Path]:
    "The chapter's notebook nbs/NN_<slug>.ipynb and its module icmlbook/<slug>.py."
    nbs = sorted((root / "nbs").glob(f"[0-9][0-9]_{slug}.ipynb"))
    module = root / "icmlbook" / f"{slug}.py"
    if len(nbs) != 1 or not module.exists():
        raise SystemExit(f"no chapter {slug!r}: need exactly one nbs/NN_{slug}.ipynb and icmlbook/{slug}.py")
    return nbs[0], module


def review_mutants(slug: str, source: str, root: Path = ROOT) -> list[tuple[str, Mutant]]:
    "The chapter's mutants from results/mutation/review.yml (found by a review), as (name, mutant with its source)."
    path = root / RESULTS_DIR / "review.yml"
    if not path.exists():
        return []
    import yaml
    out = []
    for k, e in enumerate((yaml.safe_load(path.read_text(encoding="utf-8")) or {}).get(slug) or []):
        if not (isinstance(e, dict) and {"name", "old", "new"} <= set(e) and all(isinstance(e[x], str) for x in e)):
            raise ValueError(f"{path}: entry {k} of {slug} needs the strings name, old and new, got {e!r}")
        n = source.count(e["old"])
        if n != 1:
            raise ValueError(f"{path}: the text of review mutant {e['name']!r} occurs {n} times in the module of "
                             f"{slug} (it must occur once): update its entry to today's code")
        mid = "review-" + hashlib.sha1(e["name"].encode()).hexdigest()[:6]
        out.append((e["name"], Mutant("review", 0, 0, mid, source.replace(e["old"], e["new"]))))
    return out


def run_review(slug: str, source: str, steps: list[Step], module_file: str, module_name: str, root: Path,
               workers: int, timeout: float, deadline: float, expected: float, cwd: Path) -> list[dict]:
    "Run the chapter's review mutants (all of them, before the sample); each entry as in the result's mutants."
    named = review_mutants(slug, source, root)
    jobs = [Job(m.id, program(steps, m.source, module_file)) for _, m in named]
    done = {j.key: j for j in run_jobs(jobs, module_name, workers, timeout, deadline, expected, cwd)}
    if len(done) < len(named):
        raise RuntimeError(f"the budget ran out before the {len(named)} review mutants of {slug} were judged")
    return [{"name": name, **_record(source, m, done[m.id].outcome)} for name, m in named]


def _rel(p: Path, root: Path) -> str:
    return str(p.relative_to(root)) if p.is_relative_to(root) else str(p)


def _prepare(notebook: Path, module: Path, module_name: str, root: Path, cwd: Path | None, timeout: float | None,
             deadline: float, workers: int, budget: float, echo):
    """The module's source, the notebook's test plan, and the unmutated run: the tests must pass, and its time
    sets the per-mutant timeout (four times as long, at least 20 s)."""
    source = module.read_text(encoding="utf-8")
    steps = test_plan(json.loads(notebook.read_text(encoding="utf-8")), test_flags(root))
    module_file = _rel(module, root)
    cwd = cwd or notebook.parent
    base = program(steps, source, module_file)
    warm_imports(base, module_name)
    [job] = run_jobs([Job("baseline", base)], module_name, 1, timeout or 3600.0, deadline, 0.0, cwd)
    if job.outcome.get("outcome") != "survived":
        raise RuntimeError(f"the unmutated tests do not pass, so no mutant can be judged: {job.outcome}")
    t0 = job.outcome["seconds"]
    timeout = timeout or max(20.0, 4 * t0)
    echo(f"{module_file}: the {sum(s.kind == 'cell' for s in steps)} test cells pass unmutated in {t0:.1f} s; "
         f"timeout {timeout:.0f} s per mutant, {workers} worker(s), budget {budget:.0f} s")
    return source, steps, module_file, cwd, t0, timeout


UNCOVERED_CHECK = 10  # mutants on lines no test cell runs, judged anyway with every cell to check the coverage map


def _coverage(steps: list[Step], exp_steps: list[Step], source: str, module_file: str, module_name: str,
              cwd: Path, deadline: float, previous: dict | None, echo, experiment: bool = True
              ) -> tuple[Coverage, dict]:
    """One traced, unmutated run of the test cells and then the experiment cells (the claim check at the default
    scale): the module lines each test step runs, and the lines the experiment runs (the claim lines). The claim
    lines of an earlier result are reused when neither the module nor the experiment cells changed."""
    exp_hash = hashlib.sha256("\n# ---\n".join(x.source for x in exp_steps).encode()).hexdigest()
    code_hash = hashlib.sha256(source.encode()).hexdigest()
    reuse = bool(previous) and previous.get("code_hash") == code_hash and \
        previous.get("experiment_hash") == exp_hash and "claim_lines" in previous
    pieces = program(steps, source, module_file)
    exp = [] if reuse or not experiment else [Piece(x.label, f"<{x.label}>", x.source) for x in exp_steps]
    t = time.monotonic()
    [job] = run_jobs([Job("coverage", pieces + exp, trace=module_file)], module_name, 1,
                     max(1.0, deadline - t), deadline, 0.0, cwd)
    lines = job.outcome.get("lines")
    if lines is None:  # timed out: no record of the lines; the test cells alone, then
        [job] = run_jobs([Job("coverage", pieces, trace=module_file)], module_name, 1,
                         max(1.0, deadline - time.monotonic()), deadline, 0.0, cwd)
        lines, exp = job.outcome.get("lines"), []
    if lines is None:
        raise RuntimeError(f"the traced run of the test cells did not finish: {job.outcome}")
    index = {(x.label if x.kind == "cell" else f"{x.label} (export)"): i for i, x in enumerate(steps)}
    failed = job.outcome.get("step", "")
    if failed in index:
        raise RuntimeError(f"the test cells fail when traced ({failed}: {job.outcome.get('error')})")
    info = {"experiment_hash": exp_hash}
    if reuse:
        claim = set(previous["claim_lines"])
        info.update(experiment_seconds=previous.get("experiment_seconds"), experiment_error=previous.get(
            "experiment_error"), claim_lines_from=previous.get("claim_lines_from") or previous["date"][:10])
    else:
        claim = set().union(*(set(v) for k, v in lines.items() if k.startswith("experiment cell")))
        info.update(experiment_seconds=round(time.monotonic() - t, 2) if exp else None,
                    experiment_error=(f"{failed}: {job.outcome.get('error')}" if failed else None) if exp else
                    "the experiment ran past the budget: no claim lines" if experiment and exp_steps else
                    "the experiment was not traced: no claim lines")
        if exp:
            echo(f"  traced the test cells and the experiment in {time.monotonic() - t:.0f} s: "
                 f"{len(claim)} module lines compute the claims")
    cov = Coverage({index[k]: set(v) for k, v in lines.items() if k in index}, claim)
    return cov, info


def mutate_chapter(notebook: Path, module: Path, module_name: str, out: Path, *, root: Path = ROOT,
                   seed: int = 0, budget: float = DEFAULT_BUDGET, workers: int = 2, timeout: float | None = None,
                   max_mutants: int | None = None, mutants: list[Mutant] | None = None, cwd: Path | None = None,
                   experiment: bool = True, echo=print) -> dict:
    """Run the mutants of `module` against `notebook`'s test cells and write the result to `out`.

    Coverage first, as mutmut does: one traced unmutated run records the module lines each test cell runs and
    the lines the experiment runs (the claim lines; `experiment=False` skips it). Mutants on claim lines are
    tried first (each group in the seeded shuffle's order). A mutant runs only the cells `Coverage.plan` selects
    for its line, after that selection passed unmutated; a mutant on a line no test cell runs survives without a
    run (the first UNCOVERED_CHECK of them run anyway with every cell: if one is killed, the coverage map missed
    something and all of them are judged again). Every survivor of a selection is judged again with every cell
    before it counts, so a selection can only save time, never turn a kill into a survivor.
    Snapshots: the cells before the export cell a mutant changes run the same code for it as unmutated, so they run
    once per round for all the mutants of that export cell, in a process each mutant is forked from
    (`run_snapshots`); only the later steps run per mutant. Rounds take as many mutants as the time left allows.
    `mutants` (with `source` set) replaces cosmic-ray's enumeration and the seeded shuffle: for tests."""
    t_start = time.monotonic()
    deadline = t_start + budget
    source, steps, module_file, cwd, t0, timeout = _prepare(notebook, module, module_name, root, cwd, timeout,
                                                             deadline, workers, budget, echo)
    review = run_review(module.stem, source, steps, module_file, module_name, root, workers, timeout, deadline,
                        min(timeout, 1.5 * t0), cwd)
    if review:
        echo(f"  review mutants: {sum(r['outcome'] != 'survived' for r in review)} of {len(review)} detected")
    nb = json.loads(notebook.read_text(encoding="utf-8"))
    exp_steps = experiment_plan(nb, test_flags(root))
    previous = json.loads(out.read_text(encoding="utf-8")) if out.exists() else None
    cov, cov_info = _coverage(steps, exp_steps, source, module_file, module_name, cwd, deadline, previous, echo,
                              experiment)
    names = [cell_names(x.source) if x.kind == "cell" else None for x in steps]
    executable = executable_lines(source)

    skipped = 0
    if mutants is None:
        mutants, skipped = enumerate_mutants(source)
        random.Random(seed).shuffle(mutants)
    for m in mutants:
        if not m.line and m.source is not None:  # a hand-made mutant: its line from the diff
            m.line = line_diff(source, m.source)[0]
    mutants.sort(key=lambda m: m.line not in cov.claim_lines)  # stable: the claim lines first, each in seeded order
    candidates = len(mutants)
    plans = {m.line: cov.plan(steps, names, m.line) for m in mutants}

    base = program(steps, source, module_file)
    limit = len(mutants) if max_mutants is None else min(max_mutants, len(mutants))
    incompetent, tried, how, results = [], {}, {}, []
    counts = {"killed": 0, "survived": 0, "timeout": 0}
    checked, misses, provisional, dropped, snapshots = [], [], [], [], [0]

    def item(m: Mutant, kind: str | None = None) -> SnapItem:
        "How mutant m is judged: from the snapshot at the export step it changes, with the steps its line needs."
        p, v = prefix_index(steps, source, m.source), plans[m.line]
        if kind is None:
            kind = "all" if v is None else "uncovered, judged with every cell" if v == [] else "selected"
        sel = [i for i in v if i >= p] if kind == "selected" else None
        return SnapItem(m.id, m.source, p, sel, kind)

    def competent(m: Mutant) -> bool:
        if m.source is None:
            m.source = make_mutant(source, m)
        if m.source is None:
            return False
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # e.g. SyntaxWarning for `x is not "best"`: still a mutant
                compile(m.source, module_file, "exec", dont_inherit=True)
        except SyntaxError:
            incompetent.append(m.id)
            return False
        return True

    def done(e: dict) -> None:
        i, o = e["key"], e["outcome"]
        counts[o["outcome"]] += 1
        if i in checked and o["outcome"] != "survived":
            misses.append(i)
        r = _record(source, tried[i], o)
        r["cells"] = e["cells"]
        results.append(r)
        k = sum(counts.values())
        if k % 25 == 0:
            echo(f"  {k} mutants run: {counts['killed']} killed, {counts['survived']} survived, "
                 f"{counts['timeout']} timed out ({(time.monotonic() - t_start) / 60:.1f} min)")

    def judge(items: list[SnapItem]) -> None:
        snapshots[0] += len({it.prefix for it in items})
        for e in run_snapshots(items, steps, base, module_file, module_name, workers, timeout, deadline,
                               min(timeout, 1.5 * t0), cwd, done):
            if e.get("dropped"):
                dropped.append(e["key"])
            elif "error" in e:  # the unmutated prefix failed in its snapshot: judged from scratch
                for j in run_jobs([Job(e["key"], program(steps, tried[e["key"]].source, module_file))], module_name, 1,
                                  timeout, deadline, min(timeout, t0), cwd):  # none when the deadline came first
                    done({"key": j.key, "outcome": j.outcome, "cells": "all"})

    # Rounds: each takes the next mutants in order (claim lines first) that the time left should allow, groups them
    # by the export cell they change, and judges each group from one snapshot of the cells before that cell.
    queue, n, per_mutant = iter(mutants), 0, 0.25 * t0 / workers  # a first guess: most mutants die in an early cell
    while n < limit and time.monotonic() + min(timeout, t0) < deadline:
        left = deadline - time.monotonic()
        size = max(4 * workers, int(0.9 * left / per_mutant))
        batch = []
        while len(batch) < size and n < limit:
            m = next(queue, None)
            if m is None:
                break
            if not competent(m):
                continue
            n += 1
            tried[m.id] = m
            if plans[m.line] == [] and len(checked) >= UNCOVERED_CHECK:
                how[m.id] = "uncovered"
                provisional.append(m.id)
                continue
            it = item(m)
            if plans[m.line] == []:
                checked.append(m.id)
            how[m.id] = it.kind
            batch.append(it)
        if not batch:
            break
        t = time.monotonic()
        judge(batch)
        per_mutant = max(0.05, (time.monotonic() - t) / len(batch))
    # An uncovered mutant that was killed means the coverage map missed a cell: judge every such survivor.
    if misses and provisional:
        judge([item(tried[i], "uncovered, then every cell") for i in provisional])
        judged = {r["id"] for r in results}
        provisional = [i for i in provisional if i not in judged]
    for i in provisional:
        r = _record(source, tried[i], {"outcome": "survived", "seconds": 0.0})
        r["cells"] = "uncovered"
        results.append(r)
        counts["survived"] += 1
    results.sort(key=lambda r: (r["line"], r["operator"], r["id"]))
    claim_ids = {m.id for m in mutants if m.line in cov.claim_lines}
    test_lines = cov.test_lines() & executable
    data = {
        "chapter": module.stem, "module": module_file, "notebook": _rel(notebook, root),
        "code_hash": sha256(module), "tests_hash": tests_hash(steps),
        "date": datetime.datetime.now().isoformat(timespec="seconds"),
        "wall_time": round(time.monotonic() - t_start, 2), "baseline_seconds": t0, "timeout_seconds": timeout,
        "workers": workers, "library": f"{LIBRARY} {LIBRARY_VERSION}", "seed": seed,
        "candidates": candidates, "skipped_in_annotations": skipped, "incompetent": len(incompetent),
        "tried": len(results), **_counts(results),
        "sampled": len(results) < candidates, "review": review,
        "selection": "coverage",
        "line_coverage": {"executable": len(executable), "run_by_tests": len(test_lines),
                          "share": round(len(test_lines) / len(executable), 4) if executable else None},
        "uncovered": {"skipped": sum(r["cells"] == "uncovered" for r in results), "checked": len(checked),
                      "killed_when_checked": len(misses)},
        "dropped_unconfirmed": len(dropped), "snapshots": snapshots[0],
        "claim_lines": sorted(cov.claim_lines), **cov_info,
        "claim_mutants": {"candidates": len(claim_ids), "tried": sum(r["id"] in claim_ids for r in results),
                          "detected": sum(r["id"] in claim_ids and r["outcome"] != "survived" for r in results)},
        "experiment_defs": experiment_defs(exp_steps),
        "mutants": results,
    }
    data["score"], data["interval"] = (score(data, {})[k] for k in ("score", "interval"))
    write_result(out, data)
    return data


def _record(source: str, m: Mutant, outcome: dict) -> dict:
    "One mutant's entry in the result: where it is, what it changed (if not killed) and what killed it."
    line, diff = line_diff(source, m.source)
    r = {"id": m.id, "line": line, "where": enclosing(source, line), "operator": m.op,
         "outcome": outcome["outcome"], "seconds": outcome["seconds"]}
    if outcome["outcome"] == "killed":
        r["killed_by"] = f"{outcome['step']}: {outcome['error']}"[:160]
    else:
        r["diff"] = diff
    return r


def _counts(results: list[dict]) -> dict:
    c = {k: sum(r["outcome"] == k for r in results) for k in ("killed", "survived", "timeout")}
    return {"killed": c["killed"], "survived": c["survived"], "timeouts": c["timeout"]}


def retest_chapter(notebook: Path, module: Path, module_name: str, out: Path, *, root: Path = ROOT,
                   seed: int = 0, spot_check: int = 30, budget: float = DEFAULT_BUDGET, workers: int = 2,
                   timeout: float | None = None, mutants: list[Mutant] | None = None, cwd: Path | None = None,
                   echo=print) -> dict:
    """Judge the same sample again with today's test cells, after tests were added: every survivor and every
    timed-out mutant of the result in `out` (a loaded machine times out survivors too), and `spot_check` of its
    killed mutants (a seeded sample) to confirm they are still killed. The module must be the one that run
    mutated (same sha256); the other mutants keep their outcome. The review mutants are judged again too. The
    result records each retest (date, test hashes, counts, spot-check changes) under "retests".
    `mutants` (with `source` set) replaces cosmic-ray's enumeration: for tests."""
    t_start = time.monotonic()
    deadline = t_start + budget
    data = json.loads(out.read_text(encoding="utf-8"))
    if data["code_hash"] != sha256(module):
        raise SystemExit(f"{_rel(module, root)} changed after the run of {data['date'][:10]}: a retest judges the "
                         "same mutants, so run the whole chapter again instead")
    source, steps, module_file, cwd, t0, timeout = _prepare(notebook, module, module_name, root, cwd, timeout,
                                                             deadline, workers, budget, echo)
    data["review"] = run_review(module.stem, source, steps, module_file, module_name, root, workers, timeout,
                                deadline, min(timeout, 1.5 * t0), cwd)
    surv = [r["id"] for r in data["mutants"] if r["outcome"] == "survived"]
    slow = [r["id"] for r in data["mutants"] if r["outcome"] == "timeout"]  # a busy machine can time out a survivor
    detected = sorted(r["id"] for r in data["mutants"] if r["outcome"] == "killed")
    spot = random.Random(seed).sample(detected, min(spot_check, len(detected)))
    wanted = set(surv) | set(slow) | set(spot)
    if mutants is None:
        mutants = [m for m in enumerate_mutants(source)[0] if m.id in wanted]
    by_id = {m.id: m for m in mutants if m.id in wanted}
    missing = wanted - set(by_id)
    if missing:
        raise RuntimeError(f"mutants of the earlier run not found in today's enumeration: {sorted(missing)[:5]}")
    for m in by_id.values():
        if m.source is None:
            m.source = make_mutant(source, m)
    order = surv + slow + spot
    jobs = (Job(i, program(steps, by_id[i].source, module_file)) for i in order)
    finished = run_jobs(jobs, module_name, workers, timeout, deadline, min(timeout, 1.5 * t0), cwd)
    if len(finished) < len(order):
        raise RuntimeError(f"the budget of {budget:.0f} s judged only {len(finished)} of the {len(order)} mutants "
                           "to retest; nothing was written (raise --budget)")
    new = {job.key: _record(source, by_id[job.key], job.outcome) for job in finished}
    old = {r["id"]: r for r in data["mutants"]}
    data["mutants"] = sorted((new.get(i, r) for i, r in old.items()), key=lambda r: (r["line"], r["operator"], r["id"]))
    before = data.get("tests_hash")
    data.update(tests_hash=tests_hash(steps), **_counts(data["mutants"]))
    data["score"] = score(data, {})["score"]
    data.setdefault("retests", []).append({
        "date": datetime.datetime.now().isoformat(timespec="seconds"),
        "wall_time": round(time.monotonic() - t_start, 2), "tests_hash_before": before,
        "survivors_retested": len(surv), "survivors_killed": sum(new[i]["outcome"] != "survived" for i in surv),
        "timeouts_retested": len(slow), "timeouts_survived": [i for i in slow if new[i]["outcome"] == "survived"],
        "spot_checked": len(spot), "spot_check_survived": [i for i in spot if new[i]["outcome"] == "survived"]})
    write_result(out, data)
    return data


def write_result(path: Path, data: dict) -> None:
    "The result as JSON with one line per mutant, so that a re-run's diff reads mutant by mutant."
    head = json.dumps({k: v for k, v in data.items() if k != "mutants"}, indent=1, ensure_ascii=False)
    rows = ",\n".join("  " + json.dumps(m, ensure_ascii=False) for m in data["mutants"])
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(head[:-2] + ',\n "mutants": [\n' + rows + "\n ]\n}\n", encoding="utf-8")


# ----------------------------------------------------------------------------------------------------------
# Reading results (the "Test strength" page)

def equivalents(path: Path) -> dict[str, str]:
    "A chapter's equivalent mutants, {id: one-line reason}, from its .equivalent.yml (empty if none)."
    if not path.exists():
        return {}
    import yaml
    data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    if not isinstance(data, dict) or not all(isinstance(v, str) and v.strip() and "\n" not in v.strip()
                                             for v in data.values()):
        raise ValueError(f"{path}: expected a mapping 'mutant id: one-line reason'")
    return {str(k): v.strip() for k, v in data.items()}


def score(data: dict, equiv: dict[str, str]) -> dict:
    "Detected (killed + timed out), equivalent survivors, open survivors and the score detected/(tried - equivalent)."
    survivors = [m for m in data["mutants"] if m["outcome"] == "survived"]
    eq = [m for m in survivors if m["id"] in equiv]
    detected = data["killed"] + data["timeouts"]
    denom = data["tried"] - len(eq)
    return {"detected": detected, "equivalent": len(eq), "open": len(survivors) - len(eq),
            "score": round(detected / denom, 4) if denom else None, "interval": wilson(detected, denom)}


def load_results(root: Path | None = ROOT) -> list[dict]:
    """One row per chapter notebook, with status 'current' (its result, scored with today's equivalents),
    'stale' (the module changed after the run: the result is not shown) or 'not run'. A current result whose
    test cells changed since its run keeps its numbers, flagged with `tests_changed`: re-run for today's score."""
    if root is None:
        return []
    rows = []
    for nb_path in sorted((root / "nbs").glob("[0-9][0-9]_*.ipynb")):
        if nb_path.name.startswith("00_"):
            continue
        slug = nb_path.stem[3:]
        res = root / RESULTS_DIR / f"{slug}.json"
        row = {"chapter": slug, "status": "not run", "result": None, "equivalents": {}, "stale_reason": "",
               "tests_changed": False}
        if res.exists():
            data = json.loads(res.read_text(encoding="utf-8"))
            module = root / data["module"]
            row["date"] = data["date"][:10]
            if not module.exists() or sha256(module) != data["code_hash"]:
                row.update(status="stale", stale_reason=f"`{data['module']}` changed after the run of {row['date']}")
            else:
                try:
                    steps = test_plan(json.loads(nb_path.read_text(encoding="utf-8")), test_flags(root))
                    row["tests_changed"] = tests_hash(steps) != data.get("tests_hash")
                except ValueError:  # no Experiment heading any more: the tests cannot be told apart
                    row["tests_changed"] = True
                eq = equivalents(root / RESULTS_DIR / f"{slug}.equivalent.yml")
                row.update(status="current", result=data, equivalents=eq, **score(data, eq))
        rows.append(row)
    return rows


def _cell(text) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _code(text: str) -> str:
    text = text.strip()
    return "``" + text.replace("|", "\\|") + "``" if "`" in text else "`" + text.replace("|", "\\|") + "`"


TARGET_TRIED = 0.25  # issue 52: at least a quarter of the candidates tried, and every mutant on a claim line


def targets(d: dict) -> dict:
    """Whether a result meets the sampling targets: the share of candidates tried, and every mutant on a line the
    claim check runs (None for a run that predates the coverage-based selection)."""
    share = d["tried"] / d["candidates"] if d["candidates"] else None
    c = d.get("claim_mutants")
    return {"tried_share": share, "tried_ok": share is not None and share >= TARGET_TRIED,
            "claims_ok": None if c is None else c["tried"] == c["candidates"]}


def summary_table(rows: list[dict]) -> str:
    "Markdown table: each chapter's score (95% interval), sampling, line coverage and run; stale and unrun chapters show no numbers."
    out = ["| chapter | score (95% CI) | mutants tried | claim-line mutants detected / tried / all | lines run by tests "
           "| open | equivalent | review mutants | run |",
           "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        d = r["result"]
        if r["status"] != "current":
            label = "*stale*" if r["status"] == "stale" else "*not run*"
            out.append(f"| {_cell(r['chapter'])} | {label} |  |  |  |  |  |  | {r.get('date', '')} |")
            continue
        rev = d.get("review")
        rev = "—" if not rev else f"{sum(m['outcome'] != 'survived' for m in rev)} of {len(rev)} detected"
        ci = r.get("interval")
        pct = "—" if r["score"] is None else f"**{100 * r['score']:.0f}%**" + \
            (f" ({100 * ci[0]:.0f}–{100 * ci[1]:.0f})" if ci else "")
        t = targets(d)
        share = f" of {d['candidates']} ({100 * t['tried_share']:.0f}%{'' if t['tried_ok'] else ', *below 25%*'})" \
            if d["sampled"] else " (all)"
        c = d.get("claim_mutants")
        claim = "*not measured*" if c is None else f"{c['detected']} / {c['tried']} / {c['candidates']}" + \
            ("" if t["claims_ok"] else " *(not all tried)*")
        lc = d.get("line_coverage")
        lines = "*not measured*" if not lc or lc["share"] is None else \
            f"{100 * lc['share']:.0f}% of {lc['executable']}"
        run = f"{r['date']}, {d['wall_time'] / 60:.0f} min" + ("; *tests changed since*" if r["tests_changed"] else "")
        out.append(f"| {_cell(r['chapter'])} | {pct} | {d['tried']}{share} | {claim} | {lines} | {r['open']} | "
                   f"{r['equivalent']} | {rev} | {run} |")
    return "\n".join(out)


def short_change(diff: str, context: int = 12) -> tuple[str, str]:
    """The changed part of a one-site diff ('-old' / '+new' lines) with a few characters of context on each side,
    cut at spaces: e.g. ('x.size <= 8 else', 'x.size <= 7 else')."""
    old = " ".join(l[1:].strip() for l in diff.splitlines() if l.startswith("-"))
    new = " ".join(l[1:].strip() for l in diff.splitlines() if l.startswith("+"))
    p = 0
    while p < min(len(old), len(new)) and old[p] == new[p]:
        p += 1
    q = 0
    while q < min(len(old), len(new)) - p and old[-1 - q] == new[-1 - q]:
        q += 1
    start = 0 if p <= context else old.rfind(" ", 0, p - context) + 1   # the same in both: a common prefix

    def clip(t: str) -> str:
        stop = len(t) - q + context  # inside the common suffix, so at the same place in both
        stop = len(t) if stop >= len(t) or t.find(" ", stop) < 0 else t.find(" ", stop)
        return ("… " if start else "") + t[start:stop] + (" …" if stop < len(t) else "")
    return clip(old), clip(new)


def survivors_table(row: dict) -> str:
    "Markdown table of a current chapter's surviving mutants: line, function, the change, and equivalent or open."
    d = row["result"]
    surv = [m for m in d["mutants"] if m["outcome"] == "survived"]
    if not surv:
        return "*No mutant survived.*"
    out = ["| line | in | change | status |", "|---|---|---|---|"]
    for m in surv:
        old, new = short_change(m["diff"])
        status = f"equivalent: {_cell(row['equivalents'][m['id']])}" if m["id"] in row["equivalents"] else \
            f"**open** (`{m['id']}`)"
        out.append(f"| {m['line']} | {_cell(m['where'] or '—')} | {_code(old)} → {_code(new) if new else '*(removed)*'} "
                   f"| {status} |")
    return "\n".join(out)


def review_table(row: dict) -> str:
    "Markdown: the mutants a review found (results/mutation/review.yml), each with its outcome in this run."
    review = row["result"].get("review")
    if review is None:
        return "*This run predates the review mutants of `results/mutation/review.yml`.*"
    if not review:
        return "*No review mutants for this chapter.*"
    out = ["| review mutant | line | outcome |", "|---|---|---|"]
    for r in review:
        how = f"killed ({_cell(r['killed_by'].split(':')[0])})" if r["outcome"] == "killed" else \
            "timed out" if r["outcome"] == "timeout" else "**survived**"
        out.append(f"| {_cell(r['name'])} | {r['line']} | {how} |")
    return "\n".join(out)


def unmatched_equivalents(row: dict) -> list[str]:
    "Ids in a chapter's equivalents file that are not among this run's survivors (killed, or not sampled)."
    surv = {m["id"] for m in row["result"]["mutants"] if m["outcome"] == "survived"}
    return [k for k in row["equivalents"] if k not in surv]


def coverage_text(d: dict) -> str:
    "A sentence on the run's coverage-based selection: claim lines, lines the tests run, unexported helpers."
    if d.get("selection") != "coverage":
        return (" *This run predates coverage-based selection: it did not measure which lines the tests and the "
                "claim check run.*")
    c, lc, u = d["claim_mutants"], d["line_coverage"], d["uncovered"]
    out = (f" The claim check (the experiment cells at the default scale) runs {len(d['claim_lines'])} lines of the "
           f"module; {c['candidates']} candidates sit on them, tried first: {c['tried']} tried, {c['detected']} "
           f"detected. The test cells run {lc['run_by_tests']} of its {lc['executable']} lines; "
           f"{u['skipped']} tried mutants sit on lines no test runs and survive without a run "
           f"({u['checked']} of them were run anyway, {u['killed_when_checked']} killed).")
    if d.get("experiment_error"):
        out += f" The traced claim check stopped early ({_cell(d['experiment_error'])}), so its lines are a lower bound."
    if d.get("experiment_defs"):
        out += (" Defined in the experiment cells, so never mutated: "
                + ", ".join(f"`{n}`" for n in d["experiment_defs"]) + ".")
    return out


def chapter_section(row: dict) -> str:
    "Markdown for one chapter: its run and its surviving mutants; a stale result says only why it is not shown."
    name, slug = f"**{row['chapter']}**", row["chapter"]
    if row["status"] == "not run":
        return f"{name}: *not run yet* (`make mutate SLUG={slug}`)."
    if row["status"] == "stale":
        return f"{name}: *stale, not shown*: {row['stale_reason']}. Run `make mutate SLUG={slug}` again."
    d = row["result"]
    pct = "—" if row["score"] is None else f"{100 * row['score']:.0f}%"
    text = (f"{name}: score **{pct}**. {d['tried']} of {d['candidates']} mutants of `{d['module']}` tried "
            f"(seed {d['seed']}; {d['skipped_in_annotations']} more sit in annotations that never run): "
            f"{d['killed']} killed, {d['timeouts']} timed out, {d['survived']} survived, {row['equivalent']} of "
            f"them equivalent. Run on {row['date']} in {d['wall_time'] / 60:.1f} min with {d['library']}, "
            f"{d['workers']} at a time, {d['timeout_seconds']:.0f} s per mutant at most."
            + "".join(f" Retested on {r['date'][:10]} with added tests ({r['wall_time'] / 60:.1f} min): "
                      f"{r['survivors_killed']} of its {r['survivors_retested']} survivors now killed, "
                      + (f"{r['timeouts_retested'] - len(r['timeouts_survived'])} of its {r['timeouts_retested']} "
                         "timed-out mutants detected again, " if "timeouts_retested" in r else "")
                      + f"and {r['spot_checked'] - len(r['spot_check_survived'])} of {r['spot_checked']} killed "
                      "mutants checked again still killed." for r in d.get("retests", []))
            + (" *The chapter's test cells changed after this run; its module did not. Run "
               f"`make mutate SLUG={slug} MUTATE_ARGS=--retest` for a score of today's tests.*"
               if row["tests_changed"] else "")
            + coverage_text(d)
            + "\n\n" + survivors_table(row))
    text += "\n\n" + review_table(row)
    extra = unmatched_equivalents(row)
    if extra:
        text += ("\n\nMarked equivalent but not a survivor of this run (killed now, or not in its sample): "
                 + ", ".join(f"`{k}`" for k in extra) + ".")
    return text


# ----------------------------------------------------------------------------------------------------------

def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("slug", help="the chapter's slug, e.g. data_pricing")
    ap.add_argument("--budget", type=float, default=DEFAULT_BUDGET, help="seconds for the whole run")
    ap.add_argument("--workers", type=int, default=2, help="mutants tested at a time")
    ap.add_argument("--seed", type=int, default=0, help="seed of the shuffle that picks the mutants")
    ap.add_argument("--max-mutants", type=int, default=None, help="try at most this many (default: as time allows)")
    ap.add_argument("--timeout", type=float, default=None,
                    help="seconds per mutant (default: 4x the unmutated run, at least 20)")
    ap.add_argument("--retest", action="store_true",
                    help="judge the last run's sample again with today's tests: its survivors, and --spot-check of "
                         "its detected mutants (the module must be unchanged since that run)")
    ap.add_argument("--review-only", action="store_true",
                    help="run only the chapter's review mutants (results/mutation/review.yml) and print; writes nothing")
    ap.add_argument("--only", default="", help="comma-separated mutant ids: run just these and print; writes nothing")
    ap.add_argument("--spot-check", type=int, default=30, help="detected mutants a --retest judges again")
    ap.add_argument("--no-experiment", action="store_true",
                    help="do not trace the experiment cells (no claim lines, unless the last result has them)")
    args = ap.parse_args(argv)
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        os.environ.setdefault(var, "1")  # one thread per worker, set before numpy and torch load
    os.environ.update(MPLBACKEND="Agg", ICMLBOOK_PROGRESS="0", HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1",
                      ICMLBOOK_LEDGER=tempfile.mkdtemp(prefix="mutate-ledger-"))
    os.environ.setdefault("ICMLBOOK_SCALE", "ci")
    ensure_library()
    sys.path.insert(0, str(ROOT))
    notebook, module = chapter_paths(args.slug)
    out = ROOT / RESULTS_DIR / f"{args.slug}.json"
    if args.review_only or args.only:
        t_start = time.monotonic()
        name = f"icmlbook.{args.slug}"
        source, steps, module_file, cwd, t0, timeout = _prepare(
            notebook, module, name, ROOT, None, args.timeout, t_start + args.budget, args.workers, args.budget, print)
        if args.review_only:
            found = run_review(args.slug, source, steps, module_file, name, ROOT, args.workers, timeout,
                               t_start + args.budget, min(timeout, 1.5 * t0), cwd)
        else:
            ids = set(args.only.split(","))
            ms = {m.id: m for m in enumerate_mutants(source)[0] if m.id in ids}
            if ids - set(ms):
                raise SystemExit(f"no mutant of today's module with id(s) {sorted(ids - set(ms))}")
            for m in ms.values():
                m.source = make_mutant(source, m)
            done = run_jobs([Job(i, program(steps, m.source, module_file)) for i, m in ms.items()], name,
                            args.workers, timeout, t_start + args.budget, min(timeout, 1.5 * t0), cwd)
            found = [{"name": j.key, **_record(source, ms[j.key], j.outcome)} for j in done]
        for r in found:
            print(f"  {r['outcome']:8s} line {r['line']}: {r['name']}" + (f"  [{r['killed_by']}]" if "killed_by" in r else ""))
        return 0
    if args.retest:
        if not out.exists():
            raise SystemExit(f"no earlier run to retest: {out.relative_to(ROOT)} (run without --retest first)")
        d = retest_chapter(notebook, module, f"icmlbook.{args.slug}", out, seed=args.seed, budget=args.budget,
                           workers=args.workers, timeout=args.timeout, spot_check=args.spot_check)
        r = d["retests"][-1]
        print(f"retest: {r['survivors_killed']} of {r['survivors_retested']} survivors now killed; "
              f"{r['timeouts_retested'] - len(r['timeouts_survived'])} of {r['timeouts_retested']} timed-out mutants "
              f"detected again{' (now surviving: ' + str(r['timeouts_survived']) + ')' if r['timeouts_survived'] else ''}; "
              f"{r['spot_checked'] - len(r['spot_check_survived'])} of {r['spot_checked']} spot-checked killed "
              f"mutants still killed" + (f" (now surviving: {r['spot_check_survived']})" if r["spot_check_survived"] else ""))
    else:
        d = mutate_chapter(notebook, module, f"icmlbook.{args.slug}", out, seed=args.seed, budget=args.budget,
                           workers=args.workers, timeout=args.timeout, max_mutants=args.max_mutants,
                           experiment=not args.no_experiment)
    eq = equivalents(ROOT / RESULTS_DIR / f"{args.slug}.equivalent.yml")
    s = score(d, eq)
    pct = "n/a" if s["score"] is None else f"{100 * s['score']:.1f}%"
    print(f"{args.slug}: score {pct}: {d['tried']} of {d['candidates']} mutants tried, {d['killed']} killed, "
          f"{d['timeouts']} timed out, {d['survived']} survived ({s['equivalent']} marked equivalent) "
          f"in {d['wall_time'] / 60:.1f} min; written to {out.relative_to(ROOT)}")
    for m in d["mutants"]:
        if m["outcome"] == "survived" and m["id"] not in eq:
            print(f"  survived {m['id']} line {m['line']} ({m['where'] or 'module'}, {m['operator']}):")
            print("    " + m["diff"].replace("\n", "\n    "))
    return 0


if __name__ == "__main__":
    sys.exit(main())
