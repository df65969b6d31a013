"""Target ``reference``: the ONNX reference evaluator (``onnx.reference``).

A node runs when the evaluator has a Python implementation for its domain, op and version,
or the op is a spec function it can expand. ``confirm`` builds the evaluator and, for models
up to 1 MiB, runs it once on generated inputs (in process: it is Python).
"""

from __future__ import annotations

from rewriter.plugin import (
    REFUSED,
    RUNS,
    Confirmation,
    Finding,
    NodeQuery,
    Target,
    TargetOptions,
    generated_feeds,
    hookimpl,
    model_size,
    normalize_domain,
    onnx_schemas,
    opset_import_findings,
    run_sets,
)

CONFIRM_BY_DEFAULT_BELOW = 20 * 2**20
# The evaluator is numpy one node at a time, in process: confirmations run models up to this
# size only (bigger ones are only loaded)
RUN_BY_DEFAULT_BELOW = 2**20

_LOADERS = {
    "": "onnx.reference.ops",
    "ai.onnx.ml": "onnx.reference.ops.aionnxml",
    "ai.onnx.preview": "onnx.reference.ops.aionnx_preview",
    "ai.onnx.preview.training": "onnx.reference.ops.aionnx_preview_training",
    "experimental": "onnx.reference.ops.experimental",
}


class ReferenceTarget(Target):
    name = "reference"
    description = "the ONNX reference evaluator (onnx.reference.ReferenceEvaluator)"

    def __init__(self, options: TargetOptions | None = None) -> None:
        options = options or TargetOptions()
        self.confirm_option = options.confirm
        self.extra_ops = tuple(options.reference_ops)
        self._extra = {(normalize_domain(getattr(op, "op_domain", "")), op.__name__)
                       for op in self.extra_ops}
        self._verdicts: dict[tuple, tuple[str, str] | None] = {}
        self.plugins = options.plugins
        self._given_ops = self.extra_ops

    def check_model(self, model):
        findings = opset_import_findings(
            self.name, model, onnx_schemas().max_version, ("", "ai.onnx.ml")
        )
        problem = self._use_kernels(model)
        if problem:
            findings.append(Finding(self.name, "model", "", "", None, "no-kernel", problem))
        return findings

    def _use_kernels(self, model) -> str | None:
        """Python kernels a rewritten model's metadata lists become extra ops (OpRun
        classes) when the installed plugins provide them; returns what is missing."""
        from rewriter.plugin import RewriterError, read_needs, reference_ops

        ops, problem = list(self._given_ops), None
        try:
            if read_needs(model).python:
                ops += reference_ops(model, self._registry(), only_retargeted=True)
        except RewriterError as e:
            problem = str(e)
        self.extra_ops = tuple(ops)
        self._extra = {(normalize_domain(getattr(op, "op_domain", "")), op.__name__)
                       for op in self.extra_ops}
        return problem

    def kernel_problem(self, remedy) -> str | None:
        """Python kernels run as extra ops of the evaluator; native library ops do not."""
        if remedy.kind != "python":
            return (f"the reference evaluator cannot run {remedy.use.library}'s native "
                    f"{remedy.use.key}")
        return None

    def check_op(self, domain: str, op_type: str, opset: int | None) -> str:
        """The evaluator's verdict depends on the op alone (its kernels take any type)."""
        if (domain, op_type) in self._extra:
            return RUNS
        if opset is None or domain not in _LOADERS:
            return REFUSED
        if domain != "experimental" and onnx_schemas().resolve(domain, op_type, opset) is None:
            return REFUSED
        key = (domain, op_type, opset)
        if key not in self._verdicts:
            self._verdicts[key] = self._load(domain, op_type, opset)
        return RUNS if self._verdicts[key] is None else REFUSED

    def check_node(self, query: NodeQuery) -> Finding | None:
        node, domain, opset = query.node, query.domain, query.opset
        if (domain, node.op_type) in self._extra:
            return None  # a Python kernel given for it
        if opset is None:
            return self.finding(
                query, "domain-not-imported",
                f"the model has no opset import for domain {domain or 'ai.onnx'!r}",
            )
        if domain not in _LOADERS:
            return self.finding(
                query, "unknown-domain",
                f"the reference evaluator implements no operators in domain {domain!r}",
            )
        schema = onnx_schemas().resolve(domain, node.op_type, opset)
        if schema is None and domain != "experimental":
            return self.finding(
                query, "no-schema",
                f"onnx has no schema for {domain or 'ai.onnx'}::{node.op_type} at opset {opset}",
            )
        key = (domain, node.op_type, opset)
        if key not in self._verdicts:
            self._verdicts[key] = self._load(domain, node.op_type, opset)
        verdict = self._verdicts[key]
        if verdict is None:
            return None
        version = schema.since_version if schema else opset
        return self.finding(query, verdict[0], verdict[1], version=version)

    @staticmethod
    def _load(domain: str, op_type: str, opset: int) -> tuple[str, str] | None:
        import importlib

        from onnx.reference import ReferenceEvaluator
        from onnx.reference.op_run import RuntimeContextError

        module = importlib.import_module(_LOADERS[domain])
        # a function op (Mish-24, HardSwish-24) is expanded by the evaluator: its body is
        # built by the class given here, as the evaluator does at run time
        extra = {"evaluator_cls": ReferenceEvaluator} if domain == "" else {}
        try:
            module.load_op(domain, op_type, opset, **extra)
        except RuntimeContextError:
            return None  # a context-dependent function: expanded per node at run time
        except (NotImplementedError, ValueError, KeyError, ImportError, RuntimeError) as e:
            # RuntimeError: onnx 1.23 has no DequantizeLinear/QuantizeLinear before version 19
            first = (str(e).strip().splitlines() or [type(e).__name__])[0]
            return ("no-kernel", f"no reference implementation of {op_type}({opset}): {first}")
        return None

    def wants_confirm(self, loaded) -> bool:
        return self.confirm_by_size(self.confirm_option, loaded, CONFIRM_BY_DEFAULT_BELOW)

    def confirm(self, model, base_dir) -> str | None:
        return self.confirmation(model, base_dir).refusal

    def confirmation(self, model, base_dir) -> Confirmation:
        """Build the evaluator, then run it once on generated inputs: a NotImplementedError
        (an attribute value or mode it lacks) or a message saying it lacks something is a
        refusal; other run errors may come from the inputs."""
        try:
            evaluator = self._evaluator(model, base_dir)
        except Exception as e:  # noqa: BLE001 - the evaluator's refusal is the answer
            return Confirmation(_first_line(e), "load")
        if not self.confirm_by_size(None, model_size(model, base_dir), RUN_BY_DEFAULT_BELOW):
            return Confirmation(note=f"not run: larger than {RUN_BY_DEFAULT_BELOW // 2**20} "
                                "MiB (the reference evaluator is slow)")
        sets, note = generated_feeds(model)
        if sets is None:
            return Confirmation(note=note)
        lacks = []

        def run(feeds):
            try:
                evaluator.run(None, {n: feeds[n] for n in evaluator.input_names if n in feeds})
            except Exception as e:  # noqa: BLE001
                if isinstance(e, NotImplementedError):
                    lacks.append(e)
                raise RuntimeError(f"{type(e).__name__}: {_first_line(e)}{_where(e)}") from None

        error, values = run_sets(run, sets)
        if error is None:
            return Confirmation(ran=True)
        if values:
            return Confirmation.varied(error)
        if lacks or self.run_refuses(error):
            return Confirmation(error, "run")
        return Confirmation.inconclusive(error)

    def _evaluator(self, model, base_dir):
        from onnx import ModelProto
        from onnx.external_data_helper import load_external_data_for_model, uses_external_data

        from rewriter.plugin import iter_tensors

        problem = self._use_kernels(model)  # kernels a rewritten model lists
        if problem:
            raise RuntimeError(problem)
        if any(uses_external_data(t) for _, t in iter_tensors(model)):
            copy = ModelProto()
            copy.CopyFrom(model)
            load_external_data_for_model(copy, str(base_dir))
            model = copy
        return evaluator_class(self.extra_ops)(model)

    def prepare(self, model, base_dir):
        """A ReferenceEvaluator (with the extra Python kernels) as a run function."""
        evaluator = self._evaluator(model, base_dir)
        inputs = list(evaluator.input_names)
        outputs = list(evaluator.output_names)

        def run(feeds):
            given = {name: feeds[name] for name in inputs if name in feeds}
            return dict(zip(outputs, evaluator.run(None, given)))

        return run


def _first_line(e: BaseException) -> str:
    return (str(e).strip().splitlines() or [type(e).__name__])[0]


def _where(e: BaseException) -> str:
    """" (node with name 'N')" for the innermost operator of the evaluator that was running
    when ``e`` was raised (" (the node of output 'y')" when it has no name), else ""."""
    node, tb = None, e.__traceback__
    while tb is not None:
        node = getattr(tb.tb_frame.f_locals.get("self"), "onnx_node", node)
        tb = tb.tb_next
    if node is None:
        return ""
    if node.name:
        return f" (node with name '{node.name}')"
    return f" (the node of output '{node.output[0]}')" if node.output else ""


def evaluator_class(ops: tuple[type, ...]):
    """ReferenceEvaluator knowing ``ops`` everywhere: onnx builds the evaluators of
    model-local functions with the evaluator's class but without ``new_ops``, so the extra
    kernels must be a default of the class itself."""
    from onnx.reference import ReferenceEvaluator

    if not ops:
        return ReferenceEvaluator

    class WithKernels(ReferenceEvaluator):
        def __init__(self, proto, *args, **kwargs):
            kwargs.setdefault("new_ops", list(ops))
            super().__init__(proto, *args, **kwargs)

    return WithKernels


@hookimpl
def register_targets(registry):
    registry.add(
        "reference",
        lambda argument, options=None: ReferenceTarget(options),
        description="the ONNX reference evaluator",
    )
