"""Run rewritten models: an onnxruntime session with every kernel the model needs.

``rewriter.session(path_or_model)`` reads the kernels a rewrite recorded in the model's
metadata (``rewriter.plan.kernels``), resolves them through the installed plugins, registers the
Python ones with onnxruntime-extensions (lazily, once per process) and registers the custom-op
libraries the model needs. ``onnx-rewriter run`` does the same from the shell.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort
from onnx import ModelProto

from rewriter.errors import RewriterError
from rewriter.io.interface import read_interface, to_original
from rewriter.plan.kernels import (
    KernelRunError,
    library_path,
    read_needs,
    register_onnxruntime,
    resolve_needs,
    take_kernel_errors,
)


class KernelSession(ort.InferenceSession):
    """An InferenceSession whose ``run`` re-raises what a Python kernel raised (an exception
    cannot cross onnxruntime-extensions' boundary: the kernel returns empty outputs and the
    error is recorded instead), and gives the outputs a rewrite adapted
    (``--adapt-interface``, :attr:`interface`) back as the original model gave them: a list
    of maps for ZipMap's output, string labels. ``get_outputs()`` describes the model as it
    is (the adapted types)."""

    # output name -> rewriter.io.interface.Adaptation (set by rewriter.session)
    interface: Mapping[str, Any] = {}

    def run(self, output_names, input_feed, run_options=None):
        take_kernel_errors()
        try:
            result = super().run(output_names, input_feed, run_options)
        except Exception as e:
            errors = take_kernel_errors()
            if errors:
                raise _kernel_error(errors) from e
            raise
        errors = take_kernel_errors()
        if errors:
            raise _kernel_error(errors)
        if self.interface:
            names = list(output_names or [o.name for o in self.get_outputs()])
            back = to_original(dict(zip(names, result)), self.interface)
            result = [back[n] for n in names]
        return result


def _kernel_error(errors) -> KernelRunError:
    name, e = errors[0]
    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    err = KernelRunError(f"kernel ai.onnx.contrib::{name} raised {type(e).__name__}: {e}{more}")
    err.__cause__ = e
    return err


def prepare_kernels(model: ModelProto, registry) -> list[str]:
    """Register every kernel ``model`` needs; return the custom-op library paths a session
    must register. Raises KernelError naming each op no installed plugin provides."""
    needs = read_needs(model)
    if not needs:
        return []
    kernels = resolve_needs(needs, registry)
    if needs.python:
        register_onnxruntime(needs.python.values(), kernels)
    return [library_path(lib) for lib in needs.libraries]


def _load(model) -> tuple[ModelProto, Path | None]:
    """The model and the folder its external data is read from (None: it has none). A
    ``ModelProto`` is validated as a file is (:func:`rewriter.io.model.as_loaded`: its data
    resolved against the current directory, never through a link out of it)."""
    from rewriter.io.model import as_loaded

    loaded = as_loaded(model)
    if isinstance(model, ModelProto) and not loaded.external_files:
        return loaded.model, None
    return loaded.model, loaded.base_dir


def session(
    model: str | os.PathLike | ModelProto,
    providers: Sequence[str] | None = None,
    *,
    plugins: Any = None,
    sess_options: ort.SessionOptions | None = None,
    custom_op_libraries: Sequence[str] = (),
) -> KernelSession:
    """An onnxruntime InferenceSession for ``model`` with every kernel it needs registered,
    whose ``run`` gives outputs a rewrite adapted (``--adapt-interface``) in the original
    model's form (:class:`KernelSession`).

    Args:
        model: a path or a ModelProto (external data is read relative to the file).
        providers: onnxruntime execution providers (default: CPU).
        plugins: loaded plugins (:func:`rewriter.manager.load_plugins`), or ``-p`` values to
            load (default: the installed plugins).
        sess_options: session options to start from (libraries are added to them).
        custom_op_libraries: extra custom-op libraries (``"extensions"`` allowed).

    Raises:
        KernelError: the model needs a kernel no installed plugin provides (the message names
            the op and the plugin to install).
    """
    from rewriter.manager import Plugins, load_plugins

    if not isinstance(plugins, Plugins):
        plugins = load_plugins(tuple(plugins or ()))
    proto, base_dir = _load(model)
    libraries = prepare_kernels(proto, plugins.registry)
    libraries += [library_path(x) for x in custom_op_libraries]
    so = sess_options
    if so is None:
        so = ort.SessionOptions()
        so.log_severity_level = 3  # declared-vs-actual shape warnings are noise here
    for lib in dict.fromkeys(libraries):
        so.register_custom_ops_library(lib)
    if base_dir is not None:
        so.add_session_config_entry(
            "session.model_external_initializers_file_folder_path", str(base_dir))
    source: Any = proto.SerializeToString()
    if base_dir is not None and not isinstance(model, ModelProto):
        source = str(model)
    try:
        sess = KernelSession(source, so, providers=list(providers or ["CPUExecutionProvider"]))
        sess.interface = read_interface(proto)
        return sess
    except RewriterError:
        raise
    except Exception as e:  # noqa: BLE001 - onnxruntime's own exception classes vary
        name = _display_name(model)
        raise RuntimeFailure(
            f"onnxruntime cannot load {name}: {_first_line(e)} (`onnx-rewriter check` says "
            "why; `onnx-rewriter rewrite` fixes what it can)"
        ) from e


# -- running once ---------------------------------------------------------------------------
# Inputs are generated or loaded by rewriter.io.inputs (shared with compare).


def save_outputs(path: str | os.PathLike, outputs: Mapping[str, np.ndarray], *,
                 protected: Sequence[str | os.PathLike] = ()) -> Path:
    """Outputs to an .npz file (object string arrays stored as unicode arrays), written
    through :mod:`rewriter.io.output`: atomic, never over a ``protected`` file (the model
    and its data, by path, symlink or hard link)."""
    from rewriter.io import output

    arrays = {k: (np.asarray(v).astype(str) if np.asarray(v).dtype == object else v)
              for k, v in outputs.items()}
    return output.write_file(path, lambda f: np.savez(f, **arrays), protected=protected)


def run(
    model: str | os.PathLike | ModelProto,
    inputs: Mapping[str, Any] | None = None,
    *,
    dims: Mapping[str, int] | None = None,
    seed: int = 0,
    providers: Sequence[str] | None = None,
    plugins: Any = None,
    timeout: float | None = None,
    memory_limit: int | None = None,
    custom_op_libraries: Sequence[str] = (),
) -> tuple[dict[str, Any], dict[str, Any], bool]:
    """Run ``model`` once: (outputs by name, the inputs used, whether they were generated);
    outputs a rewrite adapted (``--adapt-interface``) are given as the original gave them.
    Without ``inputs``, seeded random ones are made from the declared types and shapes
    (symbolic dimensions from ``dims``).

    The model runs in the child process ``compare`` uses
    (:mod:`rewriter.comparison.isolation`), with every kernel its metadata lists
    registered: a kernel that crashes, hangs past ``timeout`` seconds or runs out of memory
    (``memory_limit`` bytes of address space) is a :class:`RuntimeFailure`, never the end of
    this process.

    Raises:
        RuntimeFailure: onnxruntime cannot load or run the model (its reason in one line).
        InputError: the inputs do not fit the model.
    """
    from rewriter.comparison.isolation import DEFAULT_TIMEOUT_S, Job, shared_runner
    from rewriter.io.inputs import check_feeds, generate_inputs
    from rewriter.io.model import as_loaded
    from rewriter.manager import Plugins, load_plugins

    if not isinstance(plugins, Plugins):
        plugins = load_plugins(tuple(plugins or ()))
    loaded = as_loaded(model)
    proto = loaded.model
    generated = inputs is None
    if generated:
        inputs = generate_inputs(proto, seed=seed, dims=dims)
    check_feeds(inputs, proto)
    feeds = {k: (v.astype(object) if isinstance(v, np.ndarray) and v.dtype.kind == "U" else v)
             for k, v in inputs.items()}
    provider = (list(providers or []) or ["CPUExecutionProvider"])[0]
    target = "onnxruntime" if provider == "CPUExecutionProvider" else f"onnxruntime:{provider}"
    name = _display_name(model)
    job = Job.make(target, proto, loaded.base_dir, [feeds], plugins=plugins,
                   custom_op_libraries=custom_op_libraries)
    runner = shared_runner(plugins, memory_limit=memory_limit)
    result = runner.run(job, DEFAULT_TIMEOUT_S if timeout is None else timeout)
    if result.ok:
        outputs = to_original(dict(result.outputs[0]), read_interface(proto))
        return outputs, dict(inputs), generated
    raise RuntimeFailure(_failure_text(result, name))


_LOAD = "could not load the model: "


def _display_name(model) -> str:
    """How errors name ``model``: its file, or "the model" for one given in memory."""
    from rewriter.io.model import IN_MEMORY, LoadedModel

    if isinstance(model, LoadedModel):
        return "the model" if str(model.path) == IN_MEMORY else str(model.path)
    return "the model" if isinstance(model, ModelProto) else str(model)


def _failure_text(result, name: str) -> str:
    """One line for a run that did not give outputs."""
    error = result.error
    if result.kind == "error" and error.startswith(_LOAD):
        return (f"onnxruntime cannot load {name}: {error[len(_LOAD):]} (`onnx-rewriter check` "
                "says why; `onnx-rewriter rewrite` fixes what it can)")
    if result.kind == "error" and error.startswith("cannot create target"):
        return f"cannot run {name}: {error}"
    if result.kind == "error":
        return f"onnxruntime failed running {name}: {error.removeprefix('failed: ')}"
    if result.kind == "timeout":
        return f"running {name} {error}"
    return f"running {name} in a child process: {error}"


class RuntimeFailure(RewriterError):
    """onnxruntime refused or failed to run a model (one line; exit 2)."""


def _first_line(e: BaseException) -> str:
    from rewriter.errors import one_line

    text = str(e).strip().splitlines()
    return one_line(text[0]) if text else type(e).__name__


def confirm_child(provider: str, base_dir: str, specs: Sequence[str], autoload: bool,
                  libraries: Sequence[str], model_bytes: bytes) -> str | None:
    """Build a session for a model that needs kernels (run in the confirming child)."""
    import onnx

    from rewriter.console import die_with_parent

    die_with_parent()  # a parent killed meanwhile leaves no session being built

    from rewriter.manager import load_plugins

    plugins = load_plugins(tuple(specs), autoload=autoload)
    model = onnx.load_from_string(model_bytes)
    so = ort.SessionOptions()
    so.log_severity_level = 4
    so.add_session_config_entry("session.model_external_initializers_file_folder_path",
                                base_dir)
    try:
        libs = prepare_kernels(model, plugins.registry) + list(libraries)
        for lib in dict.fromkeys(libs):
            so.register_custom_ops_library(lib)
        ort.InferenceSession(model_bytes, so, providers=[provider])
    except Exception as e:  # noqa: BLE001 - the refusal is the answer
        text = str(e).strip()
        return text.splitlines()[0] if text else type(e).__name__
    return None


def describe(name: str, value: Any) -> dict[str, Any]:
    """A short, JSON-friendly description of one array (or sequence of maps, as ZipMap's)."""
    if isinstance(value, list) and value and all(isinstance(m, Mapping) for m in value):
        return {"name": name, "dtype": "seq(map)", "shape": [len(value)],
                "preview": [{str(k): float(v) for k, v in m.items()} for m in value[:2]]}
    arr = np.asarray(value)
    flat = arr.reshape(-1)[:6]
    preview = [v if isinstance(v, str) else (v.item() if hasattr(v, "item") else v)
               for v in flat]
    if arr.dtype.kind == "f":
        preview = [round(float(v), 6) for v in flat]
    return {"name": name, "dtype": "string" if arr.dtype == object else arr.dtype.name,
            "shape": list(arr.shape), "preview": preview}
