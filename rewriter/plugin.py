"""The plugin API, version 1.0: everything a plugin may use, and nothing else.

A plugin (a module registered under the ``onnx_rewriter`` entry-point group, or given with
``-p``) imports only from here; the built-in plugins do too (``tests/test_layers.py`` fails
on any other import from ``rewriter``). ``docs/plugins.md`` is the guide.

Stable (API 1.0): the hook marker and the registration hooks' registries; authoring
decompositions (``DecompositionContext``, ``Declined``, ``FunctionBuilder`` and its helpers,
``OpSample``/``Arg`` to declare an oracle's samples); kernels (``kernel``); the errors.

Provisional (for target and pass authors; may change in a minor version): ``Target`` and what
a target works with (``Finding``, ``NodeQuery``, ``TargetOptions``, confirmation helpers),
``RuntimeTarget`` (a target that answers by loading models in its runtime) with
``probe_models`` (one-node probe models, the model as a file) and ``ProbeWorker``, the
schema and type helpers, graph walking, ``RewritePass``/``PassContext`` and the splice
primitives passes use, the kernel runtime adapters.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rewriter.detect import probe_models
from rewriter.detect.ranks import forget_contradicted_constant_shapes
from rewriter.detect.runtime_target import (
    NOT_ASKED,
    ProbeCrashed,
    ProbeWorker,
    RuntimeTarget,
    serve_probes,
)
from rewriter.detect.targets import (
    BY_NODE,
    BY_TYPES,
    REFUSED,
    RUN_BY_DEFAULT_BELOW,
    RUNS,
    Confirmation,
    Finding,
    NodeQuery,
    Target,
    TargetOptions,
    child_says,
    confirm_in_child,
    generated_feeds,
    model_size,
    opset_import_findings,
    refused_node,
    run_sets,
    schema_arity_problem,
)
from rewriter.detect.walker import find_unsupported
from rewriter.errors import PluginError, RewriterError, TargetError
from rewriter.graph.schemas import (
    BodyUnavailable,
    OpSchema,
    SchemaIndex,
    onnx_schemas,
    onnxruntime_schemas,
    schema_function_body,
    type_proto,
)
from rewriter.graph.typeinfer import (
    bind_type_params,
    declared_protos,
    infer_node_outputs,
    type_string,
)
from rewriter.graph.walk import (
    iter_nodes,
    iter_scopes,
    iter_tensors,
    main_node_index,
    normalize_domain,
    opset_map,
    outer_references,
    rename_reads,
)
from rewriter.hookspecs import hookimpl
from rewriter.io.interface import Adaptation, record_adaptation
from rewriter.plan.bodies import Declined, FunctionBuilder, declining, present, typed_tensor
from rewriter.plan.functions import (
    REMEDY_DOMAIN,
    DecompositionContext,
    retarget,
    specialise,
    splice,
)
from rewriter.plan.kernels import (
    EXTENSIONS,
    kernel,
    library_path,
    read_needs,
    reference_ops,
    register_onnxruntime,
)
from rewriter.plan.passes import PassContext, RewritePass
from rewriter.registry import REARRANGED, Arg, OpSample

API_VERSION = (1, 0)

__all__ = [
    "API_VERSION",
    # stable: hooks, authoring, kernels, errors
    "hookimpl",
    "DecompositionContext",
    "Declined",
    "declining",
    "FunctionBuilder",
    "present",
    "typed_tensor",
    "OpSample",
    "Arg",
    "REARRANGED",
    "kernel",
    "RewriterError",
    "PluginError",
    "TargetError",
    # provisional: targets
    "Target",
    "TargetOptions",
    "Finding",
    "NodeQuery",
    "Confirmation",
    "RUN_BY_DEFAULT_BELOW",
    "RUNS", "REFUSED", "BY_TYPES", "BY_NODE",  # Target.check_op's answers
    "child_says",
    "confirm_in_child",
    "generated_feeds",
    "model_size",
    "opset_import_findings",
    "refused_node",
    "run_sets",
    "schema_arity_problem",
    "find_unsupported",
    "forget_contradicted_constant_shapes",
    # provisional: targets that answer by loading models in a runtime
    "RuntimeTarget",
    "NOT_ASKED",
    "probe_models",
    "ProbeWorker",
    "ProbeCrashed",
    "serve_probes",
    # provisional: schemas, types, graph walking
    "OpSchema",
    "SchemaIndex",
    "BodyUnavailable",
    "onnx_schemas",
    "onnxruntime_schemas",
    "schema_function_body",
    "type_proto",
    "type_string",
    "bind_type_params",
    "declared_protos",
    "infer_node_outputs",
    "iter_nodes",
    "main_node_index",
    "iter_scopes",
    "iter_tensors",
    "normalize_domain",
    "opset_map",
    "outer_references",
    "rename_reads",
    # provisional: passes and the splice primitives
    "RewritePass",
    "PassContext",
    "REMEDY_DOMAIN",
    "retarget",
    "specialise",
    "splice",
    # provisional: interface adaptation (--adapt-interface, rewriter.io.interface)
    "Adaptation",
    "record_adaptation",
    # provisional: the kernel runtime adapters
    "EXTENSIONS",
    "library_path",
    "read_needs",
    "reference_ops",
    "register_onnxruntime",
    "KernelSession",
    "prepare_kernels",
]

if TYPE_CHECKING:
    from rewriter.comparison.runtime import KernelSession, prepare_kernels

_RUNTIME = frozenset({"KernelSession", "prepare_kernels"})


def __getattr__(name: str):
    # the kernel runtime adapters import onnxruntime (~35 MiB): only when a plugin asks
    if name in _RUNTIME:
        from rewriter.comparison import runtime

        return getattr(runtime, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
