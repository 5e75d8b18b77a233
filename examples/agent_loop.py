#!/usr/bin/env python3
"""An agent's loop on Lockstep, with the Python client.

fork a workspace → edit → checkpoint → break something → restore →
preflight → promote (refused by the gate until CI posts a green check).

Run against a local server (an admin key, because it creates the base
repository, a gate policy and the agent's own key):

    lockstep serve --data /tmp/ls &
    LOCKSTEP_URL=http://127.0.0.1:7070 LOCKSTEP_KEY=$(cat /tmp/ls/admin.key) \\
        python3 examples/agent_loop.py

Uses the installed package (pip install ./clients/python) or, without it,
the copy in clients/python.
"""

from __future__ import annotations

import os
import sys
import tempfile
import uuid

try:
    import lockstep
except ImportError:
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "clients", "python"))
    import lockstep


def write(root: str, files: dict) -> None:
    for rel, content in files.items():
        p = os.path.join(root, rel)
        os.makedirs(os.path.dirname(p), exist_ok=True)
        with open(p, "w") as f:
            f.write(content)


def main() -> None:
    admin = lockstep.Client()  # $LOCKSTEP_URL, $LOCKSTEP_KEY
    suffix = uuid.uuid4().hex[:8]
    base, ws = f"demo-{suffix}", f"demo-{suffix}-fix"
    work = tempfile.mkdtemp(prefix="agent-")

    # The project: a base repository, a gate that wants CI green.
    admin.create_repo(base)
    seed = os.path.join(work, "seed")
    write(seed, {"app.py": "def greet(name):\n    return 'hello ' + name\n", "README.md": "demo\n"})
    admin.push_dir(base, seed, expect_oid=lockstep.ZERO_OID, message="seed")
    admin.set_gate(base, {"branch": "main", "required_checks": ["ci"]})
    agent = lockstep.Client(key=admin.create_key(f"agent-{suffix}", "agent")["secret"])
    ci = lockstep.Client(key=admin.create_key(f"ci-{suffix}", "ci")["secret"])

    # 1. Fork a workspace for the task.
    try:
        f = agent.fork(base, ws, task="greet with a capital H")
    except lockstep.InvalidArgument:  # a server without task labels
        f = agent.fork(base, ws)
    print(f"forked {f['name']} from {f['fork_of']} at {f['base_commit'][:12]}")

    # 2. Edit: the agent works in its own directory and pushes it
    #    (incremental: only changed objects travel), with compare-and-swap.
    tree = os.path.join(work, "tree")
    write(tree, {"app.py": "def greet(name):\n    return 'Hello ' + name\n", "README.md": "demo\n"})
    good = agent.push_dir(ws, tree, expect_current=True, message="capital H")
    print(f"pushed {good.commit[:12]} ({good.objects_sent} objects sent)")

    # 3. Checkpoint the good state.
    cp = agent.checkpoint(ws, "greeting fixed")
    print(f"checkpoint {cp['id']} at {cp['commit'][:12]}")

    # 4. Break something…
    write(tree, {"app.py": "def greet(name)\n    return 'Hello ' + name\n"})
    bad = agent.push_dir(ws, tree, expect_oid=good.commit, message="refactor (broken)")
    print(f"pushed a broken attempt {bad.commit[:12]}")

    # 5. …and restore the checkpoint (a new commit; the broken attempt stays readable).
    res = agent.restore(ws, cp["id"], expect_oid=bad.commit)
    assert res["tree"] == good.tree
    print(f"restored checkpoint {cp['id']}: tree {res['tree'][:12]} again")

    # 6. Preflight: would it merge cleanly? (writes nothing)
    pre = agent.preflight(ws)
    print(f"preflight clean={pre['clean']} fast_forward={pre['fast_forward']}")

    # 7. Promote: the gate refuses until CI reports on the exact commit.
    try:
        agent.promote(ws)
    except lockstep.GateFailed as e:
        print("gate refused: " + "; ".join(r["message"] for r in e.reasons))
    head = agent.head(ws)
    ci.post_check(ws, head, "ci", "success", summary="tests pass")
    out = agent.promote(ws)
    print(f"promoted {ws} into {out['into']}: {base}@main is {out['commit'][:12]}")
    assert admin.read_file(base, "main", "app.py").startswith(b"def greet(name):\n    return 'Hello")


if __name__ == "__main__":
    main()
