"""Targets that answer by loading the model in a runtime: :class:`RuntimeTarget`.

A runtime that publishes no operator table (OpenVINO, tract) is asked: the whole model first
when it is small (one answer for every node), else one probe model per distinct node
signature, each verdict cached per process by what it depends on. A refusal of the whole
model that names a node is pointed at that node; one that names none is a finding on the
model when no node finding explains it. ``confirm`` loads the whole model as users do (by
path, with its external data beside it) in a child process and runs it once on generated
inputs; a runtime that may crash the process answers probes in a :class:`ProbeWorker`.

The base class holds that scaffolding; a subclass says how its runtime is asked
(``docs/targets.md``, "Writing a target over a runtime").
"""

from __future__ import annotations

import hashlib
import pickle
from collections.abc import Callable, Mapping
from typing import Any, ClassVar

from rewriter.detect.probe_models import external, inferred_shapes, model_constants, model_file
from rewriter.detect.targets import (
    RUN_BY_DEFAULT_BELOW,
    Confirmation,
    Finding,
    NodeQuery,
    Target,
    TargetOptions,
    confirm_in_child,
    generated_feeds,
    model_size,
    refused_node,
)
from rewriter.errors import RewriterError

# check_model's verdict on a model it did not ask the runtime about (too big, external data)
NOT_ASKED = ("not-asked", "")
Verdict = tuple[str, str] | None  # None: it runs; else (reason, detail)


class RuntimeTarget(Target):
    """A target that answers by loading models in its runtime.

    A subclass sets :attr:`runtime` (its name in messages) and implements:

    * :meth:`ask_whole_model`: the runtime's verdict on a whole model's bytes (None: it runs);
    * :meth:`check_node`: a node's verdict, usually from a one-node probe model
      (:func:`rewriter.detect.probe_models.probe_inputs` and ``one_node_model``, with the
      model's :attr:`constants` and inferred :attr:`shapes`), cached with
      :meth:`cached_verdict`; :meth:`blamed_verdict` where the whole model's refusal named
      the node;
    * :meth:`confirm_job`: the confirming child's script and what it is given (the child
      reports with :func:`rewriter.detect.targets.child_says`);
    * :meth:`prepare` (:class:`Target`'s), to run models for ``compare``.

    It inherits :meth:`check_model` (the whole model first, then the shapes probes need),
    :meth:`check_done`, :meth:`confirmation` (in a child process, cached), the confirmation
    defaults (:meth:`wants_confirm` up to :attr:`confirm_by_default_below` bytes), onnxruntime's
    schemas (contrib ops' output types known), and the answer that it runs no custom kernels.
    """

    runtime: str = "the runtime"  # its name in messages ("OpenVINO", "tract")
    confirm_by_default_below: int = 100 * 2**20  # bytes of model + external data
    confirm_timeout_s: float = 300
    # the whole model is asked first (one answer for every node) up to this many nodes...
    whole_model_max_nodes: int = 500
    # ...and shape inference (the probes' input shapes) runs on models up to this many
    shape_inference_max_nodes: int = 20_000
    # check_model asks the whole model first and probes nodes only if it refuses; False:
    # probe every node (what a benchmark's "per-node" figures measure)
    model_fast_path: bool = True
    # verdict key -> verdict, one cache per process and class (a subclass may share its
    # parent's by naming it in its body)
    verdicts: ClassVar[dict[tuple, Verdict]] = {}

    def __init_subclass__(cls, **kwargs) -> None:
        super().__init_subclass__(**kwargs)
        if "verdicts" not in cls.__dict__:
            cls.verdicts = {}

    def __init__(self, name: str, description: str, options: TargetOptions | None = None):
        options = options or TargetOptions()
        self.name = name
        self.description = description
        self.confirm_option = options.confirm
        self.plugins = options.plugins
        self.as_oracle = options.oracle  # runs originals for a comparison (TargetOptions)
        # about the model last checked (check_model): name -> TensorProto of its constants,
        # name -> TypeProto with shape (when the whole model did not run), whether the whole
        # model runs, the verdicts its refusal blames on nodes (path -> verdict), and a
        # refusal that names no node (check_done)
        self.constants: dict = {}
        self.shapes: dict = {}
        self.model_runs = False
        self.blamed: dict[str, tuple[str, str]] = {}
        self.model_refusal: Finding | None = None
        self.confirmations: dict[tuple, Confirmation] = {}

    @property
    def schemas(self):
        """onnxruntime's schema registry: onnx's plus the contrib domains (com.microsoft),
        whose output types the walk then knows (a probe needs its inputs' types)."""
        from rewriter.graph.schemas import onnxruntime_schemas

        return onnxruntime_schemas()

    # -- what a subclass implements ---------------------------------------------------------

    def ask_whole_model(self, data: bytes) -> Verdict:
        """The runtime's verdict on the whole model serialized as ``data`` (without external
        data): None when it loads (and runs), else (reason, detail)."""
        raise NotImplementedError

    def confirm_job(self, model, base_dir, data: bytes, path: str | None,
                    feeds: list | None) -> tuple[list[str], dict]:
        """The confirming child: (``argv`` for :func:`rewriter.detect.targets.confirm_in_child`,
        its first item the script; the job pickled on its stdin). ``data``: the model's
        bytes (:meth:`confirm_bytes`), ``path``: the model as a file (None: not asked by
        path), ``feeds``: the input sets to run it on (None: not run)."""
        raise NotImplementedError

    # -- the model -----------------------------------------------------------------------------

    def remember(self, model) -> None:
        """Per-model state a subclass keeps before the whole model is asked (default none)."""

    def check_model(self, model) -> list[Finding]:
        """Remember the model's constants for the node probes; ask the runtime about the
        whole model first when it is small (then no node needs a probe, or its refusal
        names the node to blame); infer shapes for the probes when it does not run."""
        self.constants = model_constants(model)
        self.shapes, self.blamed, self.model_refusal = {}, {}, None
        self.remember(model)
        verdict = self.whole_model_verdict(model)
        self.model_runs = self.runs_whole(verdict)
        if not self.model_runs and len(model.graph.node) <= self.shape_inference_max_nodes:
            self.shapes = inferred_shapes(model)
            self.shapes_inferred(model)
        return self.model_findings(model, verdict)

    def runs_whole(self, verdict: Verdict) -> bool:
        """Whether the whole model's ``verdict`` means every node runs."""
        return verdict is None

    def shapes_inferred(self, model) -> None:
        """Called when :attr:`shapes` holds the model's inferred shapes (default nothing)."""

    def model_findings(self, model, verdict: Verdict) -> list[Finding]:
        """The model-level findings of the whole model's ``verdict`` (NOT_ASKED: none)."""
        if verdict is None or verdict is NOT_ASKED:
            return []
        return self.blame(model, verdict)

    def whole_model_bytes(self, model) -> bytes:
        """The bytes :meth:`ask_whole_model` is asked about (default: the model's)."""
        return model.SerializeToString()

    def verdict_scope(self) -> tuple:
        """What every cached verdict of this target also depends on (a device...)."""
        return ()

    def whole_model_verdict(self, model) -> Verdict:
        """The runtime's verdict on the whole model, cached by its bytes: asked of models of
        up to :attr:`whole_model_max_nodes` nodes and :attr:`confirm_by_default_below`
        bytes, without external data (their folder is not known here); NOT_ASKED
        otherwise (the probes decide)."""
        from rewriter.graph.walk import iter_tensors

        if not self.model_fast_path or len(model.graph.node) > self.whole_model_max_nodes:
            return NOT_ASKED
        if model.ByteSize() > self.confirm_by_default_below:
            return NOT_ASKED
        if any(external(t) for _, t in iter_tensors(model)):
            return NOT_ASKED
        data = self.whole_model_bytes(model)
        key = (*self.verdict_scope(), "model", hashlib.sha256(data).digest())
        return self.cached_verdict(key, lambda: self.ask_whole_model(data))

    def cached_verdict(self, key: tuple, ask: Callable[[], Verdict]) -> Verdict:
        """The verdict cached under ``key`` in :attr:`verdicts`, asked once."""
        if key not in self.verdicts:
            self.verdicts[key] = ask()
        return self.verdicts[key]

    def blame(self, model, verdict: tuple[str, str]) -> list[Finding]:
        """Where the runtime's refusal of the whole model points: the node it names (its
        finding comes from :meth:`check_node`, :meth:`blamed_verdict`); else a finding on
        the model (:meth:`check_done`, when no node finding explains it)."""
        if self.blame_node(model, verdict):
            return []
        self.keep_model_refusal(verdict)
        return []

    def blame_node(self, model, verdict: tuple[str, str]) -> bool:
        """Record ``verdict`` for the node its detail names, if it names one."""
        site = refused_node(model, verdict[1])
        if site is None:
            return False
        self.blamed[site.path] = verdict
        return True

    def blame_by_prefix(self, model, verdict: tuple[str, str]) -> bool:
        """Record ``verdict`` for the first main-graph node whose prefix of the model the
        runtime refuses (:mod:`rewriter.detect.bisect`: a panic that names no node); whether
        one was found."""
        from rewriter.detect.bisect import bisect_refusal

        found = bisect_refusal(model, self)
        if found is None:
            return False
        self.blame_main_node(model, found.index, (verdict[0], found.detail(self.name)))
        return True

    def blame_main_node(self, model, index: int, verdict: tuple[str, str]) -> None:
        """Record ``verdict`` for the main-graph node at ``index`` (found by
        :meth:`blamed_verdict`)."""
        from rewriter.graph.walk import main_node_site

        self.blamed[main_node_site(model, index).path] = verdict

    def keep_model_refusal(self, verdict: tuple[str, str]) -> None:
        """Keep ``verdict`` as a finding on the model, for :meth:`check_done`."""
        self.model_refusal = Finding(target=self.name, path="model", domain="", op_type="",
                                version=None, reason=verdict[0], detail=verdict[1])

    def check_done(self, model, findings) -> list[Finding]:
        """The runtime's refusal of the whole model that names no node (see :meth:`blame`),
        when no node finding of this target explains it."""
        refusal, self.model_refusal = self.model_refusal, None
        if refusal is None or any(f.target == self.name for f in findings):
            return []
        return [refusal]

    # -- per node ------------------------------------------------------------------------------

    @staticmethod
    def in_body(query: NodeQuery) -> bool:
        """Whether the planner asks about a node of a decomposition body (not the model's)."""
        return "/<body>/" in query.path

    def blamed_verdict(self, query: NodeQuery) -> tuple[str, str] | None:
        """The whole model's refusal, where it named this node of the model."""
        return None if self.in_body(query) else self.blamed.get(query.path)

    # -- confirmation and runs -------------------------------------------------------------------

    def kernel_problem(self, remedy) -> str | None:
        return f"{self.runtime} runs no Python or onnxruntime custom-op kernels"

    def wants_confirm(self, loaded) -> bool:
        return self.confirm_by_size(self.confirm_option, loaded, self.confirm_by_default_below)

    def confirm(self, model, base_dir) -> str | None:
        """The runtime's refusal of the model (see :meth:`confirmation`), or None."""
        return self.confirmation(model, base_dir).refusal

    def confirm_bytes(self, model, base_dir, data: bytes) -> bytes:
        """The bytes the confirming child is given, from the model's own (``data``; the
        default; OSError or ValueError: a refusal at load, "cannot read the model's
        external data")."""
        return data

    def confirmation_key(self) -> tuple:
        """What a confirmation depends on besides the model's bytes and folder."""
        return ()

    def early_confirmation(self, model, base_dir) -> Confirmation | None:
        """A confirmation decided without the child (cached like the child's), or None; a
        RewriterError it raises is a refusal at load (not cached)."""
        return None

    def clean_message(self, message: str) -> str:
        """The runtime's error, said in one readable line (default: stripped)."""
        return message.strip()

    def confirmation(self, model, base_dir) -> Confirmation:
        """Load the whole model in a child process as users do, by path (the model written
        to a private temporary folder with its external data beside it) and from bytes, and,
        for models up to RUN_BY_DEFAULT_BELOW bytes, run it once there on generated inputs
        (a crash is an answer, not our crash; :func:`rewriter.detect.targets.confirm_in_child`
        says what a failed run counts as). Cached per model bytes and folder."""
        own = model.SerializeToString()
        try:
            data = self.confirm_bytes(model, base_dir, own)
        except (OSError, ValueError) as e:
            return Confirmation(f"cannot read the model's external data: {e}", "load")
        key = (hashlib.sha256(data).digest(), str(base_dir), *self.confirmation_key())
        if key in self.confirmations:
            return self.confirmations[key]
        try:
            early = self.early_confirmation(model, base_dir)
        except RewriterError as e:
            return Confirmation(str(e), "load")
        if early is not None:
            self.confirmations[key] = early
            return early
        feeds, note = None, f"not run: larger than {RUN_BY_DEFAULT_BELOW // 2**20} MiB"
        if self.confirm_by_size(None, model_size(model, base_dir), RUN_BY_DEFAULT_BELOW):
            feeds, note = generated_feeds(model)
        try:
            with model_file(model, base_dir, own) as file:
                argv, job = self.confirm_job(model, base_dir, data, file.path, feeds)
                result = confirm_in_child(self, self.runtime, argv, pickle.dumps(job),
                                          base_dir, self.confirm_timeout_s, self.clean_message)
        except ValueError as e:  # an external-data location leaving the model's folder
            return Confirmation(str(e), "load")
        note = "; ".join(n for n in (file.note, note) if n)
        if note and result.refusal is None and not result.note:
            result = Confirmation(ran=result.ran, note=note)
        self.confirmations[key] = result
        return result

    @staticmethod
    def run_model_file(model, base_dir):
        """(``model`` as a file for a run function, an ExitStack that removes it): see
        :func:`rewriter.detect.probe_models.model_file`; RuntimeError for an external-data
        location leaving ``base_dir``. Close the stack once the run function is gone
        (``weakref.finalize(run, stack.close)``)."""
        import contextlib

        stack = contextlib.ExitStack()
        try:
            file = stack.enter_context(model_file(model, base_dir))
        except ValueError as e:
            raise RuntimeError(str(e)) from None
        return file, stack


# -- a worker process for runtimes that may crash the process ---------------------------------

class ProbeCrashed(Exception):
    """The probe worker died or hung (then it was killed): ``timed_out``, and its last words
    on stderr (``lines``)."""

    def __init__(self, timed_out: bool, lines: list[str]) -> None:
        super().__init__("timed out" if timed_out else (lines[-1] if lines else "crashed"))
        self.timed_out = timed_out
        self.lines = lines

    def panic(self) -> tuple[bool, str]:
        """(whether a Rust panic is among its last words, the line that says what happened)."""
        lines = self.lines
        panic = next((ln for ln in lines if "panicked at" in ln), None)
        index = lines.index(panic) if panic else -1
        said = lines[index + 1] if panic and index + 1 < len(lines) else (
            lines[-1] if lines else "no message")
        return panic is not None, said


class ProbeWorker:
    """A child process answering questions, one at a time (pickles on its stdin and stdout):
    ``answer`` ("module:function", run there as ``function(*question)``; the child loops in
    :func:`serve_probes`). When the runtime crashes it (a Rust panic aborts) or takes longer
    than ``timeout`` seconds, :meth:`ask` raises :class:`ProbeCrashed` (the verdict on the
    model asked about), and the next question starts a new child. ``env``: variables set for
    the child."""

    def __init__(self, answer: str, timeout: float, env: Mapping[str, str] | None = None):
        self.answer = answer
        self.timeout = timeout
        self.env = dict(env or {})
        self.proc = None
        self.stderr = None

    def _start(self) -> None:
        import os
        import subprocess
        import sys
        import tempfile

        module, _, function = self.answer.partition(":")
        self.stderr = tempfile.TemporaryFile()
        self.proc = subprocess.Popen(
            [sys.executable, "-c", f"from rewriter.detect.runtime_target import serve_probes\n"
             f"from {module} import {function}\nserve_probes({function})\n"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.stderr,
            env=dict(os.environ, **self.env))

    def ask(self, *question: Any) -> Any:
        import select
        import struct

        if self.proc is None or self.proc.poll() is not None:
            self._start()
        request = pickle.dumps(question)
        ready = [self.proc.stdout]  # an error writing: the child is gone, not slow
        try:
            self.proc.stdin.write(struct.pack("<Q", len(request)) + request)
            self.proc.stdin.flush()
            ready, _, _ = select.select([self.proc.stdout], [], [], self.timeout)
            header = self.proc.stdout.read(8) if ready else b""
            if len(header) == 8:
                return pickle.loads(self.proc.stdout.read(struct.unpack("<Q", header)[0]))
        except (BrokenPipeError, OSError, EOFError, pickle.UnpicklingError):
            pass
        raise self._failed(bool(ready))

    def _failed(self, answered: bool) -> ProbeCrashed:
        """The child died (or hung: it is killed): its last words."""
        self.proc.kill()
        self.proc.wait()
        self.stderr.seek(0)
        lines = [ln.strip() for ln in self.stderr.read().decode(errors="replace").splitlines()
                 if ln.strip()]
        self.stderr.close()
        self.proc = None
        return ProbeCrashed(not answered, lines)


def serve_probes(answer: Callable[..., Any]) -> None:
    """The probe worker's loop (:class:`ProbeWorker`): a question per pickle on stdin, the
    pickle of ``answer(*question)`` on stdout; ends at the end of stdin (its parent is
    gone)."""
    import struct
    import sys

    try:  # Linux: killed with the parent, even when the runtime hangs
        import ctypes
        import signal

        ctypes.CDLL(None).prctl(1, signal.SIGKILL)
    except (OSError, AttributeError):
        pass
    stdin, stdout = sys.stdin.buffer, sys.stdout.buffer
    sys.stdout = sys.stderr  # nothing else may write on the answers' channel
    while True:
        header = stdin.read(8)
        if len(header) < 8:
            return
        question = pickle.loads(stdin.read(struct.unpack("<Q", header)[0]))
        reply = pickle.dumps(answer(*question))
        stdout.write(struct.pack("<Q", len(reply)) + reply)
        stdout.flush()
