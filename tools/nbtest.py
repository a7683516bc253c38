"""`nbdev_test` that keeps what it executed, runs offline and stops a notebook that runs too long.

    python tools/nbtest.py [--timeout SECONDS] [nbdev_test arguments]

runs nbdev's own `nbdev_test` (same flags, same skipped `#| slow` cells, same failures) with three additions:

- each notebook that passes is written, with the outputs nbdev's shell captured, into the book's execution
  cache (the folder tools/cachekey.py names for the current scale and code, the cache Jupyter Book reads with
  `execute_notebooks: cache`). A book build right after it finds every notebook in the cache and renders
  those outputs instead of re-running it;
- the network is blocked while notebooks run: a Python socket may connect (or send) only to this machine
  (127.0.0.0/8, ::1, localhost), so torch.distributed on 127.0.0.1 works and anything else fails with
  NetworkBlockedError. Child Python processes of a notebook get the same guard, through a sitecustomize
  module on PYTHONPATH. (Sockets opened from C/C++ code are not seen, as with pytest-socket.);
- each notebook has a time limit in CPU seconds (its kernel's and its child processes'): --timeout, else the
  environment variable ICMLBOOK_NB_TIMEOUT, else 400 at the default scale and none at ICMLBOOK_SCALE=full
  (0 means none), with a wall-clock cap of WALL_FACTOR (4, or ICMLBOOK_NB_WALL_FACTOR) times as many seconds
  behind it. CPU time does not grow when other jobs load the machine, so a busy machine slows a run without
  failing it. A notebook over its limit fails with NotebookTimeout naming it; one stuck where Python cannot
  interrupt it ends the run GRACE seconds later (60, or ICMLBOOK_NB_TIMEOUT_GRACE).
"""
import argparse
import contextlib
import inspect
import os
import signal
import sys
import tempfile
import threading
import time
from pathlib import Path

import nbdev.test
from execnb.shell import CaptureShell

sys.path.insert(0, str(Path(__file__).resolve().parent))
from cachekey import cache_dir  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_TIMEOUT = {"ci": 400.0, "full": 0.0}  # CPU seconds per notebook (kernel and children); 0: no limit
# the wall-clock cap behind the CPU-time limit, as a multiple of it (a loaded machine slows a run, it does not fail it)
WALL_FACTOR = float(os.environ.get("ICMLBOOK_NB_WALL_FACTOR") or 4.0)
# seconds after the limit before a notebook that ignores NotebookTimeout ends the run
GRACE = float(os.environ.get("ICMLBOOK_NB_TIMEOUT_GRACE") or 60.0)
_run_all, _set_path = CaptureShell.run_all, CaptureShell.set_path


def install_network_guard(allowed_names=("localhost",)):
    """Make every Python socket refuse to connect or send to a host that is not this machine.

    Self-contained on purpose: tools/nbtest.py copies this function's source into the sitecustomize module
    that child processes of a notebook import at startup."""
    import ipaddress
    import socket

    if getattr(socket.socket, "_icmlbook_guarded", False):
        return

    class NetworkBlockedError(RuntimeError):
        "A notebook run tried to reach the network."
    NetworkBlockedError.__qualname__ = NetworkBlockedError.__name__

    def allowed(address) -> bool:
        host = address[0] if isinstance(address, tuple) and address else address
        if isinstance(host, bytes):
            host = host.decode(errors="replace")
        if host in allowed_names:
            return True
        try:
            ip = ipaddress.ip_address(str(host).split("%")[0])
        except ValueError:
            return False  # a name other than localhost: resolving it is already a network request
        ip = getattr(ip, "ipv4_mapped", None) or ip
        return ip.is_loopback

    def check(sock, address, call):
        if sock.family in (socket.AF_INET, socket.AF_INET6) and not allowed(address):
            where = ":".join(str(a) for a in address[:2]) if isinstance(address, tuple) else repr(address)
            raise NetworkBlockedError(
                f"the network is blocked while notebooks run (tools/nbtest.py): socket.{call}() to {where} "
                f"refused; notebooks may reach only this machine (127.0.0.1, ::1, localhost)")

    original = {name: getattr(socket.socket, name) for name in ("connect", "connect_ex", "sendto", "sendmsg")}

    def connect(self, address):
        check(self, address, "connect")
        return original["connect"](self, address)

    def connect_ex(self, address):
        check(self, address, "connect_ex")
        return original["connect_ex"](self, address)

    def sendto(self, data, *args):
        if args:
            check(self, args[-1], "sendto")
        return original["sendto"](self, data, *args)

    def sendmsg(self, buffers, *args):
        if len(args) >= 3 and args[2] is not None:
            check(self, args[2], "sendmsg")
        return original["sendmsg"](self, buffers, *args)

    socket.socket.connect, socket.socket.connect_ex = connect, connect_ex
    socket.socket.sendto, socket.socket.sendmsg = sendto, sendmsg
    socket.socket._icmlbook_guarded = True
    socket.NetworkBlockedError = NetworkBlockedError


SITECUSTOMIZE = '''"""Written by tools/nbtest.py for the processes a notebook starts: the notebook's network guard."""
import os
import sys

{guard}

install_network_guard()


def _chain():
    "Run the sitecustomize module this one hides, if there is one."
    import importlib.machinery
    import importlib.util
    here = os.path.dirname(os.path.abspath(__file__))
    for entry in sys.path:
        if os.path.abspath(entry or os.curdir) == here:
            continue
        spec = importlib.machinery.PathFinder.find_spec("sitecustomize", [entry])
        if spec is not None and spec.loader is not None:
            spec.loader.exec_module(importlib.util.module_from_spec(spec))
            return


_chain()
'''


class NotebookTimeout(TimeoutError):
    "A notebook ran longer than its limit."


def notebook_timeout() -> float:
    "The per-notebook limit in CPU seconds (0: none), from ICMLBOOK_NB_TIMEOUT or the scale's default."
    value = os.environ.get("ICMLBOOK_NB_TIMEOUT")
    if value:
        return float(value)
    return DEFAULT_TIMEOUT.get(os.environ.get("ICMLBOOK_SCALE", "ci"), 0.0)


def cpu_seconds() -> float:
    "CPU seconds used so far by this process (all threads), its finished children and its live child processes."
    t = os.times()
    used = t.user + t.system + t.children_user + t.children_system
    try:
        import psutil
        for child in psutil.Process().children(recursive=True):
            with contextlib.suppress(psutil.Error):
                c = child.cpu_times()
                used += c.user + c.system
    except ImportError:  # psutil comes with ipykernel; without it, live children count once they are reaped
        pass
    return used


class TimeLimit:
    """Raise NotebookTimeout in the notebook's code once it has used `seconds` of CPU time (kernel and child
    processes), or once WALL_FACTOR times as many wall seconds have passed, whichever comes first; again every few
    seconds, so an `except Exception` in a cell cannot swallow it. End the process if the notebook is still running
    GRACE seconds after that (a notebook stuck in C code, where Python cannot interrupt it). CPU time, unlike wall
    time, does not grow when other jobs load the machine, so a busy machine slows a run without failing it."""

    def __init__(self, name: str, seconds: float, wall_factor: float | None = None):
        factor = wall_factor if wall_factor is not None else WALL_FACTOR
        self.name, self.seconds, self.wall, self.active = name, seconds, seconds * factor, False
        self.reason = None
        how = "set --timeout or ICMLBOOK_NB_TIMEOUT, 0 for none"
        self.cpu_message = (f"{name} ran longer than its time limit of {seconds:g} s of CPU time "
                            f"(kernel and child processes; tools/nbtest.py; {how})")
        self.wall_message = (f"{name} ran past its wall-clock cap of {self.wall:g} s ({factor:g} x its CPU time limit "
                             f"of {seconds:g} s; tools/nbtest.py; {how})")

    def _raise(self, *args):
        if self.active and self.reason:
            raise NotebookTimeout(self.reason)

    def _watch(self):
        fired = None
        while not self._stop.wait(0.25):
            now = time.monotonic()
            if self.reason is None:
                if now - self.t0 > self.wall:
                    self.reason = self.wall_message
                elif cpu_seconds() - self.cpu0 > self.seconds:
                    self.reason = self.cpu_message
                else:
                    continue
            if fired is None or now - fired >= min(max(self.seconds, 1.0), 5.0):
                if fired is None:
                    first = now
                fired = now
                if self.alarm:  # signals reach the main thread only; elsewhere the kill below alone applies
                    signal.pthread_kill(threading.main_thread().ident, signal.SIGALRM)
            if now - first > GRACE:
                # straight to file descriptor 2: while a cell runs, the shell captures sys.stderr
                os.write(2, f"\nFAILED: {self.reason}; it did not stop within {GRACE:g} s more, "
                            "so the test run ends here\n".encode())
                os._exit(1)

    def __enter__(self):
        if self.seconds <= 0:
            return self
        self.active, self.t0, self.cpu0 = True, time.monotonic(), cpu_seconds()
        self.alarm = threading.current_thread() is threading.main_thread()
        if self.alarm:
            self.previous = signal.signal(signal.SIGALRM, self._raise)
        self._stop = threading.Event()
        self.watchdog = threading.Thread(target=self._watch, daemon=True)
        self.watchdog.start()
        return self

    def __exit__(self, *exc):
        if not self.active:
            return False
        self.active = False
        self._stop.set()
        self.watchdog.join()
        if self.alarm:
            signal.signal(signal.SIGALRM, self.previous)
        return False


def set_path(self, path):
    self.notebook_path = Path(path)
    return _set_path(self, path)


def run_all(self, nb, *args, **kwargs):
    install_network_guard()
    path = getattr(self, "notebook_path", None)
    name = path.name if path is not None else "the notebook"
    try:
        with TimeLimit(name, notebook_timeout()):
            _run_all(self, nb, *args, **kwargs)  # raises on a failing cell: nothing is cached then
    except NotebookTimeout as e:
        if not isinstance(self.exc, NotebookTimeout):  # raised between cells: report it as the failure
            self.exc = e
        raise
    if path is None or self.exc is not None:
        return
    cache_notebook(path, nb)


def cache_notebook(path: Path, nb) -> None:
    import nbformat
    from jupyter_cache import get_cache
    # nbdev's reader strips the `#|` lines from the cells it runs; put the outputs back into the notebook
    # as it is on disk, so the cache's hash of the code cells matches the book's.
    source = nbformat.read(path, as_version=4)
    count = 0
    for cell in nb.cells:
        outputs = cell.get("outputs")
        if cell.cell_type == "code" and outputs:
            count += 1
            target = source.cells[cell.idx_]
            target.outputs = [nbformat.from_dict(dict(o)) for o in outputs]
            for o in target.outputs:
                if o.output_type == "execute_result":
                    o.execution_count = count
            target.execution_count = count
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / path.name
        nbformat.write(source, out)
        get_cache(str(cache_dir())).cache_notebook_file(str(out), uri=str(path), check_validity=False, overwrite=True)


def patch_capture_shell() -> None:
    CaptureShell.set_path, CaptureShell.run_all = set_path, run_all


# nbdev_test runs the notebooks in worker processes; under the spawn and forkserver start methods they
# import this script as __mp_main__ and need the patch too. Imported as a module (by the tests), it patches nothing.
if __name__ in ("__main__", "__mp_main__"):
    patch_capture_shell()


@contextlib.contextmanager
def prepared():
    "Take --timeout out of the command line and put the network guard in place, in this process and its children."
    p = argparse.ArgumentParser(add_help=False)
    p.add_argument("--timeout", type=float, default=None, help="seconds per notebook (0: no limit)")
    args, rest = p.parse_known_args(sys.argv[1:])
    if args.timeout is not None:
        os.environ["ICMLBOOK_NB_TIMEOUT"] = repr(args.timeout)
    sys.argv = [sys.argv[0], *rest]
    with tempfile.TemporaryDirectory(prefix="icmlbook-netguard-") as site:
        Path(site, "sitecustomize.py").write_text(
            SITECUSTOMIZE.format(guard=inspect.getsource(install_network_guard)), encoding="utf-8")
        os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [site, os.environ.get("PYTHONPATH")]))
        install_network_guard()
        yield


if __name__ == "__main__":
    with prepared():
        # called from the script's top level, so that fastcore's call_parse reads the command line
        result = nbdev.test.nbdev_test()
    sys.exit(result)
