// The client: every operation of the OpenAPI document through `api` (an
// openapi-fetch client typed by the generated schema), plus hand-written
// methods for the agent loop, the incremental push and idempotent retries.
//
// Retries: every write (any method but GET/HEAD) carries one
// Idempotency-Key per logical request, kept across retries, so a retried
// write is applied once. Connection errors, 429, 502, 503 and 504 are
// retried up to `retries` times with capped exponential backoff (full
// jitter), never sooner than the answer's Retry-After (cut to
// `maxRetryAfterMs`). `not_configured` is final whatever its status.

import { randomUUID } from "node:crypto";
import createClient, { type Client as FetchClient } from "openapi-fetch";
import type { components, paths } from "./schema.js";
import { errorFrom, LockstepError, Unavailable } from "./errors.js";
import { plan, scan, writePack, ZERO_OID, type PushReport } from "./push.js";

export type Schemas = components["schemas"];
export type { paths, components };

export const RETRY_STATUSES = new Set([429, 502, 503, 504]);

export interface ClientOptions {
  /** Server URL (default LOCKSTEP_URL or http://127.0.0.1:7070). */
  url?: string;
  /** API key (default LOCKSTEP_KEY). */
  key?: string;
  retries?: number;
  backoffMs?: number;
  maxBackoffMs?: number;
  maxRetryAfterMs?: number;
  userAgent?: string;
  /** The fetch to use (default the global one). */
  fetch?: typeof fetch;
  /** How to wait between attempts (tests replace it). */
  sleep?: (ms: number) => Promise<void>;
}

type Result<T> = { data?: T; error?: unknown; response: Response };

export interface PushOptions {
  branch?: string;
  /** Compare-and-swap: the branch must point here (40 zeros: must not exist). */
  expectOid?: string;
  /** Read the branch's tip first and use it as expectOid. */
  expectCurrent?: boolean;
  force?: boolean;
  message?: string;
  author?: string;
  allowEmpty?: boolean;
}

export function retryAfterMs(value: string | null): number | undefined {
  if (!value) return undefined;
  const secs = Number(value);
  if (Number.isFinite(secs)) return Math.max(0, secs * 1000);
  const when = Date.parse(value);
  return Number.isNaN(when) ? undefined : Math.max(0, when - Date.now());
}

export class Lockstep {
  readonly url: string;
  readonly api: FetchClient<paths>;
  retries: number;
  backoffMs: number;
  maxBackoffMs: number;
  maxRetryAfterMs: number;
  sleep: (ms: number) => Promise<void>;
  private readonly key: string;
  private readonly userAgent: string;
  private readonly fetchImpl: typeof fetch;

  constructor(opts: ClientOptions = {}) {
    this.url = (opts.url ?? process.env["LOCKSTEP_URL"] ?? "http://127.0.0.1:7070").replace(/\/+$/, "");
    this.key = opts.key ?? process.env["LOCKSTEP_KEY"] ?? "";
    this.retries = opts.retries ?? 4;
    this.backoffMs = opts.backoffMs ?? 250;
    this.maxBackoffMs = opts.maxBackoffMs ?? 8000;
    this.maxRetryAfterMs = opts.maxRetryAfterMs ?? 60000;
    this.userAgent = opts.userAgent ?? "lockstep-typescript/0.1";
    this.fetchImpl = opts.fetch ?? globalThis.fetch;
    this.sleep = opts.sleep ?? ((ms) => new Promise((r) => setTimeout(r, ms)));
    this.api = createClient<paths>({ baseUrl: this.url, fetch: (req: Request) => this.send(req) });
  }

  /** Send one logical request with the retry rules above (used by `api` too). */
  async send(req: Request): Promise<Response> {
    const headers = new Headers(req.headers);
    headers.set("User-Agent", this.userAgent);
    if (this.key && !headers.has("Authorization")) headers.set("Authorization", "Bearer " + this.key);
    if (!headers.has("Accept")) headers.set("Accept", "application/json");
    const write = req.method !== "GET" && req.method !== "HEAD";
    if (write && !headers.has("Idempotency-Key")) headers.set("Idempotency-Key", randomUUID());
    const body = write ? await req.arrayBuffer() : undefined;
    const path = new URL(req.url).pathname;
    for (let attempt = 0; ; attempt++) {
      let retryAfter: number | undefined;
      try {
        const res = await this.fetchImpl(req.url, { method: req.method, headers, body, signal: req.signal });
        if (!RETRY_STATUSES.has(res.status) || attempt >= this.retries) return res;
        const text = await res.clone().text();
        if (text.includes('"not_configured"')) return res; // final whatever the status a proxy gave it
        retryAfter = retryAfterMs(res.headers.get("Retry-After"));
        await res.body?.cancel();
      } catch (e) {
        if (e instanceof LockstepError) throw e;
        if (req.signal?.aborted) throw e;
        if (attempt >= this.retries) {
          const cause = (e as { cause?: { code?: string } }).cause?.code ?? String(e);
          throw new Unavailable(`${req.method} ${path}: ${cause}`, { method: req.method, path });
        }
      }
      let delay = Math.min(this.maxBackoffMs, this.backoffMs * 2 ** attempt) * Math.random();
      if (retryAfter !== undefined) delay = Math.max(delay, Math.min(retryAfter, this.maxRetryAfterMs));
      await this.sleep(delay);
    }
  }

  /** The data of an `api` call, or its typed error thrown. */
  async must<T>(call: Promise<Result<T>>): Promise<T> {
    const { data, error, response } = await call;
    if (!response.ok) {
      throw errorFrom(response.status, error, "", new URL(response.url || this.url).pathname);
    }
    return data as T;
  }

  // ------------------------------------------------------------ keys, repos

  whoami() {
    return this.must(this.api.GET("/api/v1/whoami"));
  }

  createKey(name: string, role: Schemas["Role"]) {
    return this.must(this.api.POST("/api/v1/keys", { body: { name, role } }));
  }

  createRepo(name: string, defaultBranch?: string) {
    return this.must(this.api.POST("/api/v1/repos", { body: { name, ...(defaultBranch ? { default_branch: defaultBranch } : {}) } }));
  }

  repo(name: string) {
    return this.must(this.api.GET("/api/v1/repos/{repo}", { params: { path: { repo: name } } }));
  }

  fork(base: string, name: string, task?: string) {
    return this.must(this.api.POST("/api/v1/repos/{repo}/forks", { params: { path: { repo: base } }, body: { name, ...(task ? { task } : {}) } }));
  }

  async refs(repo: string) {
    return (await this.must(this.api.GET("/api/v1/repos/{repo}/refs", { params: { path: { repo } } }))).refs;
  }

  /** Storage of the repository's fork network (admins): disk, and bucket in object-storage mode. */
  usage(repo: string) {
    return this.must(this.api.GET("/api/v1/repos/{repo}/usage", { params: { path: { repo } } }));
  }

  /** Run the object GC now (admins): unreachable objects older than `prune` ("now" or a duration; default the server's --object-retention) are dropped; `dryRun` drops nothing. */
  gc(opts: { repo?: string; prune?: string; dryRun?: boolean } = {}) {
    const body: { repo?: string; prune?: string; dry_run?: boolean } = {};
    if (opts.repo) body.repo = opts.repo;
    if (opts.prune) body.prune = opts.prune;
    if (opts.dryRun) body.dry_run = true;
    return this.must(this.api.POST("/api/v1/gc", { body }));
  }

  /** The retention policy of a base repository (admins). */
  retention(repo: string) {
    return this.must(this.api.GET("/api/v1/repos/{repo}/retention", { params: { path: { repo } } }));
  }

  /** Set the retention policy of a base repository (admins); ages such as "7d" or "36h", "0" = off. */
  setRetention(repo: string, policy: { abandon_after: string; delete_after: string; archive_failed: boolean }) {
    return this.must(this.api.PUT("/api/v1/repos/{repo}/retention", { params: { path: { repo } }, body: policy }));
  }

  /** Preflight many workspaces of `base` (listed, or every one of `task`) into its branch `ours` in one call; writes nothing. */
  preflightBatch(base: string, opts: { workspaces?: string[]; task?: string; ours?: string; deep?: boolean; renames?: boolean }) {
    const body: Schemas["PreflightBatchRequest"] = { deep: opts.deep ?? true, renames: opts.renames ?? true };
    if (opts.workspaces) body.workspaces = opts.workspaces;
    if (opts.task) body.task = opts.task;
    if (opts.ours) body.ours = opts.ours;
    return this.must(this.api.POST("/api/v1/repos/{repo}/merges/preflight", { params: { path: { repo: base } }, body }));
  }

  /** The oid of `branch` (default: the default branch), "" when it does not exist. */
  async head(repo: string, branch?: string): Promise<string> {
    const b = branch || (await this.repo(repo)).default_branch;
    return (await this.refs(repo)).find((r) => r.name === "refs/heads/" + b)?.oid ?? "";
  }

  // -------------------------------------------------------------- run jobs

  /**
   * Run `command` on a runner (`lockstep runner --jobs`) as a transactional
   * run on a fresh checkout of the workspace's tip; resolves with the
   * finished job (`state` done or failed, `result`, the last `output`
   * lines). With `pushOnSuccess` the result is pushed with compare-and-swap
   * on the tip checked out. Throws NoRunner (no live runner covers the
   * workspace; final), InvalidArgument, PermissionDenied, NotFound.
   */
  async executeRun(workspace: string, command: string[], opts: { pushOnSuccess?: boolean; timeoutSeconds?: number } = {}): Promise<Schemas["RunJob"]> {
    const body: Schemas["RunJobRequest"] = { command, push_on_success: opts.pushOnSuccess ?? false };
    if (opts.timeoutSeconds) body.timeout_seconds = opts.timeoutSeconds;
    // Accept: application/json (send's default): one JSON job, not the event stream.
    return (await this.must(this.api.POST("/api/v1/repos/{repo}/jobs", { params: { path: { repo: workspace } }, body }))) as Schemas["RunJob"];
  }

  /** A run job with its output lines after seq `after`. Throws NotFound. */
  runJob(workspace: string, id: string, after?: number) {
    return this.must(this.api.GET("/api/v1/repos/{repo}/jobs/{id}", { params: { path: { repo: workspace, id }, query: after ? { after } : {} } }));
  }

  // ------------------------------------------------------------------ push

  /** Push a directory with the incremental protocol (see push.ts). */
  async pushDir(repo: string, directory: string, opts: PushOptions = {}): Promise<PushReport> {
    let trips = 0;
    let { branch, expectOid } = opts;
    if (opts.expectCurrent) {
      if (!branch) {
        branch = (await this.repo(repo)).default_branch;
        trips++;
      }
      expectOid = (await this.head(repo, branch)) || ZERO_OID;
      trips++;
    }
    const snap = scan(directory);
    const need = await plan(snap, async (oids) => {
      trips++;
      const r = await this.must(this.api.POST("/api/v1/repos/{repo}/objects/missing", { params: { path: { repo } }, body: { oids } }));
      return r.missing ?? [];
    });
    let sentObjects = 0, sentBytes = 0, writtenObjects = 0, writtenBytes = 0;
    if (need.length > 0) {
      const { pack, objects } = writePack(snap, need);
      sentObjects = objects;
      sentBytes = pack.length;
      const up = await this.must(this.api.POST("/api/v1/repos/{repo}/objects", {
        params: { path: { repo } },
        body: pack as unknown as string,
        bodySerializer: (b: unknown) => b as BodyInit,
        headers: { "Content-Type": "application/x-git-packfile" },
      }));
      trips++;
      writtenObjects = up.objects_written;
      writtenBytes = up.bytes_written;
    }
    const query: NonNullable<paths["/api/v1/repos/{repo}/worktree"]["put"]["parameters"]["query"]> = { tree: snap.tree };
    if (branch) query.branch = branch;
    if (expectOid) query.expect_oid = expectOid;
    if (opts.message) query.message = opts.message;
    if (opts.author) query.author = opts.author;
    if (opts.force) query.force = true;
    if (opts.allowEmpty) query.allow_empty = true;
    const res = await this.must(this.api.PUT("/api/v1/repos/{repo}/worktree", { params: { path: { repo }, query } }));
    trips++;
    return {
      commit: res.commit, tree: res.tree, branch: res.branch, changed: res.changed, parent: res.parent,
      objectsWritten: res.objects_written + writtenObjects, bytesWritten: res.bytes_written + writtenBytes,
      files: snap.files, objectsSent: sentObjects, bytesSent: sentBytes, roundTrips: trips,
    };
  }

  /** A new commit with `to`'s tree (history is not rewritten). */
  rollback(repo: string, to: string, opts: { expectOid?: string; branch?: string; message?: string; force?: boolean } = {}) {
    return this.must(this.api.POST("/api/v1/repos/{repo}/rollback", {
      params: { path: { repo } },
      body: { to, expect_oid: opts.expectOid, branch: opts.branch, message: opts.message, force: opts.force },
    }));
  }

  // ---------------------------------------------------------- checkpoints

  checkpoint(workspace: string, label?: string) {
    return this.must(this.api.POST("/api/v1/repos/{repo}/checkpoints", { params: { path: { repo: workspace } }, body: label ? { label } : {} }));
  }

  restore(workspace: string, id: string, expectOid?: string) {
    return this.must(this.api.POST("/api/v1/repos/{repo}/checkpoints/{id}/restore", {
      params: { path: { repo: workspace, id } }, body: expectOid ? { expect_oid: expectOid } : {},
    }));
  }

  // ------------------------------------------------------- merge and gate

  merge(repo: string, body: Schemas["MergeRequest"]) {
    return this.must(this.api.POST("/api/v1/repos/{repo}/merges", { params: { path: { repo } }, body }));
  }

  /** Would the workspace merge cleanly into its base's default branch? Writes nothing. */
  async preflight(workspace: string) {
    const ws = await this.repo(workspace);
    return this.merge(ws.fork_of || workspace, { theirs: `${workspace}:${ws.default_branch}`, preflight: true, deep: true });
  }

  setGate(repo: string, policy: Schemas["Policy"]) {
    return this.must(this.api.PUT("/api/v1/repos/{repo}/gate", { params: { path: { repo } }, body: policy }));
  }

  evaluate(workspace: string, commit?: string) {
    return this.must(this.api.GET("/api/v1/repos/{repo}/gate/evaluate", { params: { path: { repo: workspace }, query: commit ? { commit } : {} } }));
  }

  postCheck(repo: string, commit: string, name: string, status: Schemas["CheckStatus"], summary?: string) {
    return this.must(this.api.POST("/api/v1/repos/{repo}/commits/{rev}/checks", {
      params: { path: { repo, rev: commit } }, body: { name, status, ...(summary ? { summary } : {}) },
    }));
  }

  /** Gate + preflight + materialize into the base; GateFailed lists the unmet rules. */
  promote(workspace: string, opts: { commit?: string; message?: string } = {}) {
    return this.must(this.api.POST("/api/v1/repos/{repo}/promote", { params: { path: { repo: workspace } }, body: { ...opts } }));
  }

  // ----------------------------------------------------------------- reads

  commit(repo: string, rev: string) {
    return this.must(this.api.GET("/api/v1/repos/{repo}/commits/{rev}", { params: { path: { repo, rev } } }));
  }

  async readFile(repo: string, rev: string, path: string): Promise<Buffer> {
    const data = await this.must(this.api.GET("/api/v1/repos/{repo}/blob/{rev}/{path}", {
      params: { path: { repo, rev, path: path.replace(/^\/+/, "") } }, parseAs: "arrayBuffer",
    }));
    return Buffer.from(data as unknown as ArrayBuffer);
  }
}
