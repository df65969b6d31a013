"""Run models on targets in a child process, with a time limit.

A runtime that crashes (a segfault in a kernel), hangs or runs out of memory must be a
result in a report, never the end of the tool. :class:`Runner` owns one worker process
(``python -m rewriter.comparison.isolation``) that loads the same plugins as the caller and
runs jobs one at a time: build the target by name, ``target.prepare(model, base_dir)``,
then run it on each set of feeds. A job that crashes the worker or outlives its time limit
is reported as such and the worker is started afresh for the next job.

The protocol is pickles framed by an 8-byte length, over the worker's stdin and a copy of
its stdout taken before anything else can write there (fd 1 is then pointed at stderr, so a
library printing to stdout cannot corrupt it). The worker's stderr goes to a temporary file
whose last line explains a crash.
"""

from __future__ import annotations

import atexit
import math
import os
import pickle
import select
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rewriter.console import child_env, die_with_parent

DEFAULT_TIMEOUT_S = 300.0
STARTUP_TIMEOUT_S = 300.0  # a new worker's imports, not counted in a job's time limit
_HEADER = 8
_READY = b"ready"
_ACCEPTED = b"accepted"  # the job's plugins are loaded: its time limit starts now
_KERNEL_CLASH = "onnxruntime-extensions cannot replace it"  # rewriter.plan.kernels' KernelError


@dataclass
class RunResult:
    """What one job gave: outputs per feed set, or why not.

    ``kind`` is ``ok``, ``error`` (the runtime refused the model or a run raised),
    ``unsupported`` (the target cannot run models), ``crash``, ``timeout`` or ``oom``.
    """

    kind: str
    outputs: list[dict[str, Any]] | None = None
    error: str = ""
    seconds: float = 0.0
    # a job run with ``keep_going``: the feed sets that failed (their outputs are None)
    set_errors: dict[int, str] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.kind == "ok"


@dataclass
class Job:
    """One model on one target, run on every set of feeds. The worker loads the plugins
    the job names (as ``load_plugins(plugin_specs, autoload=autoload)``, cached), with
    ``sys_path`` as its import path, so the targets and kernels are the caller's."""

    target: str  # a target spec, as given to resolve_targets ("onnxruntime", "reference")
    model: bytes  # a serialized ModelProto
    base_dir: str  # where its external data lives (absolute)
    feeds: list[dict[str, Any]]
    custom_op_libraries: tuple[str, ...] = ()
    reference_ops: tuple[type, ...] = ()  # OpRun classes (pickled by reference)
    plugin_specs: tuple[str, ...] = ()
    autoload: bool = True
    sys_path: tuple[str, ...] = ()
    # run every feed set even when one fails (its outputs None, its error in set_errors);
    # the job fails only when every set does
    keep_going: bool = False
    oracle: bool = False  # the run is the comparison's oracle (TargetOptions.oracle)

    @classmethod
    def make(cls, target: str, model, base_dir, feeds, *, plugins=None,
             custom_op_libraries=(), reference_ops=(), keep_going: bool = False,
             oracle: bool = False) -> Job:
        """A job for ``model`` (a ModelProto) on ``target``, for the caller's plugins."""
        return cls(target, model.SerializeToString(), str(Path(base_dir).absolute()),
                   list(feeds), tuple(custom_op_libraries), tuple(reference_ops),
                   tuple(getattr(plugins, "specs", ()) or ()),
                   bool(getattr(plugins, "autoload", True)), tuple(sys.path), keep_going,
                   oracle)


@dataclass
class _Config:
    sys_path: list[str]
    memory_limit: int | None = None
    warm: tuple | None = None  # (specs, autoload): plugins to load before the first job


class _Died(Exception):
    pass


class Runner:
    """One worker process, started lazily and restarted after a crash or a timeout.

    Args:
        plugins: plugins (:class:`~rewriter.manager.Plugins`) for the worker to load as soon
            as it starts; each job names its own.
        timeout: seconds one job (loading the model and every run) may take.
        memory_limit: bytes of address space the worker may use (``RLIMIT_AS``), or None.
    """

    def __init__(self, plugins=None, *, timeout: float | None = DEFAULT_TIMEOUT_S,
                 memory_limit: int | None = None) -> None:
        warm = None
        if plugins is not None:
            warm = (tuple(getattr(plugins, "specs", ()) or ()),
                    bool(getattr(plugins, "autoload", True)))
        self.config = _Config(list(sys.path), memory_limit, warm)
        self.timeout = timeout
        self._proc: subprocess.Popen | None = None
        self._stderr = None
        self._ready = False
        self._lock = threading.RLock()  # one job at a time

    # -- lifecycle --------------------------------------------------------------------------

    def start(self) -> None:
        """Start the worker now (it imports onnx and loads plugins while the caller works)."""
        with self._lock:
            self._start()

    def _start(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            return
        self._cleanup()
        self._ready = False
        self._stderr = tempfile.TemporaryFile()
        env = child_env()  # the worker dies with this process, even if it is killed
        env.setdefault("PYTHONFAULTHANDLER", "1")  # a segfault leaves a line in stderr
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "rewriter.comparison.isolation"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._stderr,
            cwd=os.getcwd(), env=env, close_fds=True,
            start_new_session=True,  # its own process group: killed as one, no terminal ^C
        )
        try:
            self._send(pickle.dumps(self.config))
        except _Died:
            pass  # reported by the first job

    def close(self) -> None:
        proc = self._proc
        if proc is not None and proc.poll() is None and not self._ready:
            self._kill()  # still importing: nothing to finish
        elif proc is not None and proc.poll() is None:
            try:
                proc.stdin.close()  # EOF: the worker exits
                proc.wait(timeout=5)
            except (OSError, subprocess.TimeoutExpired):
                self._kill()
        self._cleanup()

    def __enter__(self) -> Runner:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _kill(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            try:
                os.killpg(self._proc.pid, signal.SIGKILL)  # the worker and what it started
            except OSError:
                self._proc.kill()
            self._proc.wait()

    def _cleanup(self) -> None:
        if self._proc is not None:
            for stream in (self._proc.stdin, self._proc.stdout):
                try:
                    stream.close()
                except OSError:
                    pass
        self._proc = None
        if self._stderr is not None:
            self._stderr.close()
            self._stderr = None

    # -- jobs -------------------------------------------------------------------------------

    def run(self, job: Job, timeout: float | None = ...) -> RunResult:
        """Run one job; never raises for what the runtime does. ``timeout``: seconds (None:
        no limit; default: the runner's). A job whose kernels clash with those an earlier
        job (another plugin set) registered in this worker runs again in a fresh one:
        onnxruntime-extensions cannot replace an op within a process."""
        with self._lock:
            limit = self.timeout if timeout is ... else timeout
            result = self._run(job, limit)
            if result.kind == "error" and _KERNEL_CLASH in result.error:
                self._kill()
                self._cleanup()
                result = self._run(job, limit)
            return result

    def _run(self, job: Job, timeout: float | None) -> RunResult:
        start = time.perf_counter()
        try:  # the import path goes first: the job's kernel classes may need it to unpickle
            payload = pickle.dumps((job.sys_path or tuple(sys.path), job.plugin_specs,
                                    job.autoload, pickle.dumps(job), timeout))
        except Exception as e:  # noqa: BLE001 - e.g. a kernel class defined in a function
            return RunResult("error", error=f"cannot send the job to the worker: {e}")
        self._start()
        try:  # keep only this job's stderr (the worker shares the file's offset)
            self._stderr.seek(0)
            self._stderr.truncate()
        except OSError:
            pass
        try:
            if not self._ready:  # the worker's own start does not count against the job
                if self._receive(time.monotonic() + STARTUP_TIMEOUT_S) != _READY:
                    raise _Died
                self._ready = True
        except (TimeoutError, _Died) as e:
            if isinstance(e, TimeoutError):
                kind, message = "timeout", f"the worker did not start within " \
                                           f"{STARTUP_TIMEOUT_S:g}s"
            else:
                kind, message = self._death()
                message = f"the worker failed to start: {message}"
                limit = self.config.memory_limit
                if limit:  # too little address space to import numpy and the runtimes
                    kind = "oom"
                    message = (f"the worker failed to start under a memory limit of "
                               f"{limit / 2**20:g} MiB: too small to import the runtimes? "
                               "(raise --memory-limit)")
            self._kill()
            self._cleanup()
            return RunResult(kind, error=message, seconds=time.perf_counter() - start)
        accepted = False
        try:
            self._send(payload)
            raw = self._receive(time.monotonic() + STARTUP_TIMEOUT_S)
            if raw == _ACCEPTED:
                accepted = True
                deadline = None if timeout is None else time.monotonic() + timeout
                raw = self._receive(deadline)
        except TimeoutError:
            self._kill()
            self._cleanup()
            message = (f"took longer than {timeout:g}s (killed)" if accepted else
                       f"loading the plugins took longer than {STARTUP_TIMEOUT_S:g}s (killed)")
            return RunResult("timeout", error=message, seconds=time.perf_counter() - start)
        except _Died:
            kind, message = self._death()
            self._cleanup()
            return RunResult(kind, error=message, seconds=time.perf_counter() - start)
        result = pickle.loads(raw)
        result.seconds = time.perf_counter() - start
        return result

    def _send(self, data: bytes) -> None:
        try:
            self._proc.stdin.write(len(data).to_bytes(_HEADER, "little"))
            self._proc.stdin.write(data)
            self._proc.stdin.flush()
        except (BrokenPipeError, OSError, ValueError) as e:
            raise _Died from e

    def _receive(self, deadline: float | None) -> bytes:
        size = int.from_bytes(self._read(_HEADER, deadline), "little")
        return self._read(size, deadline)

    def _read(self, n: int, deadline: float | None) -> bytes:
        fd = self._proc.stdout.fileno()
        chunks, got = [], 0
        while got < n:
            wait = None if deadline is None else deadline - time.monotonic()
            if wait is not None and wait <= 0:
                raise TimeoutError
            ready, _, _ = select.select([fd], [], [], wait)
            if not ready:
                raise TimeoutError
            chunk = os.read(fd, min(n - got, 1 << 20))
            if not chunk:
                raise _Died
            chunks.append(chunk)
            got += len(chunk)
        return b"".join(chunks)

    def _death(self) -> tuple[str, str]:
        """(kind, message) for a worker that went away."""
        try:
            code = self._proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._kill()
            code = self._proc.returncode
        last = self._stderr_tail()
        if code is not None and code < 0:
            try:
                name = signal.Signals(-code).name
            except ValueError:
                name = f"signal {-code}"
            if -code == signal.SIGKILL:
                return "oom", f"the runtime was killed ({name}; out of memory?)" + last
            return "crash", f"the runtime crashed ({name})" + last
        if "MemoryError" in last or "bad_alloc" in last:
            return "oom", f"the runtime ran out of memory (exit code {code})" + last
        return "crash", f"the runtime exited with code {code}" + last

    def _stderr_tail(self) -> str:
        if self._stderr is None:
            return ""
        try:
            self._stderr.seek(0)
            lines = [x.strip() for x in self._stderr.read()[-8192:].decode(
                errors="replace").splitlines() if x.strip()]
        except OSError:
            return ""
        # faulthandler's "Fatal Python error: Segmentation fault" says more than the stack
        fatal = [x for x in lines if x.startswith("Fatal Python error")]
        line = (fatal or lines or [""])[-1]
        return f": {line[:300]}" if line else ""


# -- workers shared within a process ------------------------------------------------------

MAX_SHARED = 2
_SHARED: OrderedDict[tuple, Runner] = OrderedDict()
_SHARED_LOCK = threading.Lock()
_AT_EXIT = []


def shared_runner(plugins=None, *, memory_limit: int | None = None) -> Runner:
    """A worker kept alive between calls (``compare`` after every ``rewrite`` in a loop
    would otherwise pay a process start and its imports each time): one per memory limit,
    the least recently used closed beyond :data:`MAX_SHARED`, all closed at exit. Jobs
    carry their plugin set, which the worker loads once and keeps."""
    key = (memory_limit,)
    with _SHARED_LOCK:
        if not _AT_EXIT:
            atexit.register(close_shared)
            _AT_EXIT.append(True)
        runner = _SHARED.pop(key, None) or Runner(plugins, memory_limit=memory_limit)
        _SHARED[key] = runner
        while len(_SHARED) > MAX_SHARED:
            _, old = _SHARED.popitem(last=False)
            with old._lock:
                old.close()
    return runner


def close_shared() -> None:
    """Stop every shared worker."""
    with _SHARED_LOCK:
        runners = list(_SHARED.values())
        _SHARED.clear()
    for r in runners:
        r.close()


# -- the worker --------------------------------------------------------------------------


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return (text.splitlines()[0] if text else "") or type(e).__name__


def _is_oom(e: BaseException) -> bool:
    text = str(e)
    return isinstance(e, MemoryError) or "bad_alloc" in text or "Failed to allocate" in text


_MEMORY_WORDS = ("failed to map segment", "cannot allocate memory", "bad_alloc",
                 "out of memory", "failed to allocate")


def _out_of_memory(e: BaseException | None) -> bool:
    """Whether ``e`` (or what caused it) is the address-space limit biting: a MemoryError,
    or a shared library that could not be mapped while importing."""
    while e is not None:
        if isinstance(e, MemoryError) or any(w in str(e).lower() for w in _MEMORY_WORDS):
            return True
        e = e.__cause__ or e.__context__
    return False


def _limit_too_small(limit: int, e: BaseException) -> str:
    return (f"the memory limit of {limit / 2**20:,.0f} MiB is too small for the worker to "
            "load onnxruntime and the plugins; give a larger --memory-limit "
            f"({_first_line(e)})")


MAX_PLUGIN_SETS = 4


class _Worker:
    def __init__(self, config: _Config) -> None:
        self.config = config
        self._plugins: OrderedDict[tuple, Any] = OrderedDict()
        self._targets: dict[tuple, Any] = {}

    def plugins(self, specs: tuple[str, ...], autoload: bool):
        """Loaded once per set (a plugin failing to load raises, for the job to report)."""
        key = (tuple(specs), bool(autoload))
        if key not in self._plugins:
            from rewriter.manager import load_plugins

            self._plugins[key] = load_plugins(list(specs), autoload=autoload)
            while len(self._plugins) > MAX_PLUGIN_SETS:
                old, _ = self._plugins.popitem(last=False)
                self._targets = {k: v for k, v in self._targets.items() if k[0] != old}
        self._plugins.move_to_end(key)
        return self._plugins[key]

    def warm(self) -> None:
        """Import the runtimes and load the expected plugins before the first job."""
        try:
            import onnx.reference  # noqa: F401
            import onnxruntime  # noqa: F401

            if self.config.warm is not None:
                self.plugins(*self.config.warm)
        except Exception:  # noqa: BLE001 - the job that needs it reports the failure
            pass

    def target(self, job: Job, model):
        """The job's target; the reference evaluator gets the job's OpRuns and those the
        installed plugins' kernels provide for this model's ops."""
        from rewriter.detect.targets import TargetOptions, resolve_targets
        from rewriter.plan.kernels import reference_ops

        plugin_key = (tuple(job.plugin_specs), bool(job.autoload))
        plugins = self.plugins(*plugin_key)
        kernel_ops = ()
        if job.target.partition(":")[0] == "reference":  # built per model: not cached
            kernel_ops = tuple(reference_ops(model, plugins.registry))
        key = (plugin_key, job.target, job.custom_op_libraries, job.reference_ops, job.oracle)
        if kernel_ops or key not in self._targets:
            options = TargetOptions(custom_op_libraries=job.custom_op_libraries, confirm=False,
                                    reference_ops=tuple(job.reference_ops) + kernel_ops,
                                    oracle=job.oracle)
            (target,) = resolve_targets(plugins, [job.target], options)
            if kernel_ops:
                return target
            self._targets[key] = target
        return self._targets[key]

    def handle(self, job: Job) -> RunResult:
        from onnx import ModelProto

        try:
            model = ModelProto.FromString(job.model)
            target = self.target(job, model)
        except Exception as e:  # noqa: BLE001
            return RunResult("error", error=f"cannot create target {job.target!r}: "
                             f"{_first_line(e)}")
        if not target.runs_models:
            return RunResult("unsupported", error=f"target {target.name!r} cannot run models "
                             "(it only answers what it supports)")
        try:
            run = target.prepare(model, job.base_dir)
        except NotImplementedError as e:
            return RunResult("unsupported", error=_first_line(e))
        except Exception as e:  # noqa: BLE001 - the runtime's refusal is the answer
            kind = "oom" if _is_oom(e) else "error"
            return RunResult(kind, error="could not load the model: "
                             f"{_first_line(e)}")
        outputs: list[dict[str, Any] | None] = []
        failed: dict[int, str] = {}
        first: RunResult | None = None
        for i, feeds in enumerate(job.feeds):
            try:
                outputs.append(dict(run(feeds)))
            except Exception as e:  # noqa: BLE001
                kind = "oom" if _is_oom(e) else "error"
                where = f" on input set {i}" if len(job.feeds) > 1 else ""
                result = RunResult(kind, error=f"failed{where}: {_first_line(e)}")
                if not job.keep_going or kind == "oom":
                    return result
                first = first or result
                failed[i] = _first_line(e)
                outputs.append(None)
        if first is not None and len(failed) == len(job.feeds):
            return first
        return RunResult("ok", outputs=outputs, set_errors=failed)


def _read_message(stream) -> bytes | None:
    header = stream.read(_HEADER)
    if len(header) < _HEADER:
        return None
    size = int.from_bytes(header, "little")
    data = stream.read(size)
    if len(data) < size:
        return None
    return data


def _write_message(stream, data: bytes) -> None:
    stream.write(len(data).to_bytes(_HEADER, "little"))
    stream.write(data)
    stream.flush()


CHILD_GRACE_S = 30.0  # the child's own time limit: the parent's, and this much more


def serve(argv: Sequence[str] | None = None) -> int:
    """The worker's main loop (``python -m rewriter.comparison.isolation``). It dies with
    its parent, and enforces each job's time limit itself too (SIGALRM, with no handler:
    the kernel ends the process even in a hung native kernel), should the parent be gone."""
    die_with_parent()
    signal.signal(signal.SIGALRM, signal.SIG_DFL)
    out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # anything printed to stdout from now on goes to stderr
    sys.stdout = sys.stderr
    inp = sys.stdin.buffer
    raw = _read_message(inp)
    if raw is None:
        return 0
    config: _Config = pickle.loads(raw)
    sys.path[:] = config.sys_path
    import warnings

    warnings.simplefilter("ignore")  # numeric warnings on random inputs are noise here
    if config.memory_limit:
        import resource

        resource.setrlimit(resource.RLIMIT_AS, (config.memory_limit, config.memory_limit))
    worker = _Worker(config)
    worker.warm()
    _write_message(out, _READY)
    while True:
        raw = _read_message(inp)
        if raw is None:
            return 0
        try:
            # the import path and the plugins first: the job's kernel classes may live there
            sys_path, specs, autoload, inner, limit = pickle.loads(raw)
            sys.path[:] = list(sys_path)
            try:
                worker.plugins(specs, autoload)
            except Exception as e:  # noqa: BLE001 - reported as the job's result
                raise RuntimeError(f"cannot load the plugins: {_first_line(e)}") from e
            job = pickle.loads(inner)
            _write_message(out, _ACCEPTED)
        except Exception as e:  # noqa: BLE001 - e.g. a kernel class the worker cannot import
            result = RunResult("error", error=f"the worker cannot read the job: {_first_line(e)}")
            if config.memory_limit and _out_of_memory(e):
                result = RunResult("oom", error=_limit_too_small(config.memory_limit, e))
        else:
            if limit:
                signal.alarm(max(1, math.ceil(limit + CHILD_GRACE_S)))
            try:
                result = worker.handle(job)
            except MemoryError:
                result = RunResult("oom", error="out of memory")
            finally:
                signal.alarm(0)
        try:
            data = pickle.dumps(result)
        except Exception as e:  # noqa: BLE001 - outputs numpy cannot pickle
            data = pickle.dumps(RunResult("error", error=f"cannot return the outputs: {e}"))
        _write_message(out, data)


if __name__ == "__main__":
    # run the imported module's serve, so pickled classes are rewriter.comparison.isolation's own
    from rewriter.comparison import isolation

    sys.exit(isolation.serve())
