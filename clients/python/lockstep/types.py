"""Typed shapes of the API's answers (api/openapi.yaml is the full contract).

They are ``TypedDict``s: the client returns the decoded JSON as is, so a
field a newer server adds never breaks an older client.
"""

from __future__ import annotations

import sys
from typing import Any, Dict, List

if sys.version_info >= (3, 8):
    from typing import Literal, TypedDict
else:  # pragma: no cover
    TypedDict = dict

# RepoStatus is a repository's lifecycle status: the server's table
# (lockstep.Statuses, status.go); a Go test keeps this list in step with it.
if sys.version_info >= (3, 8):
    RepoStatus = Literal["active", "promoted", "failed", "abandoned"]
else:  # pragma: no cover
    RepoStatus = str


class Repo(TypedDict, total=False):
    name: str
    network: str
    fork_of: str
    default_branch: str
    status: RepoStatus
    owner_key_id: str
    owner: str
    base_commit: str
    task: str
    created_at: str
    updated_at: str
    head: str


class ForkResult(TypedDict, total=False):
    name: str
    fork_of: str
    network: str
    base_commit: str
    owner: str
    task: str
    duration_ms: float


class WorkspaceInfo(TypedDict, total=False):
    name: str
    owner: str
    status: RepoStatus
    tip: str
    base_commit: str
    ahead: int
    behind: int
    task: str
    created_at: str
    updated_at: str


class Ref(TypedDict):
    name: str
    oid: str
    updated_at: str


class PushResult(TypedDict, total=False):
    commit: str
    tree: str
    parent: str
    branch: str
    changed: bool
    objects_written: int
    bytes_written: int
    duration_ms: float


class Signature(TypedDict):
    name: str
    email: str
    time: str


class Commit(TypedDict):
    commit: str
    tree: str
    parents: List[str]
    message: str
    author: Signature
    committer: Signature
    time: str


class FileChange(TypedDict, total=False):
    path: str
    status: str
    old_mode: str
    new_mode: str
    old_hash: str
    new_hash: str
    added: int
    removed: int
    binary: bool
    patch: str
    patch_truncated: bool


class CompareResult(TypedDict):
    base: str
    head: str
    files: List[FileChange]
    added: int
    removed: int


class Conflict(TypedDict, total=False):
    path: str
    kind: str
    hunks: List[Dict[str, Any]]


class MergeResult(TypedDict, total=False):
    clean: bool
    fast_forward: bool
    up_to_date: bool
    merge_base: str
    ours: str
    theirs: str
    tree: str
    commit: str
    branch: str
    side_ref: str
    conflicts: List[Conflict]
    retries: int
    duration_ms: float


class Reason(TypedDict, total=False):
    rule: str
    message: str
    path: str


class Evaluation(TypedDict, total=False):
    workspace: str
    commit: str
    into: str
    passed: bool
    reasons: List[Reason]
    changed_files: int
    changed_lines: int
    merge_clean: bool


class PromoteResult(MergeResult, total=False):
    gate: Evaluation
    workspace: str
    into: str
    queued_ms: float


class Policy(TypedDict, total=False):
    branch: str
    required_checks: List[str]
    max_changed_files: int
    max_changed_lines: int
    protected_paths: List[str]
    require_clean_merge: bool
    promote_mode: str


class Check(TypedDict, total=False):
    id: int
    commit: str
    name: str
    status: str
    summary: str
    details_url: str
    key: str
    created_at: str


class CheckSet(TypedDict):
    commit: str
    checks: List[Check]
    history: List[Check]


class Checkpoint(TypedDict, total=False):
    id: str
    repo: str
    branch: str
    commit: str
    tree: str
    db_snapshot: str
    fs_snapshot: str
    label: str
    key: str
    op_id: str
    duration_ms: float
    created_at: str


class PartResult(TypedDict, total=False):
    restored: bool
    skipped: str
    error: str


class RestoreResult(TypedDict, total=False):
    checkpoint: str
    commit: str
    tree: str
    code: PartResult
    database: PartResult
    db_restored: bool
    fs_snapshot: str
    op_id: str
    duration_ms: float
