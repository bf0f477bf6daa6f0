"""The versioned, pickle-free model artifact: a directory of two files.

- ``weights.safetensors``: the network's state dict and the sorted calibration scores.
- ``metadata.json``: format version, model version, feature names and order,
  the fitted feature spec where there is one (``offline_train.features``: spec,
  medians, modes, vocabularies; JSON), schema hash, scaler, sigmas, kappas, thresholds, network config, training
  summary, and a SHA-256 checksum over the weights file and the metadata.

Loading checks the format, the checksum and the shapes, and raises
``ArtifactError`` with the reason; nothing is unpickled.

The directory may be an object-store URI (``s3://bucket/models/v3``, see
``offline_train.storage``): the files are written locally, then uploaded
with ``metadata.json`` last. ``metadata.json`` is the artifact's manifest (it
carries the weights' checksum): a reader finds no artifact until it exists,
and an upload that dies half-way leaves none.
"""

from __future__ import annotations

import ctypes
import errno
import hashlib
import json
import os
import shutil
import stat
import sys
import tempfile
import uuid
from collections.abc import Callable
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from safetensors import SafetensorError

from . import storage
from .features import spec_hash

# torch is imported where tensors are read or written, so commands that only list models start seconds sooner.
if TYPE_CHECKING:
    import torch

FORMAT = "kdsm-artifact/1"


def check_counts(part: str, **counts) -> None:
    """Each of an artifact's sizes (``part.name = value``) is a whole number (not a bool, a float or text): ValueError.

    >>> check_counts("knn", rows=512, d=2.0)
    Traceback (most recent call last):
    ...
    ValueError: knn.d must be a whole number, not 2.0
    """
    for name, value in counts.items():
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"{part}.{name} must be a whole number, not {value!r}")


def check_shapes(state: dict, expected: dict[str, tuple], part: str, sizes: str) -> None:
    """Each tensor of ``state`` named in ``expected`` has that shape, checked before a part of that size is built: the
    metadata is a checksummed JSON anyone can re-sign, and a part allocates from it (``load_state_dict`` compared only
    after). RuntimeError, as ``load_state_dict`` raises, names the metadata (``sizes``) and the tensor.

    >>> check_shapes({"w": __import__("numpy").zeros((4, 2))}, {"w": (9, 2)}, "net", "net.rows = 9")
    Traceback (most recent call last):
    ...
    RuntimeError: net.rows = 9 give net.w the shape (9, 2); the weights' has (4, 2)
    """
    for name, size in expected.items():
        tensor = state.get(name)
        if tensor is None:
            raise RuntimeError(f"the weights hold no {part}.{name}")
        if tuple(tensor.shape) != size:
            raise RuntimeError(f"{sizes} give {part}.{name} the shape {size}; the weights' has {tuple(tensor.shape)}")
WEIGHTS = "weights.safetensors"
METADATA = "metadata.json"


class ArtifactError(ValueError):
    """An artifact that is missing, corrupted, tampered with or of the wrong schema."""


def schema_hash(features: list[str]) -> str:
    """Stable short hash of the ordered feature names (float features)."""
    return hashlib.sha256(json.dumps(list(features)).encode()).hexdigest()[:16]


def _checksum(weights: Path, meta: dict) -> str:
    h = hashlib.sha256()
    h.update(weights.read_bytes())
    body = {k: v for k, v in meta.items() if k != "checksum"}
    h.update(json.dumps(body, sort_keys=True).encode())
    return h.hexdigest()


def _exchange(a: Path, b: Path) -> bool:
    """Swap two existing paths in one step (Linux ``renameat2(RENAME_EXCHANGE)``); False where the platform or the
    file system cannot, and nothing moved."""
    if sys.platform != "linux":
        return False
    try:
        renameat2 = ctypes.CDLL(None, use_errno=True).renameat2
    except (OSError, AttributeError):
        return False
    at_fdcwd, rename_exchange = -100, 2
    if renameat2(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), rename_exchange) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP, errno.EXDEV):
        return False
    raise OSError(err, os.strerror(err), str(b))


def check_replaceable(path: str | os.PathLike, name: str | None = None, advice: str = "refusing to replace it") -> None:
    """Refuse a local ``path`` that writing an artifact there would destroy: a file, or a directory that holds
    anything but is no artifact (no ``metadata.json``). New, empty, or an artifact: fine. The message names the
    path as ``name`` (default: the path) and ends with ``advice``."""
    path = Path(path)
    name = name or str(path)
    if not path.exists():
        return
    if not path.is_dir():
        raise ArtifactError(f"{name} is a file, not an artifact directory: {advice}")
    if not (path / METADATA).is_file() and any(path.iterdir()):
        raise ArtifactError(f"{name} is a directory that holds other files, not a model artifact: {advice}")


@contextmanager
def atomic_directory(path: str | os.PathLike):
    """Yield a temp dir beside ``path``; on success it replaces ``path``, on error it is removed.

    ``path`` must be new, an empty directory or an artifact (``check_replaceable``, checked before the
    caller writes anything): a file or another directory is refused, never deleted. The new directory
    takes ``path``'s place in one rename-exchange where the file system has it (Linux), else the old one
    is renamed aside and the new one renamed in (``path`` is absent between the two renames); the old
    one is deleted only then. Readers (streamers loading a model) see the old directory or the new one,
    never half of one.
    """
    path = Path(path)
    check_replaceable(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    # Not mkdtemp: its 0700 would make the model unreadable to a streamer running as another user; mkdir honours
    # the umask, as the directory the artifact replaces was made.
    tmp = path.parent / f".{path.name}.{uuid.uuid4().hex}"
    tmp.mkdir()
    try:
        yield tmp
        check_replaceable(path)  # again: something may have appeared there while the caller wrote
        if not (path.exists() or path.is_symlink()):
            os.replace(tmp, path)
            return
        if not _exchange(tmp, path):
            aside = Path(tempfile.mkdtemp(prefix=f".{path.name}.old.", dir=path.parent))
            os.replace(path, aside / "old")
            try:
                os.replace(tmp, path)
            except BaseException:
                os.replace(aside / "old", path)  # put the old one back
                aside.rmdir()
                raise
            tmp = aside
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    # tmp now holds the old directory: the new one is in place, so a failure here costs only disk
    if tmp.is_symlink():
        tmp.unlink()
    else:
        shutil.rmtree(tmp, ignore_errors=True)


def write_artifact(path: str | os.PathLike, tensors: dict[str, torch.Tensor], meta: dict,
                   also: Callable[[Path], None] | None = None) -> Path | str:
    """Write the artifact directory atomically (a local path, or a URI: upload with the manifest last).

    ``also(directory)`` writes more files (the report) into the new directory before it takes ``path``'s place, so a
    failure leaves no half-written report beside a new model. An I/O error (a full disk) is an ``ArtifactError`` in one
    line, and ``path`` is left as it was.
    """
    if storage.is_remote(path):
        with tempfile.TemporaryDirectory(prefix="kdsm-artifact-") as tmp:
            write_artifact(Path(tmp) / "a", tensors, meta, also)
            return publish_artifact(Path(tmp) / "a", path)
    from safetensors.torch import save_file

    try:
        with atomic_directory(path) as tmp:
            save_file({k: v.detach().cpu().contiguous() for k, v in tensors.items()}, str(tmp / WEIGHTS))
            # safetensors writes 0600 whatever the umask: the mode the umask gave the directory (atomic_directory's
            # mkdir), less execute; not os.umask(), which would set the process's umask to read it, for every thread
            os.chmod(tmp / WEIGHTS, stat.S_IMODE(tmp.stat().st_mode) & 0o666)
            meta = {**meta, "format": FORMAT}
            meta["checksum"] = _checksum(tmp / WEIGHTS, meta)
            (tmp / METADATA).write_text(json.dumps(meta, indent=2, sort_keys=True))
            if also is not None:
                also(tmp)
    except (OSError, SafetensorError) as e:
        raise ArtifactError(f"cannot write the model to {path}: {' '.join(str(e).split())}") from None
    return Path(path)


def publish_artifact(src: str | os.PathLike, dst) -> str:
    """Copy an artifact directory (report included) to ``dst``, local or remote, ``metadata.json`` last.

    A remote ``src`` is first downloaded (weights and metadata) to a temp directory.
    """
    if storage.is_remote(src):
        with tempfile.TemporaryDirectory(prefix="kdsm-artifact-") as tmp:
            storage.download_dir(src, tmp, [METADATA, WEIGHTS])
            if not (Path(tmp) / METADATA).is_file():
                raise ArtifactError(f"no model artifact at {src} (no {METADATA})")
            return publish_artifact(tmp, dst)
    if not storage.is_remote(dst):
        with atomic_directory(dst) as tmp:
            shutil.copytree(src, tmp, dirs_exist_ok=True)
        return str(dst)
    return storage.upload_dir(src, dst, manifest=METADATA)


def artifact_exists(path) -> bool:
    """An artifact is there when its manifest (``metadata.json``) is."""
    return storage.is_file(storage.join(path, METADATA))


def read_artifact(path: str | os.PathLike, arrays: Literal["torch", "numpy"] = "torch") -> tuple[dict, dict]:
    """Tensors (torch, on CPU) and metadata, verified; raises ArtifactError.

    ``arrays="numpy"`` reads numpy arrays instead, for callers that need no model (the thresholds commands)."""
    if storage.is_remote(path):
        with tempfile.TemporaryDirectory(prefix="kdsm-artifact-") as tmp:
            try:
                storage.download_dir(path, tmp, [METADATA, WEIGHTS])  # the manifest first: it names what to trust
            except storage.StorageError as e:
                raise ArtifactError(str(e)) from None
            if not (Path(tmp) / METADATA).is_file():
                raise ArtifactError(f"no model artifact at {path} (no {METADATA}: missing, or its upload did not finish)")
            try:
                return read_artifact(tmp, arrays)
            except ArtifactError as e:
                raise ArtifactError(str(e).replace(tmp, str(path))) from None
    path = Path(path)
    if not path.is_dir():
        raise ArtifactError(f"no model artifact at {path} (expected a directory with {METADATA} and {WEIGHTS})")
    try:
        meta = json.loads((path / METADATA).read_bytes().decode("utf-8"))
    except FileNotFoundError:
        raise ArtifactError(f"{path}: missing {METADATA}") from None
    except OSError as e:  # a directory, unreadable, an I/O error
        raise ArtifactError(f"{path}/{METADATA} cannot be read: {e.strerror or e}") from None
    except RecursionError:
        raise ArtifactError(f"{path}/{METADATA} is not valid JSON: nested too deeply") from None
    except ValueError as e:  # json.JSONDecodeError, UnicodeDecodeError
        raise ArtifactError(f"{path}/{METADATA} is not valid JSON: {e}") from None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        raise ArtifactError(f"{path}: unsupported artifact format {meta.get('format') if isinstance(meta, dict) else None!r}, expected {FORMAT}")
    weights = path / WEIGHTS
    if not weights.is_file():
        raise ArtifactError(f"{path}: missing {WEIGHTS}")
    try:
        checksum = _checksum(weights, meta)
    except OSError as e:
        raise ArtifactError(f"{path}: cannot read weights: {e.strerror or e}") from None
    except (ValueError, RecursionError) as e:
        raise ArtifactError(f"{path}/{METADATA} cannot be checksummed: {e!r}") from None
    if checksum != meta.get("checksum"):
        raise ArtifactError(f"{path}: checksum mismatch: the artifact was modified or corrupted")
    try:
        if arrays == "numpy":
            from safetensors.numpy import load_file as load_arrays

            tensors = load_arrays(str(weights))
        else:
            from safetensors.torch import load_file

            tensors = load_file(str(weights), device="cpu")
    except (SafetensorError, OSError) as e:
        raise ArtifactError(f"{path}: cannot read weights: {e}") from None
    spec = meta.get("feature_spec")
    try:
        expected = spec_hash(spec) if spec else schema_hash(meta.get("features", []))
    except (KeyError, TypeError, ValueError, AttributeError, RecursionError) as e:
        raise ArtifactError(f"{path}: the feature spec is malformed: {e!r}") from None
    if expected != meta.get("schema_hash"):
        raise ArtifactError(f"{path}: schema hash does not match the feature " + ("spec" if spec else "list"))
    return tensors, meta
