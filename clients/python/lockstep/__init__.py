"""Lockstep's Python client: versioned git workspaces for coding agents.

Standard library only. Quick start::

    import lockstep
    c = lockstep.Client("http://127.0.0.1:7070", key)   # or $LOCKSTEP_URL / $LOCKSTEP_KEY
    ws = c.fork("web", "fix-login", task="fix the login redirect")
    head = c.head(ws["name"])
    c.edit(ws["name"], [lockstep.write("app.py", "print('hi')\\n")], expect_oid=head)
    cp = c.checkpoint(ws["name"], "before refactor")
    c.promote(ws["name"])

Errors are exceptions per code (:class:`RefConflict`, :class:`GateFailed`, …),
all subclasses of :class:`LockstepError`.
"""

from .client import NOT_COVERED, OPERATIONS, Client, delete, write
from .errors import (
    AlreadyExists,
    GateFailed,
    IdempotencyKeyReused,
    InProgress,
    Internal,
    InvalidArgument,
    LockstepError,
    MergeConflict,
    NotConfigured,
    NoRunner,
    NotFound,
    PermissionDenied,
    PreconditionRequired,
    RateLimited,
    RefConflict,
    TooLarge,
    Unauthenticated,
    Unavailable,
)
from .push import ZERO_OID, PushReport, StatCache, object_id, plan, scan, write_pack

__version__ = "0.1.0"

__all__ = [
    "Client",
    "OPERATIONS",
    "NOT_COVERED",
    "write",
    "delete",
    "ZERO_OID",
    "PushReport",
    "StatCache",
    "object_id",
    "plan",
    "scan",
    "write_pack",
    "LockstepError",
    "InvalidArgument",
    "Unauthenticated",
    "PermissionDenied",
    "NotFound",
    "RefConflict",
    "MergeConflict",
    "AlreadyExists",
    "InProgress",
    "GateFailed",
    "TooLarge",
    "IdempotencyKeyReused",
    "PreconditionRequired",
    "Unavailable",
    "RateLimited",
    "NotConfigured",
    "NoRunner",
    "Internal",
]
