"""Publishing a run: who may write an output folder, what an earlier attempt
there becomes, and the last writes that make a run complete.

    claim()    OUTPUT/.lock is created exclusively (host, boot, pid, start time);
               then an earlier attempt in the folder is refused, or with
               --replace deleted whole, before the pipeline starts.
    pipeline   bundles write under OUTPUT/.temp-*; one finishing step
               renames them into scored/ and unscored/, then writes
               metrics.json and manifest.json whole (transforms.write).
    publish()  report.html and comparison.json whole, the manifest again
               listing them, then _SUCCESS; the lock is released.

A reader (read_run) accepts a folder only with _SUCCESS and a manifest whose
metrics.json checksum holds; the files the manifest lists are the run. On
object stores a rename is a copy, so a crashed run may leave objects behind:
they are not part of any run, whatever their names.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import socket
import uuid
from dataclasses import dataclass
from datetime import datetime, timezone

from apache_beam.io.filesystem import BeamIOError
from apache_beam.io.filesystems import FileSystems

from litmus_score.scoring.layout import (
    COMPARISON_FILE,
    EVIDENCE_FILE,
    IMPORTED_DIR,
    LOCK_FILE,
    MANIFEST_FILE,
    MANIFEST_SCHEMA,
    METRICS_FILE,
    PARTIAL_PREFIX,
    POLICY_FILE,
    POLICY_SOURCE_FILE,
    REPORT_FILE,
    SUCCESS_MARKER,
    TEMP_PREFIX,
    UNMAPPED_DIR,
    UNSCORED_DIR,
)
from pipeline.locknotes import note_lock
from pipeline.processes import boot_id, process_ended, process_start
from transforms.files import delete_exactly, is_local, literal_pattern, objects_under, to_json, write_text, write_whole
from transforms.write import FILE_SETS

# Every name a run writes at the top of its folder (UNMAPPED_DIR: what of the
# logs `score --input_format` imports became no trajectory; IMPORTED_DIR:
# where a run written before it imported in the same job kept its import).
RUN_NAMES = frozenset({METRICS_FILE, MANIFEST_FILE, EVIDENCE_FILE, COMPARISON_FILE, REPORT_FILE, SUCCESS_MARKER,
                       LOCK_FILE, IMPORTED_DIR, UNMAPPED_DIR, POLICY_FILE, POLICY_SOURCE_FILE, UNSCORED_DIR,
                       *(files.folder for files in FILE_SETS.values())})
_READ_ERRORS = (OSError, BeamIOError, ValueError, KeyError, TypeError, AttributeError)


class PublishError(ValueError):
    """An output folder that cannot be written or read as asked; the message is one line."""


def _listing(folder: str) -> dict:
    """Top-level name -> the paths to delete for it. Local folders are listed
    one level deep (Beam's local match walks every subfolder: `--output /`
    would list the whole disk); object stores list the prefix."""
    if is_local(folder):
        if not os.path.exists(folder):
            return {}
        if not os.path.isdir(folder):
            raise PublishError(f"output {folder!r} is a file, not a folder")
        return {name: [os.path.join(folder, name)] for name in os.listdir(folder)}
    names: dict[str, list[str]] = {}
    prefix = FileSystems.join(folder, "")
    for path in objects_under(folder):
        names.setdefault(path[len(prefix):].split("/", 1)[0], []).append(path)
    return names


def _read_bytes(path: str) -> bytes:
    with FileSystems.open(path) as handle:
        return handle.read()


@dataclass(frozen=True)
class FolderKind:
    """What a command writes into a folder it claims: the names at the top of
    the folder (anything else there is someone else's), and the file whose
    presence says an earlier attempt finished."""

    noun: str
    names: frozenset
    finished_marker: str


# A scoring run's folder.
RUN = FolderKind("run", RUN_NAMES, SUCCESS_MARKER)
# `compare`'s folder: the comparison, the report of the newer run against the older, their manifest.
COMPARISON = FolderKind("comparison", frozenset({COMPARISON_FILE, REPORT_FILE, MANIFEST_FILE, SUCCESS_MARKER,
                                                 LOCK_FILE}), SUCCESS_MARKER)


def _refuse_foreign(folder: str, names, kind: FolderKind) -> None:
    foreign = sorted(name for name in names if name not in kind.names and not name.startswith((TEMP_PREFIX,
                                                                                                PARTIAL_PREFIX)))
    if foreign:
        shown = ", ".join(repr(name) for name in foreign[:3]) + (", ..." if len(foreign) > 3 else "")
        raise PublishError(f"output folder {folder!r} holds files litmus-score did not write ({shown}); "
                           "choose a new or empty folder")


class Lock:
    """FOLDER/.lock, created exclusively: one command writes a folder at a time.

    The record (host, boot id, pid, the process's start time) is written to
    a temporary file and linked into place, so a lock is never seen empty or
    half written: a full disk fails the claim and leaves no lock. Beam's
    object store filesystems have no create-if-absent, so there the lock is
    a check then a create (an object appears whole): it keeps apart runs
    started seconds apart, not at the same instant.

    A lock is stale when its owner is provably gone: on this host, a boot
    other than this one, a pid no process has, or a pid now held by a
    process that started at another time; or a lock with no readable record,
    which no run of this version leaves. A stale lock may be broken (with
    --replace, or by `nightly` for its own night); one from another host
    cannot be judged and must be deleted by hand.
    """

    def __init__(self, path: str):
        self.path = path

    @classmethod
    def acquire(cls, folder: str, may_break_stale: bool = False) -> Lock:
        path = FileSystems.join(folder, LOCK_FILE)
        record = {"pid": os.getpid(), "host": socket.gethostname(), "boot_id": boot_id(),
                  "process_start": process_start(os.getpid()),
                  "started": datetime.now(timezone.utc).isoformat(timespec="seconds")}
        data = to_json(record).encode("utf-8")
        note_lock(path)
        if _create_exclusively(path, data):
            return cls(path)
        holder = _holder(path)
        described = (f"pid {holder.get('pid')} on {holder.get('host')}, since {holder.get('started')}"
                     if isinstance(holder, dict) else "an unreadable lock" if holder == _UNREADABLE
                     else "a lock with no record: empty or garbled")
        if not _owner_gone(holder):
            raise PublishError(f"output folder {folder!r} is in use by another run ({described}); "
                               f"if that run is gone, delete {path}")
        if not may_break_stale:
            raise PublishError(f"a run that did not finish left {path} ({described}, no longer running); "
                               "pass --replace to replace its partial output")
        if not (_break(path, holder) and _create_exclusively(path, data)):
            raise PublishError(f"output folder {folder!r} is in use by another run; try again later")
        return cls(path)

    def release(self) -> None:
        if FileSystems.exists(self.path):
            delete_exactly([self.path])


def release_abandoned(path: str, pid: int) -> bool:
    """Deletes the lock at `path` if its record names process `pid` of this
    host: a run that ended without releasing it. Whether it did."""
    holder = _holder(path)
    if not (isinstance(holder, dict) and holder.get("pid") == pid and holder.get("host") == socket.gethostname()):
        return False
    delete_exactly([path])
    return True


def _create_exclusively(path: str, data: bytes) -> bool:
    if not is_local(path):
        if FileSystems.exists(path):
            return False
        with FileSystems.create(path) as handle:
            handle.write(data)
        return True
    folder = os.path.dirname(path)
    if not os.path.isdir(folder):
        raise PublishError(f"{folder!r} is not a folder")
    partial = os.path.join(folder, f"{PARTIAL_PREFIX}{uuid.uuid4().hex}{LOCK_FILE}")
    try:
        with open(partial, "xb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.link(partial, path)  # fails if the lock exists: create-if-absent, with the record already whole
        return True
    except FileExistsError:
        return False
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.remove(partial)


# A lock whose bytes cannot be read (its permissions): nothing can be judged.
_UNREADABLE = "unreadable"


def _holder(path: str):
    """The lock's record: a dict, None when it holds none (empty, garbled), or _UNREADABLE."""
    try:
        data = _read_bytes(path)
    except (OSError, BeamIOError):
        return None if not FileSystems.exists(path) else _UNREADABLE
    try:
        holder = json.loads(data)
    except ValueError:
        return None
    return holder if isinstance(holder, dict) else None


def _owner_gone(holder) -> bool:
    """Whether the run that took the lock `holder` records is provably no longer running."""
    if holder is None:  # empty or garbled: never written by a run that may still be going
        return True
    if holder == _UNREADABLE:
        return False
    pid = holder.get("pid")
    if holder.get("host") != socket.gethostname() or not isinstance(pid, int) or isinstance(pid, bool):
        return False
    boot = boot_id()
    if holder.get("boot_id") is not None and boot is not None and holder["boot_id"] != boot:
        return True  # this host has rebooted since
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:  # alive, another user's
        pass
    if process_ended(pid):
        return True
    recorded, now = holder.get("process_start"), process_start(pid)
    return recorded is not None and now is not None and recorded != now  # the pid was reused


def _break(path: str, holder) -> bool:
    """Removes the stale lock `holder`; False if another run took it over meanwhile."""
    if not is_local(path):
        delete_exactly([path])
        return True
    aside = os.path.join(os.path.dirname(path), f"{PARTIAL_PREFIX}{uuid.uuid4().hex}{LOCK_FILE}")
    try:
        os.rename(path, aside)
    except FileNotFoundError:  # another run broke it first
        return True
    if _holder(aside) != holder:  # a fresh lock, taken after ours was judged stale: put it back
        os.rename(aside, path)
        return False
    os.remove(aside)
    return True


def claim(folder: str, replace: bool = False, night: dict | None = None, kind: FolderKind = RUN) -> Lock:
    """Locks `folder` for a new `kind` of output and clears any earlier
    attempt in it, or raises PublishError. Without `replace` an earlier
    attempt is refused; for `night` (nightly), an attempt of that same night
    is replaced, one of another night never is, and one of other inputs
    needs `replace`. Nothing is written before the folder is known to hold
    nothing but such an attempt; a folder that cannot be written is named
    with the system's reason."""
    try:
        _refuse_foreign(folder, _listing(folder), kind)  # before anything is written: `--output /`, a user's folder
        if is_local(folder):
            os.makedirs(folder, exist_ok=True)
        lock = Lock.acquire(folder, may_break_stale=replace or night is not None)
    except (OSError, BeamIOError) as error:
        raise PublishError(f"cannot write output folder {folder!r}: {_reason(error)}") from None
    try:
        earlier = {name: paths for name, paths in _listing(folder).items() if name != LOCK_FILE}
        if earlier:
            _refuse_foreign(folder, earlier, kind)
            _check_replaceable(folder, replace, night, kind)
            delete_exactly(deletion_order(earlier, kind))
    except BaseException:
        lock.release()
        raise
    return lock


def deletion_order(earlier: dict, kind: FolderKind) -> list:
    """The paths of an earlier attempt (name -> paths), in the order they are
    deleted: its finished marker first, then its manifest, then the files
    they vouch for; a run killed at any point of the deletion leaves no
    marker that outlives what it vouches for."""
    first = (kind.finished_marker, MANIFEST_FILE)
    names = [name for name in first if name in earlier] + sorted(name for name in earlier if name not in first)
    return [path for name in names for path in earlier[name]]


def _reason(error: Exception) -> str:
    return getattr(error, "strerror", None) or str(error).split("\n", 1)[0]


def _check_replaceable(folder: str, replace: bool, night: dict | None, kind: FolderKind) -> None:
    try:
        manifest = json.loads(_read_bytes(FileSystems.join(folder, MANIFEST_FILE)))
    except _READ_ERRORS:
        manifest = None
    finished = FileSystems.exists(FileSystems.join(folder, kind.finished_marker))
    held = (f"an earlier complete {kind.noun}" if finished
            else f"an earlier {kind.noun} that did not finish (no {kind.finished_marker})")
    if night is None:
        if not replace:
            raise PublishError(f"output folder {folder!r} is not empty: it holds {held}; "
                               "pass --replace to replace it, or choose a new folder")
        return
    if manifest is None:  # nothing of this night's earlier attempt was published
        return
    theirs = manifest.get("night") if isinstance(manifest, dict) else None
    if not isinstance(theirs, dict) or theirs.get("date") != night["date"]:
        found = theirs.get("date") if isinstance(theirs, dict) else None
        raise PublishError(f"output folder {folder!r} holds the results of another night ({found!r}), "
                           f"not {night['date']}; refusing to write over them")
    if theirs.get("inputs") != night["inputs"] and not replace:
        raise PublishError(f"output folder {folder!r} holds {night['date']} scored from other inputs "
                           f"({theirs.get('inputs')!r}); pass --replace to replace it")


def read_run(folder: str, complete: bool = True):
    """(metrics, manifest) of the run in `folder`, or PublishError: the
    folder must hold _SUCCESS (unless `complete` is False: the launcher
    reading its own run before publishing it) and a manifest whose
    metrics.json entry matches the file."""
    folder = folder.rstrip("/") or "/"
    if complete and not FileSystems.exists(FileSystems.join(folder, SUCCESS_MARKER)):
        raise PublishError(f"{folder!r} is not a complete litmus-score run (no {SUCCESS_MARKER}: it is still "
                           "being written, it did not finish, or it is no run)")
    try:
        manifest = json.loads(_read_bytes(FileSystems.join(folder, MANIFEST_FILE)))
        entry = next(e for e in manifest["outputs"] if e["path"] == METRICS_FILE)
        if manifest["schema"] != MANIFEST_SCHEMA:
            raise ValueError(manifest["schema"])
    except (*_READ_ERRORS, StopIteration):
        raise PublishError(f"{folder!r} has no valid {MANIFEST_FILE}") from None
    try:
        data = _read_bytes(FileSystems.join(folder, METRICS_FILE))
    except _READ_ERRORS:
        raise PublishError(f"{folder!r} has no readable {METRICS_FILE}") from None
    if hashlib.sha256(data).hexdigest() != entry["sha256"]:
        raise PublishError(f"{folder!r}: {METRICS_FILE} does not match its manifest")
    try:
        return json.loads(data), manifest
    except ValueError:
        raise PublishError(f"{folder!r}: {METRICS_FILE} is not JSON") from None


@dataclass(frozen=True)
class Run:
    """A complete run, read once (pin_run): a run that compares with a
    baseline reads it when it starts, and whatever later happens to its
    folder, compares with what was read."""

    folder: str
    metrics: dict
    manifest: dict
    policy: tuple = (None, None)  # run_policy's (sha256, policy)
    # Set when `metrics` are the run's inputs scored again under other rules (pipeline.rescore).
    rescored: dict | None = None

    def identity(self) -> dict:
        """Which run, and which state of it, was read: its folder, its night
        (nightly's date) and the sha256 of the metrics.json read."""
        from litmus_score.scoring.compare import baseline_source

        metrics_entry = next(entry for entry in self.manifest["outputs"] if entry["path"] == METRICS_FILE)
        return {**baseline_source(self.folder, self.manifest), "metrics_sha256": metrics_entry["sha256"],
                "rescored": self.rescored}


def run_policy(folder: str, manifest: dict) -> tuple:
    """(policy_sha256, the policy) of a run: the policy as policy.json holds
    it, checked against the manifest's sha256; None for a run scored without
    one, or (with its sha256) for a run written before runs stored it."""
    sha256 = manifest.get("policy_sha256")
    if sha256 is None or not any(entry["path"] == POLICY_FILE for entry in manifest["outputs"]):
        return sha256, None
    try:
        data = _read_bytes(FileSystems.join(folder, POLICY_FILE))
    except (OSError, BeamIOError):
        raise PublishError(f"{folder!r} has no readable {POLICY_FILE}") from None
    if hashlib.sha256(data).hexdigest() != sha256:
        raise PublishError(f"{folder!r}: {POLICY_FILE} does not match the run's policy_sha256")
    return sha256, json.loads(data)


def pin_run(folder: str, role: str = "baseline") -> Run:
    """The complete run in `folder`, read now; PublishError naming its `role` if it is none."""
    try:
        metrics, manifest = read_run(folder)
    except PublishError as error:
        raise PublishError(f"{role}: {error}") from None
    if not isinstance(metrics, dict):
        raise PublishError(f"{role}: {folder!r}: {METRICS_FILE} is not a JSON object")
    folder = folder.rstrip("/") or "/"
    try:
        policy = run_policy(folder, manifest)
    except PublishError as error:
        raise PublishError(f"{role}: {error}") from None
    return Run(folder, metrics, manifest, policy)


def listed_files(folder: str, manifest: dict, subfolder: str) -> list:
    """Paths of the files the manifest lists under `subfolder`: the run's files, whatever else is there."""
    return [FileSystems.join(folder, entry["path"]) for entry in manifest["outputs"]
            if entry["path"].startswith(subfolder + "/")]


def publish(folder: str, manifest: dict, documents: dict) -> dict:
    """Writes `documents` (name -> text) whole, then the manifest listing
    them, then _SUCCESS: the run is complete. Returns the manifest."""
    entries = {entry["path"]: entry for entry in manifest["outputs"]}
    for name, text in documents.items():
        entries[name] = write_whole(folder, name, text.encode("utf-8"))
    manifest = {**manifest, "outputs": sorted(entries.values(), key=lambda entry: entry["path"])}
    write_whole(folder, MANIFEST_FILE, to_json(manifest).encode("utf-8"))
    write_text(FileSystems.join(folder, SUCCESS_MARKER), "")
    return manifest


def completed_subfolders(root: str, prefix: str) -> list:
    """Names of root's subfolders starting with `prefix` that hold _SUCCESS, sorted."""
    if is_local(root):
        if not os.path.isdir(root):
            return []
        return sorted(name for name in os.listdir(root)
                      if name.startswith(prefix) and os.path.exists(os.path.join(root, name, SUCCESS_MARKER)))
    pattern = FileSystems.join(literal_pattern(root), literal_pattern(prefix) + "*", SUCCESS_MARKER)
    start = len(FileSystems.join(root, ""))
    return sorted({found.path[start:].split("/", 1)[0] for found in FileSystems.match([pattern])[0].metadata_list})
