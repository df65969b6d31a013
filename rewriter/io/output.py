"""Safe output: every file the tool writes (models and their external data, ``run -o``
outputs, ``--save-inputs``, reports) goes through here.

A write is atomic (a temporary file in the destination's folder, fsync'ed, renamed over the
destination), never goes through a symlink, refuses the input and its data (by path,
symlink or hard link), gives the file the mode the umask allows, and holds a lock on the
destination's folder so two writers to one output take turns. Temporary files are named
``.onnx-rewriter-PID-XXXX.tmp``: those of a process that no longer runs (killed mid-write)
are removed by the next write to that folder.

A model and its external data are replaced as one unit: the data is written under names no
file has yet, the model naming them is renamed into place, and only then are the data files
the previous model named removed. A kill at any point leaves the old pair or the new pair;
data files no model names (a kill between the two steps) are removed by the next write.

Failures raise :class:`~rewriter.errors.WriteError` naming the OS's reason and the path
("no space left on device writing out.onnx").
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import re
import shutil
import stat
import tempfile
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import IO, Any

from rewriter.errors import OutputError, WriteError

TEMP_PREFIX = ".onnx-rewriter-"
TEMP_SUFFIX = ".tmp"
_NAME_MAX = 255  # bytes in one file name (Linux, macOS)

_REASONS = {
    errno.ENOSPC: "no space left on device",
    errno.EDQUOT: "disk quota exceeded",
    errno.EROFS: "read-only file system",
    errno.EACCES: "permission denied",
    errno.EPERM: "operation not permitted",
    errno.ENAMETOOLONG: "file name too long",
    errno.EFBIG: "file too large",
    errno.EIO: "input/output error",
    errno.ENOENT: "no such file or directory",
    errno.ENOTDIR: "not a directory",
    errno.EISDIR: "is a directory",
    errno.EMFILE: "too many open files",
    errno.EXDEV: "cross-device link",
}


def os_reason(e: OSError) -> str:
    """The OS's reason for ``e``, in lower case ("no space left on device")."""
    if e.errno in _REASONS:
        return _REASONS[e.errno]
    return (e.strerror or type(e).__name__).lower()


def write_error(e: OSError, path: str | os.PathLike, action: str = "writing") -> WriteError:
    """A one-line error naming what the OS said and the file: "no space left on device
    writing OUT"."""
    error = WriteError(f"{os_reason(e)} {action} {path}")
    error.errno = e.errno
    return error


@contextlib.contextmanager
def named_errors(path: str | os.PathLike, action: str = "writing") -> Iterator[None]:
    """Turn an OSError raised inside into a :class:`WriteError` naming ``path``."""
    try:
        yield
    except WriteError:
        raise
    except OSError as e:
        raise write_error(e, path, action) from e


# ----------------------------------------------------------------------------- checks


def _same_file(a: Path, b: Path) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return os.path.realpath(a) == os.path.realpath(b)


def check_output_path(output: str | os.PathLike, source: Path | None = None, *,
                      in_place: bool = False, folder_ok: bool = False,
                      protected: Iterable[str | os.PathLike] = ()) -> Path:
    """The absolute output path, or an OutputError: it would overwrite the input model
    ``source`` (unless ``in_place``) or a ``protected`` file (the input's external data, by
    path, symlink or hard link), is a symlink, is not a regular file (``folder_ok``: or a
    folder), or its folder does not exist."""
    out = Path(os.path.abspath(os.fspath(output)))
    try:
        st = os.lstat(out)
    except FileNotFoundError:
        st = None
    except OSError as e:
        raise write_error(e, out, "checking") from None
    if st is not None:
        if source is not None and not in_place and _same_file(out, source):
            raise OutputError(f"{out}: is the input model; refusing to overwrite it (pass "
                              "--in-place to allow)")
        if any(_same_file(out, Path(p)) for p in protected):
            raise OutputError(f"{out}: is one of the input's files (its external data); "
                              "refusing to overwrite it")
        if stat.S_ISLNK(st.st_mode):
            raise OutputError(f"{out}: is a symlink; refusing to write through it")
        if not stat.S_ISREG(st.st_mode) and not (folder_ok and stat.S_ISDIR(st.st_mode)):
            raise OutputError(f"{out}: exists and is not a regular file")
        if stat.S_ISREG(st.st_mode) and st.st_nlink > 1 and source is not None \
                and not in_place and _same_file(out, source):
            raise OutputError(f"{out}: is a hard link to the input model")
    if not out.parent.is_dir():
        raise OutputError(f"{out}: folder {str(out.parent)!r} does not exist")
    if len(os.fsencode(out.name)) > _NAME_MAX:
        raise OutputError(f"{out}: file name too long ({len(os.fsencode(out.name))} bytes, "
                          f"at most {_NAME_MAX})")
    return out


# ----------------------------------------------------------------------------- primitives


def current_umask() -> int:
    """The process's umask, read without changing it where the OS allows (Linux)."""
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o022)  # elsewhere: set and restore (not thread-safe, but brief)
    os.umask(mask)
    return mask


def _pid_alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    except OSError:
        return True
    return True


_TEMP = re.compile(re.escape(TEMP_PREFIX) + r"(\d+)-[^/]*" + re.escape(TEMP_SUFFIX) + "$")


def clean_stale(folder: str | os.PathLike) -> list[str]:
    """Remove the temporary files (and folders) of writers that no longer run; return their
    names. Live writers' files are left alone."""
    removed = []
    try:
        names = os.listdir(folder)
    except OSError:
        return removed
    for name in names:
        m = _TEMP.match(name)
        if not m or _pid_alive(int(m.group(1))):
            continue
        path = os.path.join(folder, name)
        try:
            if os.path.isdir(path) and not os.path.islink(path):
                shutil.rmtree(path)
            else:
                os.unlink(path)
            removed.append(name)
        except FileNotFoundError:
            pass
        except OSError:
            pass  # not ours to remove after all (permissions): left alone
    return removed


@contextlib.contextmanager
def folder_lock(folder: str | os.PathLike) -> Iterator[None]:
    """An exclusive lock on ``folder`` (flock on the folder itself: no lock file to leave
    behind) held by one writer at a time, in this process or another."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - not POSIX
        yield
        return
    fd = os.open(folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


def _temp_path(folder: Path) -> Path:
    """A name for a new temporary file in ``folder``, not created yet (the writer's pid in
    it: see :func:`clean_stale`). Known before the file exists, so that an interruption at
    any point after its creation can remove it."""
    return folder / f"{TEMP_PREFIX}{os.getpid()}-{uuid.uuid4().hex[:12]}{TEMP_SUFFIX}"


_CREATE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0)


def _fsync_folder(folder: Path) -> None:
    try:
        fd = os.open(folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


@contextlib.contextmanager
def _temporary(folder: Path) -> Iterator[Path]:
    """A new temporary file's name in ``folder`` (:func:`_temp_path`): the file is removed
    if anything fails or the process is interrupted inside the block, wherever that lands,
    unless the failure is that the name was another writer's (``FileExistsError``)."""
    tmp = _temp_path(folder)
    try:
        yield tmp
    except BaseException as e:
        if not isinstance(e, FileExistsError):
            tmp.unlink(missing_ok=True)
        raise


def _write_to(tmp: Path, write: Callable[[IO[bytes]], Any], mode: int) -> None:
    """Create ``tmp`` (never an existing file) holding what ``write`` wrote, fsync'ed, with
    ``mode``; inside :func:`_temporary`, which removes it on failure."""
    with os.fdopen(os.open(tmp, _CREATE, 0o600), "wb") as f:
        write(f)
        f.flush()
        os.fsync(f.fileno())
    os.chmod(tmp, mode)


def _place(folder: Path, write: Callable[[IO[bytes]], Any], mode: int, dest: Path) -> None:
    """A temporary file in ``folder`` holding what ``write`` wrote (:func:`_write_to`),
    renamed to ``dest``; removed if anything fails or the process is interrupted."""
    with _temporary(folder) as tmp:
        _write_to(tmp, write, mode)
        os.replace(tmp, dest)


def file_mode() -> int:
    """The mode a new file gets: read-write as the umask allows."""
    return 0o666 & ~current_umask()


# ----------------------------------------------------------------------------- one file


def write_file(target: str | os.PathLike, write: Callable[[IO[bytes]], Any], *,
               source: Path | None = None, protected: Iterable[str | os.PathLike] = ()
               ) -> Path:
    """Write one file atomically (``write`` gets a binary file object); see the module's
    docstring. Returns the absolute path written."""
    protected = list(protected)
    out = check_output_path(target, source, protected=protected)
    with named_errors(out), folder_lock(out.parent):
        check_output_path(out, source, protected=protected)  # again, under the lock
        clean_stale(out.parent)
        _place(out.parent, write, file_mode(), out)
        _fsync_folder(out.parent)
    return out


def write_bytes(target: str | os.PathLike, data: bytes, **kwargs) -> Path:
    """:func:`write_file` of ``data``."""
    return write_file(target, lambda f: f.write(data), **kwargs)


def write_text(target: str | os.PathLike, text: str, **kwargs) -> Path:
    """:func:`write_file` of ``text`` as UTF-8 (a report)."""
    return write_bytes(target, text.encode("utf-8", "surrogateescape"), **kwargs)


# ----------------------------------------------------------------------------- one folder

_RENAME_EXCHANGE = 2


def _exchange(a: Path, b: Path) -> bool:
    """Swap two paths atomically (Linux renameat2 RENAME_EXCHANGE); False where the OS or
    the file system cannot."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        renameat2 = libc.renameat2
    except (OSError, AttributeError):
        return False
    at_fdcwd = -100
    rc = renameat2(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), _RENAME_EXCHANGE)
    if rc == 0:
        return True
    code = ctypes.get_errno()
    if code in (errno.ENOSYS, errno.EINVAL, errno.ENOTSUP):
        return False
    raise OSError(code, os.strerror(code), str(b))


def write_folder(target: str | os.PathLike, fill: Callable[[Path], Any], *,
                 protected: Iterable[str | os.PathLike] = ()) -> Path:
    """Write a folder as a whole: ``fill`` writes into a temporary folder which then takes
    the target's place (swapped atomically where the OS can; the old folder is removed)."""
    out = check_output_path(target, None, folder_ok=True, protected=protected)
    if out.exists() and not out.is_dir():
        raise OutputError(f"{out}: exists and is not a folder")
    with named_errors(out), folder_lock(out.parent):
        clean_stale(out.parent)
        tmp = Path(tempfile.mkdtemp(prefix=f"{TEMP_PREFIX}{os.getpid()}-",
                                    suffix=TEMP_SUFFIX, dir=out.parent))
        try:
            os.chmod(tmp, 0o777 & ~current_umask())
            fill(tmp)
            if out.exists():
                if not _exchange(tmp, out):
                    old = Path(tempfile.mkdtemp(prefix=f"{TEMP_PREFIX}{os.getpid()}-",
                                                suffix=TEMP_SUFFIX, dir=out.parent))
                    os.rmdir(old)
                    os.replace(out, old)
                    os.replace(tmp, out)
                    tmp = old
            else:
                os.replace(tmp, out)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)  # the old folder, or what a failure left
        _fsync_folder(out.parent)
    return out


# ----------------------------------------------------------------------------- a model


def data_base(output: Path) -> str:
    """The stem of the external-data names of ``output``: its name, shortened (with a hash
    of the full name) where names built on it would be too long for the file system, with
    a backslash, and a colon second (``C:``), as ``_``: a location must not read as a path
    on Windows, and the loader refuses those (found by tests/test_properties.py: an output
    named ``0:`` was written with data it then refused). A changed name gets the hash too,
    so it never takes the data names of another output (``0_`` beside ``0:``)."""
    name = output.name.replace("\\", "_")
    if name[1:2] == ":":
        name = name[:1] + "_" + name[2:]
    if name == output.name and len(os.fsencode(name)) <= _NAME_MAX - 16:
        return name
    digest = hashlib.blake2b(os.fsencode(output.name), digest_size=4).hexdigest()
    head = os.fsencode(name)[:_NAME_MAX - 32].decode("utf-8", "ignore")
    return f"{head}-{digest}"


def data_name_pattern(output: Path) -> re.Pattern:
    """The external-data names the tool gives ``output``: ``OUT.data``, ``OUT.K.data``."""
    return re.compile(re.escape(data_base(output)) + r"(\.\d+)?\.data$")


def data_file_names(output: Path, count: int, taken: Iterable[str] = ()) -> list[str]:
    """``count`` names for external data written next to ``output``, none of them in
    ``taken``: ``OUT.data`` (or ``OUT.0.data``, ``OUT.1.data``, ... for several files) on
    a fresh folder, the next free numbers otherwise."""
    taken = set(taken)
    base = data_base(output)
    first = [f"{base}.data"] if count == 1 else []
    names: list[str] = []
    k = 0 if count > 1 else 1
    candidates = iter(first)
    while len(names) < count:
        name = next(candidates, None)
        if name is None:
            name = f"{base}.{k}.data"
            k += 1
        if name not in taken:
            names.append(name)
            taken.add(name)
    return names


def referenced_data(model_path: Path) -> set[str] | None:
    """The external-data locations the model at ``model_path`` names (None: there is no
    readable model there)."""
    from onnx import ModelProto, TensorProto

    from rewriter.graph.walk import iter_tensor_sites

    try:
        with open(model_path, "rb") as f:
            st = os.fstat(f.fileno())
            if not stat.S_ISREG(st.st_mode):
                return None
            data = f.read()
        model = ModelProto()
        model.ParseFromString(data)
    except Exception:  # noqa: BLE001 - not a model: nothing known about its data
        return None
    if not model.HasField("graph") or model.ir_version <= 0:
        return None
    names = set()
    for _, t in iter_tensor_sites(model):
        if t.data_location == TensorProto.EXTERNAL:
            for e in t.external_data:
                if e.key == "location":
                    names.add(e.value)
    return names


def _clean_orphans(out: Path, current: set[str] | None,
                   protected: Sequence[Path]) -> list[str]:
    """Data files named after ``out`` that its current model does not name (a write killed
    between its data and its model); where no model is there, every such file is one."""
    pattern = data_name_pattern(out)
    removed = []
    for name in os.listdir(out.parent):
        if not pattern.match(name) or (current is not None and name in current):
            continue
        path = out.parent / name
        if any(_same_file(path, p) for p in protected) or path.is_symlink() \
                or not path.is_file():
            continue
        path.unlink(missing_ok=True)
        removed.append(name)
    return removed


def write_model(out: Path, serialize: Callable[[Mapping[str, str]], bytes],
                data: Mapping[str, Path], *, protected: Sequence[Path] = (),
                keep: Iterable[str] = ()) -> Path:
    """Write a model and its external data as one unit (see the module's docstring).

    Args:
        out: the model's path (checked by :func:`check_output_path` already).
        serialize: the model's bytes, given the name each external-data location gets.
        data: the files to copy next to ``out``, by the location the model names now.
        protected: files never written nor removed (the input and its data).
        keep: locations the model keeps as they are (its data already next to ``out``).
    """
    protected = [Path(p) for p in protected]
    with named_errors(out), folder_lock(out.parent):
        clean_stale(out.parent)
        pattern = data_name_pattern(out)
        existing = [n for n in os.listdir(out.parent) if pattern.match(n)]
        current = referenced_data(out) if existing else set()
        unknown = out.exists() and current is None  # not a model: nothing of it is removed
        if not unknown:
            _clean_orphans(out, current if out.exists() else None, protected)
        current_names = set(current or ())
        taken = set(os.listdir(out.parent)) | current_names | set(keep)
        names = data_file_names(out, len(data), taken)
        renames = dict(zip(sorted(data), names, strict=True))
        payload = serialize(renames)  # before writing anything: this fails on size
        mode = file_mode()
        created: list[Path] = []
        placed: tuple[int, int] | None = None
        try:
            for location, name in renames.items():
                source = data[location]
                dest = out.parent / name
                _place(out.parent, lambda f, s=source: _copy_into(s, f), mode, dest)
                created.append(dest)
            with _temporary(out.parent) as model_tmp:  # (its identity taken before the rename)
                _write_to(model_tmp, lambda f: f.write(payload), mode)
                placed = _identity(model_tmp)
                os.replace(model_tmp, out)
        except BaseException:
            # a failed save leaves no half set of new files; but once the model is in place
            # (a signal raised just after the rename) its data stays: it is the new pair
            if not created or placed is None or _identity(out) != placed:
                for p in created:
                    p.unlink(missing_ok=True)
            raise
        # the new pair is in place: the files only the old model named go
        for name in current_names - set(names) - set(keep):
            path = out.parent / name
            if pattern.match(name) and path.is_file() and not path.is_symlink() \
                    and not any(_same_file(path, p) for p in protected):
                path.unlink(missing_ok=True)
        _fsync_folder(out.parent)
    return out


def _identity(path: Path) -> tuple[int, int] | None:
    """(device, inode) of ``path``, None when it cannot be read."""
    try:
        st = os.lstat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino


def _copy_into(src: Path, f: IO[bytes]) -> None:
    with open(src, "rb") as s:
        shutil.copyfileobj(s, f, length=1 << 24)
