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
