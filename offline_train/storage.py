"""Where data lives: a local path or an object-store URI, resolved to a pyarrow filesystem and a path in it.

Every place that takes a location (``kdsm train --data/--out``, ``kdsm score``,
``archive.dir``, ``registry.store_dir``, ``stream.model``) goes through
``resolve``; nothing else parses URIs. A plain path (or ``file://``) is the
local disk and keeps its old behaviour; ``s3://bucket/prefix`` is S3 or an
S3-compatible server (SeaweedFS, MinIO) with the ``storage`` config section's
endpoint and credentials, or the usual AWS environment (``AWS_ACCESS_KEY_ID``,
``AWS_SECRET_ACCESS_KEY``, ``AWS_DEFAULT_REGION``, ``AWS_ENDPOINT_URL``); any
other scheme pyarrow knows (``gs://``, ``abfs://``, ``hdfs://``) goes to
``pyarrow.fs.FileSystem.from_uri``.

Object stores have no rename, so "write a temp file, then rename" cannot make
a file appear atomically. What they do have: an object appears whole or not
at all (a single PUT, or a multipart upload that only exists once completed).
So a set of files is published as data objects first and one small manifest
object last (``upload_dir(..., manifest=...)``); readers trust only what a
manifest names, and a writer killed half-way leaves no manifest, hence
nothing a reader picks up. A model artifact's manifest is its
``metadata.json`` (it carries the weights' checksum); an archive file's is a
marker under ``_committed/`` (``write_marker`` / ``committed_files``).

>>> is_remote("s3://bucket/archive"), is_remote("runs/archive"), is_remote("file:///tmp/x")
(True, False, False)
>>> as_location("s3://bucket/m"), as_location("runs/m")
('s3://bucket/m', PosixPath('runs/m'))
>>> join("s3://bucket/models", "v1", "metadata.json")
's3://bucket/models/v1/metadata.json'
>>> resolve("s3://bucket/a/b/")[1]
'bucket/a/b'
"""

from __future__ import annotations

import json
import os
import posixpath
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from types import SimpleNamespace
from urllib.parse import urlsplit

import pyarrow as pa
import pyarrow.fs as pafs

MARKERS = "_committed"  # archive manifests: MARKERS/<relative path of the data object>.json


class StorageError(OSError):
    """An object store that cannot be used (unreachable endpoint, missing bucket, denied); one readable line."""


@dataclass(frozen=True)
class S3Options:
    endpoint: str | None = None  # http://127.0.0.1:8333 for SeaweedFS/MinIO; None = AWS (or env AWS_ENDPOINT_URL)
    region: str | None = None
    access_key: str | None = None  # None = the AWS default chain (env, profile, instance role)
    secret_key: str | None = None
    connect_timeout_s: float = 5.0
    request_timeout_s: float = 30.0
    retries: int = 3


_options = S3Options()


def configure(cfg) -> None:
    """Use the ``storage`` config section (``offline_train.config.StorageConfig``) for every later ``resolve``."""
    global _options
    secret = cfg.s3_secret_key.get_secret_value() if cfg.s3_secret_key is not None else None
    _options = S3Options(cfg.s3_endpoint, cfg.s3_region, cfg.s3_access_key, secret, cfg.connect_timeout_s,
                         cfg.request_timeout_s, cfg.retries)


def is_remote(location) -> bool:
    """True for an object-store URI; False for a local path or ``file://``."""
    text = str(location)
    return "://" in text and not text.startswith("file://")


def check_output_file(out, kind: str, example: str, inputs=(), outside=()) -> None:
    """Refuse, before any work, a local ``--out`` file that cannot be written: a directory, or a path under a file.
    ``kind`` and ``example`` name the file the command writes (an object-store ``out`` is checked by its bucket).

    Nor may ``out`` destroy what the command reads: it may be none of ``inputs`` (the files read), nor lie inside
    any directory of ``outside``, ``(location, what it is, why not)`` triples (a model artifact, a data directory
    a later run would read it from). Local paths are compared resolved (links, ``..``), object-store ones as strings.

    >>> check_output_file("/", "PNG", "report.png")
    Traceback (most recent call last):
    ...
    offline_train.storage.StorageError: --out / is a directory: name the PNG file, e.g. /report.png
    >>> check_output_file("s3://b/m/x.parquet", "Parquet", "x.parquet", outside=[("s3://b/m/", "the model", "no")])
    Traceback (most recent call last):
    ...
    offline_train.storage.StorageError: --out s3://b/m/x.parquet is inside the model s3://b/m/: no
    """
    target = _comparable(out) if inputs or outside else None
    if any(_comparable(f) == target for f in inputs):
        raise StorageError(f"--out {out} is one of the input files (--data): writing it would destroy the data "
                           f"being read; name another {kind} file")
    for where, what, why in outside:
        place = _comparable(where)
        if target == place or (target[0] == place[0] and target[1].startswith(place[1].rstrip("/") + "/")):
            raise StorageError(f"--out {out} is inside {what} {where}: {why}")
    if is_remote(out):
        return
    out = Path(out)
    if out.is_dir():
        raise StorageError(f"--out {out} is a directory: name the {kind} file, e.g. {out / example}")
    above = nearest_existing(out.parent)
    if not above.is_dir():
        raise StorageError(f"--out {out}: {above} is a file, not a directory: cannot write under it")


def nearest_existing(path) -> Path:
    """``path`` or its nearest existing ancestor: where creating ``path`` would start (a file there blocks it).

    >>> nearest_existing("/dev/null/a/b")
    PosixPath('/dev/null')
    """
    path = Path(path)
    return next((p for p in (path, *path.parents) if p.exists()), Path("."))


def _comparable(location) -> tuple[bool, str]:
    """``location`` as ``check_output_file`` compares it: a local path resolved, a URI as its string."""
    if is_remote(location):
        return True, str(location).rstrip("/")
    text = str(location)
    try:
        return False, str(Path(urlsplit(text).path if text.startswith("file://") else text).resolve())
    except (OSError, RuntimeError):  # a symlink loop: compare it as written
        return False, os.path.abspath(text)


def as_location(where) -> str | Path:
    """How code keeps a location: a URI stays a string (``Path("s3://b/m")`` would fold it to ``s3:/b/m``), a local
    path becomes a ``Path``."""
    return str(where) if is_remote(where) else Path(where)


def join(location, *parts: str) -> str:
    if is_remote(location):
        return posixpath.join(str(location).rstrip("/"), *parts)
    return os.path.join(str(location), *parts)


def endpoint_of(opts: S3Options | None = None) -> str:
    opts = opts or _options
    return opts.endpoint or os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL") or "AWS S3"


@lru_cache(maxsize=8)
def _s3(opts: S3Options) -> pafs.S3FileSystem:
    kw = {}
    endpoint = opts.endpoint or os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
    if endpoint:
        u = urlsplit(endpoint if "://" in endpoint else "https://" + endpoint)
        kw.update(endpoint_override=u.netloc, scheme=u.scheme)
    region = opts.region or os.environ.get("AWS_DEFAULT_REGION") or os.environ.get("AWS_REGION") or "us-east-1"
    if opts.access_key:
        kw.update(access_key=opts.access_key, secret_key=opts.secret_key or "")
    return pafs.S3FileSystem(region=region, connect_timeout=opts.connect_timeout_s, request_timeout=opts.request_timeout_s,
                             retry_strategy=pafs.AwsStandardS3RetryStrategy(max_attempts=opts.retries),
                             allow_bucket_creation=False, allow_bucket_deletion=False, **kw)


_LOCAL = pafs.LocalFileSystem()


def resolve(location) -> tuple[pafs.FileSystem, str]:
    """(filesystem, path inside it) for a local path or a URI; raises StorageError for an unusable URI."""
    text = str(location)
    if not is_remote(text):
        return _LOCAL, os.path.abspath(urlsplit(text).path if text.startswith("file://") else text)
    u = urlsplit(text)
    if u.scheme in ("s3", "s3a"):
        if not u.netloc:
            raise StorageError(f"{text}: no bucket in the URI (expected s3://BUCKET/PREFIX)")
        return _s3(_options), f"{u.netloc}/{u.path.strip('/')}".rstrip("/")
    try:
        return pafs.FileSystem.from_uri(text)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, OSError, ValueError) as e:
        raise StorageError(f"{text}: unsupported or unusable storage URI ({_first_line(e)})") from None


def to_location(like, fs_path: str) -> str:
    """A filesystem path found under ``like`` (same filesystem) as a location string again."""
    if not is_remote(like):
        return fs_path
    return f"{urlsplit(str(like)).scheme}://{fs_path}"


def _first_line(e: BaseException) -> str:
    return str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__


def explain(location, e: BaseException) -> StorageError:
    """A pyarrow/AWS error as one line a user can act on."""
    text = str(e)
    where = str(location)
    if "NO_SUCH_BUCKET" in text or "NoSuchBucket" in text:
        bucket = urlsplit(where).netloc
        return StorageError(f"{where}: bucket {bucket!r} does not exist at {endpoint_of()} (create it first)")
    if "NETWORK_CONNECTION" in text or "curlCode" in text or "Could not connect" in text:
        return StorageError(f"{where}: cannot reach the object store at {endpoint_of()} (storage.s3_endpoint / AWS_ENDPOINT_URL)")
    if "ACCESS_DENIED" in text or "InvalidAccessKeyId" in text or "SignatureDoesNotMatch" in text or "403" in text:
        return StorageError(f"{where}: access denied by {endpoint_of()} (check storage.s3_access_key/s3_secret_key or AWS_* credentials)")
    return StorageError(f"{where}: {_first_line(e)}")


class _Guard:
    """``with guard(loc):`` turns a remote OSError into a StorageError; local errors pass through unchanged."""

    def __init__(self, location):
        self.location = location

    def __enter__(self):
        return self

    def __exit__(self, et, e, tb):
        if e is not None and is_remote(self.location) and isinstance(e, OSError) and not isinstance(e, StorageError):
            raise explain(self.location, e) from None
        return False


guard = _Guard


# ---------------------------------------------------------------------- small-object helpers
def info(location) -> pafs.FileInfo:
    fs, path = resolve(location)
    with guard(location):
        return fs.get_file_info(path)


def exists(location) -> bool:
    return info(location).type != pafs.FileType.NotFound


def is_file(location) -> bool:
    return info(location).type == pafs.FileType.File


def read_bytes(location) -> bytes:
    fs, path = resolve(location)
    with guard(location):
        with fs.open_input_stream(path) as f:
            return f.read()


def write_bytes(location, data: bytes) -> None:
    """One object, whole or not at all (remote); local files are written under a temp name and renamed."""
    fs, path = resolve(location)
    if not is_remote(location):
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        tmp = f"{path}.tmp-{os.getpid()}"
        with open(tmp, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
        return
    with guard(location):
        with fs.open_output_stream(path) as f:
            f.write(data)


def delete_file(location) -> None:
    fs, path = resolve(location)
    with guard(location):
        try:
            fs.delete_file(path)
        except FileNotFoundError:
            pass


def delete_dir(location) -> None:
    fs, path = resolve(location)
    with guard(location):
        try:
            fs.delete_dir(path)
        except FileNotFoundError:
            pass


def list_files(location, suffix: str = "") -> list[pafs.FileInfo]:
    """Every file under ``location`` (recursively) whose name ends with ``suffix``; [] when there is none."""
    fs, path = resolve(location)
    with guard(location):
        try:
            found = fs.get_file_info(pafs.FileSelector(path, recursive=True, allow_not_found=True))
        except FileNotFoundError:
            return []
    return [f for f in found if f.type == pafs.FileType.File and f.base_name.endswith(suffix)]


def check_bucket(location) -> None:
    """Raise StorageError now if the store behind ``location`` is unreachable or its bucket is missing."""
    if not is_remote(location):
        return
    fs, path = resolve(location)
    bucket = path.split("/", 1)[0]
    with guard(location):
        if fs.get_file_info(bucket).type == pafs.FileType.NotFound:
            raise StorageError(f"{location}: bucket {bucket!r} does not exist at {endpoint_of()} (create it first)")


# ---------------------------------------------------------------------- publishing a set of files
def upload_dir(src: str | os.PathLike, dst, manifest: str) -> str:
    """Copy a local directory to ``dst``, the ``manifest`` file last (see the module docstring).

    An existing manifest at ``dst`` is deleted first, so a copy that dies
    half-way over an old one leaves no manifest, rather than an old manifest
    beside new data.
    """
    src = Path(src)
    files = sorted(p for p in src.rglob("*") if p.is_file())
    if not (src / manifest).is_file():
        raise FileNotFoundError(f"{src}: no {manifest} to publish")
    fs, base = resolve(dst)
    with guard(dst):
        if is_remote(dst):
            delete_file(join(dst, manifest))
        else:
            Path(base).mkdir(parents=True, exist_ok=True)
        for p in [p for p in files if p != src / manifest] + [src / manifest]:
            rel = p.relative_to(src).as_posix()
            target = f"{base}/{rel}"
            if not is_remote(dst):
                Path(target).parent.mkdir(parents=True, exist_ok=True)
            pafs.copy_files(str(p), target, source_filesystem=_LOCAL, destination_filesystem=fs)
    return str(dst)


def download_dir(src, dst: str | os.PathLike, names: list[str]) -> Path:
    """Copy the named files of a stored directory to a local one (missing ones are left out)."""
    dst = Path(dst)
    dst.mkdir(parents=True, exist_ok=True)
    fs, base = resolve(src)
    with guard(src):
        for name in names:
            try:
                with fs.open_input_stream(f"{base}/{name}") as f:
                    (dst / name).write_bytes(f.read())
            except FileNotFoundError:
                continue
    return dst


# ---------------------------------------------------------------------- archive markers
class StoredFile(str):
    """A committed data object: its URI (``str(f)``), name, modification time and size (``f.stat()``)."""

    mtime: float
    size: int

    def __new__(cls, uri: str, mtime: float, size: int):
        self = super().__new__(cls, uri)
        self.mtime, self.size = mtime, size
        return self

    @property
    def name(self) -> str:
        return posixpath.basename(self)

    @property
    def parent(self) -> SimpleNamespace:
        return SimpleNamespace(name=posixpath.basename(posixpath.dirname(self)))

    def stat(self) -> SimpleNamespace:
        return SimpleNamespace(st_mtime=self.mtime, st_size=self.size)


def marker_of(root, rel: str) -> str:
    return join(root, MARKERS, rel + ".json")


def write_marker(root, rel: str, meta: dict) -> None:
    """Publish the data object ``root/rel`` (already written whole) to readers."""
    write_bytes(marker_of(root, rel), json.dumps(meta, sort_keys=True).encode())


def committed_files(root, suffix: str = ".parquet") -> list[StoredFile]:
    """The data objects under ``root`` that have a marker, oldest marker first. Readers trust only these.

    Two listings (markers, data); the time is the marker's (when the file was published), the size the data's.
    """
    base = resolve(root)[1].rstrip("/") + "/"
    marked = {}
    for m in list_files(join(root, MARKERS), suffix + ".json"):
        marked[m.path[len(base) + len(MARKERS) + 1:-len(".json")]] = m.mtime.timestamp() if m.mtime else 0.0
    out = [StoredFile(join(root, f.path[len(base):]), marked[f.path[len(base):]], f.size or 0)
           for f in list_files(root, suffix) if f.path[len(base):] in marked]
    return sorted(out, key=lambda f: (f.mtime, f.name))
