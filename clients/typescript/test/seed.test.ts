// The seed scenario against a real server: LOCKSTEP_URL and LOCKSTEP_KEY
// (an admin key) are set by clients/typescript/typescript_test.go, which
// starts one. Without them the tests are skipped (and the Go test fails
// on a skip).

import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { randomUUID } from "node:crypto";
import { chmodSync, mkdirSync, mkdtempSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { test } from "node:test";
import { GateFailed, Lockstep, NoRunner, NotFound, PreconditionRequired, RefConflict, Unauthenticated, ZERO_OID, type Schemas } from "../src/index.js";

const URL_ = process.env["LOCKSTEP_URL"] ?? "";
const KEY = process.env["LOCKSTEP_KEY"] ?? "";
const skip = URL_ && KEY ? false : "LOCKSTEP_URL and LOCKSTEP_KEY (admin) are needed";

const name = (prefix: string) => `${prefix}-${randomUUID().slice(0, 10)}`;

function writeTree(root: string, files: Record<string, string>): void {
  for (const [rel, content] of Object.entries(files)) {
    const p = join(root, rel);
    mkdirSync(dirname(p), { recursive: true });
    writeFileSync(p, content);
  }
}

/** The tree `git add -A && git write-tree` builds for root. */
function gitTree(root: string): string {
  const gd = join(mkdtempSync(join(tmpdir(), "git-")), "g");
  execFileSync("git", ["init", "-q", "--bare", gd]);
  const env = { ...process.env, GIT_DIR: gd, GIT_WORK_TREE: root };
  execFileSync("git", ["add", "-A"], { cwd: root, env });
  return execFileSync("git", ["write-tree"], { cwd: root, env }).toString().trim();
}

test("seed scenario: push, fork, CAS, stale push, rollback, checkpoint, gate, promote", { skip }, async () => {
  const admin = new Lockstep({ url: URL_, key: KEY, retries: 2 });
  const tmp = mkdtempSync(join(tmpdir(), "seed-"));

  // A base repository, pushed from a directory with the incremental protocol.
  const repo = name("base");
  assert.equal((await admin.createRepo(repo)).name, repo);
  const d = join(tmp, "base");
  const files: Record<string, string> = { "README.md": "hello\n", "src/app.py": "print('v1')\n" };
  for (let i = 0; i < 4; i++) files[`pkg${i}/mod.py`] = `x = ${i}\n`;
  writeTree(d, files);
  symlinkSync("README.md", join(d, "link"));
  mkdirSync(join(d, "empty/dir"), { recursive: true });
  chmodSync(join(d, "pkg0/mod.py"), 0o755);
  const first = await admin.pushDir(repo, d, { expectOid: ZERO_OID, message: "first" });
  assert.equal(first.changed, true);
  assert.equal(first.tree, gitTree(d), "the tree must be the one git builds");
  assert.equal(first.objectsSent, 6 + 1 + 6); // 6 distinct blobs + the link + root, src, pkg0..3
  assert.equal((await admin.readFile(repo, "main", "src/app.py")).toString(), "print('v1')\n");
  assert.equal(await admin.head(repo), first.commit);
  const usage = await admin.usage(repo);
  assert.equal(usage.network, repo);
  assert.ok((usage.disk.total_bytes ?? 0) > 0);
  const dry = await admin.gc({ repo, prune: "now", dryRun: true });
  assert.equal(dry.dry_run, true);
  assert.equal(dry.networks, 1);
  const pol = await admin.setRetention(repo, { abandon_after: "7d", delete_after: "0", archive_failed: true });
  assert.equal(pol.abandon_after, "7d");
  assert.equal((await admin.retention(repo)).archive_failed, true);

  // An agent forks a workspace and pushes with CAS; only what changed is sent.
  const agentKey = await admin.createKey(name("agent"), "agent");
  const agent = new Lockstep({ url: URL_, key: agentKey.secret, retries: 2 });
  const ws = name("ws");
  const f = await agent.fork(repo, ws);
  assert.equal(f.fork_of, repo);
  const w = join(tmp, "ws");
  writeTree(w, { ...files, "src/app.py": "print('v2')\n" });
  symlinkSync("README.md", join(w, "link"));
  chmodSync(join(w, "pkg0/mod.py"), 0o755);
  const wsHead = await agent.head(ws);
  const good = await agent.pushDir(ws, w, { expectOid: wsHead, message: "v2" });
  assert.equal(good.parent, wsHead);
  assert.equal(good.objectsSent, 3, "the blob, src/ and the root"); // incremental
  assert.equal(good.tree, gitTree(w));

  // A stale push (the tip moved since) is refused with ref_conflict naming the tip.
  writeTree(w, { "src/other.py": "stale\n" });
  await assert.rejects(agent.pushDir(ws, w, { expectOid: wsHead }), (e: unknown) => {
    assert.ok(e instanceof RefConflict, String(e));
    assert.equal(e.actual, good.commit);
    assert.equal(e.status, 409);
    return true;
  });
  await assert.rejects(agent.pushDir(ws, w), PreconditionRequired);
  assert.equal(await agent.head(ws), good.commit, "the refused pushes wrote nothing");

  // A checkpoint, a broken push, a byte-exact rollback and a restore.
  const cp = await agent.checkpoint(ws, "good");
  assert.equal(cp.commit, good.commit);
  writeTree(w, { "src/app.py": "syntax error(\n" });
  const bad = await agent.pushDir(ws, w, { expectCurrent: true, message: "broken" });
  assert.equal(bad.parent, good.commit);
  const rb = await agent.rollback(ws, good.commit, { expectOid: bad.commit });
  assert.equal(rb.tree, good.tree, "rollback is byte-exact: the same tree");
  assert.equal((await agent.readFile(ws, "main", "src/app.py")).toString(), "print('v2')\n");
  const broken = await agent.pushDir(ws, w, { expectCurrent: true, message: "broken again" });
  const restored = await agent.restore(ws, cp.id, broken.commit);
  assert.equal(restored.tree, good.tree);
  const tip = await agent.head(ws);
  assert.deepEqual((await agent.commit(ws, tip)).parents, [broken.commit], "a restore is a new commit, history stays");

  // Preflight, a gate with a required check, promote.
  const pre = await agent.preflight(ws);
  assert.equal(pre.clean, true);
  await admin.setGate(repo, { branch: "main", required_checks: ["ci"] });
  await assert.rejects(agent.promote(ws), (e: unknown) => {
    assert.ok(e instanceof GateFailed, String(e));
    assert.ok(e.reasons.length > 0);
    return true;
  });
  assert.equal((await agent.evaluate(ws)).passed, false);
  const ci = new Lockstep({ url: URL_, key: (await admin.createKey(name("ci"), "ci")).secret });
  await ci.postCheck(ws, tip, "ci", "success", "green");
  assert.equal((await agent.evaluate(ws)).passed, true);
  const out = await agent.promote(ws);
  assert.equal(out.clean, true);
  assert.equal((await admin.readFile(repo, "main", "src/app.py")).toString(), "print('v2')\n");
  await assert.rejects(admin.readFile(repo, "main", "src/other.py"), NotFound); // the restore undid it
});

test("typed errors per code", { skip }, async () => {
  const admin = new Lockstep({ url: URL_, key: KEY, retries: 0 });
  await assert.rejects(admin.repo(name("nope")), (e: unknown) => e instanceof NotFound && e.status === 404);
  await assert.rejects(new Lockstep({ url: URL_, key: "lsk_wrong", retries: 0 }).whoami(), Unauthenticated);
});

// Compile-time: the generated types accept the minimal bodies the server
// accepts (a field with a default is optional, issue 24 item 8).
export const minimalMerge: Schemas["MergeRequest"] = { theirs: "ws:main" };
export const minimalEdits: Schemas["EditsRequest"] = { edits: [{ op: "write", path: "a", content: "b" }] };

test("executeRun: no_runner at once, then a job taken by a runner (the runner protocol through the typed api)", { skip }, async () => {
  const admin = new Lockstep({ url: URL_, key: KEY, retries: 2 });
  const repo = name("base");
  await admin.createRepo(repo);
  const agent = new Lockstep({ url: URL_, key: (await admin.createKey(name("agent"), "agent")).secret, retries: 2 });
  const ws = name("job");
  await agent.fork(repo, ws);
  await assert.rejects(agent.executeRun(ws, ["make", "test"]), NoRunner);
  const runner = new Lockstep({ url: URL_, key: (await admin.createKey(name("box"), "runner")).secret, retries: 2 });
  const info = await runner.must(runner.api.POST("/api/v1/runners", { body: { name: name("box"), workspaces: [ws] } }));
  const serve = (async () => {
    for (;;) {
      const { data, response } = await runner.api.POST("/api/v1/runners/{id}/jobs", { params: { path: { id: info.id }, query: { wait: 1 } } });
      if (response.status === 204 || !data) continue;
      const path = { id: info.id, job: data.job.id };
      await runner.must(runner.api.POST("/api/v1/runners/{id}/jobs/{job}/output", { params: { path }, body: { lines: [{ stream: "stdout", text: "ok 1" }] } }));
      await runner.must(runner.api.POST("/api/v1/runners/{id}/jobs/{job}/result", { params: { path },
        body: { checked_out: "c0ffee", exit_code: 0, succeeded: true, rolled_back: false, duration_ms: 1, pushed_commit: "beef" } }));
      return;
    }
  })();
  const job = await agent.executeRun(ws, ["make", "test"], { pushOnSuccess: true });
  await serve;
  assert.equal(job.state, "done");
  assert.equal(job.result?.pushed_commit, "beef");
  assert.deepEqual(job.output?.map((l) => l.text), ["ok 1"]);
  assert.equal((await agent.runJob(ws, job.id)).state, "done");
});
