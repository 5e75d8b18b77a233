"""The incremental push, as the Go client does it (worktree/ and
cmd/lockstep/pushcmd.go), over the same wire protocol:

1. scan the directory into git blob and tree objects (the tree ``git add -A
   && git write-tree`` would build: modes 100644/100755/120000, entries in
   git's order, no empty directories, ``.git`` and ``.lockstep`` skipped),
   reading and hashing only files whose stat changed since the last push
   (the stat cache, with git's "racy" rule);
2. ask ``POST objects/missing`` which objects the server lacks: with the
   last push's trees known, in one round trip (the old root checked in the
   same request); otherwise top-down, one batch per tree level, never
   descending into a tree the server has;
3. upload those objects as one version 2 packfile (``POST objects``,
   ``application/x-git-packfile``), re-reading each file and refusing one
   that changed since the scan;
4. commit the root tree with compare-and-swap (``PUT worktree?tree=``),
   then remember the pushed trees in the cache.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat as statmod
import struct
import tempfile
import time
import zlib
from dataclasses import dataclass, field
from typing import IO, Callable, Dict, Iterable, List, Optional, Set, Tuple

from .errors import InvalidArgument, LockstepError

ZERO_OID = "0" * 40
BATCH = 4096  # oids per objects/missing request, as the Go client

MODE_FILE = "100644"
MODE_EXEC = "100755"
MODE_LINK = "120000"
MODE_TREE = "40000"


def object_id(kind: str, data: bytes) -> str:
    """The git object id of ``data`` as an object of ``kind`` (blob, tree, commit)."""
    h = hashlib.sha1()
    h.update(b"%s %d\0" % (kind.encode(), len(data)))
    h.update(data)
    return h.hexdigest()


def _sort_key(name: str, mode: str) -> bytes:
    b = name.encode("utf-8")
    return b + b"/" if mode == MODE_TREE else b


def tree_bytes(entries: Iterable[Tuple[str, str, str]]) -> bytes:
    """Encode tree entries (name, mode, oid) in git's order."""
    out = bytearray()
    for name, mode, oid in sorted(entries, key=lambda e: _sort_key(e[0], e[1])):
        out += mode.encode() + b" " + name.encode("utf-8") + b"\0" + bytes.fromhex(oid)
    return bytes(out)


# ---------------------------------------------------------------- stat cache


def default_cache_path(directory: str) -> str:
    """Where the stat cache of ``directory`` lives: the user cache dir, outside the tree."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    digest = hashlib.sha256(os.path.abspath(directory).encode()).hexdigest()[:16]
    return os.path.join(base, "lockstep", "statcache-py", digest + ".json")


def _stat_key(st: os.stat_result) -> List[int]:
    return [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, st.st_dev, st.st_mode]


class StatCache:
    """path → (stat, blob oid), trusted only for files whose mtime is
    strictly older than the time the scan that recorded them started (the
    "racy git" rule), plus the trees of the last accepted push."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.entries: Dict[str, Tuple[List[int], str]] = {}
        self.ref_ns = 0
        self.known_root = ""
        self.known_trees: Set[str] = set()
        self._new: Dict[str, Tuple[List[int], str]] = {}
        self._started = 0
        try:
            with open(path, "r", encoding="utf-8") as f:
                data = json.load(f)
            self.ref_ns = int(data["ref_ns"])
            self.entries = {p: (list(v[0]), str(v[1])) for p, v in data["entries"].items()}
            self.known_root = str(data.get("known_root", ""))
            self.known_trees = set(data.get("known_trees", []))
        except (OSError, ValueError, KeyError, TypeError, IndexError):
            self.entries, self.ref_ns = {}, 0  # missing or corrupt: a full re-hash

    def start(self) -> None:
        """Sample the filesystem clock (by touching the cache file) before the scan reads any file."""
        os.makedirs(os.path.dirname(self.path), exist_ok=True)
        marker = self.path + ".clock"
        with open(marker, "a"):
            pass
        os.utime(marker)
        self._started = os.stat(marker).st_mtime_ns
        self._new = {}

    def lookup(self, rel: str, st: os.stat_result) -> Optional[str]:
        e = self.entries.get(rel)
        if e is None or e[0] != _stat_key(st) or st.st_mtime_ns >= self.ref_ns:
            return None
        return e[1]

    def record(self, rel: str, st: os.stat_result, oid: str) -> None:
        self._new[rel] = (_stat_key(st), oid)

    def commit_scan(self) -> None:
        """A complete scan replaces the entries and their reference time."""
        self.entries, self.ref_ns = self._new, self._started

    def save(self) -> None:
        data = {
            "ref_ns": self.ref_ns,
            "entries": {p: [v[0], v[1]] for p, v in self.entries.items()},
            "known_root": self.known_root,
            "known_trees": sorted(self.known_trees),
        }
        os.makedirs(os.path.dirname(self.path), exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=os.path.dirname(self.path), prefix=".statcache")
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(data, f)
        os.replace(tmp, self.path)


# ------------------------------------------------------------------ scanning


@dataclass
class Blob:
    rel: str
    oid: str
    link_target: Optional[bytes] = None  # symlinks: the content is the target
    st: Optional[os.stat_result] = None


@dataclass
class Snapshot:
    """A scanned directory: its root tree and every tree and blob under it."""

    directory: str
    tree: str
    trees: Dict[str, List[Tuple[str, str, str]]] = field(default_factory=dict)  # oid → entries
    tree_data: Dict[str, bytes] = field(default_factory=dict)
    blobs: Dict[str, Blob] = field(default_factory=dict)
    files: int = 0
    hashed: int = 0


def _check_link(root: str, rel: str, target: str) -> None:
    if os.path.isabs(target):
        raise InvalidArgument(f"symlink {rel!r} points to an absolute path {target!r}")
    resolved = os.path.normpath(os.path.join(root, os.path.dirname(rel), target))
    if resolved != root and not resolved.startswith(root + os.sep):
        raise InvalidArgument(f"symlink {rel!r} points outside the directory ({target!r})")


def _hash_file(path: str) -> str:
    h = hashlib.sha1()
    size = os.lstat(path).st_size
    h.update(b"blob %d\0" % size)
    n = 0
    with open(path, "rb") as f:
        while True:
            chunk = f.read(1 << 20)
            if not chunk:
                break
            n += len(chunk)
            h.update(chunk)
    if n != size:
        raise InvalidArgument(f"file changed during push: {path}")
    return h.hexdigest()


def scan(directory: str, cache: Optional[StatCache] = None) -> Snapshot:
    """Build the git objects of ``directory`` (see the module comment)."""
    root = os.path.abspath(directory)
    if not os.path.isdir(root):
        raise InvalidArgument(f"push: {directory} is not a directory")
    if cache is not None:
        cache.start()
    snap = Snapshot(directory=root, tree="")

    def walk(abs_dir: str, rel_dir: str) -> Optional[str]:
        entries: List[Tuple[str, str, str]] = []
        with os.scandir(abs_dir) as it:
            des = list(it)
        for de in des:
            name = de.name
            if name == ".git" or (name == ".lockstep" and de.is_dir(follow_symlinks=False)):
                continue
            rel = f"{rel_dir}/{name}" if rel_dir else name
            try:
                name.encode("utf-8")
            except UnicodeEncodeError:
                raise InvalidArgument(f"file name is not valid UTF-8: {rel!r}") from None
            try:
                st = os.lstat(de.path)
            except FileNotFoundError:
                continue  # deleted while we walk
            if statmod.S_ISDIR(st.st_mode):
                sub = walk(de.path, rel)
                if sub is not None:
                    entries.append((name, MODE_TREE, sub))
            elif statmod.S_ISREG(st.st_mode):
                mode = MODE_EXEC if st.st_mode & 0o100 else MODE_FILE
                oid = cache.lookup(rel, st) if cache is not None else None
                if oid is None:
                    oid = _hash_file(de.path)
                    snap.hashed += 1
                if cache is not None:
                    cache.record(rel, st, oid)
                snap.blobs.setdefault(oid, Blob(rel=rel, oid=oid, st=st))
                snap.files += 1
                entries.append((name, mode, oid))
            elif statmod.S_ISLNK(st.st_mode):
                target = os.readlink(de.path)
                _check_link(root, rel, target)
                data = os.fsencode(target)
                oid = object_id("blob", data)
                snap.blobs.setdefault(oid, Blob(rel=rel, oid=oid, link_target=data))
                snap.files += 1
                entries.append((name, MODE_LINK, oid))
            else:
                raise InvalidArgument(f"{rel!r} cannot be pushed: only regular files, symlinks and directories can")
        if not entries and rel_dir:
            return None  # git stores no empty directories
        data = tree_bytes(entries)
        oid = object_id("tree", data)
        snap.trees[oid] = entries
        snap.tree_data[oid] = data
        return oid

    snap.tree = walk(root, "") or ""
    if cache is not None:
        cache.commit_scan()
    return snap


# ---------------------------------------------------------------- negotiation

MissingFunc = Callable[[List[str]], List[str]]


def _ask(missing: MissingFunc, batch: List[str]) -> List[str]:
    got = missing(batch)
    asked = set(batch)
    out: List[str] = []
    seen: Set[str] = set()
    for h in got:
        if h not in asked:
            raise LockstepError(f"server reported {h} missing, which was not asked about", code="internal")
        if h not in seen:
            seen.add(h)
            out.append(h)
    return out


def _plan_known(snap: Snapshot, missing: MissingFunc, known_root: str, known_trees: Set[str]) -> Optional[List[str]]:
    cand = [known_root]
    seen = {known_root}

    def visit(h: str) -> None:
        if h in seen or h in known_trees:
            return
        seen.add(h)
        cand.append(h)
        for _, mode, oid in snap.trees.get(h, ()):
            visit(oid)

    visit(snap.tree)
    miss: Set[str] = set()
    for start in range(0, len(cand), BATCH):
        miss.update(_ask(missing, cand[start : start + BATCH]))
        if start == 0 and known_root in miss:
            return None  # the hint is useless: the level-by-level walk
    return [h for h in cand[1:] if h in miss]


def plan(snap: Snapshot, missing: MissingFunc, known_root: str = "", known_trees: Optional[Set[str]] = None) -> List[str]:
    """The objects of ``snap`` the server lacks, parents before children."""
    if known_root:
        out = _plan_known(snap, missing, known_root, known_trees or set())
        if out is not None:
            return out
    asked = {snap.tree}
    level = [snap.tree]
    out: List[str] = []
    while level:
        nxt: List[str] = []
        for start in range(0, len(level), BATCH):
            for h in _ask(missing, level[start : start + BATCH]):
                out.append(h)
                for _, mode, oid in snap.trees.get(h, ()):
                    if oid not in asked:
                        asked.add(oid)
                        nxt.append(oid)
        level = nxt
    return out


# ---------------------------------------------------------------------- pack

_TYPES = {"commit": 1, "tree": 2, "blob": 3}


def _pack_header(kind: str, size: int) -> bytes:
    b = (_TYPES[kind] << 4) | (size & 0x0F)
    size >>= 4
    out = bytearray()
    while size:
        out.append(b | 0x80)
        b = size & 0x7F
        size >>= 7
    out.append(b)
    return bytes(out)


def _blob_content(snap: Snapshot, blob: Blob) -> bytes:
    if blob.link_target is not None:
        return blob.link_target
    path = os.path.join(snap.directory, blob.rel)
    try:
        st = os.lstat(path)
        with open(path, "rb") as f:
            data = f.read()
    except OSError:
        raise InvalidArgument(f"file changed during push: {blob.rel}") from None
    if blob.st is not None and (st.st_size, st.st_mtime_ns) != (blob.st.st_size, blob.st.st_mtime_ns):
        raise InvalidArgument(f"file changed during push: {blob.rel}")
    if object_id("blob", data) != blob.oid:
        raise InvalidArgument(f"file changed during push: {blob.rel}")
    return data


def write_pack(snap: Snapshot, oids: List[str], out: IO[bytes]) -> Tuple[int, int]:
    """Write a version 2 packfile of ``oids`` (undeltified) to ``out``; returns (objects, bytes)."""
    uniq: List[str] = []
    seen: Set[str] = set()
    for h in oids:
        if h not in snap.trees and h not in snap.blobs:
            raise InvalidArgument(f"object {h} is not in the snapshot")
        if h not in seen:
            seen.add(h)
            uniq.append(h)
    sha = hashlib.sha1()
    total = 0

    def put(b: bytes) -> None:
        nonlocal total
        sha.update(b)
        out.write(b)
        total += len(b)

    put(b"PACK" + struct.pack(">II", 2, len(uniq)))
    for h in uniq:
        if h in snap.tree_data:
            kind, data = "tree", snap.tree_data[h]
        else:
            kind, data = "blob", _blob_content(snap, snap.blobs[h])
        put(_pack_header(kind, len(data)))
        put(zlib.compress(data))
    digest = sha.digest()
    out.write(digest)
    return len(uniq), total + len(digest)


@dataclass
class PushReport:
    """What a push did: the server's answer plus the client's counts."""

    commit: str
    tree: str
    branch: str
    changed: bool
    parent: str = ""
    objects_written: int = 0
    bytes_written: int = 0
    files: int = 0
    hashed: int = 0
    objects_sent: int = 0
    bytes_sent: int = 0
    round_trips: int = 0
    duration_ms: float = 0.0
    raw: Dict[str, object] = field(default_factory=dict)


def now_ms() -> float:
    return time.monotonic() * 1000
