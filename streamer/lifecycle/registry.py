"""Model registry: artifacts in a store, versions and the current/previous pointers in Redis.

- ``ArtifactStore``: one directory per version under a root, a local path
  or an object-store URI (``registry.store_dir: s3://bucket/models``).
- ``ModelRegistry``: per-version metadata (created, data window, training
  summary, gate result) as JSON in Redis, the ``current`` and ``previous``
  pointers in one hash, changed atomically by a Lua script that also
  publishes the new version on a channel and appends to an audit stream.
- Retention: ``ModelRegistry.prune(keep)`` removes the versions beyond the
  newest ``keep``, never the current or previous one nor one still
  ``validating``; each entry leaves Redis in one Lua step that checks the
  pointers, and only then is its artifact deleted from the store.
- ``RegistryModelProvider``: what a streamer asks for its model between
  batches. A background thread listens on the channel and re-reads the
  pointer every ``check_interval_s`` (pub/sub can drop messages); a new
  version is loaded and smoke-scored off the hot path and only then becomes
  what ``current()`` returns. A model that fails to load, or has another
  feature schema, is refused and the old one keeps serving.

Redis keys: ``registry:*`` of ``streamer.lifecycle.control.Keys``.

>>> store = ArtifactStore("/tmp/kdsm-doctest-store")
>>> store.location("v1").name
'v1'
>>> ArtifactStore("s3://bucket/models").location("v1")
's3://bucket/models/v1'
>>> Keys("kdsm:").pointers
'kdsm:registry:pointers'
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from offline_train import storage
from offline_train.artifact import (
    METADATA,
    ArtifactError,
    artifact_exists,
    publish_artifact,
    read_artifact,
)

from .control import (
    ChannelWatcher,
    Keys,
    NotUtf8,
    expect_types,
    json_of,
    read_raw,
    redis_client,
    text_of,
)
from .metrics import LifecycleMetrics

# The detector (torch, scikit-learn) is imported where a model is loaded, so commands that only read the registry
# (`kdsm models list`, `rollback`) start seconds sooner.
if TYPE_CHECKING:
    from offline_train.detector import KDSM

log = logging.getLogger("kdsm.registry")



# What promote accepts without force: passed the gate, served before, or added by hand (`kdsm models add`).
PROMOTABLE = ("validated", "promoted", "registered")


class RegistryError(ValueError):
    """A registry operation that cannot be done (unknown version, no previous, refused artifact)."""


class ArtifactStore:
    """Artifacts as directories ``root/VERSION``, ``root`` a local path or an object-store URI.

    Local: ``put`` copies then renames, so a half-copied model is never
    visible. Object store: ``put`` uploads with ``metadata.json`` last, and a
    version exists only once that manifest does (``offline_train.artifact``).
    """

    def __init__(self, root: str | os.PathLike):
        self.remote = storage.is_remote(root)
        self.root = str(root).rstrip("/") if self.remote else Path(root)

    def location(self, version: str) -> Path | str:
        if not version or "/" in version or version.startswith("."):
            raise RegistryError(f"invalid model version {version!r}")
        return storage.join(self.root, version) if self.remote else self.root / version

    local_path = location  # the name before object stores; kept for callers

    def exists(self, version: str) -> bool:
        if self.remote:
            return artifact_exists(self.location(version))
        return self.location(version).is_dir()

    def put(self, version: str, src: str | os.PathLike) -> str:
        return publish_artifact(src, self.location(version))

    def delete(self, version: str) -> None:
        """Remove ``version``'s artifact. One that is not there is no error; one that cannot be removed raises
        ``OSError`` (``StorageError`` for an object store: unreachable, denied)."""
        if self.remote:
            storage.delete_file(storage.join(self.location(version), METADATA))  # unpublish first
            storage.delete_dir(self.location(version))
        else:
            try:
                shutil.rmtree(self.location(version))
            except FileNotFoundError:
                pass


LocalArtifactStore = ArtifactStore  # the name before object stores


class LockLost(RegistryError):
    """A promotion under a lock (the retrain's) refused because the lock is no longer held with that token."""


class CurrentChanged(RegistryError):
    """A promotion that expected a current version refused because ``current`` is another one now (an operator's
    promote or rollback while a retrain ran)."""


# A script that fails keeps the writes made before the failing command: each checks first the type of every key it
# writes (a key written by hand) and answers WRONGTYPE before any write (expect_types names the key), then audits
# first (XADD is what may still fail: the stream's last ID) and publishes last.
_REFUSE_WRONG_TYPES = """
local function wrong_type(...)
  local kv = {...}
  for i = 1, #kv, 2 do
    local have = redis.call('TYPE', kv[i]).ok
    if have ~= 'none' and have ~= kv[i + 1] then
      return redis.error_reply('WRONGTYPE Redis key ' .. kv[i] .. ' holds a ' .. have .. ', not the ' .. kv[i + 1])
    end
  end
end
"""
# Atomic pointer moves: read, move, publish and audit in one server-side step. A promotion under a lock
# (ARGV[6] = its token, KEYS[3] = its key) happens only if the lock still holds that token, in the same step; only
# of a version still in the versions set (KEYS[4]; else -1: pruned since promote read it, its artifact going or
# gone); one with ARGV[7] = '1' only if current is still ARGV[8] ('' = none), else 0.
# A rollback moves them only if previous is still ARGV[4], the version whose artifact it checked (else 0).
_PROMOTE = _REFUSE_WRONG_TYPES + """
local bad = wrong_type(KEYS[1], 'hash', KEYS[2], 'stream')
if bad then return bad end
if ARGV[6] ~= '' and redis.call('GET', KEYS[3]) ~= ARGV[6] then return false end
if not redis.call('ZSCORE', KEYS[4], ARGV[1]) then return -1 end
local cur = redis.call('HGET', KEYS[1], 'current')
if ARGV[7] == '1' and (cur or '') ~= ARGV[8] then return 0 end
if cur == ARGV[1] then return {redis.call('HGET', KEYS[1], 'previous') or '', cur} end
redis.call('XADD', KEYS[2], 'MAXLEN', '~', 1000, '*', 'action', ARGV[3], 'from', cur or '', 'to', ARGV[1], 'reason', ARGV[4], 'time', ARGV[5])
if cur then redis.call('HSET', KEYS[1], 'previous', cur) end
redis.call('HSET', KEYS[1], 'current', ARGV[1])
redis.call('PUBLISH', ARGV[2], ARGV[1])
return {cur or '', ARGV[1]}
"""
_ROLLBACK = _REFUSE_WRONG_TYPES + """
local bad = wrong_type(KEYS[1], 'hash', KEYS[2], 'stream')
if bad then return bad end
local cur = redis.call('HGET', KEYS[1], 'current')
local prev = redis.call('HGET', KEYS[1], 'previous')
if not prev or prev == '' then return false end
if prev ~= ARGV[4] then return 0 end
redis.call('XADD', KEYS[2], 'MAXLEN', '~', 1000, '*', 'action', 'rollback', 'from', cur or '', 'to', prev, 'reason', ARGV[2], 'time', ARGV[3])
redis.call('HSET', KEYS[1], 'current', prev, 'previous', cur or '')
redis.call('PUBLISH', ARGV[1], prev)
return {cur or '', prev}
"""
# Retention: version ARGV[1] leaves the registry (versions set KEYS[2], entry KEYS[3]; audited in KEYS[4]) only if it
# is neither current nor previous now (KEYS[1]), is still registered, and its entry is still what prune judged it by
# (ARGV[2]: '1' and the entry, or '0' for none; so a version that became "validating" since is kept). The artifact is
# deleted by the caller, only once this returned 'pruned': a promote racing it finds the version gone (_PROMOTE: -1).
_PRUNE = _REFUSE_WRONG_TYPES + """
local bad = wrong_type(KEYS[1], 'hash', KEYS[2], 'zset', KEYS[3], 'string', KEYS[4], 'stream')
if bad then return bad end
if redis.call('HGET', KEYS[1], 'current') == ARGV[1] then return 'current' end
if redis.call('HGET', KEYS[1], 'previous') == ARGV[1] then return 'previous' end
if not redis.call('ZSCORE', KEYS[2], ARGV[1]) then return 'gone' end
local entry = redis.call('GET', KEYS[3])
if (entry and '1' .. entry or '0') ~= ARGV[2] then return 'changed' end
redis.call('XADD', KEYS[4], 'MAXLEN', '~', 1000, '*', 'action', 'prune', 'from', ARGV[1], 'to', '', 'reason', ARGV[3], 'time', ARGV[4])
redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('DEL', KEYS[3])
return 'pruned'
"""

# What the prune script answers for a version it did not remove, as the reason in prune's output.
_NOT_PRUNED = {"current": "became current while the prune ran (a promote or rollback): kept",
               "previous": "became previous (rollback's target) while the prune ran: kept",
               "gone": "no longer registered (another prune removed it): its artifact is left to that prune",
               "changed": "its registry entry changed while the prune ran (a retrain's gate?): kept"}


def _not_utf8_pointer(keys: Keys, field: str, value: str) -> RegistryError:
    """A pointer written by hand that is not UTF-8: the one line naming the hash field and its repair."""
    then = ", then promote a version (kdsm models promote VERSION)" if field == "current" else ""
    return RegistryError(f"the registry's {field} pointer ({keys.pointers} field {field}) is not UTF-8: {value[:80]!r} "
                         f"(written by hand?): delete it (redis-cli HDEL {keys.pointers} {field}){then}")


def _now_iso() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


class ModelRegistry:
    """Versions, metadata and pointers in Redis; artifacts in ``store``."""

    def __init__(self, client, store: ArtifactStore, prefix: str = "kdsm:"):
        self.r = client
        self.store = store
        self.keys = Keys(prefix)
        self._promote = client.register_script(_PROMOTE)
        self._rollback = client.register_script(_ROLLBACK)
        self._prune = client.register_script(_PRUNE)

    @classmethod
    def from_settings(cls, settings, client=None) -> ModelRegistry:
        return cls(client or redis_client(settings.redis), ArtifactStore(settings.registry.store_dir),
                   settings.redis.key_prefix)

    def _state(self, *versions: str, lock: bool = False):
        """Within: a registry key of the wrong Redis type (written by hand) is a ``RegistryError`` naming it."""
        expected = {self.keys.pointers: "hash", self.keys.versions: "zset", self.keys.log: "stream",
                    **{self.keys.version(v): "string" for v in versions}}
        if lock:
            expected[self.keys.lock] = "string"
        return expect_types(self.r, RegistryError, expected)

    # ------------------------------------------------------------ versions
    def add(self, model_dir: str | os.PathLike, meta: dict | None = None) -> str:
        """Copy an artifact into the store and register it; returns its version (from its metadata)."""
        return self.add_artifact(model_dir, meta)[0]

    def add_artifact(self, model_dir: str | os.PathLike, meta: dict | None = None) -> tuple[str, str | None]:
        """``add``, returning (version, repaired): ``repaired`` says why the stored copy was published again, else None.

        Adding a version that is already registered keeps its metadata and
        status (a second ``models add`` of the serving model must not mark it
        "registered" again); its stored copy is checked (checksums, as promote
        does) and published again from ``model_dir`` if missing or damaged:
        the documented repair of a damaged store artifact.
        """
        from offline_train.detector import KDSM

        det = KDSM.load(model_dir, device="cpu")  # refuses a corrupt artifact before it enters the store
        version = det.version_
        if self.get(version) is not None:
            try:
                self._check_artifact(version, f"published again from {model_dir}")
                return version, None
            except RegistryError as e:
                repaired = str(e)
            location = self.store.location(version)
            if self.store.remote:
                # A store that cannot be read now is no damaged copy: raise (StorageError, one line), replace nothing
                storage.check_bucket(location)
            elif location.is_dir() and not artifact_exists(location):
                shutil.rmtree(location)  # a directory without its manifest is no artifact put may replace
            # The copy is replaced in place, never deleted first: locally in one rename, remotely its manifest last,
            # so a failed put leaves what was there and a streamer restarting on it never finds nothing.
            self.store.put(version, model_dir)
            log.warning({"event": "registry_artifact_repaired", "version": version, "was": repaired})
            return version, repaired
        self.store.put(version, model_dir)
        base = {"version": version, "created": det.metadata_.get("created", _now_iso()), "registered": _now_iso(),
                "features": det.feature_names_, "schema_hash": det.schema_hash_, "thresholds": det.thresholds_,
                "train_summary": {k: v for k, v in det.train_summary_.to_dict().items() if k != "loss_curve"},
                "data_summary": det.data_summary_, "status": "registered"}
        self.register(version, {**base, **(meta or {})})
        return version, None

    def register(self, version: str, meta: dict) -> None:
        created = time.time()
        with self._state(version):
            pipe = self.r.pipeline()
            pipe.set(self.keys.version(version), json.dumps({"version": version, **meta}, default=str))
            pipe.zadd(self.keys.versions, {version: created}, nx=True)
            pipe.execute()

    def update(self, version: str, **fields) -> dict:
        meta = self.get(version)
        if meta is None:
            raise RegistryError(f"unknown model version {version!r}")
        meta.update(fields)
        self.r.set(self.keys.version(version), json.dumps(meta, default=str))
        return meta

    def get(self, version: str) -> dict | None:
        """The version's metadata, None if it is not registered; an entry that is not a JSON object is a ``RegistryError``.

        Read undecoded (``read_raw``): an entry written by hand that is not UTF-8 is damaged like any other, not a
        ``UnicodeDecodeError`` traceback in ``kdsm models list``.
        """
        return self._entry(version)[1]

    def _entry(self, version: str) -> tuple[str | None, dict | None]:
        """(the entry as stored, its metadata): ``get``, with the text the metadata was read from (what prune's
        script compares); (None, None) when the version has no entry."""
        key = self.keys.version(version)
        with self._state(version):
            raw = text_of(read_raw(self.r, "GET", key))
        if raw is None:
            return None, None
        try:
            meta = json_of(raw)
        except ValueError:
            meta = None
        if not isinstance(meta, dict):
            try:
                again = f" and register its artifact again (kdsm models add --model {self.store.location(version)})"
            except RegistryError:  # not a name a version can have
                again = ""
            what = " (not UTF-8)" if isinstance(raw, NotUtf8) else ""
            raise RegistryError(f"the registry entry of version {version!r} ({key}) is not a JSON object{what}: "
                                f"{raw[:80]!r} (written by hand?): delete it (redis-cli DEL {key}){again}")
        return raw, meta

    def list(self) -> list[dict]:
        """Registered versions, newest first, each with ``current`` / ``previous`` flags.

        A version whose entry is unreadable is listed as ``{"version", "status": "unreadable", "error"}``: one bad
        entry does not hide the others; so is a member of the versions set that is not UTF-8 (read undecoded).
        """
        ptr = self.pointers()
        out = []
        key = self.keys.versions
        with self._state():
            members = read_raw(self.r, "ZREVRANGE", key, 0, -1)
        for member in members:
            v = text_of(member)
            try:
                if isinstance(v, NotUtf8):  # its score names it to redis-cli (a float's repr reads back exactly)
                    score = self.r.zscore(key, member)
                    s = repr(float(score)) if score is not None else "SCORE"
                    raise RegistryError(f"the registry's version set ({key}) holds a member that is not UTF-8: "
                                        f"{member[:80]!r} (written by hand?): remove it "
                                        f"(redis-cli ZREMRANGEBYSCORE {key} {s} {s})")
                meta = self.get(v) or {"version": v}
            except RegistryError as e:
                log.warning({"event": "registry_entry_unreadable", "version": v, "error": str(e)})
                meta = {"version": v, "status": "unreadable", "error": str(e)}
            meta["current"], meta["previous"] = v == ptr["current"], v == ptr["previous"]
            out.append(meta)
        return out

    # ------------------------------------------------------------ pointers
    def pointers(self) -> dict[str, str | None]:
        """Read undecoded: a pointer written by hand that is not UTF-8 is a ``RegistryError`` naming it and its repair."""
        with self._state():
            h = read_raw(self.r, "HGETALL", self.keys.pointers)
        h = {text_of(k): text_of(v) for k, v in h.items()}
        ptr = {"current": h.get("current") or None, "previous": h.get("previous") or None}
        for field, v in ptr.items():
            if isinstance(v, NotUtf8):
                raise _not_utf8_pointer(self.keys, field, v)
        return ptr

    def current_version(self) -> str | None:
        """Read undecoded: a current pointer written by hand that is not UTF-8 is a ``NotUtf8``, a version no artifact
        has: a streamer refuses it as it refuses any garbage version (the old model keeps serving), promote refuses it.
        """
        with self._state():
            return text_of(read_raw(self.r, "HGET", self.keys.pointers, "current")) or None

    def checked_current_version(self) -> str | None:
        """``current_version``, a pointer that is not UTF-8 a ``RegistryError`` naming it and its repair: what promote
        refuses, so a retrain checks it before it trains (and a pointers key of another type is one too)."""
        v = self.current_version()
        if isinstance(v, NotUtf8):
            raise _not_utf8_pointer(self.keys, "current", v)
        return v

    def _check_artifact(self, version: str, refused: str) -> None:
        """``version``'s artifact is in the store and matches its checksums (read without loading the model), else a
        ``RegistryError`` ending in ``refused``: what promote and rollback check before they move a pointer to it."""
        if not self.store.exists(version):
            raise RegistryError(f"version {version} has no artifact in the store ({self.store.location(version)}), "
                                f"{refused}")
        try:
            read_artifact(self.store.location(version), arrays="numpy")
        except (ArtifactError, OSError) as e:
            raise RegistryError(f"version {version} is damaged in the store, {refused}: {e}") from None

    def promote(self, version: str, reason: str = "manual", force: bool = False,
                lock_token: str | bytes | None = None, expect_current: str | None | bool = False,
                ) -> tuple[str | None, str]:
        """Make ``version`` current (the old current becomes previous); returns the pointers after it: (previous, current).

        Promoting the version that is already current changes nothing (the
        previous pointer stays what rollback goes back to). Refuses unknown,
        missing, damaged (checksums, read without loading the model) or,
        without ``force``, versions whose status is not in ``PROMOTABLE``
        (gate-rejected, still validating): a streamer that starts would find no model to
        load in a damaged current one. With ``lock_token`` (the retrain
        lock's), the pointers move only if ``<p>retrain:lock`` still holds that
        token, checked in the same Lua step: else ``LockLost``, nothing moved.
        With ``expect_current`` (a version, or None for no current; False: no
        check) the pointers move only if ``current`` is still that, checked in
        the same step: else ``CurrentChanged``, nothing moved (a retrain does
        not override an operator's promote or rollback made while it ran).
        A version that left the versions set after it was read (``prune``
        removed it: its artifact is going) is refused in the same step too.
        """
        meta = self.get(version)
        if meta is None:
            raise RegistryError(f"unknown model version {version!r} (see `kdsm models list`)")
        self._check_artifact(version, "not promoted")
        status = meta.get("status")
        if status == "rejected" and not force:
            gate = meta.get("gate")
            why = gate.get("reason") if isinstance(gate, dict) else gate
            raise RegistryError(f"version {version} failed the validation gate ({why}); use --force to promote anyway")
        if status not in PROMOTABLE and not force:  # e.g. validating: a retrain that died in its gate
            raise RegistryError(f"version {version} has status {status!r}, it did not pass the validation gate; "
                                "use --force to promote anyway")
        was = self.checked_current_version()  # not UTF-8: the script's reply would hold it, undecodable
        with self._state(lock=bool(lock_token)):
            res = self._promote(keys=[self.keys.pointers, self.keys.log, self.keys.lock, self.keys.versions],
                                args=[version, self.keys.channel, "promote", reason, _now_iso(), lock_token or "",
                                      "0" if expect_current is False else "1", expect_current or ""])
        if res == -1:
            raise RegistryError(f"version {version} was pruned from the registry while it was being promoted "
                                "(kdsm models prune): not promoted")
        if res == 0:
            raise CurrentChanged(f"current is {self.current_version()} now, not {expect_current}: version {version} "
                                 "not promoted")
        if not res:
            raise LockLost(f"{self.keys.lock} is no longer held by this retrain: version {version} not promoted")
        prev, new = res
        if was != new:
            self.update(version, status="promoted", promoted=_now_iso())
        return (prev or None), new

    def rollback(self, reason: str = "manual") -> tuple[str | None, str]:
        """current <- previous (and previous <- the old current, so a second rollback undoes the first).

        Refuses, as promote does, a previous version whose artifact is missing or damaged (checksums): nothing moves.
        The script moves the pointers only if previous is still the version checked (else nothing moves either).
        """
        prev = self.pointers()["previous"]  # not UTF-8: its one line, not an undecodable reply of the script
        if prev is None:
            raise RegistryError("nothing to roll back to: no previous version")
        self._check_artifact(prev, "nothing rolled back")
        with self._state():
            res = self._rollback(keys=[self.keys.pointers, self.keys.log],
                                 args=[self.keys.channel, reason, _now_iso(), prev])
        if res == 0:
            raise RegistryError(f"the previous pointer moved from {prev} while its artifact was checked (another "
                                "promote or rollback?): nothing rolled back; look at kdsm models list, then run it again")
        if not res:
            raise RegistryError("nothing to roll back to: no previous version")
        return (res[0] or None), res[1]

    # ------------------------------------------------------------ retention
    def prune(self, keep: int, dry_run: bool = False, reason: str | None = None) -> dict:
        """Remove the versions beyond the newest ``keep`` (by registration time, the versions set's score) and their
        artifacts; returns what was pruned (``would_prune`` with ``dry_run``, which changes nothing), what was kept
        and why, what a race kept (``skipped``) and the artifacts that could not be deleted (``artifact_errors``).

        Never pruned, however old: the current and the previous version (rollback's target), a version whose status
        is "validating" (a retrain whose gate has not finished) and one whose entry cannot be read (repair it first:
        ``kdsm models list`` names it). Each version leaves Redis in one Lua step that checks, at that moment, that it
        is neither current nor previous and that its entry is what it was judged by; only then is its artifact deleted
        from the store. A deletion that fails (the store went away) is logged and reported in ``artifact_errors``, the
        entry staying removed, and the others go on. An object store that cannot be reached before anything is removed
        is a ``StorageError`` (one line), nothing removed.
        """
        if isinstance(keep, bool) or not isinstance(keep, int) or keep < 1:
            raise RegistryError(f"keep must be a positive integer (how many of the newest versions to keep), got {keep!r}")
        kept, candidates = self._prune_plan(keep)
        out = {"keep": keep, "dry_run": dry_run}
        if dry_run:
            return out | {"would_prune": [{"version": v, "artifact": str(self.store.location(v))}
                                          for v, _ in candidates], "kept": kept}
        if candidates and self.store.remote:
            storage.check_bucket(self.store.root)  # unreachable now: one line, nothing removed
        reason = reason or f"retention: keep the newest {keep}"
        pruned, skipped, errors = [], [], []
        for v, entry in candidates:
            res = self._prune_entry(v, entry, reason)
            if res != "pruned":
                skipped.append({"version": v, "why": _NOT_PRUNED.get(res, res)})
                continue
            location = str(self.store.location(v))
            pruned.append({"version": v, "artifact": location})
            log.info({"event": "registry_pruned", "version": v, "reason": reason})
            try:
                self.store.delete(v)
            except Exception as e:  # noqa: BLE001 - the entry is gone already: report the artifact left behind
                text = str(e).strip() if isinstance(e, OSError) else f"{type(e).__name__}: {e}".strip()
                error = text.splitlines()[0] if text else type(e).__name__
                log.error({"event": "registry_prune_artifact_failed", "version": v, "artifact": location,
                           "error": error, "action": "entry removed; delete the artifact by hand"})
                errors.append({"version": v, "artifact": location, "error": error})
        return out | {"pruned": pruned, "kept": kept, "skipped": skipped, "artifact_errors": errors}

    def _prune_plan(self, keep: int) -> tuple[list[dict], list[tuple[str, str | None]]]:
        """(kept: each ``{"version", "why"}``, newest first; candidates: (version, its entry as read), newest first)."""
        ptr = self.pointers()  # a pointer that is not UTF-8: its one line, nothing pruned
        with self._state():
            members = read_raw(self.r, "ZREVRANGE", self.keys.versions, 0, -1)
        kept, candidates = [], []
        for rank, member in enumerate(members):
            v = text_of(member)
            if isinstance(v, NotUtf8):
                kept.append({"version": v, "why": "unreadable: its name is not UTF-8 (kdsm models list names its "
                                                  "repair)"})
                continue
            if v == ptr["current"]:
                why = "current"
            elif v == ptr["previous"]:
                why = "previous (rollback's target)"
            elif rank < keep:
                why = f"among the newest {keep}"
            else:
                try:
                    self.store.location(v)  # a name no artifact can have (written by hand): kept, named
                    entry, meta = self._entry(v)
                except RegistryError as e:
                    why = f"unreadable: {e}"
                else:
                    if meta is not None and meta.get("status") == "validating":
                        why = "validating (a retrain's gate has not finished)"
                    else:
                        candidates.append((v, entry))
                        continue
            kept.append({"version": v, "why": why})
        return kept, candidates

    def _prune_entry(self, version: str, entry: str | None, reason: str) -> str:
        """One version out of Redis if the script finds it neither current nor previous and its entry still
        ``entry``: 'pruned', else why not ('current', 'previous', 'gone', 'changed'). Deletes no artifact."""
        with self._state(version):
            res = self._prune(keys=[self.keys.pointers, self.keys.versions, self.keys.version(version), self.keys.log],
                              args=[version, "0" if entry is None else "1" + entry, reason, _now_iso()])
        return text_of(res)

    def history(self, count: int = 20) -> list[dict]:
        """The newest promote / rollback / prune records (a prune's ``from`` is the version it removed); read undecoded:
        a field written by hand that is not UTF-8 is shown with U+FFFD."""
        with self._state():
            entries = read_raw(self.r, "XREVRANGE", self.keys.log, "+", "-", "COUNT", count)
        return [{text_of(k): text_of(v) for k, v in (fields or {}).items()} for _, fields in entries]


class RegistryModelProvider:
    """The streamer's model source: ``current()`` is a lock-free read; swaps happen in a background thread.

    Start-up loads the registry's current version (or uses ``fallback`` when the
    registry has none yet). The app calls ``current()`` once per batch, so a swap
    lands between batches and every row of a batch is scored by one version.
    """

    def __init__(self, registry: ModelRegistry, *, device: str = "auto", check_interval_s: float = 10.0,
                 fallback: KDSM | None = None, pubsub_client=None, metrics: LifecycleMetrics | None = None):
        self.registry = registry
        self.metrics = metrics or LifecycleMetrics()
        self.device = device
        self.check_interval_s = check_interval_s
        self.refused: dict[str, str] = {}  # version -> why
        self._cond = threading.Condition()
        self._pubsub_client = pubsub_client
        self._model: KDSM | None = None
        self._bad_key: str | None = None  # why the registry's keys cannot be read (logged once)
        action = "serving the fallback model" if fallback is not None else "no fallback model to serve"
        try:
            v = registry.current_version()
        except RegistryError as e:  # Redis answers, but a registry key holds another type (written by hand)
            self._damaged(str(e), action)
            v = None
        except Exception as e:  # Redis down at start: serve the fallback, the watch thread keeps trying
            log.warning({"event": "registry_unreachable", "error": str(e), "action": action})
            v = None
        if v is not None:
            try:
                self._model = self._load(v, schema=None)
            except RegistryError as e:
                self._refuse(v, str(e))
        if self._model is None:
            self._model = fallback
        if self._model is None:
            raise RegistryError("no model to serve: the registry has no loadable current version and no fallback was given")
        client = self._pubsub_client or registry.r
        self._watcher = ChannelWatcher(client, registry.keys.channel, period_s=check_interval_s,
                                       on_message=lambda _: self.check("notify"), on_tick=lambda: self.check("poll"),
                                       on_error=self._watch_failed, retry_s=min(5.0, check_interval_s),
                                       name="kdsm-registry-watch").start()

    def current(self) -> KDSM:
        return self._model

    @property
    def version(self) -> str:
        return self._model.version_

    def wait_for(self, version: str, timeout: float = 30.0) -> bool:
        """Block until ``version`` serves (tests, ops scripts); False on timeout."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while self._model.version_ != version:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(min(left, 0.5))
        return True

    def close(self) -> None:
        self._watcher.stop()

    # ------------------------------------------------------------ internals
    def _load(self, version: str, schema: str | None) -> KDSM:
        if isinstance(version, NotUtf8):  # a current pointer written by hand: refused like any garbage version
            raise _not_utf8_pointer(self.registry.keys, "current", version)
        try:
            from offline_train.detector import KDSM

            det = KDSM.load(self.registry.store.location(version), device=self.device)
        except (ArtifactError, OSError) as e:
            raise RegistryError(f"version {version} does not load: {e}") from None
        if schema is not None and det.schema_hash_ != schema:
            raise RegistryError(f"version {version} has feature schema {det.schema_hash_}, the streamer serves {schema}")
        # Smoke test: the scaler's mean row must score to a finite number before the model may serve.
        probe = det.scaler_.inverse_transform(np.zeros((1, det.n_features_in_)))
        if not np.isfinite(det.decision_function(probe)).all():
            raise RegistryError(f"version {version} scores a plain row as non-finite")
        return det

    def _refuse(self, version: str, why: str) -> None:
        if self.refused.get(version) != why:
            log.error({"event": "model_refused", "version": version, "why": why, "action": "the old model keeps serving"})
            self.metrics.model_refused.inc()
        self.refused[version] = why

    def _damaged(self, why: str, action: str) -> None:
        """A registry key of another Redis type: ``why`` names it and its repair; logged once, not at every check."""
        if self._bad_key != why:
            log.error({"event": "bad_registry_key", "error": why, "action": action})
        self._bad_key = why

    def _watch_failed(self, e: Exception) -> None:  # Redis down or a bug: keep serving, retry later
        log.warning({"event": "registry_watch_failed", "error": str(e), "action": "retrying"})

    def check(self, reason: str = "poll") -> bool:
        """Swap to the registry's current version if it differs and loads; True when a swap happened."""
        try:
            v = self.registry.current_version()
        except RegistryError as e:  # not Redis down: retrying the subscription would not help
            self._damaged(str(e), "the old model keeps serving")
            return False
        self._bad_key = None
        if v is None or v == self._model.version_:
            return False
        try:
            det = self._load(v, schema=self._model.schema_hash_)
        except RegistryError as e:
            self._refuse(v, str(e))
            return False
        except Exception as e:  # a bad artifact must never take the streamer down
            self._refuse(v, f"{type(e).__name__}: {e}")
            return False
        old = self._model.version_
        with self._cond:
            self._model = det
            self._cond.notify_all()
        self.refused.pop(v, None)
        self.metrics.model_swaps.labels(reason).inc()
        log.info({"event": "model_swapped", "from": old, "to": v, "reason": reason})
        return True


def serving_model_dir(settings) -> str:
    """The artifact the streamers serve: the registry's current version when ``registry.enabled``, else ``stream.model``."""
    if settings.registry.enabled:
        import redis

        try:
            reg = ModelRegistry.from_settings(settings)
            current = reg.checked_current_version()
        except (redis.RedisError, OSError) as e:
            log.warning({"event": "registry_unreachable_using_stream_model", "error": str(e)})
            current = None
        if current is not None:
            return str(reg.store.location(current))
    if not settings.stream.model:
        raise FileNotFoundError("no model: pass --model DIR, set stream.model, or promote a version in the registry")
    return settings.stream.model
