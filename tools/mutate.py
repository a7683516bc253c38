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

The parent process imports what the cells import once, then forks one process per mutant (--workers at a
time). The candidates are shuffled by a fixed seed and tried in that order until --max-mutants or the time
budget (default 840 s: one chapter in at most 15 minutes on a 2-core machine) runs out, so the mutants tried
are always a seeded, uniform sample, and the same prefix of one permutation on every run of the same code.

After tests are added, `--retest` judges the same sample again without a whole new run: every survivor, every
timed-out mutant (on a loaded machine a survivor can time out), and a seeded spot check of the killed mutants
(30 by default) to confirm the added tests did not stop an earlier kill. It refuses when the module changed (the mutants would differ); the result keeps a record of each retest.

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
        elif not placed:
            pieces.append(Piece(f"{s.label} (export)", module_file, module_source))
            placed = True
    if not exports:
        raise ValueError("the notebook has no export cell before its Experiment heading")
    return pieces


# ----------------------------------------------------------------------------------------------------------
# Running the cells against one module source, in a forked process

class CosmicRayTestingException(Exception):
    "The exception cosmic-ray's ExceptionReplacer writes into `except` clauses: raised by nothing."


def run_program(pieces: list[Piece], module_name: str) -> dict:
    "Execute the pieces in one fresh namespace registered as `module_name`; the first failure kills the mutant."
    import importlib
    mod = types.ModuleType(module_name)
    sys.modules[module_name] = mod
    package, _, leaf = module_name.rpartition(".")
    if package:
        setattr(importlib.import_module(package), leaf, mod)
    ns = mod.__dict__
    ns["CosmicRayTestingException"] = CosmicRayTestingException
    flags = 0
    for p in pieces:
        try:
            code = compile(p.code, p.filename, "exec", flags=flags, dont_inherit=True)
            flags |= code.co_flags & FUTURE_MASK  # a __future__ import holds for later cells, as in IPython
            exec(code, ns)
        except BaseException as e:  # noqa: BLE001 (SystemExit too: any cell that does not finish kills)
            msg = str(e).strip().splitlines()
            return {"passed": False, "step": p.label, "error": f"{type(e).__name__}: {msg[0] if msg else ''}"[:200]}
    return {"passed": True}


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


def run_jobs(jobs, module_name: str, workers: int, timeout: float, deadline: float, expected: float,
             cwd: Path, on_done=None) -> list[Job]:
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
                    out.write_text(json.dumps(run_program(job.pieces, module_name)))
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
                               **({} if r["passed"] else {"step": r["step"], "error": r["error"]})}
            else:
                job.outcome = {"outcome": "killed", "seconds": seconds, "step": "process",
                               "error": f"the process died (status {status})"}
            done.append(job)
            if on_done:
                on_done(job)
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


def mutate_chapter(notebook: Path, module: Path, module_name: str, out: Path, *, root: Path = ROOT,
                   seed: int = 0, budget: float = DEFAULT_BUDGET, workers: int = 2, timeout: float | None = None,
                   max_mutants: int | None = None, mutants: list[Mutant] | None = None, cwd: Path | None = None,
                   echo=print) -> dict:
    """Run the mutants of `module` against `notebook`'s test cells and write the result to `out`.
    `mutants` (with `source` set) replaces cosmic-ray's enumeration and the seeded shuffle: for tests."""
    t_start = time.monotonic()
    deadline = t_start + budget
    source, steps, module_file, cwd, t0, timeout = _prepare(notebook, module, module_name, root, cwd, timeout,
                                                             deadline, workers, budget, echo)
    review = run_review(module.stem, source, steps, module_file, module_name, root, workers, timeout, deadline,
                        min(timeout, 1.5 * t0), cwd)
    if review:
        echo(f"  review mutants: {sum(r['outcome'] != 'survived' for r in review)} of {len(review)} detected")

    skipped = 0
    if mutants is None:
        mutants, skipped = enumerate_mutants(source)
        random.Random(seed).shuffle(mutants)
        candidates = len(mutants)
    else:
        candidates = len(mutants)
    limit = len(mutants) if max_mutants is None else min(max_mutants, len(mutants))
    incompetent = []
    tried = {}

    def jobs():
        n = 0
        for m in mutants:
            if n >= limit:
                return
            if m.source is None:
                m.source = make_mutant(source, m)
            if m.source is None:
                continue
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")  # e.g. SyntaxWarning for `x is not "best"`: still a mutant
                    compile(m.source, module_file, "exec", dont_inherit=True)
            except SyntaxError:
                incompetent.append(m.id)
                continue
            n += 1
            tried[m.id] = m
            yield Job(m.id, program(steps, m.source, module_file))

    counts = {"killed": 0, "survived": 0, "timeout": 0}

    def progress(job):
        counts[job.outcome["outcome"]] += 1
        n = sum(counts.values())
        if n % 25 == 0:
            echo(f"  {n} mutants: {counts['killed']} killed, {counts['survived']} survived, "
                 f"{counts['timeout']} timed out ({(time.monotonic() - t_start) / 60:.1f} min)")

    # A mutant's run is mostly shorter than the unmutated one (the first failing cell stops it).
    finished = run_jobs(jobs(), module_name, workers, timeout, deadline, min(timeout, 1.5 * t0), cwd, progress)
    results = []
    for job in finished:
        results.append(_record(source, tried[job.key], job.outcome))
    results.sort(key=lambda r: (r["line"], r["operator"], r["id"]))
    data = {
        "chapter": module.stem, "module": module_file, "notebook": _rel(notebook, root),
        "code_hash": sha256(module), "tests_hash": tests_hash(steps),
        "date": datetime.datetime.now().isoformat(timespec="seconds"),
        "wall_time": round(time.monotonic() - t_start, 2), "baseline_seconds": t0, "timeout_seconds": timeout,
        "workers": workers, "library": f"{LIBRARY} {LIBRARY_VERSION}", "seed": seed,
        "candidates": candidates, "skipped_in_annotations": skipped, "incompetent": len(incompetent),
        "tried": len(results), **_counts(results),
        "sampled": len(results) < candidates, "review": review,
        "mutants": results,
    }
    data["score"] = score(data, {})["score"]
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
    killed mutants (a seeded sample) to confirm they are still killed. The module must be the one that run mutated (same sha256); the other mutants keep their
    outcome. The result records each retest (date, test hashes, counts, spot-check changes) under "retests".
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
            "score": round(detected / denom, 4) if denom else None}


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


def summary_table(rows: list[dict]) -> str:
    "Markdown table: each chapter's score, counts and run; stale and unrun chapters show no numbers."
    out = ["| chapter | score | mutants tried | detected | open | equivalent | review mutants | run |",
           "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        d = r["result"]
        if r["status"] != "current":
            label = "*stale*" if r["status"] == "stale" else "*not run*"
            out.append(f"| {_cell(r['chapter'])} | {label} |  |  |  |  |  | {r.get('date', '')} |")
            continue
        rev = d.get("review")
        rev = "—" if not rev else f"{sum(m['outcome'] != 'survived' for m in rev)} of {len(rev)} detected"
        pct = "—" if r["score"] is None else f"**{100 * r['score']:.0f}%**"
        sample = f" of {d['candidates']}" if d["sampled"] else ""
        run = f"{r['date']}, {d['wall_time'] / 60:.0f} min" + ("; *tests changed since*" if r["tests_changed"] else "")
        out.append(f"| {_cell(r['chapter'])} | {pct} | {d['tried']}{sample} | {r['detected']} | {r['open']} | "
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
              f"{r['spot_checked'] - len(r['spot_check_survived'])} of {r['spot_checked']} spot-checked detected "
              f"mutants still detected" + (f" (now surviving: {r['spot_check_survived']})" if r["spot_check_survived"] else ""))
    else:
        d = mutate_chapter(notebook, module, f"icmlbook.{args.slug}", out, seed=args.seed, budget=args.budget,
                           workers=args.workers, timeout=args.timeout, max_mutants=args.max_mutants)
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
