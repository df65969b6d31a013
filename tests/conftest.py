"""Shared fixtures: a fresh plugin manager (third-party autoload off), model builders.

The suite loads only the plugins a test names: third-party plugin autoload is off for the
whole session (``ONNX_REWRITER_DISABLE_PLUGIN_AUTOLOAD``, inherited by the CLI and the child
processes the tests start), so a plugin the user installed cannot change a result. A test
about autoload asks for the :func:`autoload` fixture. Hypothesis draws repeatable examples
unless ``HYPOTHESIS_PROFILE=explore``.
"""

from __future__ import annotations

import os
from functools import cache
from pathlib import Path

import onnx
import pytest
from hypothesis import settings

# Property tests draw the same examples on every run (a submission's CI result must not depend
# on a random draw); `HYPOTHESIS_PROFILE=explore` draws fresh ones to look for new failures.
settings.register_profile("repeatable", derandomize=True, print_blob=True)
settings.register_profile("explore", derandomize=False, print_blob=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "repeatable"))

CORPUS = Path(__file__).resolve().parents[1].parent / "shared" / "corpus"

# com.acme::FusedSwish (x * sigmoid(alpha * x)) as a function, in the source of the test
# plugins written to files (tests/test_rewrite.py, test_kernels.py, test_compare.py); the
# plugin imports `parser` from onnx.
FUSED_SWISH_SOURCE = '''FUSED_SWISH = parser.parse_function("""
<domain: "com.acme", opset_import: ["": 18]>
FusedSwish <alpha: float = 1.0> (x) => (y) {
    a = Constant <value_float: float = @alpha> ()
    ac = CastLike (a, x)
    ax = Mul (ac, x)
    s = Sigmoid (ax)
    y = Mul (x, s)
}
""")
'''


# com.acme::ErfGelu decomposed deliberately wrong (erf(0.8 x) where erf(x / sqrt 2) belongs),
# and its correct numpy kernel `erf_gelu` (the oracle), in the source of test plugins; the
# plugin imports `parser` from onnx and `kernel` from rewriter.plan.kernels.
WRONG_GELU_SOURCE = '''
import math

import numpy as np

WRONG_GELU = parser.parse_function("""
<domain: "com.acme", opset_import: ["": 18]>
ErfGelu (x) => (y) {
    c = Constant <value_float: float = 0.8> ()
    cx = CastLike (c, x)
    h = Constant <value_float: float = 0.5> ()
    hx = CastLike (h, x)
    one = Constant <value_float: float = 1.0> ()
    onex = CastLike (one, x)
    s = Mul (x, cx)
    e = Erf (s)
    p = Add (e, onex)
    q = Mul (x, p)
    y = Mul (q, hx)
}
""")

_erf = np.vectorize(math.erf, otypes=[np.float64])


@kernel(signatures=["float -> float"])
def erf_gelu(x):
    return (0.5 * x * (1 + _erf(x / math.sqrt(2)))).astype(x.dtype)
'''

# Its numpy kernel, the oracle that runs an original holding com.acme::FusedSwish (plugin
# source to append to FUSED_SWISH_SOURCE; the plugin imports `hookimpl` from rewriter).
FUSED_SWISH_KERNEL_SOURCE = '''
import numpy as np

from rewriter.plugin import kernel


@kernel(signatures=["float -> float"], attributes={"alpha": 1.0})
def fused_swish(x, *, alpha):
    return (x / (1 + np.exp(-alpha * x))).astype(x.dtype)


@hookimpl
def register_kernels(registry):
    registry.add("com.acme", "FusedSwish", f"{__name__}:fused_swish")
'''


def pytest_configure(config) -> None:
    from rewriter.manager import DISABLE_AUTOLOAD_ENV

    os.environ[DISABLE_AUTOLOAD_ENV] = "1"


@pytest.fixture
def autoload(monkeypatch) -> None:
    """Third-party plugins autoload in this test (as for a user: the suite turns it off)."""
    from rewriter.manager import DISABLE_AUTOLOAD_ENV

    monkeypatch.delenv(DISABLE_AUTOLOAD_ENV, raising=False)


@pytest.fixture(scope="session")
def plugins():
    from rewriter.manager import load_plugins

    return load_plugins(autoload=False)


@pytest.fixture(scope="session")
def corpus() -> Path:
    if not CORPUS.is_dir():
        pytest.skip(f"corpus folder {CORPUS} is absent")
    return CORPUS


def model_from_text(text: str) -> onnx.ModelProto:
    """Parse ONNX text format, asserting it is well formed."""
    return onnx.parser.parse_model(text)


def write_model(path: Path, model: onnx.ModelProto) -> Path:
    path.write_bytes(model.SerializeToString())
    return path


# -- the installed onnxruntime's ceilings (Python 3.10 resolves onnxruntime 1.23; the lowest
# allowed is older still): models a test means to run are built under them ------------------


@cache
def onnxruntime_max_ir_version() -> int:
    """The highest IR version the installed onnxruntime loads (asked with one-node models)."""
    import onnxruntime as ort
    from onnx import TensorProto, helper

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "ir", [x], [y])
    so = ort.SessionOptions()
    so.log_severity_level = 4
    for ir in range(onnx.IR_VERSION, 6, -1):
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)],
                                  ir_version=ir)
        try:
            ort.InferenceSession(model.SerializeToString(), so,
                                 providers=["CPUExecutionProvider"])
        except Exception:  # noqa: BLE001 - "Unsupported model IR version": one lower
            continue
        return ir
    raise AssertionError("the installed onnxruntime loads no IR version from 7 up")


@cache
def onnxruntime_max_opset(domain: str = "") -> int:
    """The highest opset of ``domain`` the installed onnxruntime has operator schemas for."""
    from onnxruntime.capi import _pybind_state as C

    names = ("", "ai.onnx") if domain in ("", "ai.onnx") else (domain,)
    return max(s.since_version for s in C.get_all_operator_schema() if s.domain in names)


@cache
def onnxruntime_has_kernel(op_type: str, domain: str = "") -> bool:
    """The installed onnxruntime has a CPU kernel of ``domain::op_type`` (any version)."""
    from onnxruntime.capi import _pybind_state as C

    names = ("", "ai.onnx") if domain in ("", "ai.onnx") else (domain,)
    return any(k.op_name == op_type and k.domain in names
               and k.provider == "CPUExecutionProvider" for k in C.get_all_opkernel_def())


def make_model(graph: onnx.GraphProto, opset_imports, **kwargs) -> onnx.ModelProto:
    """``helper.make_model`` at an IR version the installed onnxruntime loads (onnx's
    default, its newest, can be above it) unless ``ir_version`` is given."""
    from onnx import helper

    kwargs.setdefault("ir_version", min(onnx.IR_VERSION, onnxruntime_max_ir_version()))
    return helper.make_model(graph, opset_imports=opset_imports, **kwargs)


NO_TORCH = ("the oracle is torch's own operator and torch is not installed (the dev extra "
            "installs it on Python 3.11 only)")


def skip_where_the_oracle_needs_torch(error: BaseException | str) -> None:
    """Skip the test when ``error`` (an exception, or an error's text) is torch's absence:
    the pytorch and mmdeploy plugins' oracles run torch's own operators."""
    import importlib.util

    if importlib.util.find_spec("torch") is not None:
        return
    if (isinstance(error, ModuleNotFoundError) and error.name == "torch") or (
            isinstance(error, str) and "No module named 'torch'" in error):
        pytest.skip(NO_TORCH)


def onnxruntime_is_behind_onnx() -> bool:
    """The installed onnxruntime stops below the newest ai.onnx opset the installed onnx
    knows (onnxruntime 1.23 with onnx 1.23): an older runtime than the suite's pins."""
    return onnxruntime_max_opset() < onnx.defs.onnx_opset_version()


def skip_where_the_oracle_cannot_run(problems: list[str]) -> None:
    """Skip the test when every problem is the oracle failing: torch absent, or, on an
    onnxruntime behind the installed onnx, onnxruntime's own kernel (the oracle) refusing the
    sample (a form that kernel gained later: 2-bit MatMulNBits, int4 GatherBlockQuantized,
    GroupQueryAttention's newer inputs, an opset above its ceiling)."""
    if not problems or not all(p.startswith("oracle: ") for p in problems):
        return
    for problem in problems:
        skip_where_the_oracle_needs_torch(problem)
    if onnxruntime_is_behind_onnx() and all("[ONNXRuntimeError]" in p for p in problems):
        import onnxruntime

        pytest.skip(f"onnxruntime {onnxruntime.__version__} cannot run this sample on its own "
                    f"kernel (the oracle): {problems[0][len('oracle: '):][:160]}")


NO_KERNEL = "implementation|kernel|registered"  # onnxruntime refusing a node it has no kernel for


def onnxruntime_refusal(model: onnx.ModelProto) -> str:
    """A regex of what the installed onnxruntime says when it refuses ``model``, a model
    with a node it has no kernel for: that node, unless the model's IR version or ai.onnx
    opset is above what this onnxruntime loads at all."""
    if model.ir_version > onnxruntime_max_ir_version():
        return "Unsupported model IR version"
    opset = max((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")),
                default=0)
    if opset > onnxruntime_max_opset():
        return f"support for domain ai.onnx is till opset {onnxruntime_max_opset()}"
    return NO_KERNEL


def cli_without(module: str, argv: list[str]):
    """Run the CLI in a child process in which ``import MODULE`` fails, as if that optional
    runtime were not installed; the CompletedProcess (text)."""
    import subprocess
    import sys

    wrapper = (f"import sys; sys.modules[{module!r}] = None\n"
               "from rewriter.cli import cli\n"
               f"sys.argv = ['onnx-rewriter', *{argv!r}]\n"
               "cli()\n")
    return subprocess.run([sys.executable, "-c", wrapper], capture_output=True, text=True,
                          timeout=120)


# -- virtual environments holding test distributions ------------------------------------------


class Venv:
    """A venv that sees everything the running interpreter sees (its site-packages are
    added as site dirs, so editable installs and the dev tools' setuptools and wheel come
    along, whether pytest runs in the base interpreter or in a venv of its own) and has
    test distributions pip-installed, found through their entry-point metadata."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.python = root / "bin" / "python"

    @classmethod
    def create(cls, root: Path) -> Venv:
        import site
        import sysconfig
        import venv

        venv.EnvBuilder(with_pip=False).create(root)
        made = cls(root)
        parents = [*site.getsitepackages(), sysconfig.get_paths()["purelib"]]
        if site.ENABLE_USER_SITE:
            parents.append(site.getusersitepackages())
        own = made.run_python("import sysconfig; print(sysconfig.get_paths()['purelib'])")
        lines = [f"import site; site.addsitedir({p!r})" for p in dict.fromkeys(parents)]
        (Path(own.stdout.strip()) / "_parent_env.pth").write_text("\n".join(lines) + "\n")
        return made

    def env(self, **extra: str) -> dict[str, str]:
        from rewriter.manager import DISABLE_AUTOLOAD_ENV

        env = {k: v for k, v in os.environ.items()
               if k not in (DISABLE_AUTOLOAD_ENV, "PYTHONPATH", "PYTHONHOME")}
        env.update(extra)
        return env

    def run_python(self, *args: str, cwd: Path | None = None, timeout: float = 300,
                   **env: str):
        """``python -c CODE`` (one argument) or ``python ARGS`` with the venv's
        interpreter."""
        import subprocess

        argv = ["-c", args[0]] if len(args) == 1 else list(args)
        return subprocess.run([str(self.python), *argv], capture_output=True, text=True,
                              cwd=cwd or self.root, env=self.env(**env), timeout=timeout)

    def rewriter(self, *args: str, **env: str):
        """``onnx-rewriter ARGS`` with the venv's interpreter. The system's console script
        runs the system interpreter, which would not see the venv's distributions."""
        return self.run_python("-m", "rewriter.cli", *args, timeout=120, **env)

    def install(self, source: Path, tmp: Path) -> None:
        """pip-install the distribution at ``source`` (a copy of it: setuptools writes
        build/ and *.egg-info in-tree), offline. Without build isolation where the venv
        sees setuptools and wheel (the dev tools); else with it."""
        import shutil

        copy = tmp / source.name
        shutil.copytree(source, copy, ignore=shutil.ignore_patterns("build", "*.egg-info"))
        has_tools = self.run_python("import setuptools, wheel").returncode == 0
        isolation = ["--no-build-isolation"] if has_tools else []
        proc = self.run_python("-m", "pip", "install", "--quiet", "--no-deps", *isolation,
                               "--no-index", str(copy), PIP_DISABLE_PIP_VERSION_CHECK="1")
        assert proc.returncode == 0, (f"pip could not install {source.name} (offline, "
                                      f"{'without' if has_tools else 'with'} build isolation):"
                                      f"\n{proc.stdout}{proc.stderr}")
