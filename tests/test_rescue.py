"""``rewrite --target onnxruntime`` over every ONNX backend node case shipped inside the onnx
package: the cases onnxruntime refuses for lack of a kernel or schema that the rewrite makes
run and match their expected outputs must not become fewer, no case onnxruntime already
runs may be changed by it, and every rewritten model passes ``compare`` against the original
on the reference evaluator. (The whole suite takes ~10 s on 2 cores, so it runs in full.)"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import conformance  # noqa: E402
import onnxruntime  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

from tests.conftest import model_from_text  # noqa: E402

ONNXRUNTIME = ".".join(onnxruntime.__version__.split(".")[:2])

# Raise it when a plugin rescues more; never lower it to make a change pass. Reached with:
# spec function bodies (SwiGLU), kernels (ImageDecoder), the onnx-preview plugin
# (FlexAttention, Adam, Adagrad, Momentum), and down-conversion to the newest opset at which
# onnxruntime has the op (RoiAlign-22, Optional*-28, QuantizeLinear/DequantizeLinear-28),
# onnx-standard (BitCast of bool; bfloat16, int16 and uint32 ops computed in a wider type),
# and the harness reading float8, 4- and 2-bit feeds and outputs; onnx-lowering (float4e2m1
# read by com.microsoft::GatherBlockQuantized, uint64 TopK and Pow exponents).
MIN_RESCUED = 98
# The same figures with an older onnxruntime installed (minor version: cases it runs, cases
# rescued; measured with conformance.measure_rescue()). It refuses every model above its
# opset or IR version whole (1.23: 23 and 11), which this harness does not try to rescue:
# there the named cases are asked only of those it refuses for a kernel or schema. With an
# onnxruntime that has no figure, only the invariants are asserted.
FIGURES = {"1.32": (1500, MIN_RESCUED), "1.23": (1257, 39), "1.21": (1074, 34)}
# Some rescued cases of each kind, named, so that losing one is reported by name.
MUST_RESCUE = {
    "test_swiglu", "test_swiglu_alpha", "test_swiglu_alpha_expanded", "test_swiglu_expanded",
    "test_swiglu_float16", "test_swiglu_float16_expanded",
    "test_image_decoder_decode_jpeg_rgb", "test_flexattention_score_mod",
    "test_flexattention_gqa", "test_adagrad", "test_adam_multiple", "test_nesterov_momentum",
    "test_roialign_aligned_false", "test_optional_get_element_tensor",
    "test_quantizelinear_axis", "test_dequantizelinear_blocked", "test_bitcast_bool_to_uint8",
    "test_attention_4d_causal_bf16", "test_celu_bfloat16_expanded", "test_max_uint16",
    "test_pow_types_float32_uint32", "test_onehot_with_bfloat16_values",
    "test_quantizelinear_int4", "test_dequantizelinear_e4m3fn",
    "test_cast_FLOAT4E2M1_to_FLOAT", "test_castlike_FLOAT4E2M1_to_FLOAT16",
    "test_top_k_uint64", "test_pow_types_float32_uint64",
}


# cases of random-number ops: converted to an older opset they run, but no two runtimes draw
# the same numbers, so neither the case's outputs nor the reference evaluator's can match
RANDOM_CASES = ("test_bernoulli", "test_random")


def _listing(table: dict[str, list[str]], limit: int = 15) -> str:
    rows = sorted(table.items(), key=lambda kv: -len(kv[1]))[:limit]
    return "\n".join(f"{len(names)} × {reason}: {', '.join(names[:5])}" for reason, names in rows)


def test_rewrite_rescues_refused_cases_and_leaves_running_ones_alone():
    result = conformance.measure_rescue()
    assert result.total > 1500, "the onnx package should ship ~1,900 node cases"
    # the yardstick is meaningful: onnxruntime does refuse a good number of cases
    assert len(result.refused) > (50 if ONNXRUNTIME == "1.32" else 40)
    running, min_rescued = FIGURES.get(ONNXRUNTIME, (0, 0))
    assert len(result.running) >= running

    # no case that runs is touched: no remedy, the same nodes, the same outputs
    assert not result.changed, "rewrite changed cases onnxruntime runs:\n" + _listing(
        result.changed)
    assert result.unchanged == len(result.running)

    must = MUST_RESCUE if ONNXRUNTIME == "1.32" else MUST_RESCUE & set(result.refused)
    assert must <= set(result.rescued), (
        f"no longer rescued: {sorted(must - set(result.rescued))}\n"
        + _listing(result.failed))
    assert len(result.rescued) >= min_rescued, (
        f"rescued {len(result.rescued)} of {len(result.refused)} (was {min_rescued})\n"
        + _listing(result.failed))
    # every attempted case is accounted for, and every failure has a reason
    failing = sum(len(v) for v in result.failed.values())
    assert len(result.rescued) + failing == len(result.refused)
    assert all(reason.strip() for reason in result.failed)

    # no model the rewrite produced computes something else than the original on the
    # reference evaluator (some cannot run at all: float4 casts onnxruntime lacks); every
    # rescued one computes the same on the case's own inputs and on generated ones wherever
    # the evaluator can run the original (random bytes are no image to decode)
    assert set(result.rescued) <= set(result.compared)
    cannot = "error: could not evaluate the original"
    # random bytes are no image to decode; random batch indices point past RoiAlign's batch;
    # a random OneHot depth is negative
    cannot_take_random = ("test_image_decoder", "test_roialign", "test_onehot")
    for name, verdicts in result.compared.items():
        if name.startswith(RANDOM_CASES):  # random numbers differ between any two runtimes
            continue
        if name.startswith("test_l1normalization") and _reference_l1_norm_is_signed():
            continue  # the oracle is wrong on negative inputs (rescued only below 1.32)
        for which in ("case inputs", "generated inputs"):
            assert not verdicts[which].startswith("mismatch"), (name, which, verdicts)
            if which == "generated inputs" and name.startswith(cannot_take_random):
                continue
            if name in result.rescued:
                assert verdicts[which] == "equal" or (
                    which == "generated inputs" and verdicts[which].startswith(cannot)), (
                    name, which, verdicts)
    for name in result.rescued:
        if name.startswith("test_l1normalization") and _reference_l1_norm_is_signed():
            continue
        if not name.startswith(cannot_take_random):
            assert result.compared[name]["generated inputs"] == "equal", name


def _reference_l1_norm_is_signed() -> bool:
    """The installed onnx's reference evaluator computes LpNormalization's p=1 norm as
    sum(x), not sum(|x|) (fixed by onnx/onnx#8427, after onnx 1.23.2): [1, -1] gives 0s."""
    model = model_from_text("""
        <ir_version: 8, opset_import: ["": 13]>
        g (float[2] x) => (float[2] y) { y = LpNormalization<axis=0, p=1>(x) }""")
    got = ReferenceEvaluator(model).run(None, {"x": np.array([1, -1], np.float32)})[0]
    return not np.allclose(got, [0.5, -0.5])
