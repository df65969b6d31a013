"""``rewrite --target onnxruntime`` over every ONNX backend node case shipped inside the onnx
package: the cases onnxruntime refuses for lack of a kernel or schema that the rewrite makes
run and match their expected outputs must not become fewer, no case onnxruntime already
runs may be changed by it, and every rewritten model passes ``compare`` against the original
on the reference evaluator. (The whole suite takes ~10 s on 2 cores, so it runs in full.)"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import conformance  # noqa: E402

# Reached with the onnx-functions plugin (SwiGLU-28 lowered, then its Swish-24): raise it
# when a plugin rescues more; never lower it to make a change pass.
MIN_RESCUED = 15  # 6 SwiGLU cases by decomposition, 9 ImageDecoder cases by kernel
# The rescued cases named, so that losing one is reported by name.
MUST_RESCUE = {
    "test_swiglu", "test_swiglu_alpha", "test_swiglu_alpha_expanded", "test_swiglu_expanded",
    "test_swiglu_float16", "test_swiglu_float16_expanded",
}


def _listing(table: dict[str, list[str]], limit: int = 15) -> str:
    rows = sorted(table.items(), key=lambda kv: -len(kv[1]))[:limit]
    return "\n".join(f"{len(names)} × {reason}: {', '.join(names[:5])}" for reason, names in rows)


def test_rewrite_rescues_refused_cases_and_leaves_running_ones_alone():
    result = conformance.measure_rescue()
    assert result.total > 1500, "the onnx package should ship ~1,900 node cases"
    # the yardstick is meaningful: onnxruntime does refuse a good number of cases
    assert len(result.refused) > 50
    assert len(result.running) > 1500

    # no case that runs is touched: no remedy, the same nodes, the same outputs
    assert not result.changed, "rewrite changed cases onnxruntime runs:\n" + _listing(
        result.changed)
    assert result.unchanged == len(result.running)

    assert MUST_RESCUE <= set(result.rescued), (
        f"no longer rescued: {sorted(MUST_RESCUE - set(result.rescued))}\n"
        + _listing(result.failed))
    assert len(result.rescued) >= MIN_RESCUED, (
        f"rescued {len(result.rescued)} of {len(result.refused)} (was {MIN_RESCUED})\n"
        + _listing(result.failed))
    # every attempted case is accounted for, and every failure has a reason
    failing = sum(len(v) for v in result.failed.values())
    assert len(result.rescued) + failing == len(result.refused)
    assert all(reason.strip() for reason in result.failed)

    # every model the rewrite produced computes what the original does on the reference
    # evaluator: on the case's own inputs, and on generated ones unless the original itself
    # cannot take them (random bytes are no image to decode)
    assert set(result.rescued) <= set(result.compared)
    for name, verdicts in result.compared.items():
        assert verdicts["case inputs"] == "equal", (name, verdicts)
        generated = verdicts["generated inputs"]
        assert generated == "equal" or generated.startswith(
            "error: could not evaluate the original"), (name, verdicts)
    decoders = {n for n in result.rescued if n.startswith("test_image_decoder")}
    for name in set(result.rescued) - decoders:  # random bytes are no image to decode
        assert result.compared[name]["generated inputs"] == "equal", name
