"""One writer per storage root: the broker's exclusive lock on `<root>/log/.lock`.

Kafka holds a `.lock` file in every log dir with FileChannel.tryLock (fcntl on Linux) for the
broker's lifetime; a second broker on the same dirs refuses to start. Same here, with POSIX
record locks (fcntl F_SETLK), which NFSv4 implements natively (flock over NFS is only emulated
with them). The kernel (or the NFS server, when the client host dies) drops the lock with its
process, so a restart after kill -9 takes over with no manual step.

The lock file's content names the owner (broker id, pid, host, port) for the error a second
broker prints; the lock itself, not the content, decides who owns the root.

POSIX locks belong to a process and are dropped when ANY descriptor of the file is closed in that
process, so the owning process must never open the file a second time: `owner_of` answers from
memory for roots this process holds, and only probes (F_GETLK, which takes nothing) otherwise.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import socket
import struct
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .atomic import create_exclusive
from .errors import TopiclakeError

LOCK_NAME = ".lock"  # Kafka's LogManager.LockFileName, in the log dir

# struct flock on Linux LP64 (x86_64, aarch64): l_type, l_whence, l_start, l_len, l_pid (+ padding).
_FLOCK = struct.Struct("hhqqi4x")

_held: dict[Path, "RootLock"] = {}  # roots this process owns, by resolved log dir
_held_guard = threading.RLock()


class StorageRootInUseError(TopiclakeError):
    """Another live process owns the storage root."""

    def __init__(self, root: Path, owner: dict[str, Any] | None):
        self.root = root
        self.owner = owner
        super().__init__(f"storage root {root} is in use by {describe_owner(owner)}; "
                         "stop that broker first, or use another --data")


class StorageRootNotWritableError(TopiclakeError):
    """The storage root (or its log dir) cannot be created or written."""


def describe_owner(owner: dict[str, Any] | None) -> str:
    if not owner:
        return "another process"
    parts = []
    if owner.get("broker_id") is not None:
        parts.append(f"broker {owner['broker_id']}")
    if owner.get("pid") is not None:
        parts.append(f"pid {owner['pid']}")
    if owner.get("hostname"):
        parts.append(f"on {owner['hostname']}")
    if owner.get("port"):
        parts.append(f"serving {owner.get('host', '?')}:{owner['port']}")
    return " ".join(parts) if parts else "another process"


def lock_path(root: str | os.PathLike) -> Path:
    return Path(root) / "log" / LOCK_NAME


@dataclass
class RootLock:
    """An acquired lock; `release()` (or process death) frees the root."""

    path: Path
    fd: int
    owner: dict[str, Any]

    def update_owner(self, **fields: Any) -> None:
        """Record more about the owner (e.g. the port once it is bound) in the lock file."""
        self.owner = {**self.owner, **fields}
        _write_owner(self.fd, self.owner)

    def release(self) -> None:
        with _held_guard:
            if _held.get(self.path.resolve()) is self:
                del _held[self.path.resolve()]
        if self.fd >= 0:
            try:
                os.ftruncate(self.fd, 0)  # no stale owner text for the next reader
            except OSError:
                pass
            os.close(self.fd)  # closing drops the lock
            self.fd = -1


def acquire(root: str | os.PathLike, **owner: Any) -> RootLock:
    """Take the root's lock or raise StorageRootInUseError naming the live owner."""
    path = lock_path(root)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError):
        raise StorageRootNotWritableError(f"storage root {root} is not a directory") from None
    except PermissionError:
        raise StorageRootNotWritableError(f"storage root {root} is not writable (permission denied)") from None
    key = path.resolve()
    with _held_guard:
        if key in _held:  # POSIX locks do not exclude the owning process itself
            raise StorageRootInUseError(Path(root), _held[key].owner)
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        except PermissionError:
            raise StorageRootNotWritableError(f"storage root {root} is not writable ({path}: permission denied)") \
                from None
        try:
            fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            os.close(fd)
            if exc.errno in (errno.EACCES, errno.EAGAIN):
                raise StorageRootInUseError(Path(root), owner_of(root)) from None
            raise
        info = {"version": 0, "pid": os.getpid(), "hostname": socket.gethostname(), **owner}
        lock = RootLock(path, fd, info)
        _write_owner(fd, info)
        _held[key] = lock
        return lock


def owner_of(root: str | os.PathLike) -> dict[str, Any] | None:
    """The live owner of `root` (what its lock file says, plus the pid holding the lock), or None
    when nobody holds the lock. Takes no lock, so it never races a broker that is starting."""
    path = lock_path(root)
    with _held_guard:
        mine = _held.get(path.resolve()) if path.parent.exists() else None
    if mine is not None:
        return dict(mine.owner)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except (FileNotFoundError, NotADirectoryError, PermissionError):
        return None
    try:
        holder = _lock_holder(fd)
        if holder is None:
            return None
        text = os.pread(fd, 64 * 1024, 0)
    finally:
        os.close(fd)
    try:
        owner = json.loads(text) if text else {}
    except ValueError:  # being rewritten this instant
        owner = {}
    if holder > 0:
        owner.setdefault("pid", holder)
    return owner if isinstance(owner, dict) else {"pid": holder}


def _lock_holder(fd: int) -> int | None:
    """F_GETLK: the pid holding a conflicting lock on the whole file (0 if unknown, e.g. a lock
    held on another NFS client), or None if the file is unlocked."""
    query = _FLOCK.pack(fcntl.F_WRLCK, os.SEEK_SET, 0, 0, 0)
    try:
        answer = fcntl.fcntl(fd, fcntl.F_GETLK, query)
    except OSError:
        return 0 if _write_lock_refused(fd) else None
    l_type, _whence, _start, _len, pid = _FLOCK.unpack(answer)
    return None if l_type == fcntl.F_UNLCK else pid


def _write_lock_refused(fd: int) -> bool:
    """Fallback probe where F_GETLK is unavailable: would a shared lock be refused?"""
    try:
        fcntl.lockf(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except OSError:
        return True
    fcntl.lockf(fd, fcntl.LOCK_UN)
    return False


def _write_owner(fd: int, owner: dict[str, Any]) -> None:
    data = json.dumps(owner, sort_keys=True).encode()
    os.ftruncate(fd, 0)
    os.pwrite(fd, data, 0)
    os.fsync(fd)


# ----------------------------------------------------------------- single broker or cluster
MODE_FILE = "mode.json"  # <root>/cluster/mode.json: which kind of broker a root belongs to, once


class StorageRootModeError(TopiclakeError):
    """The root belongs to the other kind of broker (one alone, or a cluster of them)."""


def claim_mode(root: str | os.PathLike, mode: str, *, shown_as: str | None = None, **details: Any) -> dict[str, Any]:
    """Record (once) that `root` is used by a single broker ("single") or by a cluster of
    brokers coordinated through ZooKeeper ("cluster"), or refuse if it is already the other's.
    A root a broker used before this was recorded (it has a cluster id) is a single broker's.
    `shown_as`: the root's name in a refusal (a bucket's URL, whose cache `root` is).
    Returns what the root records."""
    cluster_dir = Path(root) / "cluster"
    path = cluster_dir / MODE_FILE
    wanted = {"version": 0, "mode": mode, **details}
    recorded = _read_mode(path)
    if recorded is None:
        if (cluster_dir / "meta.json").exists():
            recorded = {"version": 0, "mode": "single"}  # a root from before modes were recorded
        if recorded is None or recorded["mode"] == mode:
            if not create_exclusive(path, json.dumps(wanted).encode()):
                recorded = _read_mode(path)  # another broker recorded it first
            elif recorded is None:
                recorded = wanted
    if recorded is None:
        recorded = wanted
    if recorded.get("mode") != mode:
        if recorded.get("mode") == "cluster":
            where = recorded.get("zookeeper", "ZooKeeper")
            raise StorageRootModeError(f"storage root {shown_as or root} is used by a cluster of brokers ({where}): "
                                       "set [cluster] zookeeper to join it, or use another --data")
        raise StorageRootModeError(f"storage root {shown_as or root} belongs to a single broker (no [cluster] "
                                   "setting); a cluster needs a storage root of its own: use another --data")
    return recorded


def _read_mode(path: Path) -> dict[str, Any] | None:
    try:
        value = json.loads(path.read_bytes())
    except FileNotFoundError:
        return None
    except ValueError:
        raise StorageRootModeError(f"{path} is not valid JSON: remove it only if you know which brokers use "
                                   "this root") from None
    if not isinstance(value, dict) or value.get("mode") not in ("single", "cluster"):
        raise StorageRootModeError(f"{path} names no mode (single or cluster)")
    return value
