"""Safe model I/O (rewriter.io) and the CLI's behaviour on hostile inputs.

Every hostile input must give exactly one ``error:`` line on stderr naming the file (and the
tensor or node at fault), exit code 2, no traceback, nothing written and the input untouched.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from rewriter.cli import main
from rewriter.errors import ExternalDataError, ModelError, OutputError, WriteError
from rewriter.io import model as rio

OPSET = [helper.make_opsetid("", 17)]
CLI = [sys.executable, "-c", "import sys; from rewriter.cli import main; sys.exit(main())"]
SCRIPT = Path(sys.executable).with_name("onnx-rewriter")
if SCRIPT.exists():  # the installed console script: the real thing users run
    CLI = [str(SCRIPT)]


# ----------------------------------------------------------------------------- helpers


def snapshot(root: Path) -> dict[str, tuple]:
    """Everything observable about a tree: names, kinds, inodes, mtimes and file bytes.

    Never opens anything but regular files, so FIFOs cannot block it.
    """
    result = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            full = os.path.join(dirpath, name)
            st = os.lstat(full)
            key = os.path.relpath(full, root)
            if stat.S_ISREG(st.st_mode):
                with open(full, "rb") as f:
                    digest = hashlib.sha256(f.read()).hexdigest()
                result[key] = ("file", st.st_ino, st.st_nlink, st.st_mtime_ns, digest)
            elif stat.S_ISLNK(st.st_mode):
                result[key] = ("link", os.readlink(full), st.st_mtime_ns)
            else:
                result[key] = (stat.S_IFMT(st.st_mode), st.st_ino, st.st_mtime_ns)
    return result


def set_external(
    tensor: TensorProto, location: str, *, offset: int | None = None, length: int | None = None
) -> None:
    """Point ``tensor`` at external data (drops any inline data)."""
    tensor.ClearField("raw_data")
    del tensor.float_data[:]
    del tensor.int64_data[:]
    del tensor.external_data[:]
    tensor.data_location = TensorProto.EXTERNAL
    fields = [("location", location)]
    if offset is not None:
        fields.append(("offset", str(offset)))
    if length is not None:
        fields.append(("length", str(length)))
    for key, value in fields:
        entry = tensor.external_data.add()
        entry.key = key
        entry.value = value


def write_at(path: Path, offset: int, data: bytes) -> None:
    mode = "r+b" if path.exists() else "wb"
    with open(path, mode) as f:
        f.seek(offset)
        f.write(data)


def save_proto(model: onnx.ModelProto, path: Path) -> Path:
    path.write_bytes(model.SerializeToString())
    return path


def vi(name: str, dtype: int, shape) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, dtype, shape)


K_VALUES = np.array([1.5, -2.0, 4.25], dtype=np.float32)


def matmul_model() -> onnx.ModelProto:
    """Y = X @ W + B with inline initializers."""
    w = numpy_helper.from_array(np.arange(6, dtype=np.float32).reshape(2, 3) / 7, "W")
    b = numpy_helper.from_array(np.array([0.5, -1.0, 2.0], dtype=np.float32), "B")
    graph = helper.make_graph(
        [
            helper.make_node("MatMul", ["X", "W"], ["XW"], name="matmul"),
            helper.make_node("Add", ["XW", "B"], ["Y"], name="add_bias"),
        ],
        "g",
        [vi("X", TensorProto.FLOAT, [1, 2])],
        [vi("Y", TensorProto.FLOAT, [1, 3])],
        [w, b],
    )
    return helper.make_model(graph, opset_imports=OPSET, ir_version=8, producer_name="tests")


# Four places an external tensor named "ext" can hide besides a top-level initializer.


def _site_if_branch() -> tuple[onnx.ModelProto, TensorProto]:
    ext = numpy_helper.from_array(K_VALUES, "ext")
    then_g = helper.make_graph(
        [helper.make_node("Add", ["X", "ext"], ["t_out"], name="then_add")],
        "then", [], [vi("t_out", TensorProto.FLOAT, [3])], [ext],
    )
    else_g = helper.make_graph(
        [helper.make_node("Identity", ["X"], ["e_out"], name="else_id")],
        "else", [], [vi("e_out", TensorProto.FLOAT, [3])],
    )
    graph = helper.make_graph(
        [helper.make_node("If", ["C"], ["Y"], name="branch", then_branch=then_g,
                          else_branch=else_g)],
        "g", [vi("X", TensorProto.FLOAT, [3]), vi("C", TensorProto.BOOL, [])],
        [vi("Y", TensorProto.FLOAT, [3])],
    )
    model = helper.make_model(graph, opset_imports=OPSET, ir_version=8)
    attr = model.graph.node[0].attribute
    then = next(a for a in attr if a.name == "then_branch").g
    return model, then.initializer[0]


def _site_constant_attr() -> tuple[onnx.ModelProto, TensorProto]:
    ext = numpy_helper.from_array(K_VALUES, "ext")
    graph = helper.make_graph(
        [
            helper.make_node("Constant", [], ["K"], name="const_k", value=ext),
            helper.make_node("Add", ["X", "K"], ["Y"], name="add_k"),
        ],
        "g", [vi("X", TensorProto.FLOAT, [3])], [vi("Y", TensorProto.FLOAT, [3])],
    )
    model = helper.make_model(graph, opset_imports=OPSET, ir_version=8)
    return model, model.graph.node[0].attribute[0].t


def _site_sparse_initializer() -> tuple[onnx.ModelProto, TensorProto]:
    values = numpy_helper.from_array(K_VALUES[:2], "ext")
    indices = numpy_helper.from_array(np.array([0, 2], dtype=np.int64), "ext_indices")
    sparse = helper.make_sparse_tensor(values, indices, [3])
    graph = helper.make_graph(
        [helper.make_node("Add", ["X", "ext"], ["Y"], name="add_sparse")],
        "g", [vi("X", TensorProto.FLOAT, [3])], [vi("Y", TensorProto.FLOAT, [3])],
        sparse_initializer=[sparse],
    )
    model = helper.make_model(graph, opset_imports=OPSET, ir_version=8)
    return model, model.graph.sparse_initializer[0].values


def _site_function_constant() -> tuple[onnx.ModelProto, TensorProto]:
    ext = numpy_helper.from_array(K_VALUES, "ext")
    func = helper.make_function(
        "local", "AddK", ["x"], ["y"],
        [
            helper.make_node("Constant", [], ["k"], name="fn_const", value=ext),
            helper.make_node("Add", ["x", "k"], ["y"], name="fn_add"),
        ],
        OPSET,
    )
    graph = helper.make_graph(
        [helper.make_node("AddK", ["X"], ["Y"], name="call", domain="local")],
        "g", [vi("X", TensorProto.FLOAT, [3])], [vi("Y", TensorProto.FLOAT, [3])],
    )
    model = helper.make_model(
        graph, opset_imports=OPSET + [helper.make_opsetid("local", 1)], ir_version=8,
        functions=[func],
    )
    return model, model.functions[0].node[0].attribute[0].t


SITES: dict[str, Callable[[], tuple[onnx.ModelProto, TensorProto]]] = {
    "if-branch initializer": _site_if_branch,
    "Constant value attribute": _site_constant_attr,
    "sparse initializer": _site_sparse_initializer,
    "function Constant": _site_function_constant,
}


class Hostile:
    """A model folder plus the rest of the tree it lives in (all snapshotted)."""

    def __init__(self, tmp_path: Path) -> None:
        self.root = tmp_path
        self.dir = tmp_path / "model"
        self.dir.mkdir()
        self.outside = tmp_path / "outside"
        self.outside.mkdir()
        self.model = self.dir / "model.onnx"


def _ext_tensor_model(site: str, h: Hostile, prepare) -> Path:
    """Build the model for ``site`` and let ``prepare`` place its data and set its fields."""
    model, tensor = SITES[site]()
    data = tensor.raw_data
    assert data, "site tensors are built with raw_data"
    prepare(h, tensor, data)
    return save_proto(model, h.model)


# Each unsafe variant: (prepare, words the error must contain). ``prepare`` writes files and
# points the tensor somewhere; the model folder is h.dir.


def _safe(h, t, data):
    write_at(h.dir / "w.bin", 0, data)
    set_external(t, "w.bin", offset=0, length=len(data))


def _dotdot(h, t, data):
    write_at(h.outside / "w.bin", 0, data)
    set_external(t, "../outside/w.bin", offset=0, length=len(data))


def _dotdot_inner(h, t, data):
    (h.dir / "sub").mkdir()
    write_at(h.dir / "w.bin", 0, data)
    set_external(t, "sub/../w.bin", length=len(data))


def _absolute(h, t, data):
    write_at(h.dir / "w.bin", 0, data)  # even an absolute path *inside* the folder is refused
    set_external(t, str(h.dir / "w.bin"), length=len(data))


def _symlink(h, t, data):
    write_at(h.outside / "real.bin", 0, data)
    os.symlink(h.outside / "real.bin", h.dir / "w.bin")
    set_external(t, "w.bin", length=len(data))


def _symlink_inside(h, t, data):
    write_at(h.dir / "real.bin", 0, data)
    os.symlink("real.bin", h.dir / "w.bin")
    set_external(t, "w.bin", length=len(data))


def _symlinked_dir(h, t, data):
    write_at(h.outside / "w.bin", 0, data)
    os.symlink(h.outside, h.dir / "sub")
    set_external(t, "sub/w.bin", length=len(data))


def _hardlink(h, t, data):
    write_at(h.outside / "real.bin", 0, data)
    os.link(h.outside / "real.bin", h.dir / "w.bin")
    set_external(t, "w.bin", length=len(data))


def _offset_past_end(h, t, data):
    write_at(h.dir / "w.bin", 0, data)
    set_external(t, "w.bin", offset=len(data) + 8, length=len(data))


def _offset_past_end_no_length(h, t, data):
    write_at(h.dir / "w.bin", 0, data)
    set_external(t, "w.bin", offset=4096)


def _length_past_end(h, t, data):
    write_at(h.dir / "w.bin", 0, data)
    set_external(t, "w.bin", offset=0, length=len(data) + 1000)


def _missing(h, t, data):
    set_external(t, "w.bin", length=len(data))


def _fifo(h, t, data):
    os.mkfifo(h.dir / "w.bin")
    set_external(t, "w.bin", length=len(data))


def _directory(h, t, data):
    (h.dir / "w.bin").mkdir()
    set_external(t, "w.bin", length=len(data))


def _no_location(h, t, data):
    write_at(h.dir / "w.bin", 0, data)
    set_external(t, "", length=len(data))


UNSAFE = {
    "dotdot": (_dotdot, ["'..'", "../outside/w.bin"]),
    "dotdot-inside": (_dotdot_inner, ["'..'"]),
    "absolute": (_absolute, ["absolute path"]),
    "symlink": (_symlink, ["symlink", "'w.bin'"]),
    "symlink-inside": (_symlink_inside, ["symlink"]),
    "symlinked-dir": (_symlinked_dir, ["outside the model's folder"]),
    "hardlink": (_hardlink, ["hard link", "'w.bin'"]),
    "offset-past-end": (_offset_past_end, ["past the end", "offset "]),
    "offset-past-end-no-length": (_offset_past_end_no_length, ["past the end"]),
    "length-past-end": (_length_past_end, ["past the end", "length "]),
    "missing": (_missing, ["missing", "'w.bin'"]),
    "fifo": (_fifo, ["not a regular file"]),
    "directory": (_directory, ["not a regular file"]),
    "no-location": (_no_location, ["no 'location'"]),
}


def expect_one_error_line(capsys, argv: list[str], model: Path, *words: str) -> str:
    """Run the CLI in-process; assert exit 2 and exactly one well-formed error line."""
    rc = main(argv)
    out, err = capsys.readouterr()
    assert rc == 2, (rc, out, err)
    lines = err.splitlines()
    assert len(lines) == 1, err
    line = lines[0]
    assert line.startswith("error: "), line
    assert "internal error" not in line and "Traceback" not in err, line
    assert str(model) in line, line
    for word in words:
        assert word in line, (word, line)
    assert out == "", out
    return line


@pytest.fixture
def h(tmp_path: Path) -> Hostile:
    return Hostile(tmp_path)


@pytest.fixture(params=["check", "inspect"])
def command(request) -> str:
    return request.param


# ----------------------------------------------------------------------------- hostile: CLI


def test_baseline_models_are_accepted(h, capsys):
    """The fixtures themselves are valid, so each hostile variant fails for its own reason."""
    save_proto(matmul_model(), h.model)
    assert main(["inspect", "--json", str(h.model)]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["nodes"] == 2 and info["external_data"] == []
    for site in SITES:
        _empty_folder(h.dir)
        _ext_tensor_model(site, h, _safe)
        loaded = rio.load_model(h.model)
        assert list(loaded.external_files) == ["w.bin"], site
        assert loaded.external_files["w.bin"].tensors == 1
        assert main(["inspect", "--json", str(h.model)]) == 0, site
        info = json.loads(capsys.readouterr().out)
        size = (h.dir / "w.bin").stat().st_size
        assert size in (8, 12)  # 3 floats, or the 2 values of the sparse tensor
        assert info["external_data"] == [{"location": "w.bin", "size": size, "tensors": 1}]


def _empty_folder(folder: Path) -> None:
    for child in folder.iterdir():
        if child.is_dir() and not child.is_symlink():
            shutil.rmtree(child)
        else:
            child.unlink()


def _hostile_file(kind: str, h: Hostile) -> tuple[Path, list[str]]:
    """Write a hostile model file of ``kind``; return its path and words the error must have."""
    path = h.model
    if kind == "empty":
        path.write_bytes(b"")
        return path, ["empty file"]
    if kind == "random":
        path.write_bytes(np.random.default_rng(1234).bytes(4096))
        return path, ["not an ONNX model"]
    if kind == "truncated":
        data = matmul_model().SerializeToString()
        path.write_bytes(data[: len(data) // 2])
        return path, ["not an ONNX model"]
    if kind == "truncated-after-graph":  # cut exactly between two protobuf fields
        model = matmul_model()
        data = model.SerializeToString()
        del model.opset_import[:]
        prefix = model.SerializeToString()
        assert data.startswith(prefix) and len(prefix) < len(data)
        path.write_bytes(prefix)
        return path, ["not an ONNX model", "opset"]
    if kind == "text":
        path.write_text("this is not a model\n")
        return path, ["not an ONNX model"]
    if kind == "cycle":
        graph = helper.make_graph(
            [
                helper.make_node("Add", ["X", "b"], ["a"], name="first"),
                helper.make_node("Relu", ["a"], ["b"], name="second"),
                helper.make_node("Identity", ["a"], ["Y"], name="out"),
            ],
            "g", [vi("X", TensorProto.FLOAT, [3])], [vi("Y", TensorProto.FLOAT, [3])],
        )
        save_proto(helper.make_model(graph, opset_imports=OPSET, ir_version=8), path)
        return path, ["cycle", "first", "second"]
    if kind == "undefined-input":
        graph = helper.make_graph(
            [helper.make_node("Add", ["X", "nowhere"], ["Y"], name="adder")],
            "g", [vi("X", TensorProto.FLOAT, [3])], [vi("Y", TensorProto.FLOAT, [3])],
        )
        save_proto(helper.make_model(graph, opset_imports=OPSET, ir_version=8), path)
        return path, ["'nowhere'", "adder", "not defined"]
    if kind == "fifo":
        os.mkfifo(path)
        return path, ["FIFO"]
    if kind == "directory":
        path.mkdir()
        return path, ["directory"]
    if kind == "nonexistent":
        return path, ["no such file"]
    raise AssertionError(kind)


HOSTILE_FILES = [
    "empty", "random", "truncated", "truncated-after-graph", "text", "cycle", "undefined-input",
    "fifo", "directory", "nonexistent",
]


@pytest.mark.parametrize("kind", [k for k in HOSTILE_FILES if k != "fifo"])
def test_hostile_model_file(kind, command, h, capsys):
    path, words = _hostile_file(kind, h)
    before = snapshot(h.root)
    expect_one_error_line(capsys, [command, str(path)], path, *words)
    assert snapshot(h.root) == before


@pytest.mark.parametrize("variant", sorted(UNSAFE))
def test_unsafe_external_initializer(variant, command, h, capsys):
    prepare, words = UNSAFE[variant]
    model = matmul_model()
    w = model.graph.initializer[0]
    prepare(h, w, w.raw_data)
    save_proto(model, h.model)
    before = snapshot(h.root)
    expect_one_error_line(capsys, [command, str(h.model)], h.model, "'W'", *words)
    assert snapshot(h.root) == before


@pytest.mark.parametrize("variant", sorted(UNSAFE))
@pytest.mark.parametrize("site", sorted(SITES))
def test_unsafe_external_data_in_nested_sites(site, variant, command, h, capsys):
    prepare, words = UNSAFE[variant]
    path = _ext_tensor_model(site, h, prepare)
    before = snapshot(h.root)
    with pytest.raises(ExternalDataError) as info:
        rio.load_model(path)
    assert "'ext'" in str(info.value) and str(path) in str(info.value)
    expect_one_error_line(capsys, [command, str(path)], path, "'ext'", *words)
    assert snapshot(h.root) == before


def test_every_truncation_of_a_model_is_rejected(h):
    """Cutting a model anywhere (even between protobuf fields) must not load as a model."""
    data = matmul_model().SerializeToString()
    for n in range(len(data)):
        h.model.write_bytes(data[:n])
        with pytest.raises(ModelError) as info:
            rio.load_model(h.model)
        assert str(h.model) in str(info.value), n
        assert "\n" not in str(info.value)
    h.model.write_bytes(data)
    assert rio.load_model(h.model).model.graph.node[1].name == "add_bias"


def test_random_bytes_never_load(h):
    rng = np.random.default_rng(7)
    for size in (1, 2, 3, 16, 255, 4096, 65536):
        h.model.write_bytes(rng.bytes(size))
        with pytest.raises(ModelError):
            rio.load_model(h.model)


def test_errors_in_subgraph_name_the_path(h):
    then_g = helper.make_graph(
        [helper.make_node("Add", ["X", "ghost"], ["t_out"], name="inner_add")],
        "then", [], [vi("t_out", TensorProto.FLOAT, [3])],
    )
    else_g = helper.make_graph(
        [helper.make_node("Identity", ["X"], ["e_out"])], "else", [],
        [vi("e_out", TensorProto.FLOAT, [3])],
    )
    graph = helper.make_graph(
        [helper.make_node("If", ["C"], ["Y"], name="branch", then_branch=then_g,
                          else_branch=else_g)],
        "g", [vi("X", TensorProto.FLOAT, [3]), vi("C", TensorProto.BOOL, [])],
        [vi("Y", TensorProto.FLOAT, [3])],
    )
    save_proto(helper.make_model(graph, opset_imports=OPSET, ir_version=8), h.model)
    with pytest.raises(ModelError) as info:
        rio.load_model(h.model)
    assert "then_branch" in str(info.value) and "'ghost'" in str(info.value)


def test_control_characters_in_names_keep_the_error_on_one_line(h, capsys):
    graph = helper.make_graph(
        [helper.make_node("Add", ["X", "nope"], ["Y"], name="evil\nname")],
        "g", [vi("X", TensorProto.FLOAT, [3])], [vi("Y", TensorProto.FLOAT, [3])],
    )
    save_proto(helper.make_model(graph, opset_imports=OPSET, ir_version=8), h.model)
    expect_one_error_line(capsys, ["check", str(h.model)], h.model, "'nope'")


def test_input_from_outer_scope_is_accepted(h):
    model, _ = _site_if_branch()  # the then-branch reads X from the outer graph
    save_proto(model, h.model)
    assert rio.load_model(h.model).model.graph.node[0].op_type == "If"


def _run_cli(args: list[str], timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run(
        CLI + args, capture_output=True, text=True, timeout=timeout
    )


@pytest.mark.parametrize("cmd", ["check", "inspect"])
def test_real_cli_fifo_does_not_hang(cmd, h):
    path, _ = _hostile_file("fifo", h)
    before = snapshot(h.root)
    proc = _run_cli([cmd, str(path)], timeout=30)
    assert proc.returncode == 2, proc
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr
    assert str(path) in lines[0] and "FIFO" in lines[0]
    assert proc.stdout == ""
    assert snapshot(h.root) == before


def test_real_cli_external_data_escape(h):
    model = matmul_model()
    w = model.graph.initializer[0]
    _dotdot(h, w, w.raw_data)
    save_proto(model, h.model)
    before = snapshot(h.root)
    proc = _run_cli(["check", str(h.model)])
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert proc.stderr.count("\n") == 1 and proc.stderr.startswith("error: ")
    assert str(h.model) in proc.stderr and "'W'" in proc.stderr and "'..'" in proc.stderr
    assert snapshot(h.root) == before


# ----------------------------------------------------------------------------- loading weights

BIG = 64 * 1024 * 1024


def big_external_model(folder: Path, size: int = BIG) -> Path:
    """A model whose only initializer is ``size`` bytes in a sparse external file."""
    big = TensorProto(name="big", data_type=TensorProto.FLOAT, dims=[size // 4])
    set_external(big, "big.bin", offset=0, length=size)
    with open(folder / "big.bin", "wb") as f:
        f.truncate(size)
    graph = helper.make_graph(
        [helper.make_node("Shape", ["big"], ["Y"], name="shape_of_big")],
        "g", [], [vi("Y", TensorProto.INT64, [1])], [big],
    )
    return save_proto(helper.make_model(graph, opset_imports=OPSET, ir_version=8),
                      folder / "big.onnx")


def test_load_and_inspect_do_not_read_external_data(tmp_path, monkeypatch, capsys):
    path = big_external_model(tmp_path)
    data_file = str(tmp_path / "big.bin")
    opened: list[str] = []
    real_open, real_os_open = open, os.open

    def spy_open(file, *a, **k):
        opened.append(os.path.abspath(os.fspath(file)) if not isinstance(file, int) else "")
        return real_open(file, *a, **k)

    def spy_os_open(file, *a, **k):
        opened.append(os.path.abspath(os.fspath(file)))
        return real_os_open(file, *a, **k)

    monkeypatch.setattr("builtins.open", spy_open)
    monkeypatch.setattr(os, "open", spy_os_open)

    tracemalloc.start()
    try:
        loaded = rio.load_model(path)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 4 * 1024 * 1024, peak
    tensor = loaded.model.graph.initializer[0]
    assert tensor.raw_data == b"" and tensor.data_location == TensorProto.EXTERNAL
    assert loaded.external_files["big.bin"].size == BIG
    assert loaded.external_files["big.bin"].referenced_bytes == BIG

    assert main(["inspect", "--json", str(path)]) == 0
    info = json.loads(capsys.readouterr().out)
    assert data_file not in opened, "the external data file was opened"
    assert str(path) in opened, "the spy saw nothing: it is not watching the right calls"
    assert info["external_data"] == [{"location": "big.bin", "size": BIG, "tensors": 1}]
    assert info["tensors"] == {"count": 1, "bytes": BIG, "external_bytes": BIG}
    assert info["file_size"] == path.stat().st_size < 1024


def _maxrss_kib(args: list[str], timeout: float = 60) -> tuple[int, int, str, str]:
    """Run the CLI; return (exit code, child's peak RSS in KiB, stdout, stderr)."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(CLI + args, stdout=out, stderr=err)
        deadline = time.monotonic() + timeout
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            if time.monotonic() > deadline:
                proc.kill()
                os.wait4(proc.pid, 0)
                proc.returncode = -9
                pytest.fail(f"{args} timed out")
            time.sleep(0.01)
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        return proc.returncode, usage.ru_maxrss, out.read().decode(), err.read().decode()


def test_real_cli_inspect_big_external_data_peak_rss(tmp_path):
    """``inspect`` of a model with 256 MiB of weights costs about as much memory as a tiny one."""
    size = 256 * 1024 * 1024
    (tmp_path / "small").mkdir()
    (tmp_path / "large").mkdir()
    small = big_external_model(tmp_path / "small", 4096)
    large = big_external_model(tmp_path / "large", size)
    rc_s, rss_s, _, err_s = _maxrss_kib(["inspect", "--json", str(small)])
    rc_l, rss_l, out_l, err_l = _maxrss_kib(["inspect", "--json", str(large)])
    assert (rc_s, rc_l) == (0, 0), (err_s, err_l)
    assert "Traceback" not in err_l
    info = json.loads(out_l)
    assert info["external_data"] == [{"location": "big.bin", "size": size, "tensors": 1}]
    assert info["tensors"]["external_bytes"] == size
    growth_mib = (rss_l - rss_s) / 1024
    assert growth_mib < 32, f"peak RSS grew by {growth_mib:.0f} MiB for a 256 MiB data file"


def test_read_external_tensor_reads_only_its_bytes(h):
    model = matmul_model()
    w, b = model.graph.initializer
    wv, bv = numpy_helper.to_array(w), numpy_helper.to_array(b)
    write_at(h.dir / "w.bin", 0, b"\xff" * 7)  # junk before, between and after
    write_at(h.dir / "w.bin", 7, w.raw_data)
    write_at(h.dir / "w.bin", 7 + len(w.raw_data) + 5, b.raw_data + b"\xee" * 9)
    set_external(w, "w.bin", offset=7, length=24)
    set_external(b, "w.bin", offset=7 + 24 + 5, length=12)
    save_proto(model, h.model)
    loaded = rio.load_model(h.model)
    got_w, got_b = (rio.read_external_tensor(loaded, t) for t in loaded.model.graph.initializer)
    np.testing.assert_array_equal(got_w, wv)
    np.testing.assert_array_equal(got_b, bv)
    assert loaded.external_files["w.bin"].tensors == 2
    assert loaded.external_files["w.bin"].referenced_bytes == 36


def test_short_length_for_shape_is_rejected(h):
    model = matmul_model()
    w = model.graph.initializer[0]
    write_at(h.dir / "w.bin", 0, w.raw_data)
    set_external(w, "w.bin", offset=0, length=8)
    save_proto(model, h.model)
    with pytest.raises(ExternalDataError, match="shorter than the 24 bytes"):
        rio.load_model(h.model)


@pytest.mark.parametrize("offset,length", [("-4", "24"), ("0", "-1"), ("x", "24"), ("0", "1e3")])
def test_bad_offset_or_length_fields(offset, length, h):
    model = matmul_model()
    w = model.graph.initializer[0]
    write_at(h.dir / "w.bin", 0, w.raw_data)
    set_external(w, "w.bin")
    for key, value in (("offset", offset), ("length", length)):
        e = w.external_data.add()
        e.key, e.value = key, value
    save_proto(model, h.model)
    with pytest.raises(ExternalDataError, match="'W'"):
        rio.load_model(h.model)


# ----------------------------------------------------------------------------- save


def external_matmul(folder: Path, files: int = 1) -> Path:
    """matmul_model with W and B in external data (one shared file, or one file each)."""
    model = matmul_model()
    w, b = model.graph.initializer
    if files == 1:
        write_at(folder / "weights.bin", 0, w.raw_data)
        write_at(folder / "weights.bin", 32, b.raw_data)  # an aligned, non-zero offset
        set_external(w, "weights.bin", offset=0, length=24)
        set_external(b, "weights.bin", offset=32, length=12)
    else:
        write_at(folder / "w.bin", 0, w.raw_data)
        write_at(folder / "b.bin", 0, b.raw_data)
        set_external(w, "w.bin", offset=0, length=24)
        set_external(b, "b.bin")
    return save_proto(model, folder / "model.onnx")


def run_ort(path: Path) -> np.ndarray:
    import onnxruntime as ort

    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    x = np.array([[1.25, -3.0]], dtype=np.float32)
    return session.run(None, {"X": x})[0]


def locations(model: onnx.ModelProto) -> list[str]:
    return [rio.external_data_fields(t).get("location") for t in model.graph.initializer]


def temp_leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.endswith(".tmp"))


@pytest.mark.parametrize("files", [1, 2])
def test_save_copies_external_data_and_round_trips(files, h):
    src = external_matmul(h.dir, files)
    expected = run_ort(src)
    np.testing.assert_allclose(
        expected, np.array([[1.25, -3.0]], np.float32) @ numpy_helper.to_array(
            matmul_model().graph.initializer[0]) + np.array([0.5, -1.0, 2.0], np.float32),
        rtol=1e-5,
    )
    before_src = snapshot(h.dir)
    out_dir = h.root / "out"
    out_dir.mkdir()
    loaded = rio.load_model(src)
    out = rio.save_model(loaded.model, out_dir / "saved.onnx", source=loaded)

    assert out == out_dir / "saved.onnx"
    names = ["saved.onnx.data"] if files == 1 else ["saved.onnx.0.data", "saved.onnx.1.data"]
    assert sorted(p.name for p in out_dir.iterdir()) == sorted(["saved.onnx", *names])
    assert snapshot(h.dir) == before_src, "the source folder changed"
    assert sorted(p.name for p in h.root.iterdir()) == ["model", "out", "outside"]
    assert loaded.model.graph.initializer[0].external_data[0].value != names[0], (
        "save_model modified the caller's model in place"
    )

    saved = onnx.load(str(out))  # onnx resolves and reads the copied data
    onnx.checker.check_model(str(out))
    assert sorted(set(locations(onnx.load(str(out), load_external_data=False)))) == names
    for a, b in zip(saved.graph.initializer, matmul_model().graph.initializer, strict=True):
        np.testing.assert_array_equal(numpy_helper.to_array(a), numpy_helper.to_array(b))
    np.testing.assert_array_equal(run_ort(out), expected)
    reloaded = rio.load_model(out)
    assert sorted(reloaded.external_files) == names


def test_save_inline_model_writes_one_file(h):
    save_proto(matmul_model(), h.model)
    loaded = rio.load_model(h.model)
    out = rio.save_model(loaded.model, h.root / "out.onnx", source=loaded)
    assert out.read_bytes() == h.model.read_bytes()
    assert sorted(p.name for p in h.root.iterdir()) == ["model", "out.onnx", "outside"]
    np.testing.assert_array_equal(run_ort(out), run_ort(h.model))


def test_save_refuses_to_overwrite_input(h):
    src = external_matmul(h.dir)
    loaded = rio.load_model(src)
    os.symlink(src, h.root / "alias.onnx")
    os.link(src, h.root / "hard.onnx")
    before = snapshot(h.root)
    for target in (src, h.dir / "." / "model.onnx", h.root / "alias.onnx", h.root / "hard.onnx"):
        with pytest.raises(OutputError, match="input model"):
            rio.save_model(loaded.model, target, source=loaded)
    assert snapshot(h.root) == before


def test_save_refuses_to_overwrite_input_external_data(h):
    src = external_matmul(h.dir)
    expected = run_ort(src)
    loaded = rio.load_model(src)
    before = snapshot(h.root)
    for in_place in (False, True):
        with pytest.raises(OutputError, match="external data"):
            rio.save_model(loaded.model, h.dir / "weights.bin", source=loaded, in_place=in_place)
    assert snapshot(h.root) == before
    np.testing.assert_array_equal(run_ort(src), expected)


def test_save_data_file_never_replaces_the_input_model(h):
    """Input ``x.onnx.data`` saved as ``x.onnx``: the tool's usual data name is the input
    itself, so the data takes the next free name and the input is untouched."""
    external_matmul(h.dir)
    src = h.dir / "x.onnx.data"
    os.rename(h.model, src)
    loaded = rio.load_model(src)
    before = snapshot(h.root)
    out = rio.save_model(loaded.model, h.dir / "x.onnx", source=loaded)
    after = snapshot(h.root)
    assert {k: v for k, v in after.items() if k in before and k != "model"} == \
        {k: v for k, v in before.items() if k != "model"}  # the folder's mtime changes
    assert sorted(set(after) - set(before)) == ["model/x.onnx", "model/x.onnx.1.data"]
    np.testing.assert_array_equal(run_ort(out), run_ort(src))


def test_save_in_place(h):
    src = external_matmul(h.dir)
    expected = run_ort(src)
    loaded = rio.load_model(src)
    weights_before = snapshot(h.dir)["weights.bin"]
    loaded.model.producer_name = "rewritten"
    out = rio.save_model(loaded.model, src, source=loaded, in_place=True)
    assert out == src
    assert sorted(p.name for p in h.dir.iterdir()) == ["model.onnx", "weights.bin"]
    assert snapshot(h.dir)["weights.bin"] == weights_before
    assert onnx.load(str(src), load_external_data=False).producer_name == "rewritten"
    assert locations(onnx.load(str(src), load_external_data=False)) == ["weights.bin"] * 2
    np.testing.assert_array_equal(run_ort(src), expected)


def test_save_refuses_missing_folder_and_non_files(h):
    src = external_matmul(h.dir)
    loaded = rio.load_model(src)
    (h.root / "adir").mkdir()
    os.symlink(h.root / "outside" / "target.onnx", h.root / "dangling.onnx")
    before = snapshot(h.root)
    with pytest.raises(OutputError, match="does not exist"):
        rio.save_model(loaded.model, h.root / "nope" / "out.onnx", source=loaded)
    with pytest.raises(OutputError, match="not a regular file"):
        rio.save_model(loaded.model, h.root / "adir", source=loaded)
    with pytest.raises(OutputError, match="symlink"):
        rio.save_model(loaded.model, h.root / "dangling.onnx", source=loaded)
    assert snapshot(h.root) == before
    assert not (h.root / "nope").exists()


def test_save_external_data_needs_a_validated_source(h):
    src = external_matmul(h.dir)
    unvalidated = rio.load_model(src, validate=False)
    before = snapshot(h.root)
    with pytest.raises(OutputError):
        rio.save_model(unvalidated.model, h.root / "out.onnx", source=unvalidated)
    with pytest.raises(OutputError):
        rio.save_model(unvalidated.model, h.root / "out.onnx")
    assert snapshot(h.root) == before


def test_save_never_writes_outside_the_output_folder(h):
    src = external_matmul(h.dir)
    loaded = rio.load_model(src)
    deep = h.root / "a" / "b"
    deep.mkdir(parents=True)
    before = snapshot(h.root)
    rio.save_model(loaded.model, deep / ".." / "b" / "m.onnx", source=loaded)
    after = snapshot(h.root)
    new = sorted(set(after) - set(before))
    assert new == [os.path.join("a", "b", "m.onnx"), os.path.join("a", "b", "m.onnx.data")]
    assert {k: v for k, v in after.items() if k in before and not k.startswith("a")} == {
        k: v for k, v in before.items() if not k.startswith("a")
    }


def test_save_overwrites_a_previous_output_atomically(h):
    src = external_matmul(h.dir)
    loaded = rio.load_model(src)
    out = h.root / "out.onnx"
    out.write_bytes(b"old output")  # not a model: its files are not the tool's to remove
    (h.root / "out.onnx.data").write_bytes(b"old data")
    old_inode = out.stat().st_ino
    rio.save_model(loaded.model, out, source=loaded)
    assert out.stat().st_ino != old_inode  # replaced by rename, not rewritten in place
    assert (h.root / "out.onnx.data").read_bytes() == b"old data"
    assert locations(onnx.load(str(out), load_external_data=False)) == ["out.onnx.1.data"] * 2
    assert (h.root / "out.onnx.1.data").read_bytes() == (h.dir / "weights.bin").read_bytes()
    np.testing.assert_array_equal(run_ort(out), run_ort(src))
    assert temp_leftovers(h.root) == []


def test_save_replaces_model_and_data_as_one_unit(h):
    """A second save writes its data under a new name, puts the model naming it in place,
    then removes the data only the old model named: never the old model with new data."""
    src = external_matmul(h.dir)
    loaded = rio.load_model(src)
    out = h.root / "out.onnx"
    rio.save_model(loaded.model, out, source=loaded)
    assert locations(onnx.load(str(out), load_external_data=False)) == ["out.onnx.data"] * 2
    loaded.model.producer_name = "second"
    rio.save_model(loaded.model, out, source=loaded)
    second = onnx.load(str(out), load_external_data=False)
    assert second.producer_name == "second"
    assert locations(second) == ["out.onnx.1.data"] * 2
    assert sorted(p.name for p in h.root.iterdir()) == [
        "model", "out.onnx", "out.onnx.1.data", "outside"]
    loaded.model.producer_name = "third"
    rio.save_model(loaded.model, out, source=loaded)
    assert locations(onnx.load(str(out), load_external_data=False)) == ["out.onnx.data"] * 2
    assert sorted(p.name for p in h.root.iterdir()) == [
        "model", "out.onnx", "out.onnx.data", "outside"]
    np.testing.assert_array_equal(run_ort(out), run_ort(src))


def test_save_failure_in_serialization_writes_nothing(h, monkeypatch):
    src = external_matmul(h.dir)
    loaded = rio.load_model(src)
    out_dir = h.root / "out"
    out_dir.mkdir()
    real = rio._with_locations

    class Unserializable:
        def __init__(self, model):
            self.model = model

        def __getattr__(self, name):
            return getattr(self.model, name)

        def SerializeToString(self):  # noqa: N802 - protobuf's name
            raise ValueError("Message onnx.ModelProto exceeds maximum protobuf size of 2GB")

    monkeypatch.setattr(rio, "_with_locations", lambda m, r: Unserializable(real(m, r)))
    with pytest.raises(ValueError, match="2GB"):
        rio.save_model(loaded.model, out_dir / "saved.onnx", source=loaded)
    assert list(out_dir.iterdir()) == []


def test_save_failure_while_copying_data_leaves_no_files(h, monkeypatch):
    src = external_matmul(h.dir, files=2)
    loaded = rio.load_model(src)
    out_dir = h.root / "out"
    out_dir.mkdir()
    calls = []
    from rewriter.io import output as rout

    real_copy = rout._copy_into

    def failing_copy(src_path, f):
        calls.append(src_path)
        if len(calls) == 2:  # the second data file fails half-way
            f.write(b"partial")
            raise OSError(28, "No space left on device")
        real_copy(src_path, f)

    monkeypatch.setattr(rout, "_copy_into", failing_copy)
    before = snapshot(h.dir)
    with pytest.raises(WriteError, match=f"no space left on device writing {out_dir}"):
        rio.save_model(loaded.model, out_dir / "saved.onnx", source=loaded)
    assert len(calls) == 2
    assert list(out_dir.iterdir()) == []  # no temp file, no first data file, no model
    assert snapshot(h.dir) == before


def test_save_failure_while_writing_model_leaves_no_temp_file(h, monkeypatch):
    save_proto(matmul_model(), h.model)
    loaded = rio.load_model(h.model)
    out = h.root / "out.onnx"
    out.write_bytes(b"previous output")

    def no_fsync(fd):
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(os, "fsync", no_fsync)
    with pytest.raises(WriteError, match=f"input/output error writing {out}"):
        rio.save_model(loaded.model, out, source=loaded)
    assert out.read_bytes() == b"previous output"
    assert temp_leftovers(h.root) == []
    assert sorted(p.name for p in h.root.iterdir()) == ["model", "out.onnx", "outside"]


def test_data_file_names():
    out = Path("/x/y/model.onnx")
    assert rio.data_file_names(out, 1) == ["model.onnx.data"]
    assert rio.data_file_names(out, 3) == [
        "model.onnx.0.data", "model.onnx.1.data", "model.onnx.2.data"
    ]


def test_external_tensor_with_negative_dimension_is_refused(tmp_path, capsys):
    from rewriter.cli import main

    (tmp_path / "w.bin").write_bytes(b"\0" * 64)
    w = TensorProto(name="W", data_type=TensorProto.FLOAT, dims=[-4, 4])
    w.data_location = TensorProto.EXTERNAL
    for key, value in (("location", "w.bin"), ("offset", "0"), ("length", "64")):
        entry = w.external_data.add()
        entry.key, entry.value = key, value
    graph = helper.make_graph(
        [helper.make_node("Identity", ["W"], ["Y"])], "g", [],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, None)], [w],
    )
    path = tmp_path / "m.onnx"
    path.write_bytes(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)],
                                       ir_version=8).SerializeToString())
    assert main(["check", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "negative dimension" in err and "'W'" in err


# ----------------------------------------------------------------------------- 64 generated
# The hostile models of issue 15's probe, generated: every one given to `rewrite -o OUT` is
# either refused (one `error:` line naming the file, exit 2, no traceback, nothing written,
# the input untouched) or, for a domain used but not imported, repaired (the import added:
# the output passes onnx's full checker).


def _duplicate_initializers(h: Hostile, where: str) -> tuple[Path, list[str]]:
    """Two initializers of one name (``where``: in which graph, and of which kinds)."""
    model = matmul_model()
    g = model.graph
    if where == "top":
        g.initializer.append(numpy_helper.from_array(np.zeros(3, np.float32), "B"))
    elif where == "three-copies":
        for value in (0.0, 1.0):
            g.initializer.append(numpy_helper.from_array(np.full(3, value, np.float32), "B"))
    elif where == "two-names":
        g.initializer.append(numpy_helper.from_array(np.zeros(3, np.float32), "B"))
        g.initializer.append(numpy_helper.from_array(np.zeros((2, 3), np.float32), "W"))
    elif where == "dense-and-sparse":
        values = numpy_helper.from_array(np.array([1.0], np.float32), "B")
        indices = numpy_helper.from_array(np.array([0], np.int64), "B_indices")
        g.sparse_initializer.append(helper.make_sparse_tensor(values, indices, [3]))
    elif where in ("if-branch", "loop-body"):
        model, _ = _site_if_branch()
        then = next(a.g for a in model.graph.node[0].attribute if a.name == "then_branch")
        then.initializer.append(numpy_helper.from_array(np.zeros(3, np.float32), "ext"))
        if where == "loop-body":  # the same, one level deeper: an If inside a Loop body
            model = _in_loop_body(model)
    elif where == "external-and-inline":
        w = g.initializer[0]
        _safe(h, w, w.raw_data)
        g.initializer.append(numpy_helper.from_array(np.zeros((2, 3), np.float32), "W"))
    else:
        raise AssertionError(where)
    return save_proto(model, h.model), ["share a name"]


def _in_loop_body(model: onnx.ModelProto) -> onnx.ModelProto:
    """``model``'s graph as the body of a one-iteration Loop (its If inside it)."""
    inner = model.graph
    body = helper.make_graph(
        list(inner.node), "body",
        [vi("i", TensorProto.INT64, []), vi("cond_in", TensorProto.BOOL, [])],
        [vi("cond_in", TensorProto.BOOL, []), vi("Y", TensorProto.FLOAT, [3])],
    )
    body.node.append(helper.make_node("Identity", ["cond_in"], ["cond_out"], name="keep"))
    body.output[0].name = "cond_out"
    graph = helper.make_graph(
        [helper.make_node("Loop", ["trip", "go"], ["Ys"], name="loop", body=body)],
        "g", [vi("X", TensorProto.FLOAT, [3]), vi("C", TensorProto.BOOL, []),
              vi("trip", TensorProto.INT64, []), vi("go", TensorProto.BOOL, [])],
        [vi("Ys", TensorProto.FLOAT, [1, 3])],
    )
    return helper.make_model(graph, opset_imports=OPSET, ir_version=8)


def _missing_domain(h: Hostile, where: str) -> onnx.ModelProto:
    """A model using a domain it does not import (onnxruntime runs every node of it)."""
    ms = "com.microsoft"
    if where == "model":
        nodes = [helper.make_node("Gelu", ["X"], ["Y"], name="gelu", domain=ms)]
    elif where == "two-domains":
        nodes = [helper.make_node("Gelu", ["X"], ["g"], name="gelu", domain=ms),
                 helper.make_node("Normalizer", ["g"], ["Y"], name="norm",
                                  domain="ai.onnx.ml", norm="MAX")]
    elif where == "one-of-two":  # com.microsoft imported (below), ai.onnx.ml not
        nodes = [helper.make_node("Gelu", ["X"], ["g"], name="gelu", domain=ms),
                 helper.make_node("Normalizer", ["g"], ["Y"], name="norm",
                                  domain="ai.onnx.ml", norm="MAX")]
    elif where == "if-branch":
        then_g = helper.make_graph(
            [helper.make_node("Gelu", ["X"], ["t"], name="gelu", domain=ms)], "then", [],
            [vi("t", TensorProto.FLOAT, [2, 3])])
        else_g = helper.make_graph(
            [helper.make_node("Identity", ["X"], ["e"], name="id")], "else", [],
            [vi("e", TensorProto.FLOAT, [2, 3])])
        graph = helper.make_graph(
            [helper.make_node("If", ["C"], ["Y"], name="branch", then_branch=then_g,
                              else_branch=else_g)],
            "g", [vi("X", TensorProto.FLOAT, [2, 3]), vi("C", TensorProto.BOOL, [])],
            [vi("Y", TensorProto.FLOAT, [2, 3])])
        return helper.make_model(graph, opset_imports=OPSET, ir_version=8)
    elif where == "function-body":  # the function imports "" only; the model imports ms
        func = helper.make_function(
            "local", "G", ["x"], ["y"],
            [helper.make_node("Gelu", ["x"], ["y"], name="fn_gelu", domain=ms)], OPSET)
        graph = helper.make_graph(
            [helper.make_node("G", ["X"], ["Y"], name="call", domain="local")],
            "g", [vi("X", TensorProto.FLOAT, [2, 3])], [vi("Y", TensorProto.FLOAT, [2, 3])])
        return helper.make_model(
            graph, opset_imports=OPSET + [helper.make_opsetid("local", 1),
                                          helper.make_opsetid(ms, 1)],
            ir_version=8, functions=[func])
    elif where == "with-external-data":
        w = numpy_helper.from_array(np.full((3, 3), 0.5, np.float32), "W")
        nodes = [helper.make_node("MatMul", ["X", "W"], ["h"], name="mm"),
                 helper.make_node("Gelu", ["h"], ["Y"], name="gelu", domain=ms)]
        graph = helper.make_graph(nodes, "g", [vi("X", TensorProto.FLOAT, [2, 3])],
                                  [vi("Y", TensorProto.FLOAT, [2, 3])], [w])
        model = helper.make_model(graph, opset_imports=OPSET, ir_version=8)
        _safe(h, model.graph.initializer[0], model.graph.initializer[0].raw_data)
        return model
    else:
        raise AssertionError(where)
    imports = OPSET + ([helper.make_opsetid(ms, 1)] if where == "one-of-two" else [])
    graph = helper.make_graph(nodes, "g", [vi("X", TensorProto.FLOAT, [2, 3])],
                              [vi("Y", TensorProto.FLOAT, [2, 3])])
    return helper.make_model(graph, opset_imports=imports, ir_version=8)


DUPLICATES = ["top", "three-copies", "two-names", "dense-and-sparse", "if-branch",
              "loop-body"]
MISSING_DOMAINS = ["model", "two-domains", "one-of-two", "if-branch", "function-body",
                   "with-external-data"]
GENERATED_SITES = ["if-branch initializer", "function Constant"]


def generated_hostile_cases() -> list[str]:
    """Ids of the generated cases: model files of every broken kind, unsafe external data
    at the top level and in nested sites, duplicate initializer names, missing domain
    imports."""
    return ([f"file:{k}" for k in HOSTILE_FILES]
            + [f"external:{v}" for v in sorted(UNSAFE)]
            + [f"nested:{s}:{v}" for s in GENERATED_SITES for v in sorted(UNSAFE)]
            + [f"duplicate:{w}" for w in DUPLICATES]
            + [f"missing-domain:{w}" for w in MISSING_DOMAINS])


def test_generated_hostile_cases_are_64():
    assert len(generated_hostile_cases()) == len(set(generated_hostile_cases())) == 64


@pytest.mark.parametrize("case", generated_hostile_cases())
def test_generated_hostile_case_is_handled_by_rewrite(case, h, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "1000")  # one line however long the path
    kind, _, rest = case.partition(":")
    out = h.root / "out.onnx"
    argv = ["rewrite", str(h.model), "-o", str(out), "--no-confirm"]
    if kind == "missing-domain":
        save_proto(_missing_domain(h, rest), h.model)
        before = snapshot(h.dir)
        rc = main(argv)
        _, err = capsys.readouterr()
        assert rc == 0, err
        onnx.checker.check_model(str(out), full_check=True)  # repaired: the import added
        assert snapshot(h.dir) == before
        assert rio.load_model(out).model.graph.node[0].name == \
            onnx.load(str(h.model), load_external_data=False).graph.node[0].name
        return
    if kind == "file":
        path, words = _hostile_file(rest, h)
    elif kind == "external":
        prepare, words = UNSAFE[rest]
        model = matmul_model()
        w = model.graph.initializer[0]
        prepare(h, w, w.raw_data)
        path, words = save_proto(model, h.model), ["'W'", *words]
    elif kind == "nested":
        site, _, variant = rest.partition(":")
        prepare, words = UNSAFE[variant]
        path, words = _ext_tensor_model(site, h, prepare), ["'ext'", *words]
    elif kind == "duplicate":
        path, words = _duplicate_initializers(h, rest)
    else:
        raise AssertionError(case)
    argv[1] = str(path)
    before = snapshot(h.root)
    expect_one_error_line(capsys, argv, path, *words)
    assert snapshot(h.root) == before  # nothing written, the input untouched


# ----------------------------------------------------------------------------- every writer
# Every command that writes goes through rewriter.io.output: none of them writes through a
# link to the input model or its data (issue 15: `run -o` did, with np.savez).

WRITERS = {
    "rewrite -o, hard link to the model": (
        "hardlink", "model", ["rewrite", "{model}", "-o", "{out}", "--no-confirm"]),
    "run -o, symlink to the model": ("symlink", "model", ["run", "{model}", "-o", "{out}"]),
    "run -o, hard link to the model": ("hardlink", "model", ["run", "{model}", "-o", "{out}"]),
    "run -o, symlink to the data": ("symlink", "data", ["run", "{model}", "-o", "{out}"]),
    "compare --save-inputs, hard link to the model": (
        "hardlink", "model", ["compare", "{model}", "{model}", "--save-inputs", "{out}"]),
    "compare --save-inputs, symlink to the data": (
        "symlink", "data", ["compare", "{model}", "{model}", "--save-inputs", "{out}"]),
    "check --report, symlink to the model": (
        "symlink", "model", ["check", "{model}", "--no-confirm", "--report", "{out}"]),
    "compare --report, hard link to the model": (
        "hardlink", "model", ["compare", "{model}", "{model}", "--report", "{out}"]),
}


@pytest.mark.parametrize("case", sorted(WRITERS))
def test_no_command_writes_through_a_link_to_its_input(case, h, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "1000")
    link, to, argv = WRITERS[case]
    model = matmul_model()
    w = model.graph.initializer[0]
    _safe(h, w, w.raw_data)
    save_proto(model, h.model)
    target = h.model if to == "model" else h.dir / "w.bin"
    suffix = {"-o": ".npz" if argv[0] == "run" else ".onnx", "--save-inputs": ".npz",
              "--report": ".md" if argv[0] == "check" else ".html"}
    option = next(a for a in argv if a in suffix)
    out = h.outside / f"out{suffix[option]}"
    if argv[0] == "rewrite":
        out = h.dir / "out.onnx"
    (out.symlink_to if link == "symlink" else out.hardlink_to)(target)
    before = snapshot(h.root)
    rc = main([a.format(model=h.model, out=out) for a in argv])
    stdout, err = capsys.readouterr()
    assert rc == 2, (rc, stdout, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    assert "internal error" not in err and "Traceback" not in err
    assert str(out) in lines[0], lines[0]
    assert snapshot(h.root) == before


# ----------------------------------------------------------------------------- ModelProto


def _in_memory_external(location: str = "w.bin") -> onnx.ModelProto:
    model = matmul_model()
    w = model.graph.initializer[0]
    set_external(w, location)
    return model


LIBRARY_CALLS = {
    "check": lambda m: __import__("rewriter").check(m, ["onnxruntime"], confirm=False),
    "rewrite": lambda m: __import__("rewriter").rewrite(m, ["onnxruntime"], confirm=False),
    "compare": lambda m: __import__("rewriter").compare(m, m, ["onnxruntime"]),
    "session": lambda m: __import__("rewriter").session(m),
    "run": lambda m: __import__("rewriter.comparison.runtime", fromlist=["run"]).run(m),
}


@pytest.mark.parametrize("call", sorted(LIBRARY_CALLS))
def test_a_model_proto_goes_through_the_same_external_data_validation(call, h,
                                                                      monkeypatch):
    """A ModelProto given to the library: its data is resolved against the current
    directory, and a hard link there to a file outside is refused as for a file (issue
    15: `compare` and `session` read it)."""
    write_at(h.outside / "secret.bin", 0, K_VALUES.tobytes() * 2)
    os.link(h.outside / "secret.bin", h.dir / "w.bin")
    monkeypatch.chdir(h.dir)
    before = snapshot(h.root)
    with pytest.raises(ExternalDataError) as info:
        LIBRARY_CALLS[call](_in_memory_external())
    assert "hard link" in str(info.value) and "'W'" in str(info.value)
    assert snapshot(h.root) == before


def test_session_of_a_model_proto_reads_its_data_from_the_current_directory(h, monkeypatch):
    import rewriter

    w = numpy_helper.to_array(matmul_model().graph.initializer[0])
    write_at(h.dir / "w.bin", 0, w.tobytes())
    monkeypatch.chdir(h.dir)
    x = np.array([[1.0, 2.0]], np.float32)
    (y,) = rewriter.session(_in_memory_external()).run(None, {"X": x})
    np.testing.assert_allclose(y, x @ w + np.array([0.5, -1.0, 2.0], np.float32), rtol=1e-6)


# ----------------------------------------------------------------------------- not UTF-8
# ONNX's strings are proto2 strings: protobuf parses one that is not UTF-8 and hands it over
# as bytes, which crashed `inspect` (found by benchmarks/fuzz.py on mutated corpus models).

NOT_UTF8 = {  # the field's valid text in matmul_model() and its replacement
    "node name": (b"add_bias", b"add_bi\xffs"),
    "op type": (b"MatMul", b"MatM\xfel"),
    "value name": (b"XW", b"X\xc3"),
    "producer": (b"tests", b"te\xc3(s"),
    "graph input": (b"\n\x01X", b"\n\x01\xff"),
}


@pytest.mark.parametrize("field", sorted(NOT_UTF8))
def test_names_that_are_not_utf8_are_refused_in_one_line(field, command, h, capsys):
    good, bad = NOT_UTF8[field]
    data = matmul_model().SerializeToString()
    assert good in data
    h.model.write_bytes(data.replace(good, bad))
    before = snapshot(h.root)
    expect_one_error_line(capsys, [command, str(h.model)], h.model, "not valid UTF-8")
    assert snapshot(h.root) == before


def test_an_external_data_location_that_is_not_utf8_is_refused(h):
    model = matmul_model()
    w = model.graph.initializer[0]
    _safe(h, w, w.raw_data)
    h.model.write_bytes(model.SerializeToString().replace(b"w.bin", b"w.\xffin"))
    with pytest.raises(ExternalDataError) as info:
        rio.load_model(h.model)
    assert "not valid UTF-8" in str(info.value) and "'W'" in str(info.value)


# ----------------------------------------------------------------------------- main process
# What would be allocated, blocked on or crashed in the tool's own process (issue 15).


def symbolic_model() -> onnx.ModelProto:
    graph = helper.make_graph(
        [helper.make_node("Relu", ["X"], ["Y"], name="relu")], "g",
        [vi("X", TensorProto.FLOAT, ["N", 4])], [vi("Y", TensorProto.FLOAT, ["N", 4])])
    return helper.make_model(graph, opset_imports=OPSET, ir_version=8)


def expect_usage_line(capsys, argv: list[str], *words: str) -> str:
    rc = main(argv)
    out, err = capsys.readouterr()
    assert rc == 2, (rc, out, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    assert "internal error" not in err and "Traceback" not in err
    for word in words:
        assert word in lines[0], (word, lines[0])
    return lines[0]


def test_a_huge_dim_is_refused_before_allocation(h, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "1000")
    save_proto(symbolic_model(), h.model)
    tracemalloc.start()
    try:
        expect_usage_line(capsys, ["run", str(h.model), "--dim", f"N={10**12}"],
                          "past the input limit", "ONNX_REWRITER_MAX_INPUT_MIB")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 256 * 2**20, peak


def test_an_npz_is_sized_before_it_is_decompressed(h, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "1000")
    monkeypatch.setenv("ONNX_REWRITER_MAX_INPUT_MIB", "1")
    save_proto(symbolic_model(), h.model)
    bomb = h.outside / "inputs.npz"
    np.savez_compressed(bomb, X=np.zeros((2**16, 4), np.float32))  # 1 MiB, a few KiB packed
    assert bomb.stat().st_size < 64 * 1024
    expect_usage_line(capsys, ["run", str(h.model), "--inputs", str(bomb)],
                      "decompressed", "past the input limit")


@pytest.mark.parametrize("argv,words", [
    (["--seed", "-1"], ["--seed"]),
    (["--timeout", "nan"], ["--timeout", "nan"]),
    (["--timeout", "0"], ["--timeout"]),
    (["--memory-limit", "0"], ["--memory-limit"]),
    (["--custom-ops-library", "/no/such/lib.so"], ["/no/such/lib.so"]),
    (["--dim", "nosuchdim=7"], ["nosuchdim", "no symbolic dimension"]),
    (["--dim", "N=-3"], ["cannot be negative"]),
])
def test_bad_option_values_are_one_line(argv, words, h, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "1000")
    save_proto(symbolic_model(), h.model)
    before = snapshot(h.root)
    expect_usage_line(capsys, ["run", str(h.model), *argv], *words)
    assert snapshot(h.root) == before


def test_real_cli_fifo_as_inputs_does_not_hang(h):
    save_proto(symbolic_model(), h.model)
    fifo = h.outside / "inputs.npz"
    os.mkfifo(fifo)
    env = dict(os.environ, COLUMNS="1000")
    proc = subprocess.run(CLI + ["run", str(h.model), "--inputs", str(fifo)],
                          capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "FIFO" in lines[0] and str(fifo) in lines[0], proc.stderr


def test_a_plugin_calling_sys_exit_at_import_is_an_error(h, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "1000")
    plugin = h.outside / "quitter.py"
    plugin.write_text("import sys\nsys.exit(0)\n")
    save_proto(symbolic_model(), h.model)
    rc = main(["-p", str(plugin), "check", str(h.model), "--no-confirm"])
    out, err = capsys.readouterr()
    assert rc == 2, (rc, out, err)
    assert "quitter" in err and "Traceback" not in err, err


def test_outputs_keep_the_umask(h):
    path = external_matmul(h.dir)
    loaded = rio.load_model(path)
    previous = os.umask(0o027)
    try:
        out = rio.save_model(loaded.model, h.outside / "out.onnx", source=loaded)
    finally:
        os.umask(previous)
    modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in h.outside.iterdir()}
    assert modes == {"out.onnx": 0o640, "out.onnx.data": 0o640}, modes
    assert out == h.outside / "out.onnx"


def test_a_250_byte_output_name_is_written_with_its_data(h):
    path = external_matmul(h.dir)
    loaded = rio.load_model(path)
    out = h.outside / ("é" * 122 + ".onnx")  # 249 bytes: legal, its data names too long
    assert len(os.fsencode(out.name)) == 249
    rio.save_model(loaded.model, out, source=loaded)
    back = rio.load_model(out)
    assert [len(os.fsencode(n)) <= 255 for n in back.external_files] == [True]
    assert temp_leftovers(h.outside) == []
    np.testing.assert_array_equal(run_ort(out), run_ort(path))


@pytest.mark.parametrize("name", ["0:", "C:model.onnx", "a\\..\\b.onnx", "\\x.onnx"])
def test_output_names_that_read_as_windows_paths_get_loadable_data_names(name, h):
    """Found by tests/test_properties.py: an output named ``0:`` was written with data
    ``0:.data``, a location the loader refuses (it reads as a drive letter)."""
    path = external_matmul(h.dir)
    loaded = rio.load_model(path)
    neighbour = h.outside / (name.replace("\\", "_")[:1] + "_" + name.replace("\\", "_")[2:]
                             if name[1:2] == ":" else name.replace("\\", "_"))
    rio.save_model(loaded.model, neighbour, source=loaded)  # the name the data would get
    rio.save_model(loaded.model, h.outside / name, source=loaded)
    for out in (h.outside / name, neighbour):
        np.testing.assert_array_equal(run_ort(out), run_ort(path))
        rio.load_model(out)  # its data names pass the loader's own checks
    assert temp_leftovers(h.outside) == []
