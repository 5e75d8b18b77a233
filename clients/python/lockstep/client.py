"""The HTTP client: one method per API operation an agent needs.

Every logical write carries an ``Idempotency-Key`` (one per call, the same
on each retry). Connection errors, timeouts and 429/502/503/504 answers are
retried with capped exponential backoff and full jitter, honouring
``Retry-After``.
"""

from __future__ import annotations

import base64
import email.utils
import http.client
import io
import json
import os
import random
import shutil
import socket
import tarfile
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from typing import Any, BinaryIO, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple, Union

from . import push as _push
from .errors import InvalidArgument, LockstepError, NotFound, Unavailable, error_from
from .types import (
    Checkpoint,
    CheckSet,
    Commit,
    CompareResult,
    Evaluation,
    ForkResult,
    MergeResult,
    Policy,
    PromoteResult,
    PushResult,
    Ref,
    Repo,
    RepoStatus,
    RestoreResult,
    WorkspaceInfo,
)

RETRY_STATUSES = frozenset({429, 502, 503, 504})
JSON = Dict[str, Any]
Edit = Dict[str, Any]


def write(path: str, content: Union[str, bytes], executable: bool = False) -> Edit:
    """An edit that writes ``path`` (text is sent as UTF-8, bytes as base64)."""
    e: Edit = {"op": "write", "path": path}
    if isinstance(content, bytes):
        e["content_base64"] = base64.b64encode(content).decode()
    else:
        e["content"] = content
    if executable:
        e["executable"] = True
    return e


def delete(path: str) -> Edit:
    """An edit that deletes ``path``."""
    return {"op": "delete", "path": path}


class Client:
    """A Lockstep API client.

    ``url`` defaults to ``$LOCKSTEP_URL``, ``key`` to ``$LOCKSTEP_KEY``.
    ``retries`` is how many times a failed attempt is retried (0: never);
    ``backoff`` the first delay in seconds, doubled per attempt up to
    ``max_backoff``.

    Every method may raise :class:`Unauthenticated` (no or a revoked key),
    :class:`Unavailable` (no answer, or 503 after the retries),
    :class:`RateLimited` (after the retries) and :class:`Internal`; each
    method's docstring names the other codes it can raise. List methods
    that the server pages come in three forms: ``x_page`` (one page and
    its ``next_after``), ``iter_x`` (follows ``next_after``) and ``x`` (a
    list of everything). :data:`OPERATIONS` maps each API operation to
    its method.
    """

    def __init__(
        self,
        url: Optional[str] = None,
        key: Optional[str] = None,
        *,
        timeout: float = 120.0,
        retries: int = 4,
        backoff: float = 0.25,
        max_backoff: float = 8.0,
        max_retry_after: float = 60.0,
        user_agent: str = "lockstep-python/0.1",
    ) -> None:
        url = url or os.environ.get("LOCKSTEP_URL") or "http://127.0.0.1:7070"
        self.url = url.rstrip("/")
        self.key = key if key is not None else os.environ.get("LOCKSTEP_KEY", "")
        self.timeout = timeout
        self.retries = retries
        self.backoff = backoff
        self.max_backoff = max_backoff
        self.max_retry_after = max_retry_after  # a longer Retry-After is cut to this
        self.user_agent = user_agent
        self.sleep = time.sleep  # tests replace it
        self.last_headers: Mapping[str, str] = {}

    # ------------------------------------------------------------ transport

    def request(
        self,
        method: str,
        path: str,
        *,
        query: Optional[Mapping[str, Any]] = None,
        body: Any = None,
        data: Union[bytes, io.IOBase, None] = None,
        content_type: str = "",
        idempotent: Optional[bool] = None,
        raw: bool = False,
        stream_to: Optional[BinaryIO] = None,
        accept: str = "application/json",
    ) -> Any:
        """Send one logical request (retried as the class comment says) and
        return the decoded JSON (or bytes with ``raw``; None for 204).
        ``body`` is sent as JSON; ``data`` as is (bytes or a seekable file).
        With ``stream_to`` the answer's body is copied into that seekable
        file in chunks (rewound and truncated before a retry) and the
        answer's headers are returned.

        Raises the :class:`LockstepError` subclass of the answer's code;
        :class:`Unavailable` when the server cannot be reached."""
        url = self.url + path
        if query:
            q = {k: ("true" if v is True else "false" if v is False else v) for k, v in query.items() if v is not None and v != ""}
            if q:
                url += "?" + urllib.parse.urlencode(q, doseq=True)
        headers = {"User-Agent": self.user_agent, "Accept": accept}
        if self.key:
            headers["Authorization"] = "Bearer " + self.key
        payload: Any = None
        if body is not None:
            payload = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        elif data is not None:
            payload = data
            headers["Content-Type"] = content_type or "application/octet-stream"
        if idempotent is None:
            idempotent = method != "GET"
        if idempotent and method != "GET":
            headers["Idempotency-Key"] = str(uuid.uuid4())  # one per logical write, kept across retries
        attempt = 0
        while True:
            retry_after: Optional[float] = None
            try:
                if hasattr(payload, "seek"):
                    payload.seek(0)
                req = urllib.request.Request(url, data=payload, headers=headers, method=method)
                if hasattr(payload, "seek"):
                    payload.seek(0, os.SEEK_END)
                    req.add_header("Content-Length", str(payload.tell()))
                    payload.seek(0)
                with urllib.request.urlopen(req, timeout=self.timeout) as resp:
                    self.last_headers = dict(resp.headers.items())
                    if stream_to is not None:
                        stream_to.seek(0)
                        stream_to.truncate()
                        while True:
                            chunk = resp.read(1 << 16)
                            if not chunk:
                                break
                            stream_to.write(chunk)
                        stream_to.flush()
                        return dict(self.last_headers)
                    out = resp.read()
                    if raw:
                        return out
                    if resp.status == 204 or not out:
                        return None
                    return json.loads(out)
            except urllib.error.HTTPError as e:
                out = e.read()
                self.last_headers = dict(e.headers.items()) if e.headers else {}
                try:
                    env = json.loads(out)
                except ValueError:
                    env = None
                err = error_from(e.code, env, method, path, out)
                retry_after = _retry_after(e.headers.get("Retry-After") if e.headers else None)
                err.retry_after = retry_after
                # not_configured is final whatever the status a proxy gave it;
                # rate_limited, unavailable and in_progress are worth waiting for.
                retry = err.code != "not_configured" and (e.code in RETRY_STATUSES or err.retryable)
                if not retry or attempt >= self.retries:
                    raise err from None
            except (urllib.error.URLError, ConnectionError, socket.timeout, TimeoutError, http.client.HTTPException) as e:
                if attempt >= self.retries:
                    reason = getattr(e, "reason", e)
                    raise Unavailable(f"{method} {path}: {reason}", method=method, path=path) from None
            delay = min(self.max_backoff, self.backoff * (2**attempt)) * random.random()
            if retry_after is not None:
                delay = max(delay, min(retry_after, self.max_retry_after))
            self.sleep(delay)
            attempt += 1

    def _pages(self, route: str, key: str, query: Mapping[str, Any], after: Any, limit: int) -> Iterator[Any]:
        """Yield every item of a paged list, following ``next_after``."""
        while True:
            page = self._get(route, **dict(query, after=after or None, limit=limit or None))
            for item in page.get(key) or []:
                yield item
            after = page.get("next_after")
            if not after:
                return

    # The route is positional-only: "path" is also a query parameter
    # (GET /tree/{rev}?path=).
    def _get(self, route: str, /, **query: Any) -> Any:
        return self.request("GET", route, query=query)

    def _post(self, route: str, /, body: Any = None, **query: Any) -> Any:
        return self.request("POST", route, body=body if body is not None else {}, query=query)

    @staticmethod
    def _repo(name: str, *rest: str) -> str:
        parts = [urllib.parse.quote(name, safe="")] + [urllib.parse.quote(r, safe="") for r in rest]
        return "/api/v1/repos/" + "/".join(parts)

    # ------------------------------------------------------------ health

    def health(self) -> JSON:
        """Liveness (``GET /healthz``, no key needed): ``{"status": "ok", …}``.

        Raises Unavailable when the server cannot be reached."""
        return self._get("/healthz")

    def ready(self) -> JSON:
        """Readiness (``GET /readyz``, no key needed): the checks of the
        server's dependencies. A server that is not ready answers 503, raised
        as :class:`Unavailable` (after the retries)."""
        return self._get("/readyz")

    def metrics(self) -> str:
        """The Prometheus metrics text (``GET /metrics``)."""
        return self.request("GET", "/metrics", raw=True, accept="text/plain").decode("utf-8", "replace")

    def openapi(self) -> JSON:
        """The server's OpenAPI document (``GET /api/v1/openapi.json``, no key needed)."""
        return self._get("/api/v1/openapi.json")

    # ------------------------------------------------------------ identity

    def whoami(self) -> JSON:
        """The calling key (id, name, role, prefix) and its ``limits``: quotas
        and usage (workspaces, uploads, ``storage_bytes``/``storage_bytes_used``,
        ``runs``/``runs_active``, each limit's ``*_source``: key, server or
        admin). Raises Unauthenticated for a bad key."""
        return self._get("/api/v1/whoami")

    def create_key(self, name: str, role: str, *, ttl: str = "", scope: Optional[Mapping[str, Any]] = None) -> JSON:
        """Create an API key (admin) with ``role`` (admin, agent, reviewer,
        ci, …), or mint a scoped, expiring agent key with an agent key
        (``ttl`` a Go duration such as "1h"; ``scope`` as the server's
        KeyScope); the answer's ``secret`` is shown only once.

        Raises InvalidArgument (bad role, name, ttl or scope),
        PermissionDenied, AlreadyExists (the name is taken)."""
        body: JSON = {"name": name, "role": role}
        if ttl:
            body["ttl"] = ttl
        if scope:
            body["scope"] = dict(scope)
        return self._post("/api/v1/keys", body)

    def keys(self) -> List[JSON]:
        """Every API key (admin), revoked ones included (``revoked_at``); never a secret.

        Raises PermissionDenied (not admin)."""
        return self._get("/api/v1/keys")["keys"] or []

    def revoke_key(self, key_id: str) -> None:
        """Revoke an API key (admin); it is refused from then on.

        Raises PermissionDenied (not admin), NotFound (unknown id)."""
        self.request("DELETE", "/api/v1/keys/" + urllib.parse.quote(key_id, safe=""))

    def set_key_quota(self, key_id: str, workspaces: Optional[int] = None, *,
                      storage_bytes: Optional[int] = None, runs: Optional[int] = None) -> None:
        """Replace a key's own quotas (admin): active ``workspaces``,
        ``storage_bytes`` its active workspaces may add, concurrent ``runs``.
        Each None clears that override (the server-wide setting applies),
        0 is unlimited. ``whoami()["limits"]`` says where each limit comes
        from (``*_source``: key, server or admin).

        Raises InvalidArgument (a negative value, named), PermissionDenied, NotFound."""
        self.request("PUT", "/api/v1/keys/" + urllib.parse.quote(key_id, safe="") + "/quota",
                     body={"workspaces": workspaces, "storage_bytes": storage_bytes, "runs": runs})

    # --------------------------------------------------------------- oplog

    def oplog(self, repo: str = "", after: int = 0, limit: int = 100, *, key: str = "", op: str = "") -> JSON:
        """One page of the operations log, oldest first: ``{"entries", "next_after"}``
        (``next_after`` is 0 on the last page). Filters: ``repo``, ``key``
        (a key id), ``op`` (e.g. ``push``). An agent sees its own entries.

        Raises InvalidArgument (bad limit), PermissionDenied."""
        return self._get("/api/v1/oplog", repo=repo, key=key, op=op, after=after or None, limit=limit or None)

    def iter_oplog(self, repo: str = "", *, key: str = "", op: str = "", after: int = 0, limit: int = 1000) -> Iterator[JSON]:
        """Every operations-log entry after ``after`` matching the filters,
        fetched page by page (``limit`` per page) following ``next_after``.

        Raises as :meth:`oplog`."""
        return self._pages("/api/v1/oplog", "entries", {"repo": repo, "key": key, "op": op}, after, limit)

    def verify_oplog(self) -> JSON:
        """Recompute the operations log's hash chain (admin, reviewer, ci):
        ``{"ok", "entries", "first_bad", "reason"}``.

        Raises PermissionDenied (an agent key)."""
        return self._get("/api/v1/oplog/verify")

    # --------------------------------------------------- repos, workspaces

    def create_repo(self, name: str, default_branch: str = "") -> Repo:
        """Create a base repository (admin); ``default_branch`` defaults to main.

        Raises InvalidArgument (bad name), PermissionDenied, AlreadyExists."""
        body: JSON = {"name": name}
        if default_branch:
            body["default_branch"] = default_branch
        return self._post("/api/v1/repos", body)

    def repos(self, fork_of: str = "", network: str = "") -> List[Repo]:
        """Repositories and workspaces the key can see; filters ``fork_of``
        (only forks of that repository) and ``network`` (one fork network).
        The server answers the whole list (the route has no paging).

        Raises InvalidArgument (bad filter)."""
        return self._get("/api/v1/repos", fork_of=fork_of, network=network)["repos"]

    def repo(self, name: str) -> Repo:
        """A repository or workspace: status, fork_of, default branch, head.

        Raises InvalidArgument (bad name), NotFound."""
        return self._get(self._repo(name))

    status = repo

    def fork(self, base: str, name: str, task: str = "") -> ForkResult:
        """Create a workspace: a fork of ``base`` (refs only), labelled with ``task``.

        Raises InvalidArgument, PermissionDenied, NotFound (no base),
        AlreadyExists (the name is taken)."""
        body: JSON = {"name": name}
        if task:
            body["task"] = task
        return self._post(self._repo(base, "forks"), body)

    def workspaces_page(self, base: str, *, task: str = "", status: str = "", after: str = "", limit: int = 0) -> JSON:
        """One page of the workspaces forked off ``base`` by name, with
        ahead/behind counts: ``{"workspaces", "next_after"}`` (``next_after``
        is "" on the last page). Filters: ``task`` label, ``status``.

        Raises InvalidArgument (bad status or limit), NotFound."""
        return self._get(self._repo(base, "workspaces"), task=task, status=status, after=after, limit=limit or None)

    def iter_workspaces(self, base: str, *, task: str = "", status: str = "", after: str = "", limit: int = 0) -> Iterator[WorkspaceInfo]:
        """Every workspace of ``base`` matching the filters, page by page
        (``limit`` per page, default the server's). Raises as :meth:`workspaces_page`."""
        return self._pages(self._repo(base, "workspaces"), "workspaces", {"task": task, "status": status}, after, limit)

    def workspaces(self, base: str, *, task: str = "", status: str = "") -> List[WorkspaceInfo]:
        """Every workspace of ``base`` matching the filters (all pages), as a list.

        Raises as :meth:`workspaces_page`."""
        return list(self.iter_workspaces(base, task=task, status=status))

    def usage(self, repo: str) -> JSON:
        """Storage of the repository's fork network (admins): ``disk``
        (loose objects, packs, indexes on the answering replica), in
        object-storage mode ``bucket`` (live and retired packs), with
        branching configured ``databases`` and ``redis`` (branches and
        their snapshots: ``branches``, ``bytes``, ``snapshots``,
        ``snapshot_bytes``, ``total_bytes``), ``checkpoints`` (counts,
        with database/Redis snapshots) and ``reclaimable`` (what the
        object GC would free now and after the retention).

        Raises PermissionDenied (not an admin key), NotFound."""
        return self._get(self._repo(repo, "usage"))

    def retention(self, repo: str) -> JSON:
        """The retention policy of base repository ``repo`` (admins):
        ``abandon_after``, ``delete_after`` (ages such as "7d" or "36h";
        "0" = off) and ``archive_failed``.

        Raises PermissionDenied (not an admin key), NotFound,
        InvalidArgument (a workspace: policies are set on its base)."""
        return self._get(self._repo(repo, "retention"))

    def set_retention(self, repo: str, *, abandon_after: str = "0", delete_after: str = "0", archive_failed: bool = False) -> JSON:
        """Set the retention policy of base repository ``repo`` (admins):
        the sweeper abandons its active workspaces idle for
        ``abandon_after`` and purges abandoned and failed ones
        ``delete_after`` after their status changed, first keeping a
        failed workspace's attempts on ``refs/archive/{workspace}/{n}``
        when ``archive_failed``. "0" turns a rule off. Answers the policy
        stored.

        Raises PermissionDenied, NotFound, InvalidArgument (an age that
        does not parse, or a workspace)."""
        body = {"abandon_after": abandon_after, "delete_after": delete_after, "archive_failed": archive_failed}
        return self.request("PUT", self._repo(repo, "retention"), body=body)

    def gc(self, *, repo: str = "", prune: str = "", dry_run: bool = False) -> JSON:
        """Run the object GC now (admins): objects no live ref, retained
        attempt or checkpoint names and older than ``prune`` ("now" or a
        duration such as "336h"; default the server's --object-retention)
        are dropped, in every network or only ``repo``'s. ``dry_run``
        reports what would be dropped and drops nothing. Answers the counts
        and bytes (``objects``, ``packs``, ``loose``, ``bytes``,
        ``bucket_packs_deleted``).

        Raises PermissionDenied (not an admin key), NotFound (repo),
        InvalidArgument (prune), Unavailable (a GC is running elsewhere)."""
        body: JSON = {}
        if repo:
            body["repo"] = repo
        if prune:
            body["prune"] = prune
        if dry_run:
            body["dry_run"] = True
        return self._post("/api/v1/gc", body)

    def attempts(self, workspace: str, limit: int = 0) -> List[JSON]:
        """Commits pushed to a workspace, newest first (at most ``limit``,
        default 100; the route has no cursor).

        Raises InvalidArgument (bad limit), NotFound."""
        return self._get(self._repo(workspace, "attempts"), limit=limit or None)["attempts"] or []

    def set_status(self, workspace: str, status: RepoStatus, reason: str = "") -> Repo:
        """Set a workspace's lifecycle status (``failed``, ``abandoned`` …) with a reason.

        Raises InvalidArgument (unknown status, or a base repository),
        PermissionDenied (not the owner), NotFound, AlreadyExists (the
        transition is not allowed from the current status)."""
        return self._post(self._repo(workspace, "status"), {"status": status, "reason": reason})

    def abandon(self, workspace: str, reason: str = "") -> Repo:
        """Abandon a workspace (``DELETE``): its status becomes abandoned,
        its refs stay readable.

        Raises as :meth:`set_status`."""
        return self.request("DELETE", self._repo(workspace), query={"reason": reason})

    def refs(self, repo: str) -> List[Ref]:
        """Every ref (branches and tags) by full name with its oid.

        Raises NotFound."""
        return self._get(self._repo(repo, "refs"))["refs"] or []

    def head(self, repo: str, branch: str = "") -> str:
        """The oid of ``branch`` (default: the default branch), "" when it does not exist.

        Raises NotFound (no repository)."""
        if not branch:
            branch = self.repo(repo)["default_branch"]
        for r in self.refs(repo):
            if r["name"] == "refs/heads/" + branch:
                return r["oid"]
        return ""

    # -------------------------------------------------------------- writes

    def missing_objects(self, repo: str, oids: Sequence[str]) -> List[str]:
        """Which of ``oids`` the repository's network lacks (one round trip
        of the incremental push; :meth:`push_dir` uses it).

        Raises InvalidArgument (a bad oid), NotFound, TooLarge."""
        return self._post(self._repo(repo, "objects", "missing"), {"oids": list(oids)})["missing"] or []

    def upload_objects(self, repo: str, pack: Union[bytes, BinaryIO]) -> JSON:
        """Upload a git packfile (bytes or a seekable file), stored whole or
        not at all: ``{"objects_written", "bytes_written"}``.

        Raises InvalidArgument (a corrupt pack), PermissionDenied, NotFound, TooLarge."""
        return self.request("POST", self._repo(repo, "objects"), data=pack, content_type="application/x-git-packfile")  # type: ignore[arg-type]

    def push_tar(
        self,
        repo: str,
        tar: Union[bytes, BinaryIO],
        *,
        branch: str = "",
        expect_oid: str = "",
        force: bool = False,
        message: str = "",
        author: str = "",
        allow_empty: bool = False,
        from_rev: str = "",
        gzip: bool = False,
    ) -> PushResult:
        """Commit a whole tree sent as a tar (``gzip``: compressed) to a
        branch, with compare-and-swap (``expect_oid``; 40 zeros: the branch
        must not exist).

        Raises PreconditionRequired (no expect_oid on an existing branch),
        RefConflict (the branch moved), InvalidArgument (a bad tar),
        PermissionDenied, NotFound, TooLarge."""
        q = {"branch": branch, "expect_oid": expect_oid, "message": message, "author": author, "from": from_rev,
             "force": force or None, "allow_empty": allow_empty or None}
        return self.request("PUT", self._repo(repo, "worktree"), query=q, data=tar,  # type: ignore[arg-type]
                            content_type="application/gzip" if gzip else "application/x-tar")


    def push_dir(
        self,
        repo: str,
        directory: str,
        *,
        branch: str = "",
        expect_oid: str = "",
        expect_current: bool = False,
        force: bool = False,
        message: str = "",
        author: str = "",
        allow_empty: bool = False,
        from_rev: str = "",
        cache_path: Optional[str] = None,
        use_cache: bool = True,
    ) -> _push.PushReport:
        """Push a directory with the incremental protocol (see :mod:`lockstep.push`).

        ``expect_oid`` is the compare-and-swap value (40 zeros: the branch
        must not exist); ``expect_current`` reads the branch first.

        Raises PreconditionRequired, RefConflict (the branch moved),
        InvalidArgument (e.g. a symlink leaving the directory),
        PermissionDenied, NotFound, TooLarge."""
        t0 = _push.now_ms()
        rep_round_trips = 0
        if expect_current:
            if not branch:
                branch = self.repo(repo)["default_branch"]
                rep_round_trips += 1
            expect_oid = self.head(repo, branch) or _push.ZERO_OID
            rep_round_trips += 1
        cache = _push.StatCache(cache_path or _push.default_cache_path(directory)) if use_cache else None
        snap = _push.scan(directory, cache)
        trips = [rep_round_trips]

        def missing(oids: List[str]) -> List[str]:
            trips[0] += 1
            return self._post(self._repo(repo, "objects", "missing"), {"oids": oids})["missing"] or []

        known_root = cache.known_root if cache else ""
        known_trees = cache.known_trees if cache else set()
        need = _push.plan(snap, missing, known_root, known_trees)
        sent_objects = sent_bytes = 0
        written_objects = written_bytes = 0
        if need:
            with tempfile.SpooledTemporaryFile(max_size=32 << 20) as f:
                sent_objects, sent_bytes = _push.write_pack(snap, need, f)
                up = self.request("POST", self._repo(repo, "objects"), data=f, content_type="application/x-git-packfile")
                trips[0] += 1
            written_objects, written_bytes = up["objects_written"], up["bytes_written"]
        res = self.request(
            "PUT",
            self._repo(repo, "worktree"),
            query={
                "tree": snap.tree,
                "branch": branch,
                "expect_oid": expect_oid,
                "message": message,
                "author": author,
                "from": from_rev,
                "force": force or None,
                "allow_empty": allow_empty or None,
            },
        )
        trips[0] += 1
        if cache is not None:
            cache.known_root = snap.tree
            cache.known_trees = set(snap.trees)
            cache.save()
        return _push.PushReport(
            commit=res["commit"],
            tree=res["tree"],
            branch=res["branch"],
            changed=res["changed"],
            parent=res.get("parent", ""),
            objects_written=res["objects_written"] + written_objects,
            bytes_written=res["bytes_written"] + written_bytes,
            files=snap.files,
            hashed=snap.hashed,
            objects_sent=sent_objects,
            bytes_sent=sent_bytes,
            round_trips=trips[0],
            duration_ms=_push.now_ms() - t0,
            raw=res,
        )

    def edit(
        self,
        workspace: str,
        edits: Sequence[Edit],
        *,
        expect_oid: str = "",
        branch: str = "",
        message: str = "",
        force: bool = False,
    ) -> PushResult:
        """Apply a batch of edits (:func:`write`, :func:`delete`) as one commit, with compare-and-swap.

        Raises PreconditionRequired (no expect_oid), RefConflict (the
        branch moved: ``actual`` is its tip), InvalidArgument, NotFound,
        PermissionDenied, TooLarge."""
        body: JSON = {"edits": list(edits)}
        if branch:
            body["branch"] = branch
        if expect_oid:
            body["expect_oid"] = expect_oid
        if message:
            body["message"] = message
        if force:
            body["force"] = True
        return self._post(self._repo(workspace, "edits"), body)

    def rollback(self, repo: str, to: str, *, expect_oid: str = "", branch: str = "", message: str = "", force: bool = False) -> PushResult:
        """A new commit with ``to``'s tree (history is not rewritten).

        Raises PreconditionRequired, RefConflict, NotFound (unknown
        revision), PermissionDenied."""
        body: JSON = {"to": to}
        for k, v in (("branch", branch), ("expect_oid", expect_oid), ("message", message)):
            if v:
                body[k] = v
        if force:
            body["force"] = True
        return self._post(self._repo(repo, "rollback"), body)

    # ---------------------------------------------------------- checkpoints

    def checkpoint(self, workspace: str, label: str = "", *, branch: str = "", fs_snapshot: str = "") -> Checkpoint:
        """Checkpoint a workspace: its commit, a database snapshot when a
        database is bound, and the client's filesystem snapshot id.

        Raises NotFound, PermissionDenied, InvalidArgument."""
        body: JSON = {}
        for k, v in (("label", label), ("branch", branch), ("fs_snapshot", fs_snapshot)):
            if v:
                body[k] = v
        return self._post(self._repo(workspace, "checkpoints"), body)

    def checkpoints(self, workspace: str, limit: int = 0) -> List[Checkpoint]:
        """A workspace's checkpoints, newest first (at most ``limit``,
        default 100; the route has no cursor).

        Raises InvalidArgument (bad limit), NotFound."""
        return self._get(self._repo(workspace, "checkpoints"), limit=limit or None)["checkpoints"] or []

    def restore(self, workspace: str, checkpoint_id: str, *, expect_oid: str = "", failure: Optional[Mapping[str, Any]] = None) -> RestoreResult:
        """Roll the workspace's code (and database branch) back to a
        checkpoint, as a new commit. ``failure`` (command, exit_code,
        reason, stdout_tail …) records why in the operations log.

        Raises NotFound (unknown checkpoint), RefConflict, PermissionDenied."""
        body: JSON = {"expect_oid": expect_oid} if expect_oid else {}
        if failure:
            body["failure"] = dict(failure)
        return self._post(self._repo(workspace, "checkpoints", checkpoint_id, "restore"), body)

    # ------------------------------------------------------------ database

    def bind_database(self, repo: str, template: str) -> JSON:
        """Bind a template database to a base repository (admin); its
        workspaces then get database branches.

        Raises NotConfigured (no branch database server; final, not
        retried), InvalidArgument, PermissionDenied, NotFound."""
        return self.request("PUT", self._repo(repo, "database"), body={"template": template})

    def database(self, repo: str) -> JSON:
        """A repository's template, or a workspace's branch database and DSN.

        Raises NotConfigured, NotFound (nothing bound), PermissionDenied."""
        return self._get(self._repo(repo, "database"))

    def refresh_database(self, repo: str) -> JSON:
        """Refresh a base repository's template database (admin).

        Raises NotConfigured, NotFound, PermissionDenied."""
        return self._post(self._repo(repo, "database", "refresh"))

    def redis(self, workspace: str) -> JSON:
        """A workspace's Redis branch and its URL (created on first use;
        owner, ci or admin): ``{"repo", "template", "url", "redis_snapshot"}``.

        Raises NotConfigured (no Redis branching on the server; final),
        PermissionDenied, NotFound."""
        return self._get(self._repo(workspace, "redis"))

    def report_run(self, workspace: str, report: Mapping[str, Any]) -> JSON:
        """Report how one ``lockstep run`` of a workspace went (``run_id``,
        ``command``, ``exit``, ``succeeded``, ``rolled_back``, timings …, as
        the server's RunReport); kept as a ``run.report`` oplog entry:
        ``{"op_id", "seq"}``.

        Raises InvalidArgument, PermissionDenied, NotFound, TooLarge."""
        return self._post(self._repo(workspace, "runs"), dict(report))

    # ------------------------------------------------------------ run jobs

    def execute_run(self, workspace: str, command: List[str], *, push_on_success: bool = False, timeout_seconds: int = 0) -> JSON:
        """Run ``command`` on a runner (``lockstep runner --jobs``) as a
        transactional run on a fresh checkout of the workspace's tip, wait
        for it to end and return the job: ``{"id", "state": "done" |
        "failed", "result": {"checked_out", "exit_code", "succeeded",
        "rolled_back", "pushed_commit", "residue", …}, "error", "output":
        [last lines]}``. With ``push_on_success`` the result is pushed with
        compare-and-swap on the tip checked out. Sent once (never retried:
        a retry could run the command twice).

        Raises NoRunner (no live runner covers the workspace; final),
        InvalidArgument, PermissionDenied, NotFound."""
        body: Dict[str, Any] = {"command": list(command), "push_on_success": push_on_success}
        if timeout_seconds:
            body["timeout_seconds"] = timeout_seconds
        return self.request("POST", self._repo(workspace, "jobs"), body=body, idempotent=False)

    def run_job(self, workspace: str, job_id: str, *, after: int = 0) -> JSON:
        """A run job with its output lines after seq ``after``. Raises NotFound."""
        return self._get(self._repo(workspace, "jobs", job_id), after=after or None)

    def register_runner(self, name: str, workspaces: List[str]) -> JSON:
        """Register a runner (runner key) taking jobs of the workspaces whose
        names start with one of ``workspaces`` ("*": all): ``{"id",
        "lease_seconds", "poll_seconds", …}``. Raises InvalidArgument,
        PermissionDenied."""
        return self.request("POST", "/api/v1/runners", body={"name": name, "workspaces": list(workspaces)}, idempotent=False)

    def take_run_job(self, runner_id: str, *, wait: float = 0) -> Optional[JSON]:
        """Long-poll for a job (runner key): ``{"job", "key", "timeout_ms",
        "lease_seconds"}``, or None when none came within ``wait`` seconds."""
        q = {"wait": wait} if wait else {}
        return self.request("POST", "/api/v1/runners/" + urllib.parse.quote(runner_id, safe="") + "/jobs", query=q, idempotent=False)

    def post_run_job_output(self, runner_id: str, job_id: str, lines: List[Mapping[str, Any]]) -> JSON:
        """Append output lines ``[{"stream": "stdout" | "stderr", "text"}]``
        to a running job and renew its lease (runner key). Raises RefConflict
        when the job is no longer this runner's."""
        path = "/api/v1/runners/" + urllib.parse.quote(runner_id, safe="") + "/jobs/" + urllib.parse.quote(job_id, safe="") + "/output"
        return self.request("POST", path, body={"lines": [dict(l) for l in lines]}, idempotent=False)

    def finish_run_job(self, runner_id: str, job_id: str, result: Mapping[str, Any]) -> JSON:
        """Post a job's result (runner key; the server's RunJobResult).
        Raises RefConflict when the job is no longer this runner's."""
        path = "/api/v1/runners/" + urllib.parse.quote(runner_id, safe="") + "/jobs/" + urllib.parse.quote(job_id, safe="") + "/result"
        return self.request("POST", path, body=dict(result), idempotent=False)

    # ------------------------------------------------------------ effects

    def stage_effect(
        self,
        workspace: str,
        method: str,
        url: str,
        *,
        headers: Optional[Mapping[str, str]] = None,
        body: Union[str, bytes, None] = None,
        label: str = "",
        effect_class: str = "",
        run_id: str = "",
        consuming: bool = False,
        compensation: Optional[Mapping[str, Any]] = None,
        secret_headers: Sequence[str] = (),
    ) -> JSON:
        """Stage an outward HTTP request on a workspace: it is sent only when
        the workspace is promoted (discarded by a checkpoint restore to
        before it, a failed run or a failed workspace).

        Raises InvalidArgument (method, URL or host not allowed, body too
        big), PermissionDenied, NotFound, AlreadyExists (workspace not active)."""
        req: JSON = {"method": method, "url": url}
        if headers:
            req["headers"] = dict(headers)
        if isinstance(body, bytes):
            req["body_base64"] = base64.b64encode(body).decode()
        elif body:
            req["body"] = body
        for k, v in (("label", label), ("class", effect_class), ("run_id", run_id)):
            if v:
                req[k] = v
        if consuming:
            req["consuming"] = True
        if compensation:
            req["compensation"] = dict(compensation)
        if secret_headers:
            req["secret_headers"] = list(secret_headers)
        return self._post(self._repo(workspace, "effects"), req)

    def effects_page(self, repo: str, *, after: int = 0, limit: int = 0) -> JSON:
        """One page of a workspace's effects in staging order:
        ``{"effects", "next_after"}`` (0 on the last page).

        Raises InvalidArgument, NotFound, PermissionDenied."""
        return self._get(self._repo(repo, "effects"), after=after or None, limit=limit or None)

    def iter_effects(self, repo: str, *, after: int = 0, limit: int = 1000) -> Iterator[JSON]:
        """Every effect of a workspace after ``after``, page by page. Raises as :meth:`effects_page`."""
        return self._pages(self._repo(repo, "effects"), "effects", {}, after, limit)

    def effects(self, repo: str) -> List[JSON]:
        """Every effect of a workspace, in staging order (all pages). Raises as :meth:`effects_page`."""
        return list(self.iter_effects(repo))

    def effect(self, repo: str, effect_id: str) -> JSON:
        """One effect with its delivery attempts. Raises NotFound, PermissionDenied."""
        return self._get(self._repo(repo, "effects", effect_id))

    def discard_effects(self, workspace: str, *, after_seq: int = 0, run_id: str = "", reason: str = "") -> List[str]:
        """Discard staged effects (after a seq, of a run); returns their ids.

        Raises InvalidArgument, NotFound, PermissionDenied."""
        body: JSON = {}
        if after_seq:
            body["after_seq"] = after_seq
        if run_id:
            body["run_id"] = run_id
        if reason:
            body["reason"] = reason
        return self._post(self._repo(workspace, "effects", "discard"), body)["discarded"]

    def approve_effect(self, repo: str, effect_id: str, reason: str = "") -> JSON:
        """Release a held effect (reviewer or admin).

        Raises PermissionDenied, NotFound, AlreadyExists (not held)."""
        return self._post(self._repo(repo, "effects", effect_id, "approve"), {"reason": reason} if reason else {})

    def reject_effect(self, repo: str, effect_id: str, reason: str = "") -> JSON:
        """Discard a held effect (reviewer or admin).

        Raises PermissionDenied, NotFound, AlreadyExists (not held)."""
        return self._post(self._repo(repo, "effects", effect_id, "reject"), {"reason": reason} if reason else {})

    def compensate_effect(self, repo: str, effect_id: str) -> JSON:
        """Queue a released effect's compensation: a new request, not an erasure.

        Raises PermissionDenied, NotFound, InvalidArgument (no compensation)."""
        return self._post(self._repo(repo, "effects", effect_id, "compensate"))

    def compensate_commit(self, base: str, commit: str) -> List[JSON]:
        """Queue the compensations of every effect a promoted commit released (admin).

        Raises PermissionDenied, NotFound, InvalidArgument."""
        return self._post(self._repo(base, "effects", "compensate"), {"commit": commit})["effects"]

    # ------------------------------------------------------- merge and gate

    def merge(
        self,
        repo: str,
        theirs: str,
        *,
        ours: str = "",
        preflight: bool = False,
        materialize: bool = False,
        deep: bool = False,
        message: str = "",
        on_conflict: str = "",
        expect_oid: str = "",
        mode: str = "",
        renames: Optional[bool] = None,
        style: str = "",
    ) -> MergeResult:
        """Three-way merge of ``theirs`` (an oid, a branch or ``repo:branch``
        of the fork network) into ``ours``: ``preflight`` computes only,
        ``materialize`` writes and moves the branch. ``on_conflict``
        "markers" commits conflict markers; ``mode`` merge, squash or
        fast_forward; ``renames`` (default on) detects renames; ``style``
        merge or diff3 markers.

        Raises MergeConflict (materialize with conflicts), RefConflict,
        PreconditionRequired, InvalidArgument, NotFound, PermissionDenied."""
        body: JSON = {"theirs": theirs, "preflight": preflight, "materialize": materialize, "deep": deep}
        for k, v in (("ours", ours), ("message", message), ("on_conflict", on_conflict), ("expect_oid", expect_oid), ("mode", mode), ("style", style)):
            if v:
                body[k] = v
        if renames is not None:
            body["renames"] = renames
        return self._post(self._repo(repo, "merges"), body)

    def preflight(self, workspace: str, *, deep: bool = True) -> MergeResult:
        """Would the workspace merge cleanly into its base's default branch? Writes nothing.

        Raises NotFound, PermissionDenied."""
        ws = self.repo(workspace)
        base = ws.get("fork_of") or workspace
        return self.merge(base, f"{workspace}:{ws['default_branch']}", preflight=True, deep=deep)

    def preflight_batch(self, base: str, workspaces: Optional[List[str]] = None, *, task: str = "", ours: str = "", deep: bool = True, renames: bool = True) -> JSON:
        """Preflight many workspaces of ``base`` in one call: each one's
        default branch merged in memory into the base's branch ``ours``
        (default its default branch); nothing is written. Give
        ``workspaces`` or ``task`` (every workspace with that label).
        Answers ``{"ours", "ours_oid", "results": [{"workspace",
        "theirs", "result" | "error"}], "duration_ms"}``: an item holds
        what :meth:`preflight` answers for it, or its own error.

        Raises InvalidArgument (neither or both of workspaces and task,
        more than the server's --preflight-batch-max), NotFound (base)."""
        body: JSON = {"deep": deep, "renames": renames}
        if workspaces is not None:
            body["workspaces"] = list(workspaces)
        if task:
            body["task"] = task
        if ours:
            body["ours"] = ours
        return self._post(self._repo(base, "merges", "preflight"), body)

    def sync(self, workspace: str, expect_oid: str = "", on_conflict: str = "") -> MergeResult:
        """Merge the base's branch into the workspace (after the base moved),
        with compare-and-swap; ``on_conflict`` "markers" commits markers.

        Raises MergeConflict, RefConflict, InvalidArgument (a base
        repository), NotFound, PermissionDenied."""
        body: JSON = {}
        if expect_oid:
            body["expect_oid"] = expect_oid
        if on_conflict:
            body["on_conflict"] = on_conflict
        return self._post(self._repo(workspace, "sync"), body)

    def gate(self, repo: str, branch: str = "") -> Policy:
        """A branch's gate policy (the defaults when none was set). Raises NotFound."""
        return self._get(self._repo(repo, "gate"), branch=branch)

    def set_gate(self, repo: str, policy: Policy) -> Policy:
        """Set a branch's gate policy (admin). Raises InvalidArgument, PermissionDenied, NotFound."""
        return self.request("PUT", self._repo(repo, "gate"), body=dict(policy))

    def evaluate(self, workspace: str, commit: str = "") -> Evaluation:
        """The gate's verdict on a workspace's commit (default its tip); writes nothing.

        Raises InvalidArgument (a base repository), NotFound."""
        return self._get(self._repo(workspace, "gate", "evaluate"), commit=commit)

    def promote(self, workspace: str, *, commit: str = "", message: str = "", mode: str = "") -> PromoteResult:
        """Gate + preflight + materialize into the base; GateFailed lists the unmet rules.

        Raises GateFailed, MergeConflict, RefConflict, PermissionDenied,
        NotFound, AlreadyExists (not active)."""
        body: JSON = {}
        for k, v in (("commit", commit), ("message", message), ("mode", mode)):
            if v:
                body[k] = v
        return self._post(self._repo(workspace, "promote"), body)

    def post_check(self, repo: str, commit: str, name: str, status: str, summary: str = "", details_url: str = "") -> JSON:
        """Post a check result (pending, success, failure, error) for one exact commit (admin, ci).

        Raises InvalidArgument, PermissionDenied, NotFound."""
        body: JSON = {"name": name, "status": status}
        if summary:
            body["summary"] = summary
        if details_url:
            body["details_url"] = details_url
        return self._post(self._repo(repo, "commits", commit, "checks"), body)

    def checks(self, repo: str, commit: str) -> CheckSet:
        """A commit's checks: the latest per name and the whole history. Raises NotFound."""
        return self._get(self._repo(repo, "commits", commit, "checks"))

    # --------------------------------------------------------------- hooks

    def create_hook(self, repo: str, url: str, secret: str, events: Sequence[str] = ()) -> JSON:
        """Register a gate hook (admin, ci); deliveries are signed with
        HMAC-SHA256 of ``secret``; ``events`` empty means every event.

        Raises InvalidArgument (bad URL or host, short secret, unknown
        event), PermissionDenied, NotFound."""
        body: JSON = {"url": url, "secret": secret}
        if events:
            body["events"] = list(events)
        return self._post(self._repo(repo, "hooks"), body)

    def hooks(self, repo: str) -> List[JSON]:
        """A repository's hooks, never their secrets (the route has no paging).

        Raises PermissionDenied, NotFound."""
        return self._get(self._repo(repo, "hooks"))["hooks"] or []

    def delete_hook(self, repo: str, hook_id: str) -> None:
        """Deactivate a hook (admin, ci); its deliveries stay readable.

        Raises PermissionDenied, NotFound."""
        self.request("DELETE", self._repo(repo, "hooks", hook_id))

    def rotate_hook(self, repo: str, hook_id: str, secret: str = "", overlap_seconds: Optional[int] = None) -> JSON:
        """Replace a hook's signing secret (``secret`` "": the server makes
        one); the old one keeps signing for ``overlap_seconds`` (None: the
        server's default). The answer ``{"hook", "secret",
        "previous_secret_until"}`` shows the new secret once.

        Raises InvalidArgument, PermissionDenied, NotFound."""
        body: JSON = {}
        if secret:
            body["secret"] = secret
        if overlap_seconds is not None:
            body["overlap_seconds"] = overlap_seconds
        return self._post(self._repo(repo, "hooks", hook_id, "rotate"), body)

    def deliveries(self, repo: str, hook_id: str, limit: int = 0) -> List[JSON]:
        """A hook's newest deliveries (at most ``limit``, default 100; the
        route has no cursor), each with its attempts.

        Raises InvalidArgument, PermissionDenied, NotFound."""
        return self._get(self._repo(repo, "hooks", hook_id, "deliveries"), limit=limit or None)["deliveries"] or []

    # --------------------------------------------------------------- reads

    def log_page(self, repo: str, ref: str = "", *, after: str = "", limit: int = 0) -> JSON:
        """One page of the log of ``ref`` (default the default branch),
        newest first: ``{"commits", "next_after"}`` ("" on the last page).

        Raises InvalidArgument, NotFound."""
        return self._get(self._repo(repo, "commits"), ref=ref, limit=limit or None, after=after)

    def iter_log(self, repo: str, ref: str = "", *, after: str = "", limit: int = 0) -> Iterator[Commit]:
        """Every commit of ``ref``'s history, newest first, page by page. Raises as :meth:`log_page`."""
        return self._pages(self._repo(repo, "commits"), "commits", {"ref": ref}, after, limit)

    def log(self, repo: str, ref: str = "", limit: int = 0, after: str = "") -> List[Commit]:
        """One page of commits (see :meth:`log_page`), as a list. Raises as :meth:`log_page`."""
        return self.log_page(repo, ref, after=after, limit=limit)["commits"]

    def commit(self, repo: str, rev: str) -> Commit:
        """One commit. Raises NotFound."""
        return self._get(self._repo(repo, "commits", rev))

    def tree(self, repo: str, rev: str, path: str = "") -> List[JSON]:
        """The entries of a directory (default the root) at a revision. Raises NotFound."""
        return self._get(self._repo(repo, "tree", rev), path=path)["entries"]

    def read_file(self, repo: str, rev: str, path: str) -> bytes:
        """A file's raw content at a revision. Raises NotFound."""
        p = self._repo(repo, "blob", rev) + "/" + urllib.parse.quote(path.lstrip("/"))
        return self.request("GET", p, raw=True, accept="*/*")

    blob = read_file

    def archive(self, repo: str, rev: str, dest: Union[str, BinaryIO, None] = None) -> Union[bytes, str]:
        """The whole tree at ``rev`` as a tar. Without ``dest`` the bytes are
        returned; with a file path or a seekable binary file the tar is
        streamed into it and the commit archived is returned.

        Raises NotFound (unknown revision), PermissionDenied."""
        route = self._repo(repo, "archive", rev)
        if dest is None:
            return self.request("GET", route, raw=True, accept="application/x-tar")
        if isinstance(dest, str):
            with open(dest, "wb") as f:
                h = self.request("GET", route, stream_to=f, accept="application/x-tar")
        else:
            h = self.request("GET", route, stream_to=dest, accept="application/x-tar")
        return _header(h, "X-Lockstep-Commit")

    def checkout(self, repo: str, rev: str, directory: str) -> Tuple[str, int]:
        """Write the tree of ``repo`` at ``rev`` into ``directory`` (created
        if needed; it should be empty) and return ``(commit, files)``.

        The archive is never trusted to stay inside the directory: an
        absolute name, a ``..`` component, a symlink whose target leaves the
        directory, anything under a symlink, a hard link or device entry and
        an existing file are refused with InvalidArgument (what was written
        before stays). Raises NotFound, PermissionDenied too."""
        with tempfile.TemporaryFile() as f:
            commit = self.archive(repo, rev, f)
            f.seek(0)
            n = extract_tar(f, directory)
        return str(commit), n

    def compare(self, repo: str, base: str, head: str) -> CompareResult:
        """Changed files between two revisions, with unified diffs. Raises NotFound, InvalidArgument."""
        return self._get(self._repo(repo, "compare"), base=base, head=head)

    def git_url(self, repo: str) -> str:
        """The git smart-HTTP URL of a repository, for ``git clone``/``fetch``/``push``
        (authenticate with the key as the password)."""
        return f"{self.url}/git/{urllib.parse.quote(repo, safe='')}"


def _header(headers: Mapping[str, str], name: str) -> str:
    for k, v in headers.items():
        if k.lower() == name.lower():
            return v
    return ""


def extract_tar(f: BinaryIO, directory: str) -> int:
    """Extract a tar stream (an archive from the server) into ``directory``
    and return the number of files and symlinks written. Refuses (with
    :class:`InvalidArgument`) absolute names, ``..`` components, symlinks
    whose target leaves the directory, entries under a symlink, hard links,
    devices and files that already exist."""
    os.makedirs(directory, exist_ok=True)
    root = os.path.realpath(directory)
    links = set()
    n = 0

    def refuse(name: str, why: str) -> InvalidArgument:
        return InvalidArgument(f"archive entry {name!r} {why}")

    with tarfile.open(fileobj=f, mode="r|*") as tf:
        for m in tf:
            name = m.name
            if name.startswith("/") or os.path.isabs(name):
                raise refuse(name, "is absolute")
            parts = [p for p in name.split("/") if p not in ("", ".")]
            if not parts:
                continue
            if ".." in parts:
                raise refuse(name, "escapes the directory (..)")
            for i in range(1, len(parts)):
                if "/".join(parts[:i]) in links:
                    raise refuse(name, "lies under a symlink")
            rel = "/".join(parts)
            dest = os.path.join(root, *parts)
            parent = os.path.dirname(dest)
            if m.isdir():
                os.makedirs(dest, exist_ok=True)
                continue
            os.makedirs(parent, exist_ok=True)
            if not os.path.realpath(parent).startswith(root + os.sep) and os.path.realpath(parent) != root:
                raise refuse(name, "escapes the directory")
            if m.issym():
                target = m.linkname
                resolved = os.path.normpath(os.path.join(os.path.dirname(rel), target))
                if os.path.isabs(target) or resolved == ".." or resolved.startswith("../"):
                    raise refuse(name, f"is a symlink leaving the directory ({target!r})")
                os.symlink(target, dest)
                links.add(rel)
                n += 1
            elif m.isfile():
                src = tf.extractfile(m)
                mode = 0o755 if m.mode & 0o111 else 0o644
                try:
                    fd = os.open(dest, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), mode)
                except FileExistsError:
                    raise refuse(name, "already exists") from None
                with os.fdopen(fd, "wb") as out:
                    if src is not None:
                        shutil.copyfileobj(src, out)
                n += 1
            else:
                raise refuse(name, "is not a file, directory or symlink")
    return n


# OPERATIONS maps every operationId of the server's OpenAPI document
# (api/openapi.yaml) to the Client method that calls it; a test fetches
# the document from a real server and checks that every operation is
# here or in NOT_COVERED, and that every method exists.
OPERATIONS: Dict[str, str] = {
    "healthz": "health",
    "readyz": "ready",
    "metrics": "metrics",
    "openapi": "openapi",
    "createKey": "create_key",
    "listKeys": "keys",
    "revokeKey": "revoke_key",
    "setKeyQuota": "set_key_quota",
    "getRedis": "redis",
    "reportRun": "report_run",
    "executeRun": "execute_run",
    "getRunJob": "run_job",
    "registerRunner": "register_runner",
    "takeRunJob": "take_run_job",
    "postRunJobOutput": "post_run_job_output",
    "finishRunJob": "finish_run_job",
    "whoami": "whoami",
    "listOplog": "oplog",
    "verifyOplog": "verify_oplog",
    "createRepo": "create_repo",
    "listRepos": "repos",
    "getRepo": "repo",
    "abandonWorkspace": "abandon",
    "setWorkspaceStatus": "set_status",
    "createWorkspace": "fork",
    "listWorkspaces": "workspaces_page",
    "listAttempts": "attempts",
    "getUsage": "usage",
    "runGC": "gc",
    "preflightBatch": "preflight_batch",
    "getRetention": "retention",
    "setRetention": "set_retention",
    "listRefs": "refs",
    "pushWorktree": "push_tar",
    "editFiles": "edit",
    "missingObjects": "missing_objects",
    "uploadObjects": "upload_objects",
    "rollback": "rollback",
    "listCommits": "log_page",
    "getCommit": "commit",
    "getTree": "tree",
    "getBlob": "read_file",
    "getArchive": "archive",
    "compare": "compare",
    "merge": "merge",
    "sync": "sync",
    "setGatePolicy": "set_gate",
    "getGatePolicy": "gate",
    "evaluateGate": "evaluate",
    "postCheck": "post_check",
    "listChecks": "checks",
    "createHook": "create_hook",
    "listHooks": "hooks",
    "deleteHook": "delete_hook",
    "rotateHookSecret": "rotate_hook",
    "listDeliveries": "deliveries",
    "promote": "promote",
    "bindDatabase": "bind_database",
    "getDatabase": "database",
    "refreshDatabase": "refresh_database",
    "createCheckpoint": "checkpoint",
    "listCheckpoints": "checkpoints",
    "restoreCheckpoint": "restore",
    "stageEffect": "stage_effect",
    "listEffects": "effects_page",
    "discardEffects": "discard_effects",
    "compensateCommit": "compensate_commit",
    "getEffect": "effect",
    "approveEffect": "approve_effect",
    "rejectEffect": "reject_effect",
    "compensateEffect": "compensate_effect",
}

# NOT_COVERED: operations a Python program reaches with another client,
# and why.
NOT_COVERED: Dict[str, str] = {
    "mcpPost": "the MCP endpoint: use an MCP SDK (the mcp package) against /mcp",
    "mcpGet": "the MCP endpoint's event stream: use an MCP SDK",
    "mcpDelete": "ends an MCP session: use an MCP SDK",
    "gitInfoRefs": "git smart HTTP: use the git CLI with Client.git_url(repo)",
    "gitUploadPack": "git smart HTTP (fetch, clone): use the git CLI",
    "gitReceivePack": "git smart HTTP (push): use the git CLI",
}


def _retry_after(value: Optional[str]) -> Optional[float]:
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


__all__ = ["Client", "write", "delete", "extract_tar", "OPERATIONS", "NOT_COVERED", "LockstepError", "NotFound"]
