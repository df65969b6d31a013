"""Fault injection: what a kill, a full disk, a read-only folder or a second writer leaves
behind (issue 15).

Every case runs the real thing in a child process (the CLI, or ``save_model`` under the
CLI's own signal handling) and then looks at the output folder:

- the output is the old model+data pair or the new one, never a model naming data of the
  other (each pair is told apart by its graph name and the value of its weights);
- TERM and HUP unwind: no temporary file is left; after any kill (KILL too) the next write
  to the folder leaves no temporary file and no data file the model does not name;
- no process the killed one started is still running a moment later (children die with
  their parent, even on SIGKILL and inside a hanging kernel).

Random delays are seeded (``FAULT_SEED``, default 15). ``benchmarks/faults.py`` runs the
same cases many more times.

Disk full: ``RLIMIT_FSIZE`` in the child (SIGXFSZ ignored, so a write past it fails with
EFBIG, "file too large"), and, where the test runs as root with ``unshare``, a 1 MiB tmpfs
in a private mount namespace (a real ENOSPC). Read-only: ``chmod`` for a normal user; root
ignores modes, so as root a read-only bind mount in a private mount namespace (EROFS); the
test skips, saying why, where neither is possible.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from rewriter.io import output as output_io
from rewriter.io.model import load_model, read_external_tensor, save_model

SEED = int(os.environ.get("FAULT_SEED", "15"))
CLI = [sys.executable, "-c", "import sys; from rewriter.cli import main; sys.exit(main())"]
TAG = "ONNX_REWRITER_FAULT_TAG"
PAIRS = {"A": 1.0, "B": 2.0}  # graph name -> the value of every weight


# ----------------------------------------------------------------------------- models


def pair_model(name: str, n: int = 256) -> onnx.ModelProto:
    """Y = Swish(X @ W) at opset 24 (Swish is new there: ``-t opset:22`` rewrites it), the
    graph named ``name`` and every weight ``PAIRS[name]``."""
    w = numpy_helper.from_array(np.full((n, n), PAIRS[name], np.float32), "W")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["X", "W"], ["h"], name="matmul"),
         helper.make_node("Swish", ["h"], ["Y"], name="swish", alpha=1.0)],
        name, [helper.make_tensor_value_info("X", TensorProto.FLOAT, [2, n])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [2, n])], [w])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 24)])
    model.ir_version = 10
    return model


def write_source(folder: Path, name: str, n: int = 256) -> Path:
    """A model file with external data, in its own folder."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.onnx"
    onnx.save(pair_model(name, n), path, save_as_external_data=True,
              location=f"{name}.weights", size_threshold=0)
    return path


def temp_files(folder: Path) -> list[str]:
    return sorted(n for n in os.listdir(folder) if n.startswith(output_io.TEMP_PREFIX))


def data_files(out: Path) -> set[str]:
    pattern = output_io.data_name_pattern(out)
    return {n for n in os.listdir(out.parent) if pattern.match(n)}


def pair_of(out: Path) -> str | None:
    """Which pair ``out`` is ("A" or "B"), None when there is no output; fails when the
    model and its data do not belong together (or the data is missing or cut)."""
    if not out.exists():
        return None
    loaded = load_model(out)  # every data file present, of the size the model says
    name = loaded.model.graph.name
    assert name in PAIRS, name
    (weights,) = [t for t in loaded.model.graph.initializer if t.name == "W"]
    values = read_external_tensor(loaded, weights)
    assert np.all(values == PAIRS[name]), (
        f"mixed pair: model {name} reads weights {np.unique(values)[:4]}")
    return name


def assert_clean_after_next_write(out: Path, source: Path) -> None:
    """The next write to the folder leaves no temporary file and no data file the model
    does not name."""
    loaded = load_model(source)
    save_model(loaded.model, out, source=loaded)
    assert temp_files(out.parent) == []
    named = output_io.referenced_data(out)
    assert data_files(out) == named, (data_files(out), named)
    assert pair_of(out) == loaded.model.graph.name


# ----------------------------------------------------------------------------- processes


def tagged_env(tag: str) -> dict[str, str]:
    env = dict(os.environ)
    env[TAG] = tag
    env.pop("ONNX_REWRITER_PARENT", None)
    env["COLUMNS"] = "1000"  # an error fits one line (long ones are wrapped to the terminal)
    return env


def tagged_processes(tag: str) -> list[int]:
    """Processes (other than zombies) whose environment carries ``tag``: the one a test
    started and everything it started."""
    needle = f"{TAG}={tag}".encode()
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as f:
                if needle not in f.read().split(b"\0"):
                    continue
            with open(f"/proc/{entry}/stat", "rb") as f:
                state = f.read().rsplit(b")", 1)[1].split()[0]
        except OSError:
            continue
        if state != b"Z":
            found.append(int(entry))
    return found


def wait_until_gone(tag: str, seconds: float = 5.0) -> list[int]:
    """Wait for every process carrying ``tag`` to end; those still running after
    ``seconds`` (killed then, so a failing test leaves nothing behind)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        alive = tagged_processes(tag)
        if not alive:
            return []
        time.sleep(0.05)
    alive = tagged_processes(tag)
    for pid in alive:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    return alive


def wait_for_child(proc: subprocess.Popen, tag: str, seconds: float = 120.0) -> bool:
    """Wait until ``proc`` has started a child process (the compare worker)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and proc.poll() is None:
        if [p for p in tagged_processes(tag) if p != proc.pid]:
            return True
        time.sleep(0.05)
    return False


SAVE_DRIVER = textwrap.dedent("""
    # save_model over and over (the pairs in turn) under the CLI's signal handling
    import sys
    from rewriter.console import stop_on_signals
    from rewriter.errors import Terminated
    from rewriter.io.model import load_model, save_model

    out, count, *paths = sys.argv[1:]
    sources = [load_model(p) for p in paths]
    try:
        with stop_on_signals():
            print("ready", flush=True)
            i = 0
            while int(count) < 0 or i < int(count):
                loaded = sources[i % len(sources)]
                save_model(loaded.model, out, source=loaded)
                i += 1
    except Terminated as e:
        sys.exit(128 + e.signum)
    """)


def start_saver(out: Path, sources: list[Path], count: int = -1,
                tag: str | None = None) -> subprocess.Popen:
    """A process saving ``sources`` in turn to ``out`` (forever: count -1)."""
    env = tagged_env(tag or uuid.uuid4().hex)
    return subprocess.Popen(
        [sys.executable, "-c", SAVE_DRIVER, str(out), str(count), *map(str, sources)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, start_new_session=True)


def wait_ready(proc: subprocess.Popen) -> None:
    line = proc.stdout.readline()
    assert line.strip() == b"ready", (line, proc.stderr.read())


# ----------------------------------------------------------------------------- kills


class SaveKill:
    """One kill of a saver at a random point: its folder, sources and output."""

    def __init__(self, root: Path, sig: int, delay: float, n: int = 256) -> None:
        self.sig, self.delay = sig, delay
        self.a = write_source(root / "src_a", "A", n)
        self.b = write_source(root / "src_b", "B", n)
        self.out_dir = root / "out"
        self.out_dir.mkdir()
        self.out = self.out_dir / "model.onnx"
        loaded = load_model(self.a)
        save_model(loaded.model, self.out, source=loaded)  # the old pair
        self.proc = start_saver(self.out, [self.b, self.a])

    def kill(self) -> None:
        wait_ready(self.proc)
        time.sleep(self.delay)
        os.kill(self.proc.pid, self.sig)
        _, err = self.proc.communicate(timeout=60)
        self.rc, self.err = self.proc.returncode, err.decode(errors="replace")

    def check(self) -> str:
        """The checks every kill must pass; the pair found."""
        if self.sig == signal.SIGKILL:
            assert self.rc == -signal.SIGKILL, (self.rc, self.err)
        else:  # unwound as on Ctrl-C: exit 128 + signal, temp files removed
            assert self.rc in (128 + self.sig, 0), (self.rc, self.err)
            assert "Traceback" not in self.err, self.err
            assert temp_files(self.out_dir) == [], temp_files(self.out_dir)
        found = pair_of(self.out)
        assert found in PAIRS
        assert_clean_after_next_write(self.out, self.a)
        return found


SIGNALS = [signal.SIGTERM, signal.SIGHUP, signal.SIGKILL]


def test_kill_at_random_points_of_save_leaves_one_whole_pair(tmp_path):
    """TERM, HUP and KILL at a seeded random moment of a loop of saves (each a 256 KiB
    model with external data, the two pairs in turn): the old or the new pair, whole."""
    rng = random.Random(SEED)
    kills = [SaveKill(tmp_path / sig.name, sig, rng.uniform(0.0, 0.4)) for sig in SIGNALS]
    for kill in kills:  # the three run side by side
        kill.kill()
    for kill in kills:
        kill.check()


def test_next_write_removes_a_killed_writers_temp_files_and_orphans(tmp_path):
    """What a KILL between the data and the model leaves (a temp file, a data file no model
    names) is removed by the next write, and only that: another live writer's temp files
    and unrelated files stay."""
    a = write_source(tmp_path / "src_a", "A")
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    out = out_dir / "model.onnx"
    loaded = load_model(a)
    save_model(loaded.model, out, source=loaded)
    dead_pid = _unused_pid()
    stale = out_dir / f"{output_io.TEMP_PREFIX}{dead_pid}-x1{output_io.TEMP_SUFFIX}"
    stale.write_bytes(b"half a model")
    live = out_dir / f"{output_io.TEMP_PREFIX}{os.getpid()}-x2{output_io.TEMP_SUFFIX}"
    live.write_bytes(b"a live writer's file")
    orphan = out_dir / "model.onnx.7.data"
    orphan.write_bytes(b"\0" * 64)
    unrelated = out_dir / "notes.txt"
    unrelated.write_text("mine")
    save_model(loaded.model, out, source=loaded)
    assert not stale.exists() and not orphan.exists()
    assert live.exists() and unrelated.read_text() == "mine"
    live.unlink()
    assert data_files(out) == output_io.referenced_data(out)
    assert pair_of(out) == "A"


def test_interrupt_just_after_the_model_is_renamed_keeps_the_new_pair(tmp_path, monkeypatch):
    """A signal that lands right after the model's rename (before the save returns) must
    not remove the data the model now names (it did: the new model, its data deleted)."""
    a = write_source(tmp_path / "src_a", "A")
    b = write_source(tmp_path / "src_b", "B")
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    out = out_dir / "model.onnx"
    old = load_model(a)
    save_model(old.model, out, source=old)
    real_replace = os.replace

    def replace_then_interrupt(src, dst, *args, **kwargs):
        real_replace(src, dst, *args, **kwargs)
        if Path(dst) == out:
            raise KeyboardInterrupt

    monkeypatch.setattr(os, "replace", replace_then_interrupt)
    new = load_model(b)
    with pytest.raises(KeyboardInterrupt):
        save_model(new.model, out, source=new)
    monkeypatch.undo()
    assert pair_of(out) == "B"
    assert temp_files(out_dir) == []
    assert_clean_after_next_write(out, a)


def _unused_pid() -> int:
    """A process id no process has now."""
    pid = 2**22 - 1
    while True:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return pid
        except PermissionError:
            pass
        pid -= 1


HANG_PLUGIN = textwrap.dedent('''
    """A target whose runtime hangs in its kernel."""
    import time

    from rewriter import hookimpl
    from rewriter.detect.targets import Target


    class Hang(Target):
        name = "hang"

        def check_node(self, query):
            return None

        def run(self, model, base_dir, feeds):
            time.sleep(600)


    @hookimpl
    def register_targets(registry):
        registry.add("hang", lambda argument=None, options=None: Hang())
    ''')


@pytest.fixture(scope="module")
def hang_plugin(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("plugins") / "hang_target.py"
    path.write_text(HANG_PLUGIN)
    return path


def start_compare(folder: Path, model: Path, plugin: Path, tag: str) -> subprocess.Popen:
    """``compare`` of ``model`` with itself on the hanging target, saving its inputs."""
    argv = CLI + ["compare", str(model), str(model), "-t", "hang", "-p", str(plugin),
                  "--timeout", "600", "--save-inputs", str(folder / "inputs.npz")]
    env = tagged_env(tag)
    env["ONNX_REWRITER_DISABLE_PLUGIN_AUTOLOAD"] = "1"
    return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
                            cwd=folder, start_new_session=True)


def test_kill_during_compare_leaves_no_child_and_no_temp_file(tmp_path, hang_plugin):
    """TERM, HUP and KILL of ``compare`` while its worker runs a hanging kernel (at a
    seeded random moment after the worker started): the worker is gone a moment later
    (parent-death signal, or the worker's own watch of its parent), nothing half written."""
    rng = random.Random(SEED + 1)
    runs = []
    for sig in SIGNALS:
        folder = tmp_path / sig.name
        model = write_source(folder, "A", 16)
        tag = uuid.uuid4().hex
        runs.append((sig, folder, tag, start_compare(folder, model, hang_plugin, tag)))
    for sig, folder, tag, proc in runs:
        try:
            assert wait_for_child(proc, tag), proc.communicate(timeout=60)
            time.sleep(rng.uniform(0.0, 1.0))
            os.kill(proc.pid, sig)
            _, err = proc.communicate(timeout=60)
            err = err.decode(errors="replace")
            if sig == signal.SIGKILL:
                assert proc.returncode == -signal.SIGKILL
            else:
                assert proc.returncode == 128 + sig, (proc.returncode, err)
                assert f"terminated ({sig.name})" in err and "Traceback" not in err, err
        finally:
            left = wait_until_gone(tag)
        assert left == [], f"{sig.name}: processes left running: {left}"
        assert temp_files(folder) == []
        saved = folder / "inputs.npz"
        if saved.exists():  # written before the targets ran: whole
            assert set(np.load(saved).files) == {"X"}


# ----------------------------------------------------------------------------- OS refusals


def run_cli(argv: list[str], *, preexec=None, cwd: Path | None = None,
            timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(CLI + argv, capture_output=True, text=True, preexec_fn=preexec,
                          cwd=cwd, timeout=timeout, env=tagged_env(uuid.uuid4().hex))


def expect_one_line(proc: subprocess.CompletedProcess, *words: str) -> str:
    assert proc.returncode == 2, (proc.returncode, proc.stderr)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr
    assert "internal error" not in lines[0] and "Traceback" not in proc.stderr
    for word in words:
        assert word in lines[0], (word, lines[0])
    return lines[0]


def old_pair_folder(root: Path) -> tuple[Path, Path, dict[str, bytes]]:
    """An output folder holding pair A (the old output), the source of pair B (the new
    one, 1 MiB of weights) elsewhere, and the old folder's bytes."""
    a = write_source(root / "src_a", "A")
    b = write_source(root / "src_b", "B", 512)
    out_dir = root / "out"
    out_dir.mkdir()
    out = out_dir / "model.onnx"
    loaded = load_model(a)
    save_model(loaded.model, out, source=loaded)
    before = {n: (out_dir / n).read_bytes() for n in os.listdir(out_dir)}
    return out, b, before


REWRITE_B = ["rewrite", "-t", "opset:22", "--no-verify", "--no-confirm"]


def _file_limit(limit: int):
    def preexec() -> None:
        import resource

        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # EFBIG, not death
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    return preexec


def test_file_size_limit_names_the_reason_and_keeps_the_old_pair(tmp_path):
    """A write past RLIMIT_FSIZE (what a full disk looks like to the writer): one line,
    exit 2, the old pair untouched, nothing left."""
    out, b, before = old_pair_folder(tmp_path)
    proc = run_cli(REWRITE_B + [str(b), "-o", str(out)], preexec=_file_limit(512 * 1024))
    expect_one_line(proc, "file too large writing", str(out))
    assert {n: (out.parent / n).read_bytes() for n in os.listdir(out.parent)} == before
    assert pair_of(out) == "A"


def _can_unshare() -> str | None:
    """Why a private mount namespace cannot be used here (None: it can)."""
    if os.geteuid() != 0:
        return "not root"
    if shutil.which("unshare") is None or shutil.which("mount") is None:
        return "no unshare/mount command"
    probe = subprocess.run(["unshare", "-m", "--propagation", "private", "true"],
                           capture_output=True)
    if probe.returncode != 0:
        return f"unshare -m refused: {probe.stderr.decode(errors='replace').strip()}"
    return None


STATE = ("python3 -c 'import hashlib,json,os,sys; d=sys.argv[1]; print(json.dumps({n: "
         "hashlib.sha256(open(os.path.join(d,n),\"rb\").read()).hexdigest() "
         "for n in os.listdir(d)}))' ")


def in_namespace(setup: str, argv: list[str], folder: Path) -> tuple[subprocess.CompletedProcess,
                                                                    dict]:
    """Run the CLI after ``setup`` (shell) in a private mount namespace; its result, and
    the output folder's files (name -> sha256) as seen inside the namespace afterwards."""
    import shlex

    cli = " ".join(shlex.quote(a) for a in CLI + argv)
    script = (f"set -e\n{setup}\nset +e\n{cli} 2>&1 >/dev/null | tail -n 20 >&2\n"
              f"{STATE}{shlex.quote(str(folder))}\n")
    proc = subprocess.run(["unshare", "-m", "--propagation", "private", "sh", "-c", script],
                          capture_output=True, text=True, timeout=300,
                          env=tagged_env(uuid.uuid4().hex))
    state = json.loads(proc.stdout.strip().splitlines()[-1]) if proc.stdout.strip() else {}
    return proc, state


def _hashes(folder: Path) -> dict[str, str]:
    import hashlib

    return {n: hashlib.sha256((folder / n).read_bytes()).hexdigest() for n in os.listdir(folder)}


def test_full_disk_names_the_reason_and_keeps_the_old_pair(tmp_path):
    """A real ENOSPC: the output folder is a 1 MiB tmpfs holding the old pair (root, in a
    private mount namespace; the mount ends with it)."""
    why = _can_unshare()
    if why:
        pytest.skip(f"a tmpfs needs a private mount namespace: {why}")
    out, b, _ = old_pair_folder(tmp_path)
    stage = tmp_path / "stage"
    shutil.copytree(out.parent, stage)
    before = _hashes(stage)
    folder = out.parent
    setup = (f"mount -t tmpfs -o size=1m tmpfs {folder}\n"
             f"cp -p {stage}/* {folder}/")
    proc, state = in_namespace(setup, REWRITE_B + [str(b), "-o", str(out)], folder)
    line = proc.stderr.strip().splitlines()
    assert line and line[-1].startswith("error: no space left on device writing"), proc.stderr
    assert str(out) in line[-1] and len(line) == 1, proc.stderr
    assert state == before  # the old pair, nothing added
    assert _hashes(folder) == before  # and the real folder was never touched


def test_read_only_folder_names_the_reason_and_writes_nothing(tmp_path):
    """A read-only output folder: chmod for a normal user; as root (modes are ignored) a
    read-only bind mount in a private mount namespace."""
    out, b, before = old_pair_folder(tmp_path)
    folder = out.parent
    if os.geteuid() != 0:
        folder.chmod(0o555)
        try:
            proc = run_cli(REWRITE_B + [str(b), "-o", str(out)])
        finally:
            folder.chmod(0o755)
        expect_one_line(proc, "permission denied writing", str(out))
        assert {n: (folder / n).read_bytes() for n in os.listdir(folder)} == before
        return
    why = _can_unshare()
    if why:
        pytest.skip(f"root ignores modes, and a read-only bind mount needs a private mount "
                    f"namespace: {why}")
    hashes = _hashes(folder)
    setup = f"mount --bind {folder} {folder}\nmount -o remount,bind,ro {folder}"
    proc, state = in_namespace(setup, REWRITE_B + [str(b), "-o", str(out)], folder)
    line = proc.stderr.strip().splitlines()
    assert len(line) == 1 and line[0].startswith("error: read-only file system writing"), \
        proc.stderr
    assert str(out) in line[0]
    assert state == hashes and _hashes(folder) == hashes
    assert pair_of(out) == "A"


# ----------------------------------------------------------------------------- two writers


def test_two_writers_to_one_output_leave_one_whole_pair(tmp_path):
    """Two processes saving different pairs to one output, 12 times each, side by side:
    afterwards one whole pair, no orphan data file, no temp file."""
    a = write_source(tmp_path / "src_a", "A")
    b = write_source(tmp_path / "src_b", "B")
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    out = out_dir / "model.onnx"
    writers = [start_saver(out, [a], 12), start_saver(out, [b], 12)]
    for w in writers:
        wait_ready(w)
    for w in writers:
        _, err = w.communicate(timeout=240)
        assert w.returncode == 0, err.decode(errors="replace")
    assert pair_of(out) in PAIRS
    assert temp_files(out_dir) == []
    assert data_files(out) == output_io.referenced_data(out)


# ----------------------------------------------------------------------------- hangs

HANGING_BUILDER = textwrap.dedent('''
    """A decomposition builder that never returns."""
    import time

    from rewriter import hookimpl


    def forever(ctx):
        while True:
            time.sleep(3600)


    @hookimpl
    def register_decompositions(registry):
        registry.add("com.acme", "Stuck", forever, description="acme:Stuck")
    ''')


def test_a_builder_that_never_returns_is_stopped_by_its_time_limit(tmp_path, monkeypatch):
    """A plugin's builder past its time limit is that plugin's error (naming the plugin,
    the node and the limit); ``rewrite`` ends instead of hanging."""
    from rewriter.api import rewrite
    from rewriter.errors import PluginError
    from rewriter.manager import load_plugins
    from rewriter.plan import functions

    monkeypatch.setattr(functions, "BUILDER_TIME_LIMIT_S", 1.0)
    path = tmp_path / "stuck.py"
    path.write_text(HANGING_BUILDER)
    plugins = load_plugins([str(path)], autoload=False)
    graph = helper.make_graph(
        [helper.make_node("Stuck", ["X"], ["Y"], name="stuck", domain="com.acme")], "g",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, [3])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [3])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                    helper.make_opsetid("com.acme", 1)],
                              ir_version=8)
    start = time.monotonic()
    with pytest.raises(PluginError) as info:
        rewrite(model, ["reference"], plugins=plugins, confirm=False)
    assert time.monotonic() - start < 60
    text = str(info.value)
    assert "longer than 1s" in text and "'stuck'" in text and "\n" not in text, text


CRASHING_KERNEL = textwrap.dedent('''
    """A kernel for com.acme::Crash that crashes the process running it."""
    import ctypes

    from rewriter import hookimpl
    from rewriter.plugin import kernel


    @kernel(signatures=["float -> float"])
    def crash(x):
        ctypes.string_at(0)  # SIGSEGV
        return x


    @hookimpl
    def register_kernels(registry):
        registry.add("com.acme", "Crash", f"{__name__}:crash")
    ''')


def test_run_survives_a_crashing_kernel(tmp_path, capsys, monkeypatch):
    """``run`` executes kernels in the child runner ``compare`` uses: a segfaulting
    kernel is one error line (exit 2), not the end of the tool."""
    plugin = tmp_path / "crasher.py"
    plugin.write_text(CRASHING_KERNEL)
    graph = helper.make_graph(
        [helper.make_node("Crash", ["X"], ["Y"], name="crash", domain="com.acme")], "g",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, [3])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [3])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                    helper.make_opsetid("com.acme", 1)],
                              ir_version=8)
    from rewriter.api import rewrite
    from rewriter.manager import load_plugins

    out = tmp_path / "k.onnx"
    rewrite(model, ["onnxruntime"], output=out, prefer="kernel", verify=False, confirm=False,
            plugins=load_plugins([str(plugin)]))
    assert out.exists()
    # in this process: were the kernel run here, the crash would end the test run
    from rewriter.cli import main

    monkeypatch.setenv("COLUMNS", "1000")
    rc = main(["-p", str(plugin), "run", str(out), "-o", str(tmp_path / "y.npz")])
    _, err = capsys.readouterr()
    line = expect_one_line(subprocess.CompletedProcess([], rc, "", err), str(out))
    assert "SIGSEGV" in line or "crash" in line.lower(), line
    assert not (tmp_path / "y.npz").exists() and temp_files(tmp_path) == []


def test_a_memory_limit_too_small_for_the_worker_says_so(tmp_path, capsys, monkeypatch):
    """``--memory-limit 64``: the worker cannot even import onnxruntime under it; the error
    says the limit is too small (it showed an import failure of some shared library)."""
    from rewriter.cli import main

    monkeypatch.setenv("COLUMNS", "1000")
    graph = helper.make_graph(
        [helper.make_node("Relu", ["X"], ["Y"], name="relu")], "g",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, [3])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [3])])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                                ir_version=8), tmp_path / "relu.onnx")
    rc = main(["run", str(tmp_path / "relu.onnx"), "--memory-limit", "64"])
    _, err = capsys.readouterr()
    assert rc == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "memory limit of 64 MiB is too small" in lines[0], err
