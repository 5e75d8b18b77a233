"""Tests of the Python client against a real `lockstep serve`.

They need LOCKSTEP_URL and LOCKSTEP_KEY (an admin key); the Go test
clients/python/python_test.go starts a server and runs them. The retry
tests use a local stand-in server, since a real one cannot be made to
answer 503 on demand.
"""

from __future__ import annotations

import http.server
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import unittest
import uuid

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import lockstep  # noqa: E402
from lockstep import ZERO_OID  # noqa: E402

URL = os.environ.get("LOCKSTEP_URL", "")
KEY = os.environ.get("LOCKSTEP_KEY", "")


def name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def write_tree(root: str, files: dict, past: bool = True) -> None:
    for rel, content in files.items():
        p = os.path.join(root, rel)
        os.makedirs(os.path.dirname(p), exist_ok=True)
        with open(p, "w") as f:
            f.write(content)
        if past:  # older than any stat-cache reference time
            t = time.time() - 3600
            os.utime(p, (t, t))


def git_tree(root: str) -> str:
    gd = os.path.join(tempfile.mkdtemp(), "g")
    subprocess.run(["git", "init", "-q", "--bare", gd], check=True)
    env = dict(os.environ, GIT_DIR=gd, GIT_WORK_TREE=root)
    subprocess.run(["git", "add", "-A"], check=True, env=env, cwd=root)
    return subprocess.run(["git", "write-tree"], check=True, env=env, cwd=root, capture_output=True, text=True).stdout.strip()


@unittest.skipUnless(URL and KEY, "LOCKSTEP_URL and LOCKSTEP_KEY (admin) are needed")
class ServerTest(unittest.TestCase):
    def setUp(self) -> None:
        self.c = lockstep.Client(URL, KEY, retries=2)
        self.tmp = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, self.tmp, True)

    def base(self, files=None) -> str:
        repo = name("base")
        self.c.create_repo(repo)
        d = os.path.join(self.tmp, repo)
        os.makedirs(d)
        write_tree(d, files or {"README.md": "hello\n", "src/app.py": "print('v1')\n"})
        self.c.push_dir(repo, d, expect_oid=ZERO_OID, cache_path=os.path.join(self.tmp, repo + ".cache"))
        return repo

    def test_errors_per_code(self) -> None:
        with self.assertRaises(lockstep.NotFound) as cm:
            self.c.repo(name("nope"))
        self.assertEqual(cm.exception.status, 404)
        with self.assertRaises(lockstep.Unauthenticated):
            lockstep.Client(URL, "lsk_wrong", retries=0).whoami()
        with self.assertRaises(lockstep.InvalidArgument):
            self.c.create_repo("Not A Name")
        repo = self.base()
        with self.assertRaises(lockstep.AlreadyExists):
            self.c.create_repo(repo)
        d = os.path.join(self.tmp, "other")
        write_tree(d, {"x": "1\n"})
        with self.assertRaises(lockstep.PreconditionRequired):
            self.c.push_dir(repo, d, use_cache=False)
        with self.assertRaises(lockstep.RefConflict) as rc:
            self.c.push_dir(repo, d, expect_oid="1" * 40, use_cache=False)
        self.assertEqual(rc.exception.actual, self.c.head(repo))
        self.assertIsInstance(rc.exception, lockstep.LockstepError)
        agent = self.c.create_key(name("agent"), "agent")
        with self.assertRaises(lockstep.PermissionDenied):
            lockstep.Client(URL, agent["secret"]).create_repo(name("x"))

    def test_push_dir_incremental(self) -> None:
        repo = name("push")
        self.c.create_repo(repo)
        d = os.path.join(self.tmp, "w")
        files = {f"pkg{i}/mod{j}.py": f"x = {i * 10 + j}\n" for i in range(5) for j in range(4)}
        files["README.md"] = "readme\n"
        write_tree(d, files)
        os.symlink("README.md", os.path.join(d, "link"))
        os.makedirs(os.path.join(d, "empty/dir"))
        os.chmod(os.path.join(d, "pkg0/mod0.py"), 0o755)
        cache = os.path.join(self.tmp, "cache.json")

        r1 = self.c.push_dir(repo, d, expect_oid=ZERO_OID, message="first", cache_path=cache)
        self.assertTrue(r1.changed)
        self.assertEqual(r1.tree, git_tree(d), "the tree must be the one git builds")
        self.assertEqual(r1.hashed, 21)
        self.assertEqual(r1.objects_sent, 21 + 1 + 6)  # 21 distinct blobs + link + 6 trees
        self.assertEqual(self.c.read_file(repo, "main", "pkg3/mod2.py"), b"x = 32\n")
        self.assertEqual(self.c.head(repo), r1.commit)

        # Unchanged: nothing hashed, nothing sent, no commit.
        r2 = self.c.push_dir(repo, d, expect_oid=r1.commit, cache_path=cache)
        self.assertFalse(r2.changed)
        self.assertEqual((r2.hashed, r2.objects_sent), (0, 0))
        self.assertEqual(r2.commit, r1.commit)

        # One file changed: only it is hashed; one blob and the trees on
        # its path are sent; the known-trees hint takes one round trip.
        write_tree(d, {"pkg2/mod1.py": "x = 'changed'\n"})
        r3 = self.c.push_dir(repo, d, expect_oid=r1.commit, message="second", cache_path=cache)
        self.assertTrue(r3.changed)
        self.assertEqual(r3.hashed, 1)
        self.assertEqual(r3.objects_sent, 3)  # blob, pkg2/, root
        self.assertEqual(r3.round_trips, 3)  # objects/missing, objects, worktree
        self.assertEqual(r3.parent, r1.commit)
        self.assertEqual(r3.tree, git_tree(d))

        # Without the cache (another machine): level-by-level negotiation
        # still sends only what the server lacks.
        write_tree(d, {"pkg4/mod3.py": "x = 'again'\n"})
        r4 = self.c.push_dir(repo, d, expect_current=True, use_cache=False)
        self.assertEqual(r4.hashed, 21)  # regular files; the symlink's blob is its target
        self.assertEqual(r4.objects_sent, 3)
        self.assertEqual(r4.tree, git_tree(d))
        log = self.c.log(repo, limit=10)
        self.assertEqual([c["commit"] for c in log[:3]], [r4.commit, r3.commit, r1.commit])
        cmp = self.c.compare(repo, r1.commit, r4.commit)
        self.assertEqual(sorted(f["path"] for f in cmp["files"]), ["pkg2/mod1.py", "pkg4/mod3.py"])
        # The operations log attributes every object written exactly once:
        # each upload (objects.upload) and each commit (push).
        entries = self.c.oplog(repo, limit=1000)["entries"]
        per_op: dict = {}
        for e in entries:
            per_op[e["op"]] = per_op.get(e["op"], 0) + e["objects"]
        sent = r1.objects_sent + r3.objects_sent + r4.objects_sent
        self.assertEqual(per_op, {"repo.create": 0, "objects.upload": sent, "push": 3}, entries)

    def test_edits(self) -> None:
        repo = self.base()
        ws = name("ws")
        self.c.fork(repo, ws)
        head = self.c.head(ws)
        try:
            res = self.c.edit(ws, [lockstep.write("src/new.py", "print('new')\n"), lockstep.write("bin/run", b"#!/bin/sh\n", executable=True),
                                   lockstep.delete("README.md")], expect_oid=head, message="edits")
        except lockstep.NotFound as e:
            if "no route" in e.message:
                self.skipTest("this server has no /edits route yet")
            raise
        self.assertEqual(res["parent"], head)
        self.assertEqual(self.c.read_file(ws, res["commit"], "src/new.py"), b"print('new')\n")
        modes = {e["name"]: e["mode"] for e in self.c.tree(ws, res["commit"], "bin")}
        self.assertEqual(modes, {"run": "100755"})
        with self.assertRaises(lockstep.NotFound):
            self.c.read_file(ws, res["commit"], "README.md")
        with self.assertRaises(lockstep.RefConflict):
            self.c.edit(ws, [lockstep.write("a", "b")], expect_oid=head)
        with self.assertRaises(lockstep.PreconditionRequired):
            self.c.edit(ws, [lockstep.write("a", "b")])

    def test_workspace_checkpoint_gate_promote(self) -> None:
        repo = self.base()
        agent = self.c.create_key(name("agent"), "agent")
        a = lockstep.Client(URL, agent["secret"])
        ws = name("ws")
        try:
            f = a.fork(repo, ws, task="fix the greeting")
            self.assertEqual(f.get("task"), "fix the greeting")
            self.assertEqual([w.get("task") for w in a.workspaces(repo) if w["name"] == ws], ["fix the greeting"])
        except lockstep.InvalidArgument as e:
            if 'unknown field "task"' not in e.message:
                raise
            f = a.fork(repo, ws)  # a server from before the task label (issue 13, merged separately)
        self.assertEqual((f["name"], f["fork_of"]), (ws, repo))
        self.assertIn(ws, [w["name"] for w in a.workspaces(repo)])
        self.assertEqual(a.status(ws)["status"], "active")

        d = os.path.join(self.tmp, "ws")
        write_tree(d, {"README.md": "hello\n", "src/app.py": "print('v2')\n"})
        good = a.push_dir(ws, d, expect_current=True, message="v2", cache_path=os.path.join(self.tmp, "wsc"))
        cp = a.checkpoint(ws, "good")
        self.assertEqual(cp["commit"], good.commit)
        self.assertIn(cp["id"], [c["id"] for c in a.checkpoints(ws)])

        write_tree(d, {"src/app.py": "syntax error(\n"})
        bad = a.push_dir(ws, d, expect_oid=good.commit, message="broken", cache_path=os.path.join(self.tmp, "wsc"))
        res = a.restore(ws, cp["id"], expect_oid=bad.commit)
        self.assertEqual(res["tree"], good.tree)
        self.assertEqual(a.read_file(ws, "main", "src/app.py"), b"print('v2')\n")
        restored = a.head(ws)
        self.assertEqual(a.commit(ws, restored)["parents"], [bad.commit], "a restore is a new commit, history stays")

        pre = a.preflight(ws)
        self.assertTrue(pre["clean"])
        batch = a.preflight_batch(repo, [ws, "no-such-ws"])
        self.assertEqual([r["workspace"] for r in batch["results"]], [ws, "no-such-ws"])
        self.assertEqual(batch["results"][0]["result"]["clean"], pre["clean"])
        self.assertEqual(batch["results"][0]["result"]["tree"], pre["tree"])
        self.assertEqual(batch["results"][1]["error"]["code"], "not_found")
        self.assertEqual(self.c.head(repo), self.c.head(repo))  # preflight wrote nothing

        self.c.set_gate(repo, {"branch": "main", "required_checks": ["ci"]})
        with self.assertRaises(lockstep.GateFailed) as gf:
            a.promote(ws)
        self.assertTrue(any(r.get("rule") for r in gf.exception.reasons), gf.exception.reasons)
        self.assertFalse(a.evaluate(ws)["passed"])
        ci = lockstep.Client(URL, self.c.create_key(name("ci"), "ci")["secret"])
        ci.post_check(ws, restored, "ci", "success", summary="green")
        self.assertEqual([c["status"] for c in a.checks(ws, restored)["checks"]], ["success"])
        self.assertTrue(a.evaluate(ws)["passed"])
        out = a.promote(ws)
        self.assertTrue(out["clean"])
        self.assertEqual(self.c.read_file(repo, "main", "src/app.py"), b"print('v2')\n")
        self.assertEqual(a.status(ws)["status"], "promoted")

    def test_execute_run_on_a_runner(self) -> None:
        repo = self.base()
        ws = name("job")
        self.c.fork(repo, ws)
        with self.assertRaises(lockstep.NoRunner):
            self.c.execute_run(ws, ["make", "test"])
        secret = self.c.create_key(name("box"), "runner")["secret"]
        runner = lockstep.Client(URL, secret, retries=2)
        with self.assertRaises(lockstep.PermissionDenied):
            runner.repos()
        info = runner.register_runner(name("box"), [ws])
        failures = []

        def serve() -> None:
            try:
                taken = None
                while taken is None:
                    taken = runner.take_run_job(info["id"], wait=1)
                job = taken["job"]
                runner.post_run_job_output(info["id"], job["id"], [{"stream": "stdout", "text": "ok 1"}, {"stream": "stderr", "text": "warn"}])
                runner.finish_run_job(info["id"], job["id"], {"checked_out": "c0ffee", "exit_code": 0, "succeeded": True,
                                                               "rolled_back": False, "duration_ms": 1, "pushed_commit": "beef"})
            except Exception as e:  # noqa: BLE001 - reported by the test
                failures.append(e)

        t = threading.Thread(target=serve)
        t.start()
        job = self.c.execute_run(ws, ["make", "test"], push_on_success=True)
        t.join()
        self.assertEqual(failures, [])
        self.assertEqual(job["state"], "done")
        self.assertTrue(job["result"]["succeeded"])
        self.assertEqual(job["result"]["pushed_commit"], "beef")
        self.assertEqual([l["text"] for l in job["output"]], ["ok 1", "warn"])
        again = self.c.run_job(ws, job["id"], after=1)
        self.assertEqual([l["text"] for l in again["output"]], ["warn"])

    def test_effects_staged_listed_discarded(self) -> None:
        repo = self.base()
        ws = name("fx")
        self.c.fork(repo, ws)
        e = self.c.stage_effect(ws, "POST", "https://example.com/hook", body='{"a":1}', label="notify",
                                headers={"Authorization": "Bearer t0ken"}, run_id="run-1", consuming=True)
        self.assertEqual(e["status"], "staged")
        self.assertEqual(e["headers"]["Authorization"], "[redacted]")
        other = self.c.stage_effect(ws, "PUT", "https://example.com/x", body=b"\x00\x01", run_id="run-2")
        listed = self.c.effects(ws)
        self.assertEqual([x["id"] for x in listed], [e["id"], other["id"]])
        self.assertEqual(self.c.discard_effects(ws, run_id="run-1", reason="run failed"), [e["id"]])
        self.assertEqual(self.c.effect(ws, e["id"])["status"], "discarded")
        with self.assertRaises(lockstep.InvalidArgument):
            self.c.stage_effect(ws, "GET", "https://example.com/")

    def test_merge_conflict_and_rollback(self) -> None:
        repo = self.base()
        ws = name("ws")
        self.c.fork(repo, ws)
        d1, d2 = os.path.join(self.tmp, "1"), os.path.join(self.tmp, "2")
        write_tree(d1, {"README.md": "ours\n", "src/app.py": "print('v1')\n"})
        write_tree(d2, {"README.md": "theirs\n", "src/app.py": "print('v1')\n"})
        first = self.c.head(repo)
        self.c.push_dir(repo, d1, expect_current=True, use_cache=False)
        self.c.push_dir(ws, d2, expect_current=True, use_cache=False)
        pre = self.c.merge(repo, f"{ws}:main", preflight=True, deep=True)
        self.assertFalse(pre["clean"])
        self.assertEqual([c["path"] for c in pre["conflicts"]], ["README.md"])
        with self.assertRaises(lockstep.MergeConflict) as mc:
            self.c.merge(repo, f"{ws}:main", materialize=True, deep=True)
        self.assertEqual(mc.exception.conflicts[0]["path"], "README.md")
        rb = self.c.rollback(repo, first, expect_oid=self.c.head(repo))
        self.assertEqual(rb["tree"], self.c.commit(repo, first)["tree"])

    def test_idempotency_key_sent(self) -> None:
        # Every write carries a fresh Idempotency-Key; a replayed answer is
        # marked (servers without the feature simply ignore the header).
        repo = name("idem")
        self.c.create_repo(repo)
        self.assertIn(self.c.last_headers.get("Idempotent-Replayed", "false"), ("true", "false"))


@unittest.skipUnless(URL and KEY, "LOCKSTEP_URL and LOCKSTEP_KEY (admin) are needed")
class CoverageTest(unittest.TestCase):
    """Issue 24 item 8: every operation of the server's OpenAPI document has
    a Client method (lockstep.OPERATIONS), every public method says what it
    does, and the methods added for it work against the real server."""

    def setUp(self) -> None:
        self.c = lockstep.Client(URL, KEY, retries=2)
        self.tmp = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, self.tmp, True)

    base = ServerTest.base

    def test_every_operation_has_a_method(self) -> None:
        doc = self.c.openapi()
        ops = {}
        for route, item in doc["paths"].items():
            for method, op in item.items():
                if method in ("get", "put", "post", "delete", "patch", "head", "options"):
                    ops[op["operationId"]] = f"{method.upper()} {route}"
        self.assertGreater(len(ops), 50)
        missing = sorted(f"{oid} ({ops[oid]})" for oid in ops if oid not in lockstep.OPERATIONS and oid not in lockstep.NOT_COVERED)
        self.assertEqual(missing, [], "operations without a Python method: add them to the client and to OPERATIONS")
        stale = sorted((set(lockstep.OPERATIONS) | set(lockstep.NOT_COVERED)) - set(ops))
        self.assertEqual(stale, [], "OPERATIONS names operations the server does not have")
        for oid, meth in lockstep.OPERATIONS.items():
            self.assertTrue(callable(getattr(lockstep.Client, meth, None)), f"{oid}: Client.{meth} does not exist")

    def test_every_public_method_is_documented(self) -> None:
        for attr in dir(lockstep.Client):
            if attr.startswith("_"):
                continue
            fn = getattr(lockstep.Client, attr)
            if callable(fn):
                self.assertTrue((fn.__doc__ or "").strip(), f"Client.{attr} has no docstring")
        for cls in (lockstep.RateLimited, lockstep.NotConfigured, lockstep.Unavailable, lockstep.InProgress):
            self.assertIn(cls.code, lockstep.errors.ERRORS)
        self.assertTrue(lockstep.RateLimited.retryable)
        self.assertFalse(lockstep.NotConfigured.retryable)

    def test_health_whoami_keys(self) -> None:
        self.assertEqual(self.c.health().get("status"), "ok")
        self.assertIn("lockstep", self.c.metrics())
        self.assertEqual(self.c.whoami()["role"], "admin")
        created = self.c.create_key(name("py-key"), "agent")
        agent = lockstep.Client(URL, created["secret"], retries=0)
        self.assertEqual(agent.whoami()["id"], created["id"])
        listed = {k["id"]: k for k in self.c.keys()}
        self.assertIn(created["id"], listed)
        self.assertNotIn("secret", listed[created["id"]])
        with self.assertRaises(lockstep.PermissionDenied):
            agent.keys()
        with self.assertRaises(lockstep.PermissionDenied):
            agent.verify_oplog()
        # Per-key quota overrides: set, shown with their source, refused
        # when negative (nothing changes), cleared back to the server's.
        self.c.set_key_quota(created["id"], 3, storage_bytes=1 << 20, runs=1)
        lim = agent.whoami()["limits"]
        self.assertEqual((lim["workspaces"], lim["storage_bytes"], lim["runs"]), (3, 1 << 20, 1))
        self.assertEqual(lim["runs_source"], "key")
        with self.assertRaises(lockstep.InvalidArgument) as bad:
            self.c.set_key_quota(created["id"], 3, storage_bytes=-1, runs=1)
        self.assertIn("storage_bytes", str(bad.exception))
        self.assertEqual(agent.whoami()["limits"]["storage_bytes"], 1 << 20)
        self.c.set_key_quota(created["id"])
        lim = agent.whoami()["limits"]
        self.assertEqual((lim["storage_bytes_source"], lim["runs_source"]), ("server", "server"))
        self.assertIsNone(self.c.revoke_key(created["id"]))
        with self.assertRaises(lockstep.Unauthenticated):
            agent.whoami()
        self.assertTrue({k["id"]: k for k in self.c.keys()}[created["id"]].get("revoked_at"))
        with self.assertRaises(lockstep.NotFound):
            self.c.revoke_key("no-such-key")

    def test_oplog_filters_paging_verify(self) -> None:
        repo = self.base()
        ws = name("ws")
        self.c.fork(repo, ws)
        for i in range(3):
            self.c.edit(ws, [lockstep.write(f"f{i}.txt", f"{i}\n")], expect_oid=self.c.head(ws))
        page = self.c.oplog(ws, limit=2)
        self.assertEqual(len(page["entries"]), 2)
        self.assertTrue(page["next_after"])
        everything = list(self.c.iter_oplog(ws, limit=2))
        ops = [e["op"] for e in everything]
        self.assertGreaterEqual(len(everything), 4, ops)  # fork + 3 edits, fetched 2 per page
        self.assertEqual(everything[:2], page["entries"])
        self.assertEqual([e["seq"] for e in everything], sorted({e["seq"] for e in everything}), "pages repeated or reordered entries")
        self.assertTrue(all(e["repo"] == ws for e in everything))
        last = everything[-1]["op"]
        filtered = list(self.c.iter_oplog(ws, op=last, limit=1))
        self.assertEqual([e["seq"] for e in filtered], [e["seq"] for e in everything if e["op"] == last])
        me = self.c.whoami()["id"]
        self.assertTrue(all(e["key_id"] == me for e in self.c.iter_oplog(ws, key=me)))
        self.assertEqual(list(self.c.iter_oplog(ws, key="no-such-key")), [])
        v = self.c.verify_oplog()
        self.assertTrue(v["ok"], v)
        self.assertGreaterEqual(v["entries"], len(everything))

    def test_status_and_abandon(self) -> None:
        repo = self.base()
        a, b = name("ws"), name("ws")
        self.c.fork(repo, a)
        self.c.fork(repo, b)
        self.assertEqual(self.c.set_status(a, "failed", "tests failed")["status"], "failed")
        self.assertEqual(self.c.repo(a)["status"], "failed")
        self.assertEqual(self.c.abandon(b, "not needed")["status"], "abandoned")
        self.assertEqual(self.c.status(b)["status"], "abandoned")
        self.assertEqual(self.c.read_file(b, "main", "README.md"), b"hello\n", "an abandoned workspace stays readable")
        with self.assertRaises(lockstep.InvalidArgument):
            self.c.set_status(a, "no-such-status")  # type: ignore[arg-type]
        with self.assertRaises(lockstep.NotFound):
            self.c.abandon(name("nope"))

    def test_workspace_listing_filters_and_paging(self) -> None:
        repo = self.base()
        names = sorted(name("ws") for _ in range(5))
        for i, n in enumerate(names):
            self.c.fork(repo, n, task="even" if i % 2 == 0 else "odd")
        self.c.set_status(names[0], "failed", "x")
        first = self.c.workspaces_page(repo, limit=2)
        self.assertEqual([w["name"] for w in first["workspaces"]], names[:2])
        self.assertTrue(first["next_after"])
        second = self.c.workspaces_page(repo, limit=2, after=first["next_after"])
        self.assertEqual([w["name"] for w in second["workspaces"]], names[2:4])
        self.assertEqual([w["name"] for w in self.c.iter_workspaces(repo, limit=2)], names)
        self.assertEqual([w["name"] for w in self.c.workspaces(repo, task="even")], names[0::2])
        self.assertEqual([w["name"] for w in self.c.workspaces(repo, status="failed")], names[:1])
        self.assertEqual([w["name"] for w in self.c.iter_workspaces(repo, task="odd", status="active", limit=1)], names[1::2])
        with self.assertRaises(lockstep.InvalidArgument):
            self.c.workspaces_page(repo, status="bogus")

    def test_log_paging_tree_compare_attempts(self) -> None:
        repo = self.base()
        commits = [self.c.head(repo)]
        for i in range(4):
            commits.append(self.c.edit(repo, [lockstep.write("n.txt", f"{i}\n")], expect_oid=commits[-1])["commit"])
        page = self.c.log_page(repo, limit=2)
        self.assertEqual([c["commit"] for c in page["commits"]], commits[::-1][:2])
        self.assertEqual([c["commit"] for c in self.c.iter_log(repo, limit=2)], commits[::-1])
        self.assertEqual([e["name"] for e in self.c.tree(repo, commits[-1])], ["README.md", "n.txt", "src"])
        self.assertEqual([f["path"] for f in self.c.compare(repo, commits[0], commits[-1])["files"]], ["n.txt"])
        self.assertEqual(self.c.blob(repo, commits[-1], "n.txt"), b"3\n")
        usage = self.c.usage(repo)
        self.assertEqual(usage["network"], repo)
        self.assertGreater(usage["disk"]["total_bytes"], 0)
        self.assertEqual(self.c.retention(repo)["abandon_after"], "0")
        pol = self.c.set_retention(repo, abandon_after="7d", delete_after="30d", archive_failed=True)
        self.assertEqual((pol["abandon_after"], pol["delete_after"], pol["archive_failed"]), ("7d", "30d", True))
        self.assertEqual(self.c.retention(repo)["delete_after"], "30d")
        with self.assertRaises(lockstep.InvalidArgument):
            self.c.set_retention(repo, abandon_after="soon")
        dry = self.c.gc(repo=repo, prune="now", dry_run=True)
        self.assertTrue(dry["dry_run"])
        self.assertEqual(dry["networks"], 1)
        self.assertEqual(self.c.usage(repo)["disk"]["total_bytes"], usage["disk"]["total_bytes"])  # a dry run drops nothing

    def test_archive_and_checkout(self) -> None:
        repo = self.base({"README.md": "hello\n", "src/app.py": "print('v1')\n", "bin/run": "#!/bin/sh\n"})
        ws = name("ws")
        self.c.fork(repo, ws)
        head = self.c.edit(ws, [lockstep.write("bin/run", b"#!/bin/sh\necho hi\n", executable=True)], expect_oid=self.c.head(ws))["commit"]
        data = self.c.archive(ws, "main")
        self.assertIsInstance(data, bytes)
        path = os.path.join(self.tmp, "a.tar")
        self.assertEqual(self.c.archive(ws, "main", path), head)
        with open(path, "rb") as f:
            self.assertEqual(f.read(), data)
        out = os.path.join(self.tmp, "co")
        commit, files = self.c.checkout(ws, "main", out)
        self.assertEqual((commit, files), (head, 3))
        with open(os.path.join(out, "src", "app.py")) as f:
            self.assertEqual(f.read(), "print('v1')\n")
        self.assertTrue(os.access(os.path.join(out, "bin", "run"), os.X_OK))
        with self.assertRaises(lockstep.InvalidArgument):  # an existing file is never overwritten
            self.c.checkout(ws, "main", out)
        with self.assertRaises(lockstep.NotFound):
            self.c.archive(ws, "no-such-rev")

    def test_hooks(self) -> None:
        got: list = []

        class Receiver(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802
                got.append((self.headers, self.rfile.read(int(self.headers.get("Content-Length") or 0))))
                self.send_response(204)
                self.end_headers()

            def log_message(self, *args) -> None:
                pass

        srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Receiver)
        threading.Thread(target=srv.serve_forever, daemon=True).start()
        self.addCleanup(srv.server_close)
        self.addCleanup(srv.shutdown)
        repo = self.base()
        url = f"http://127.0.0.1:{srv.server_address[1]}/hook"
        h = self.c.create_hook(repo, url, "s" * 32, events=["push"])
        self.assertEqual((h["url"], h["active"]), (url, True))
        self.assertNotIn("secret", h)
        self.assertEqual([x["id"] for x in self.c.hooks(repo)], [h["id"]])
        with self.assertRaises(lockstep.InvalidArgument):
            self.c.create_hook(repo, url, "s" * 32, events=["no-such-event"])
        self.c.edit(repo, [lockstep.write("x.txt", "x\n")], expect_oid=self.c.head(repo))
        deadline = time.time() + 60
        deliveries: list = []
        while time.time() < deadline:
            deliveries = self.c.deliveries(repo, h["id"], limit=10)
            if deliveries and deliveries[0]["status"] == "succeeded":
                break
            time.sleep(0.2)
        self.assertEqual([d["event"] for d in deliveries], ["push"], deliveries)
        self.assertEqual(deliveries[0]["status"], "succeeded", deliveries)
        self.assertTrue(got)
        rot = self.c.rotate_hook(repo, h["id"], overlap_seconds=0)
        self.assertTrue(rot["secret"])
        self.assertEqual(rot["hook"]["id"], h["id"])
        self.assertIsNone(self.c.delete_hook(repo, h["id"]))
        self.assertFalse([x for x in self.c.hooks(repo) if x["active"]])
        self.assertEqual(len(self.c.deliveries(repo, h["id"])), 1, "deliveries stay readable")
        with self.assertRaises(lockstep.NotFound):
            self.c.delete_hook(repo, "no-such-hook")

    def test_database_not_configured_is_final(self) -> None:
        # The test server has no branch database server: a final answer.
        repo = self.base()
        c = lockstep.Client(URL, KEY, retries=3)
        delays: list = []
        c.sleep = delays.append
        with self.assertRaises(lockstep.NotConfigured):
            c.bind_database(repo, "template_db")
        for call in (c.database, c.refresh_database):
            try:
                call(repo)
            except (lockstep.NotConfigured, lockstep.NotFound):
                pass
        self.assertEqual(delays, [], "not_configured was retried")

    def test_merge_options_sync_rollback_checkpoints(self) -> None:
        repo = self.base()
        ws = name("ws")
        self.c.fork(repo, ws)
        cp = self.c.checkpoint(ws, "start")
        self.c.edit(repo, [lockstep.write("README.md", "base moved\n")], expect_oid=self.c.head(repo))
        self.c.edit(ws, [lockstep.write("src/app.py", "print('ws')\n")], expect_oid=self.c.head(ws))
        pre = self.c.merge(repo, f"{ws}:main", preflight=True, deep=True, renames=False, style="diff3")
        self.assertTrue(pre["clean"], pre)
        synced = self.c.sync(ws, expect_oid=self.c.head(ws))
        self.assertTrue(synced["clean"], synced)
        self.assertEqual(self.c.read_file(ws, "main", "README.md"), b"base moved\n")
        self.assertEqual([c["id"] for c in self.c.checkpoints(ws, limit=1)], [cp["id"]])
        self.assertGreaterEqual(len(self.c.attempts(ws)), 1)
        res = self.c.restore(ws, cp["id"], expect_oid=self.c.head(ws), failure={"command": ["make", "test"], "exit_code": 2, "reason": "tests failed"})
        self.assertEqual(res["commit"], self.c.head(ws))
        self.assertEqual(self.c.read_file(ws, "main", "src/app.py"), b"print('v1')\n")
        rb = self.c.rollback(ws, synced["commit"], expect_oid=self.c.head(ws))
        self.assertEqual(self.c.read_file(ws, rb["commit"], "src/app.py"), b"print('ws')\n")


class CheckoutSafetyTest(unittest.TestCase):
    """extract_tar refuses whatever would leave the directory."""

    def tar(self, *entries) -> "io.BytesIO":
        import io
        import tarfile

        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w") as tf:
            for name_, kind, extra in entries:
                ti = tarfile.TarInfo(name_)
                if kind == "file":
                    ti.size = len(extra)
                    tf.addfile(ti, io.BytesIO(extra))
                    continue
                if kind == "sym":
                    ti.type, ti.linkname = tarfile.SYMTYPE, extra
                elif kind == "hard":
                    ti.type, ti.linkname = tarfile.LNKTYPE, extra
                elif kind == "dev":
                    ti.type = tarfile.CHRTYPE
                tf.addfile(ti)
        buf.seek(0)
        return buf

    def extract(self, *entries) -> str:
        d = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, d, True)
        out = os.path.join(d, "out")
        lockstep.client.extract_tar(self.tar(*entries), out)
        return out

    def test_refused(self) -> None:
        cases = {
            "absolute": [("/tmp/evil", "file", b"x")],
            "dotdot": [("a/../../evil", "file", b"x")],
            "symlink out": [("l", "sym", "../outside")],
            "absolute symlink": [("l", "sym", "/etc")],
            "under a symlink": [("l", "sym", "sub"), ("l/f", "file", b"x")],
            "hard link": [("h", "hard", "/etc/passwd")],
            "device": [("d", "dev", None)],
        }
        for why, entries in cases.items():
            with self.subTest(why):
                with self.assertRaises(lockstep.InvalidArgument):
                    self.extract(*entries)

    def test_safe_tree_is_written(self) -> None:
        out = self.extract(("a/b.txt", "file", b"b"), ("a/link", "sym", "b.txt"), ("top", "sym", "a/b.txt"))
        with open(os.path.join(out, "top")) as f:
            self.assertEqual(f.read(), "b")
        self.assertEqual(os.readlink(os.path.join(out, "a", "link")), "b.txt")


class _Flaky(http.server.BaseHTTPRequestHandler):
    answers: list = []
    seen: list = []

    def do_POST(self) -> None:  # noqa: N802
        n = int(self.headers.get("Content-Length") or 0)
        self.rfile.read(n)
        type(self).seen.append(self.headers.get("Idempotency-Key"))
        status, headers, body = type(self).answers.pop(0)
        self.send_response(status)
        for k, v in headers.items():
            self.send_header(k, v)
        data = json.dumps(body).encode()
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    do_PUT = do_POST  # noqa: N815

    def log_message(self, *args) -> None:
        pass


class RetryTest(unittest.TestCase):
    def serve(self, answers) -> lockstep.Client:
        _Flaky.answers, _Flaky.seen = list(answers), []
        srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Flaky)
        threading.Thread(target=srv.serve_forever, daemon=True).start()
        self.addCleanup(srv.server_close)
        self.addCleanup(srv.shutdown)
        c = lockstep.Client(f"http://127.0.0.1:{srv.server_address[1]}", "k", retries=3, backoff=0.01, max_backoff=0.05)
        self.delays = []
        c.sleep = self.delays.append
        return c

    def test_retries_503_with_one_idempotency_key_and_retry_after(self) -> None:
        unavailable = {"error": {"code": "unavailable", "message": "down"}}
        c = self.serve([(503, {"Retry-After": "2"}, unavailable), (429, {}, unavailable),
                        (201, {}, {"name": "r", "head": ""})])
        self.assertEqual(c.create_repo("r")["name"], "r")
        self.assertEqual(len(_Flaky.seen), 3)
        self.assertEqual(len(set(_Flaky.seen)), 1, "one Idempotency-Key per logical write")
        self.assertTrue(_Flaky.seen[0])
        self.assertGreaterEqual(self.delays[0], 2.0, "Retry-After is honoured")
        self.assertLessEqual(self.delays[1], 0.05, "backoff is capped")

    def test_gives_up_and_raises_the_code(self) -> None:
        c = self.serve([(503, {}, {"error": {"code": "unavailable", "message": "down"}})] * 4)
        with self.assertRaises(lockstep.Unavailable):
            c.create_repo("r")
        self.assertEqual(len(_Flaky.seen), 4)

    def test_no_retry_on_client_errors(self) -> None:
        c = self.serve([(409, {}, {"error": {"code": "ref_conflict", "message": "moved", "details": {"expected": "a", "actual": "b"}}})])
        with self.assertRaises(lockstep.RefConflict) as cm:
            c.rollback("r", "HEAD", expect_oid="a" * 40)
        self.assertEqual((cm.exception.expected, cm.exception.actual), ("a", "b"))
        self.assertEqual(len(_Flaky.seen), 1)

    def test_rate_limited_is_retried_after_retry_after(self) -> None:
        limited = {"error": {"code": "rate_limited", "message": "too many streams"}}
        c = self.serve([(429, {"Retry-After": "3"}, limited), (201, {}, {"name": "r"})])
        self.assertEqual(c.create_repo("r")["name"], "r")
        self.assertGreaterEqual(self.delays[0], 3.0)
        c = self.serve([(429, {"Retry-After": "1"}, limited)] * 4)
        with self.assertRaises(lockstep.RateLimited) as cm:
            c.create_repo("r")
        self.assertEqual((cm.exception.retry_after, len(_Flaky.seen)), (1.0, 4))

    def test_in_progress_is_retried(self) -> None:
        busy = {"error": {"code": "in_progress", "message": "first request still running"}}
        c = self.serve([(409, {"Retry-After": "1"}, busy), (201, {}, {"name": "r"})])
        self.assertEqual(c.create_repo("r")["name"], "r")
        self.assertEqual(len(set(_Flaky.seen)), 1, "the retry reuses the Idempotency-Key")

    def test_not_configured_is_final(self) -> None:
        # Issue 22 item 6: a feature the server does not have is not retried,
        # even behind a proxy that turned the 501 into a 503.
        off = {"error": {"code": "not_configured", "message": "database branching is off"}}
        for status in (501, 503):
            c = self.serve([(status, {"Retry-After": "5"}, off)] * 4)
            with self.assertRaises(lockstep.NotConfigured):
                c.create_repo("r")
            self.assertEqual(len(_Flaky.seen), 1, f"{status} not_configured was retried")
            self.assertEqual(self.delays, [])

    def test_connection_refused_is_retried_then_unavailable(self) -> None:
        import socket

        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        s.close()
        c = lockstep.Client(f"http://127.0.0.1:{port}", "k", retries=2, backoff=0.01)
        delays = []
        c.sleep = delays.append
        with self.assertRaises(lockstep.Unavailable):
            c.whoami()
        self.assertEqual(len(delays), 2)


class ObjectsTest(unittest.TestCase):
    def test_pack_is_readable_by_git(self) -> None:
        d = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, d, True)
        write_tree(d, {"a.txt": "a\n", "dir/b.txt": "b" * 5000 + "\n"})
        snap = lockstep.scan(d)
        self.assertEqual(snap.tree, git_tree(d))
        pack = os.path.join(d, "p.pack")
        with open(pack, "wb") as f:
            n, size = lockstep.write_pack(snap, list(snap.trees) + list(snap.blobs), f)
        self.assertEqual((n, size), (4, os.path.getsize(pack)))
        g = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, g, True)
        subprocess.run(["git", "init", "-q", g], check=True)
        with open(pack, "rb") as f:
            out = subprocess.run(["git", "index-pack", "--stdin"], stdin=f, cwd=g, capture_output=True)
        self.assertEqual(out.returncode, 0, out.stderr)

    def test_symlink_outside_is_refused(self) -> None:
        d = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, d, True)
        os.symlink("/etc/passwd", os.path.join(d, "x"))
        with self.assertRaises(lockstep.InvalidArgument):
            lockstep.scan(d)


if __name__ == "__main__":
    unittest.main()
