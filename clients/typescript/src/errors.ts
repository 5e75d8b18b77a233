// Typed errors: one class per error code of the HTTP API contract (the
// error envelope {"error": {"code", "message", "details"}}), all
// subclasses of LockstepError.

import type { components } from "./schema.js";

/** Every code the server can answer (the OpenAPI document's ErrorCode). */
export type ErrorCode = components["schemas"]["ErrorCode"];

export class LockstepError extends Error {
  readonly code: ErrorCode | string;
  readonly status: number;
  readonly details: Record<string, unknown>;
  readonly method: string;
  readonly path: string;

  constructor(
    message: string,
    opts: { code?: string; status?: number; details?: Record<string, unknown>; method?: string; path?: string } = {},
  ) {
    super(message);
    this.name = new.target.name;
    this.code = opts.code ?? (new.target as unknown as { defaultCode: string }).defaultCode ?? "internal";
    this.status = opts.status ?? 0;
    this.details = opts.details ?? {};
    this.method = opts.method ?? "";
    this.path = opts.path ?? "";
  }

  static readonly defaultCode: string = "internal";

  override toString(): string {
    const where = this.method ? ` (${this.method} ${this.path} → ${this.status})` : "";
    return `${this.code}: ${this.message}${where}`;
  }
}

/** 400: malformed input (bad name, oid, path, body …). */
export class InvalidArgument extends LockstepError { static override readonly defaultCode = "invalid_argument"; }
/** 401: no key, or an unknown or revoked key. */
export class Unauthenticated extends LockstepError { static override readonly defaultCode = "unauthenticated"; }
/** 403: the key's role or ownership forbids it. */
export class PermissionDenied extends LockstepError { static override readonly defaultCode = "permission_denied"; }
/** 404: repository, ref, commit, path, checkpoint … */
export class NotFound extends LockstepError { static override readonly defaultCode = "not_found"; }
/** 409: compare-and-swap failed; re-read the branch (`actual`) and retry. */
export class RefConflict extends LockstepError {
  static override readonly defaultCode = "ref_conflict";
  get expected(): string { return String(this.details["expected"] ?? ""); }
  get actual(): string { return String(this.details["actual"] ?? ""); }
}
/** 409: the merge has conflicts (`conflicts`). */
export class MergeConflict extends LockstepError {
  static override readonly defaultCode = "merge_conflict";
  get conflicts(): Array<Record<string, unknown>> { return (this.details["conflicts"] as Array<Record<string, unknown>>) ?? []; }
}
/** 409: the name is taken. */
export class AlreadyExists extends LockstepError { static override readonly defaultCode = "already_exists"; }
/** 409: a request with the same Idempotency-Key is still running. */
export class InProgress extends LockstepError { static override readonly defaultCode = "in_progress"; }
/** 412: promote refused; `reasons` lists every unmet rule. */
export class GateFailed extends LockstepError {
  static override readonly defaultCode = "gate_failed";
  get reasons(): Array<Record<string, unknown>> { return (this.details["reasons"] as Array<Record<string, unknown>>) ?? []; }
}
/** 413: over a configured limit. */
export class TooLarge extends LockstepError { static override readonly defaultCode = "too_large"; }
/** 422: the Idempotency-Key was used before for a different request. */
export class IdempotencyKeyReused extends LockstepError { static override readonly defaultCode = "idempotency_key_reused"; }
/** 428: a write to an existing branch without `expect_oid` (and without `force`). */
export class PreconditionRequired extends LockstepError { static override readonly defaultCode = "precondition_required"; }
/** 429: over a per-key or server-wide bound (retried, honouring Retry-After). */
export class RateLimited extends LockstepError { static override readonly defaultCode = "rate_limited"; }
/** 503 (or no answer at all): a dependency is down. */
export class Unavailable extends LockstepError { static override readonly defaultCode = "unavailable"; }
/** 501: the feature is not configured on this server; final, never retried. */
export class NotConfigured extends LockstepError { static override readonly defaultCode = "not_configured"; }
/** 409: no live runner takes run jobs for the workspace; final, not retried (start `lockstep runner --jobs`). */
export class NoRunner extends LockstepError { static override readonly defaultCode = "no_runner"; }
/** 500: anything else; the server logged the details. */
export class Internal extends LockstepError { static override readonly defaultCode = "internal"; }

type ErrorClass = new (message: string, opts?: ConstructorParameters<typeof LockstepError>[1]) => LockstepError;

const classes: ErrorClass[] = [
  InvalidArgument, Unauthenticated, PermissionDenied, NotFound, RefConflict, MergeConflict, AlreadyExists,
  InProgress, GateFailed, TooLarge, IdempotencyKeyReused, PreconditionRequired, RateLimited, Unavailable,
  NotConfigured, NoRunner, Internal,
];

/** The class of each code. The Record type makes the compiler check that every ErrorCode of the OpenAPI document has one. */
export const ERRORS: Record<ErrorCode, ErrorClass> = Object.fromEntries(
  classes.map((c) => [(c as unknown as { defaultCode: string }).defaultCode, c]),
) as Record<ErrorCode, ErrorClass>;

const byStatus: Record<number, ErrorClass> = {
  400: InvalidArgument, 401: Unauthenticated, 403: PermissionDenied, 404: NotFound, 405: InvalidArgument,
  412: GateFailed, 413: TooLarge, 422: IdempotencyKeyReused, 428: PreconditionRequired, 429: RateLimited,
  501: NotConfigured, 503: Unavailable,
};

/** The error of an answer: `body` is the decoded envelope (or text, or undefined). */
export function errorFrom(status: number, body: unknown, method = "", path = ""): LockstepError {
  const err = body && typeof body === "object" ? (body as { error?: unknown }).error : undefined;
  if (err && typeof err === "object" && typeof (err as { code?: unknown }).code === "string") {
    const e = err as { code: string; message?: unknown; details?: unknown };
    const cls = (ERRORS as Record<string, ErrorClass>)[e.code] ?? LockstepError;
    const details = e.details && typeof e.details === "object" ? (e.details as Record<string, unknown>) : {};
    return new cls(String(e.message ?? ""), { code: e.code, status, details, method, path });
  }
  const cls = byStatus[status] ?? Internal;
  const text = typeof body === "string" ? body.slice(0, 300) : "";
  return new cls(`HTTP ${status} without an error envelope: ${text}`, { status, method, path });
}
