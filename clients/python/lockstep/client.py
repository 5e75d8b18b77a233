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
import socket
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Union

from . import push as _push
from .errors import LockstepError, NotFound, Unavailable, error_from
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
    ) -> Any:
        """Send one logical request (retried as the class comment says) and
        return the decoded JSON (or bytes with ``raw``; None for 204).
        ``body`` is sent as JSON; ``data`` as is (bytes or a seekable file)."""
        url = self.url + path
        if query:
            q = {k: ("true" if v is True else "false" if v is False else v) for k, v in query.items() if v is not None and v != ""}
            if q:
                url += "?" + urllib.parse.urlencode(q)
        headers = {"User-Agent": self.user_agent, "Accept": "application/json"}
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
                # not_configured is final whatever the status a proxy gave it
                if e.code not in RETRY_STATUSES or err.code == "not_configured" or attempt >= self.retries:
                    raise err from None
                retry_after = _retry_after(e.headers.get("Retry-After") if e.headers else None)
            except (urllib.error.URLError, ConnectionError, socket.timeout, TimeoutError, http.client.HTTPException) as e:
                if attempt >= self.retries:
                    reason = getattr(e, "reason", e)
                    raise Unavailable(f"{method} {path}: {reason}", method=method, path=path) from None
            delay = min(self.max_backoff, self.backoff * (2**attempt)) * random.random()
            if retry_after is not None:
                delay = max(delay, min(retry_after, self.max_retry_after))
            self.sleep(delay)
            attempt += 1

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

    # ------------------------------------------------------------ identity

    def whoami(self) -> JSON:
        return self._get("/api/v1/whoami")

    def create_key(self, name: str, role: str) -> JSON:
        """Create an API key (admin); the answer's ``secret`` is shown only once."""
        return self._post("/api/v1/keys", {"name": name, "role": role})

    def openapi(self) -> JSON:
        """The server's OpenAPI document."""
        return self._get("/api/v1/openapi.json")

    # --------------------------------------------------- repos, workspaces

    def create_repo(self, name: str, default_branch: str = "") -> Repo:
        body: JSON = {"name": name}
        if default_branch:
            body["default_branch"] = default_branch
        return self._post("/api/v1/repos", body)

    def repos(self, fork_of: str = "", network: str = "") -> List[Repo]:
        return self._get("/api/v1/repos", fork_of=fork_of, network=network)["repos"]

    def repo(self, name: str) -> Repo:
        """A repository or workspace: status, fork_of, default branch, head."""
        return self._get(self._repo(name))

    status = repo

    def fork(self, base: str, name: str, task: str = "") -> ForkResult:
        """Create a workspace: a fork of ``base`` (refs only), labelled with ``task``."""
        body: JSON = {"name": name}
        if task:
            body["task"] = task
        return self._post(self._repo(base, "forks"), body)

    def workspaces(self, base: str) -> List[WorkspaceInfo]:
        return self._get(self._repo(base, "workspaces"))["workspaces"] or []

    def attempts(self, workspace: str, limit: int = 0) -> List[JSON]:
        return self._get(self._repo(workspace, "attempts"), limit=limit or None)["attempts"] or []

    def set_status(self, workspace: str, status: RepoStatus, reason: str = "") -> Repo:
        return self._post(self._repo(workspace, "status"), {"status": status, "reason": reason})

    def abandon(self, workspace: str, reason: str = "") -> Repo:
        return self.request("DELETE", self._repo(workspace), query={"reason": reason})

    def refs(self, repo: str) -> List[Ref]:
        return self._get(self._repo(repo, "refs"))["refs"] or []

    def head(self, repo: str, branch: str = "") -> str:
        """The oid of ``branch`` (default: the default branch), "" when it does not exist."""
        if not branch:
            branch = self.repo(repo)["default_branch"]
        for r in self.refs(repo):
            if r["name"] == "refs/heads/" + branch:
                return r["oid"]
        return ""

    # -------------------------------------------------------------- writes

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
        must not exist); ``expect_current`` reads the branch first."""
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
        """Apply a batch of edits (:func:`write`, :func:`delete`) as one commit, with compare-and-swap."""
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
        """A new commit with ``to``'s tree (history is not rewritten)."""
        body: JSON = {"to": to}
        for k, v in (("branch", branch), ("expect_oid", expect_oid), ("message", message)):
            if v:
                body[k] = v
        if force:
            body["force"] = True
        return self._post(self._repo(repo, "rollback"), body)

    # ---------------------------------------------------------- checkpoints

    def checkpoint(self, workspace: str, label: str = "", *, branch: str = "", fs_snapshot: str = "") -> Checkpoint:
        body: JSON = {}
        for k, v in (("label", label), ("branch", branch), ("fs_snapshot", fs_snapshot)):
            if v:
                body[k] = v
        return self._post(self._repo(workspace, "checkpoints"), body)

    def checkpoints(self, workspace: str, limit: int = 0) -> List[Checkpoint]:
        return self._get(self._repo(workspace, "checkpoints"), limit=limit or None)["checkpoints"] or []

    def restore(self, workspace: str, checkpoint_id: str, *, expect_oid: str = "") -> RestoreResult:
        """Roll the workspace's code (and database branch) back to a checkpoint."""
        body: JSON = {"expect_oid": expect_oid} if expect_oid else {}
        return self._post(self._repo(workspace, "checkpoints", checkpoint_id, "restore"), body)

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
        before it, a failed run or a failed workspace)."""
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

    def effects(self, repo: str) -> List[JSON]:
        """Every effect of a workspace, in staging order (all pages)."""
        out: List[JSON] = []
        after = 0
        while True:
            page = self._get(self._repo(repo, "effects"), after=after or None, limit=1000)
            out.extend(page.get("effects") or [])
            after = page.get("next_after") or 0
            if not after:
                return out

    def effect(self, repo: str, effect_id: str) -> JSON:
        return self._get(self._repo(repo, "effects", effect_id))

    def discard_effects(self, workspace: str, *, after_seq: int = 0, run_id: str = "", reason: str = "") -> List[str]:
        """Discard staged effects (after a seq, of a run); returns their ids."""
        body: JSON = {}
        if after_seq:
            body["after_seq"] = after_seq
        if run_id:
            body["run_id"] = run_id
        if reason:
            body["reason"] = reason
        return self._post(self._repo(workspace, "effects", "discard"), body)["discarded"]

    def approve_effect(self, repo: str, effect_id: str, reason: str = "") -> JSON:
        return self._post(self._repo(repo, "effects", effect_id, "approve"), {"reason": reason} if reason else {})

    def reject_effect(self, repo: str, effect_id: str, reason: str = "") -> JSON:
        return self._post(self._repo(repo, "effects", effect_id, "reject"), {"reason": reason} if reason else {})

    def compensate_effect(self, repo: str, effect_id: str) -> JSON:
        """Queue a released effect's compensation: a new request, not an erasure."""
        return self._post(self._repo(repo, "effects", effect_id, "compensate"))

    def compensate_commit(self, base: str, commit: str) -> List[JSON]:
        """Queue the compensations of every effect a promoted commit released."""
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
    ) -> MergeResult:
        body: JSON = {"theirs": theirs, "preflight": preflight, "materialize": materialize, "deep": deep}
        for k, v in (("ours", ours), ("message", message), ("on_conflict", on_conflict), ("expect_oid", expect_oid), ("mode", mode)):
            if v:
                body[k] = v
        return self._post(self._repo(repo, "merges"), body)

    def preflight(self, workspace: str, *, deep: bool = True) -> MergeResult:
        """Would the workspace merge cleanly into its base's default branch? Writes nothing."""
        ws = self.repo(workspace)
        base = ws.get("fork_of") or workspace
        return self.merge(base, f"{workspace}:{ws['default_branch']}", preflight=True, deep=deep)

    def sync(self, workspace: str, expect_oid: str = "", on_conflict: str = "") -> MergeResult:
        body: JSON = {}
        if expect_oid:
            body["expect_oid"] = expect_oid
        if on_conflict:
            body["on_conflict"] = on_conflict
        return self._post(self._repo(workspace, "sync"), body)

    def gate(self, repo: str, branch: str = "") -> Policy:
        return self._get(self._repo(repo, "gate"), branch=branch)

    def set_gate(self, repo: str, policy: Policy) -> Policy:
        return self.request("PUT", self._repo(repo, "gate"), body=dict(policy))

    def evaluate(self, workspace: str, commit: str = "") -> Evaluation:
        """The gate's verdict on a workspace's commit (default its tip); writes nothing."""
        return self._get(self._repo(workspace, "gate", "evaluate"), commit=commit)

    def promote(self, workspace: str, *, commit: str = "", message: str = "", mode: str = "") -> PromoteResult:
        """Gate + preflight + materialize into the base; GateFailed lists the unmet rules."""
        body: JSON = {}
        for k, v in (("commit", commit), ("message", message), ("mode", mode)):
            if v:
                body[k] = v
        return self._post(self._repo(workspace, "promote"), body)

    def post_check(self, repo: str, commit: str, name: str, status: str, summary: str = "", details_url: str = "") -> JSON:
        body: JSON = {"name": name, "status": status}
        if summary:
            body["summary"] = summary
        if details_url:
            body["details_url"] = details_url
        return self._post(self._repo(repo, "commits", commit, "checks"), body)

    def checks(self, repo: str, commit: str) -> CheckSet:
        return self._get(self._repo(repo, "commits", commit, "checks"))

    # --------------------------------------------------------------- reads

    def log(self, repo: str, ref: str = "", limit: int = 0, after: str = "") -> List[Commit]:
        return self._get(self._repo(repo, "commits"), ref=ref, limit=limit or None, after=after)["commits"]

    def commit(self, repo: str, rev: str) -> Commit:
        return self._get(self._repo(repo, "commits", rev))

    def tree(self, repo: str, rev: str, path: str = "") -> List[JSON]:
        return self._get(self._repo(repo, "tree", rev), path=path)["entries"]

    def read_file(self, repo: str, rev: str, path: str) -> bytes:
        p = self._repo(repo, "blob", rev) + "/" + urllib.parse.quote(path.lstrip("/"))
        return self.request("GET", p, raw=True)

    def compare(self, repo: str, base: str, head: str) -> CompareResult:
        return self._get(self._repo(repo, "compare"), base=base, head=head)

    def oplog(self, repo: str = "", after: int = 0, limit: int = 100) -> JSON:
        return self._get("/api/v1/oplog", repo=repo, after=after or None, limit=limit)


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


__all__ = ["Client", "write", "delete", "LockstepError", "NotFound"]
