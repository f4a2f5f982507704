"""fsck counts remote-tracking refs as roots, as gc does (gc._roots): objects a fetch brought
that only ``refs/remotes/NAME/THREAD`` reaches are reachable, not "unreachable"; a tracking
ref gc would refuse on (it names a missing object) is an error of fsck too."""

from __future__ import annotations

import json
import subprocess
import sys

import convgit

Q = {"role": "user", "content": "what is a zebra?"}
A = {"role": "assistant", "content": "a striped horse"}


def _fsck_cli(path) -> dict:
    p = subprocess.run([sys.executable, "-m", "convgit", "fsck", "--json"], cwd=path, capture_output=True, text=True)
    return {"code": p.returncode, **json.loads(p.stdout or p.stderr)}


def test_objects_only_a_tracking_ref_reaches_are_reachable_for_fsck_as_for_gc(tmp_path):
    remote = str(tmp_path / "remote")
    a = convgit.init(tmp_path / "a")
    convgit.commit(a, {"messages": [Q]}, thread="main")
    convgit.add_remote(a, "origin", remote)
    convgit.push(a)
    b, _ = convgit.clone(remote, tmp_path / "b")
    convgit.commit(a, {"messages": [Q, A, {"role": "user", "content": "and a quagga?"}]}, thread="main")
    convgit.push(a)
    fetched = convgit.fetch(b)  # (not pulled: only origin/main reaches the two new messages and their turn)
    assert fetched.objects > 0 and convgit.rev_parse(b, "origin/main") != convgit.show_refs(b)["main"]

    rep = convgit.fsck(b)
    assert rep.ok and not [p for p in rep.problems if p.kind == "unreachable"], [p.to_json() for p in rep.problems]
    doc = _fsck_cli(tmp_path / "b")
    assert doc["code"] == 0 and doc["status"] == "ok" and doc["reachable"] == rep.reachable
    assert not [p for p in doc["problems"] if p["kind"] == "unreachable"], doc["problems"]
    # gc agrees: it prunes nothing of them, and the store still checks clean afterwards
    convgit.gc(b, prune="now")
    tip = convgit.rev_parse(b, "origin/main")
    assert [e.text for e in convgit.log(b, tip)][0] == "and a quagga?"  # (newest first, read after the prune)
    after = convgit.fsck(b)
    assert after.ok and after.reachable == rep.reachable

    # Something that is unreachable still shows as such (the rule is about tracking refs, not everything).
    convgit.commit(b, {"messages": [{"role": "user", "content": "a scratch note"}]}, thread="scratch")
    with b.transaction() as tx:
        tx.delete("scratch")
    left = convgit.fsck(b)
    assert left.ok and [p.kind for p in left.problems if p.kind == "unreachable"] == ["unreachable"]
    assert left.reachable == rep.reachable
    # A tracking ref gc would refuse on is an error of fsck too, named by REMOTE/THREAD.
    ghost = "b3" + "0" * 62
    tracking = tmp_path / "b" / ".convgit" / "refs" / "remotes" / "origin"
    tracking.mkdir(parents=True, exist_ok=True)
    (tracking / "ghost").write_text(ghost + "\n")
    bad = convgit.fsck(b)
    assert not bad.ok and [p.kind for p in bad.errors] == ["bad_ref"] and "origin/ghost" in bad.errors[0].message
    assert bad.errors[0].oid == ghost
    doc = _fsck_cli(tmp_path / "b")
    assert doc["code"] != 0 and any("origin/ghost" in p["message"] for p in doc["problems"])
    try:
        convgit.gc(b, prune="now")
        raise AssertionError("gc ran on a tracking ref naming a missing object")
    except convgit.errors.ConvgitError as e:
        assert "origin/ghost" in e.message
