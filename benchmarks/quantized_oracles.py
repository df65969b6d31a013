"""The quantized ops' decompositions against onnxruntime's own kernels, tallied per op: the
samples and data sets run, the element types of the quantized inputs, the granularities
(per tensor, per channel/column), and the disagreements.

The same checks as ``tests/test_oracles.py`` (``rewriter.testing.check_one``), restricted to
the QOperator family (``QLinear*``, ``QGemm``) and onnxruntime's dynamic quantization ops
(``QAttention``, ``QEmbedLayerNormalization``, ``DynamicQuantizeMatMul``,
``MatMulIntegerToFloat``, ``DynamicQuantizeLSTM``); with ``--all`` also com.microsoft's
``QuantizeLinear``/``DequantizeLinear`` (16-bit types), ``MatMulNBits`` and
``GatherBlockQuantized``::

    python benchmarks/quantized_oracles.py [--all] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections import defaultdict

from onnx import TensorProto

from rewriter import testing

QUANTIZED_OPS = ("QLinear", "QGemm", "QAttention", "QEmbedLayerNormalization",
                 "DynamicQuantizeMatMul", "MatMulIntegerToFloat", "DynamicQuantizeLSTM")
# and onnxruntime's weight-only and 16-bit forms (--all)
MORE_OPS = ("QuantizeLinear", "DequantizeLinear", "MatMulNBits", "GatherBlockQuantized")


def _quantized_types(check: testing.Check) -> set[str]:
    """The 4/8/16-bit integer element types among the sample model's inputs and initializers."""
    graph = check.model.graph
    elems = [i.type.tensor_type.elem_type for i in graph.input]
    elems += [t.data_type for t in graph.initializer]
    wanted = {TensorProto.UINT8: "uint8", TensorProto.INT8: "int8",
              TensorProto.UINT16: "uint16", TensorProto.INT16: "int16",
              TensorProto.UINT4: "uint4", TensorProto.INT4: "int4"}
    return {wanted[e] for e in elems if e in wanted}


def _input_names(domain: str, op_type: str) -> list[str]:
    """The op's formal input names, from onnxruntime's schemas (contrib ops included)."""
    from onnxruntime.capi import onnxruntime_pybind11_state as C

    found = [s for s in C.get_all_operator_schema()
             if s.name == op_type and (s.domain or "") == (domain or "")]
    newest = max(found, key=lambda s: s.since_version) if found else None
    return [i.name for i in newest.inputs] if newest else []


def _granularity(check: testing.Check) -> str:
    """"per channel" when a scale input (by the op's schema: a name ending in ``scale``)
    holds more than one element, else "per tensor"."""
    graph = check.model.graph
    node = graph.node[0]
    shapes = {i.name: [d.dim_value for d in i.type.tensor_type.shape.dim]
              for i in graph.input}
    shapes.update({t.name: list(t.dims) for t in graph.initializer})
    formal = _input_names(node.domain, node.op_type)
    scales = [actual for name, actual in zip(formal, node.input)
              if actual and name.lower().endswith("scale")]
    sizes = [1 if not shapes.get(s) else math.prod(shapes[s])
             for s in scales]
    return "per channel" if any(n > 1 for n in sizes) else "per tensor"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", type=str, help="write the tally here")
    parser.add_argument("--all", action="store_true",
                        help="also com.microsoft Q/DQ, MatMulNBits, GatherBlockQuantized")
    args = parser.parse_args(argv)
    prefixes = QUANTIZED_OPS + (MORE_OPS if args.all else ())
    plugins = testing.oracle_plugins()
    per_op: dict[str, dict] = defaultdict(lambda: {"samples": 0, "data_sets": 0,
                                                   "types": set(), "granularity": set(),
                                                   "disagreements": 0,
                                                   "skipped": 0, "problems": []})
    for entry in plugins.registry.decompositions:
        if (not entry.op_type.startswith(prefixes) or entry.oracle != "onnxruntime"
                or (entry.op_type in MORE_OPS[:2] and entry.domain != "com.microsoft")):
            continue
        op = f"{entry.domain or 'ai.onnx'}::{entry.op_type}"
        row = per_op[op]
        for sample, dtype in testing.sample_runs(entry):
            check = testing.build(entry, sample, dtype)
            if testing.needs_newer_onnxruntime(check):
                row["skipped"] += 1
                continue
            problems = testing.check_one(check, plugins)
            row["samples"] += 1
            row["data_sets"] += len(check.feeds)
            row["types"] |= _quantized_types(check)
            row["granularity"].add(_granularity(check))
            row["disagreements"] += bool(problems)
            row["problems"] += problems[:2]
            print(f"{check.label:90} {'DISAGREES' if problems else 'agrees'}",
                  file=sys.stderr)
    total = {"ops": len(per_op), "samples": sum(r["samples"] for r in per_op.values()),
             "data_sets": sum(r["data_sets"] for r in per_op.values()),
             "disagreements": sum(r["disagreements"] for r in per_op.values())}
    print("| op | samples | data sets | quantized types | granularity | disagreements |")
    print("|---|---:|---:|---|---|---:|")
    for op, r in sorted(per_op.items()):
        print(f"| {op} | {r['samples']} | {r['data_sets']} | {', '.join(sorted(r['types']))} "
              f"| {', '.join(sorted(r['granularity']))} | {r['disagreements']} |")
    print(f"| **{total['ops']} ops** | {total['samples']} | {total['data_sets']} | | | "
          f"**{total['disagreements']}** |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"total": total, "ops": {op: {**r, "types": sorted(r["types"]),
                                                    "granularity": sorted(r["granularity"])}
                                               for op, r in per_op.items()}}, f, indent=1)
    return 1 if total["disagreements"] else 0


if __name__ == "__main__":
    sys.exit(main())
