"""Per-call cost of a Python kernel under onnxruntime, against the same op run natively.

``python benchmarks/bench_kernel.py`` times, in one process, one-node float32 models on a
tensor of ``--size`` elements (default 1M), each call being ``session.run`` (median of
``--repeat`` timed calls after warm-up):

* ``fastgelu``: ai.onnx.contrib::FastGelu as a Python kernel (rewriter_custom_ops.fast_gelu,
  through onnxruntime-extensions' Python ops, i.e. what ``rewrite`` produces) against
  onnxruntime's own com.microsoft::FastGelu, the same op and semantics in C++.
* ``identity``: a Python kernel returning its input against onnxruntime's Identity: the
  adapter's own cost, nothing computed.
* ``swish``: the example FusedSwish kernel against its decomposition (Sigmoid, Mul) run
  natively: what ``--prefer kernel`` costs against the default ``--prefer decompose``.

It also times each Python kernel called directly on numpy arrays, which splits the Python
time into the kernel's numpy work and the adapter's marshalling (onnxruntime-extensions
passes outputs back through Python lists). Results go to ``benchmarks/_out/bench_kernel.json``.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import onnxruntime as ort
import onnxruntime_extensions
from onnx import TensorProto, helper

HERE = Path(__file__).resolve().parent
OUT = HERE / "_out"


def _model(nodes, n_inputs=1, imports=()):
    ins = [helper.make_tensor_value_info(f"x{i}", TensorProto.FLOAT, None)
           for i in range(n_inputs)]
    outs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)]
    model = helper.make_model(helper.make_graph(nodes, "bench", ins, outs), opset_imports=[
        helper.make_opsetid("", 18), *(helper.make_opsetid(d, 1) for d in imports)])
    model.ir_version = 9
    return model


def _python_model(domain, op, kernel_ref, n_inputs, attrs=None):
    """The model ``rewrite`` would produce for a node of (domain, op) given this kernel."""
    from rewriter.plan.functions import resolve_reference
    from rewriter.plan.kernels import (
        CONTRIB_DOMAIN,
        KernelUse,
        Signature,
        op_name,
        register_onnxruntime,
        retarget_node,
    )

    k = resolve_reference(kernel_ref)
    sig = Signature.parse(", ".join(["float"] * n_inputs) + " -> float")
    use = KernelUse(op_name(domain, op, sig, kernel_ref), domain, op, kernel_ref, "bench", sig)
    register_onnxruntime([use], {use.op_name: k})
    node = helper.make_node(op, [f"x{i}" for i in range(n_inputs)], ["y"], domain=domain,
                            **(attrs or {}))
    retarget_node(node, use, k)
    return _model([node], n_inputs, [CONTRIB_DOMAIN]), k


def _session(model, extensions: bool):
    so = ort.SessionOptions()
    so.log_severity_level = 3
    so.intra_op_num_threads = 1  # the Python kernel runs on one thread: compare like with like
    if extensions:
        so.register_custom_ops_library(onnxruntime_extensions.get_library_path())
    return ort.InferenceSession(model.SerializeToString(), so,
                                providers=["CPUExecutionProvider"])


def _time(fn, repeat: int, warmup: int = 2) -> float:
    for _ in range(warmup):
        fn()
    samples = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - t)
    return statistics.median(samples)


def bench(size: int, repeat: int) -> dict:
    rng = np.random.default_rng(0)
    x = rng.standard_normal(size).astype(np.float32)
    b = rng.standard_normal(size).astype(np.float32)
    cases = {}

    # FastGelu: Python kernel vs onnxruntime's C++ com.microsoft::FastGelu
    py_model, k = _python_model("ai.onnx.contrib", "FastGelu",
                                "rewriter_custom_ops.fast_gelu:kernel", 2)
    native = _model([helper.make_node("FastGelu", ["x0", "x1"], ["y"], domain="com.microsoft")],
                    2, ["com.microsoft"])
    cases["fastgelu"] = (py_model, native, {"x0": x, "x1": b}, lambda k=k: k(x, b))

    # Identity: the adapter alone
    ident_ref = "bench_kernel:IDENTITY"
    py_model, k = _python_model("bench", "Identity", ident_ref, 1)
    native = _model([helper.make_node("Identity", ["x0"], ["y"])])
    cases["identity"] = (py_model, native, {"x0": x}, lambda k=k: k(x))

    # FusedSwish: Python kernel vs its decomposition in native ops
    py_model, k = _python_model("com.acme", "FusedSwish",
                                "rewriter_custom_ops.fused_swish:kernel", 1, {"alpha": 1.0})
    native = _model([helper.make_node("Sigmoid", ["x0"], ["s"]),
                     helper.make_node("Mul", ["x0", "s"], ["y"])])
    cases["swish"] = (py_model, native, {"x0": x}, lambda k=k: k(x, alpha=1.0))

    results = {}
    for name, (py_model, native_model, feeds, direct) in cases.items():
        py = _session(py_model, True)
        nat = _session(native_model, False)
        got, want = py.run(None, feeds)[0], nat.run(None, feeds)[0]
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
        t_py = _time(lambda s=py, f=feeds: s.run(None, f), repeat)
        t_native = _time(lambda s=nat, f=feeds: s.run(None, f), repeat)
        t_direct = _time(direct, repeat)
        results[name] = {
            "python_kernel_s": t_py, "native_s": t_native, "ratio": t_py / t_native,
            "overhead_s": t_py - t_native, "kernel_numpy_s": t_direct,
            "adapter_s": t_py - t_direct,
        }
    return results


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--size", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=15)
    parser.add_argument("--out", type=Path, default=OUT / "bench_kernel.json")
    args = parser.parse_args(argv)
    results = bench(args.size, args.repeat)
    print(f"{args.size:,} float32 elements, median of {args.repeat} calls, one thread")
    print(f"{'case':10} {'python':>10} {'native':>10} {'ratio':>7} {'overhead':>10} "
          f"{'numpy':>10} {'adapter':>10}")
    for name, r in results.items():
        print(f"{name:10} {r['python_kernel_s'] * 1e3:8.2f}ms {r['native_s'] * 1e3:8.2f}ms "
              f"{r['ratio']:6.1f}x {r['overhead_s'] * 1e3:8.2f}ms "
              f"{r['kernel_numpy_s'] * 1e3:8.2f}ms {r['adapter_s'] * 1e3:8.2f}ms")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({
        "size": args.size, "repeat": args.repeat, "python": platform.python_version(),
        "onnxruntime": ort.__version__,
        "onnxruntime_extensions": onnxruntime_extensions.__version__,
        "numpy": np.__version__, "results": results}, indent=2))
    print(f"wrote {args.out}")
    return 0


def _identity(x):
    return x


def _make_identity():
    from rewriter.plan.kernels import kernel

    return kernel(signatures=["float -> float"])(_identity)


IDENTITY = _make_identity()

if __name__ == "__main__":
    sys.path.insert(0, str(HERE))  # "bench_kernel:IDENTITY" resolves to this file
    sys.exit(main())
