"""Exceptions: one class per error code of the HTTP API contract.

Every error the server answers is the JSON envelope
``{"error": {"code", "message", "details"}}``; :func:`error_from` turns it
into the exception class of its code, all subclasses of
:class:`LockstepError`.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Type


class LockstepError(Exception):
    """An error answered by the server (or a transport failure, code "unavailable")."""

    code: str = "internal"
    #: whether asking again (after ``retry_after``) can succeed; the client
    #: retries these itself before raising them.
    retryable: bool = False

    def __init__(
        self,
        message: str,
        *,
        code: Optional[str] = None,
        status: int = 0,
        details: Optional[Dict[str, Any]] = None,
        method: str = "",
        path: str = "",
    ) -> None:
        super().__init__(message)
        if code is not None:
            self.code = code
        self.message = message
        self.status = status
        self.details: Dict[str, Any] = details or {}
        self.method = method
        self.path = path
        #: seconds the server asked to wait (its Retry-After header), if any
        self.retry_after: Optional[float] = None

    def __str__(self) -> str:
        where = f" ({self.method} {self.path} → {self.status})" if self.method else ""
        return f"{self.code}: {self.message}{where}"


class InvalidArgument(LockstepError):
    """400: malformed input (bad name, oid, path, body …)."""

    code = "invalid_argument"


class Unauthenticated(LockstepError):
    """401: no key, or an unknown or revoked key."""

    code = "unauthenticated"


class PermissionDenied(LockstepError):
    """403: the key's role or ownership forbids it."""

    code = "permission_denied"


class NotFound(LockstepError):
    """404: repository, ref, commit, path, checkpoint …"""

    code = "not_found"


class RefConflict(LockstepError):
    """409: compare-and-swap failed; re-read the branch (``actual``) and retry."""

    code = "ref_conflict"

    @property
    def expected(self) -> str:
        return str(self.details.get("expected", ""))

    @property
    def actual(self) -> str:
        return str(self.details.get("actual", ""))


class MergeConflict(LockstepError):
    """409: the merge has conflicts (``conflicts``)."""

    code = "merge_conflict"

    @property
    def conflicts(self) -> List[Dict[str, Any]]:
        return list(self.details.get("conflicts") or [])


class AlreadyExists(LockstepError):
    """409: the name is taken."""

    code = "already_exists"


class InProgress(LockstepError):
    """409: a request with the same Idempotency-Key is still running (retryable, Retry-After)."""

    code = "in_progress"
    retryable = True


class GateFailed(LockstepError):
    """412: promote refused; ``reasons`` lists every unmet rule."""

    code = "gate_failed"

    @property
    def reasons(self) -> List[Dict[str, Any]]:
        return list(self.details.get("reasons") or [])


class TooLarge(LockstepError):
    """413: over a configured limit."""

    code = "too_large"


class IdempotencyKeyReused(LockstepError):
    """422: the Idempotency-Key was used before for a different request."""

    code = "idempotency_key_reused"


class PreconditionRequired(LockstepError):
    """428: a write to an existing branch without ``expect_oid`` (and without ``force``)."""

    code = "precondition_required"


class Unavailable(LockstepError):
    """503 (or no answer at all): a dependency is down (retryable, Retry-After)."""

    code = "unavailable"
    retryable = True


class RateLimited(LockstepError):
    """429: over a per-key or server-wide bound (open streams, sessions); retryable, honour ``retry_after``."""

    code = "rate_limited"
    retryable = True


class NotConfigured(LockstepError):
    """501: the feature is not configured on this server (e.g. database branching); final, never retried."""

    code = "not_configured"


class NoRunner(LockstepError):
    """409: no live runner takes run jobs for the workspace; final, not retried (start ``lockstep runner --jobs``)."""

    code = "no_runner"


class Internal(LockstepError):
    """500: anything else; the server logged the details."""

    code = "internal"


ERRORS: Dict[str, Type[LockstepError]] = {
    cls.code: cls
    for cls in (
        InvalidArgument,
        Unauthenticated,
        PermissionDenied,
        NotFound,
        RefConflict,
        MergeConflict,
        AlreadyExists,
        InProgress,
        GateFailed,
        TooLarge,
        IdempotencyKeyReused,
        PreconditionRequired,
        Unavailable,
        RateLimited,
        NotConfigured,
        NoRunner,
        Internal,
    )
}

_BY_STATUS: Dict[int, Type[LockstepError]] = {
    400: InvalidArgument,
    401: Unauthenticated,
    403: PermissionDenied,
    404: NotFound,
    405: InvalidArgument,
    412: GateFailed,
    413: TooLarge,
    422: IdempotencyKeyReused,
    428: PreconditionRequired,
    429: RateLimited,
    501: NotConfigured,
    503: Unavailable,
}


def error_from(status: int, envelope: Any, method: str = "", path: str = "", raw: bytes = b"") -> LockstepError:
    """Build the exception for an error answer (the envelope already decoded, or None)."""
    err = envelope.get("error") if isinstance(envelope, dict) else None
    if isinstance(err, dict) and isinstance(err.get("code"), str):
        code = err["code"]
        cls = ERRORS.get(code, LockstepError)
        details = err.get("details") if isinstance(err.get("details"), dict) else {}
        return cls(str(err.get("message", "")), code=code, status=status, details=details, method=method, path=path)
    cls = _BY_STATUS.get(status, Internal)
    text = raw[:300].decode("utf-8", "replace") if raw else ""
    return cls(f"HTTP {status} without an error envelope: {text}", status=status, method=method, path=path)
