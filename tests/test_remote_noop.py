"""A sync with nothing to do (docs/remotes.md "What moves over the wire"): push, fetch, pull
and index sync read the remote's refs document once and compare it with the tracking refs'
snapshot, reading no ref file per thread; and whatever did change since (the remote, a
thread here, a tracking ref moved by a push) is still seen."""

from __future__ import annotations

import convgit
from helpers.remote import rewrite_threads
from convgit import refs as refs_mod

H = [{"role": "user", "content": "hello"}, {"role": "assistant", "content": "hi there"}]


def _count_ref_reads(monkeypatch) -> dict[str, int]:
    """Count the ref files read (RefStore._read_path), tracking refs and threads apart."""
    seen = {"tracking": 0, "threads": 0}
    real = refs_mod.RefStore._read_path

    def counting(self, path, name):
        seen["tracking" if "remotes" in path.parts else "threads"] += 1
        return real(self, path, name)

    monkeypatch.setattr(refs_mod.RefStore, "_read_path", counting)
    return seen


def _pushed_and_cloned(tmp_path, url: str, n: int, *, width: int = 0):
    """Store ``a`` with ``n`` one-message threads (``t0``.., or ``t00``.. with ``width=2``),
    pushed to ``url`` as ``origin``; store ``b`` cloned from it. Returns (a, b)."""
    a = convgit.init(tmp_path / "a")
    for i in range(n):
        convgit.commit(a, {"messages": [{"role": "user", "content": f"question {i}"}]}, thread=f"t{i:0{width}d}")
    convgit.add_remote(a, "origin", url)
    convgit.push(a)
    b, _ = convgit.clone(url, tmp_path / "b")
    return a, b


def test_a_noop_sync_reads_no_ref_file_per_thread(tmp_path, monkeypatch):
    remote = str(tmp_path / "remote")
    a, b = _pushed_and_cloned(tmp_path, remote, 30, width=2)
    ix = convgit.init(tmp_path / "ix")
    convgit.add_remote(ix, "origin", remote)
    convgit.index_sync(ix)
    convgit.fetch(a)  # (a's first fetch reads the files once, and snapshots them)

    seen = _count_ref_reads(monkeypatch)
    for op in (lambda: convgit.push(a), lambda: convgit.fetch(a), lambda: convgit.pull(b),
               lambda: convgit.fetch(b), lambda: convgit.index_sync(ix)):
        rep = op()
        assert rep.moved == 0 and getattr(rep, "bytes", 0) == 0
    assert seen["tracking"] == 0, seen  # the snapshot answered for the tracking refs
    seen["threads"] = 0
    convgit.pull(b)  # (and a second no-op pull reads not even the threads: nothing moved since the first)
    assert seen == {"tracking": 0, "threads": 0}, seen

    # Whatever changed is still seen: the remote moved (another machine pushed) ...
    convgit.commit(b, {"messages": [{"role": "user", "content": "question 3"}, {"role": "assistant", "content": "b"}]},
                   thread="t03")
    assert convgit.push(b).moved == 1
    assert {t["thread"]: t["action"] for t in convgit.pull(a).threads}["t03"] == "fast-forward"
    assert convgit.index_sync(ix).moved == 1
    # ... a thread deleted here comes back with the next pull, as before ...
    with a.transaction() as tx:
        tx.delete("t05")
    assert {t["thread"]: t["action"] for t in convgit.pull(a).threads}["t05"] == "created"
    # ... and a push from here moves the tracking ref a fetch then agrees with.
    convgit.commit(a, {"messages": [{"role": "user", "content": "question 7"}, {"role": "assistant", "content": "a"}]},
                   thread="t07")
    assert convgit.push(a).moved == 1
    assert convgit.fetch(a).moved == 0 and convgit.fetch(b).threads[7]["action"] == "updated"
    assert convgit.show_refs(a)["t07"] == convgit.rev_parse(b, "origin/t07")


def _count_parses(monkeypatch) -> dict[str, int]:
    """Count the refs documents parsed (refsdoc.parse, as sync calls it) and the full reads
    of a RefStore (threads or tracking refs: RefStore.read_all)."""
    from convgit import sync

    seen = {"parse": 0, "read_all": 0}
    real_parse, real_read_all = sync.parse, refs_mod.RefStore.read_all

    def parse(*a, **k):
        seen["parse"] += 1
        return real_parse(*a, **k)

    def read_all(self, *a, **k):
        seen["read_all"] += 1
        return real_read_all(self, *a, **k)

    monkeypatch.setattr(sync, "parse", parse)
    monkeypatch.setattr(refs_mod.RefStore, "read_all", read_all)
    return seen


def _cli_json(*args, cwd) -> dict:
    import json
    import subprocess
    import sys

    p = subprocess.run([sys.executable, "-m", "convgit", *args, "--json"], cwd=cwd, capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


def test_a_noop_sync_parses_no_refs_document_and_reads_no_refs(tmp_path, monkeypatch):
    """The refs document's digest is compared with the one the snapshot (and the last push)
    was taken from before it is parsed: a no-op push, fetch or pull parses nothing and reads
    neither the threads nor the tracking refs (their journals' fingerprints say nothing moved);
    its rows are built only when asked for; and whatever did change is still seen."""
    import json

    remote = tmp_path / "remote"
    a, b = _pushed_and_cloned(tmp_path, str(remote), 12, width=2)
    ops = {"push a": lambda: convgit.push(a), "fetch a": lambda: convgit.fetch(a), "pull a": lambda: convgit.pull(a),
           "fetch b": lambda: convgit.fetch(b), "pull b": lambda: convgit.pull(b), "push b": lambda: convgit.push(b)}
    for op in ops.values():
        op()  # (the first round may key a snapshot: b has never pushed, a never pulled)

    seen = _count_parses(monkeypatch)
    for name, op in ops.items():
        rep = op()
        assert rep.moved == 0 and rep.bytes == 0 and rep.generation == 1, name
    assert seen == {"parse": 0, "read_all": 0}, seen
    # The rows are there when asked for (built then): every thread, unmoved.
    rep = convgit.push(a)
    assert seen["read_all"] == 0
    rows = rep.to_json()["threads"]
    assert [(t["thread"], t["action"]) for t in rows] == [(f"t{i:02d}", "up-to-date") for i in range(12)]
    assert rows[3]["old"] == rows[3]["new"] == convgit.show_refs(a)["t03"]
    assert [t["action"] for t in convgit.pull(b).threads] == ["same"] * 12
    doc = _cli_json("fetch", cwd=tmp_path / "a")
    assert doc["moved"] == 0 and doc["bytes"] == 0 and len(doc["threads"]) == 12

    # The remote moved (another machine pushed): seen by the next fetch and pull.
    convgit.commit(b, {"messages": [{"role": "user", "content": "question 3"}, {"role": "assistant", "content": "b"}]},
                   thread="t03")
    assert convgit.push(b).moved == 1
    assert convgit.fetch(a).moved == 1 and seen["parse"] >= 1
    assert {t["thread"]: t["action"] for t in convgit.pull(a).threads}["t03"] == "fast-forward"
    # A thread moved here: the next push of every thread sees it.
    convgit.commit(a, {"messages": [{"role": "user", "content": "question 5"}, {"role": "assistant", "content": "a"}]},
                   thread="t05")
    assert [t["thread"] for t in convgit.push(a).changed()] == ["t05"]
    assert convgit.push(a).moved == 0 and convgit.fetch(b).moved == 1

    # The document rewritten with the same threads, other bytes: parsed once, nothing moved,
    # then keyed again (the next fetch parses nothing).
    raw = json.loads((remote / "refs.json").read_bytes())
    (remote / "refs.json").write_text(json.dumps(raw, indent=3, sort_keys=True) + "\n")
    before = seen["parse"]
    assert convgit.fetch(a).moved == 0 and seen["parse"] == before + 1
    assert convgit.fetch(a).moved == 0 and convgit.pull(a).moved == 0 and seen["parse"] == before + 1
    assert convgit.push(a).moved == 0  # (the marker of the last push named the older bytes: checked in full)
    # ... and a damaged one is refused, whatever was seen before (its digest is not the one seen).
    good = (remote / "refs.json").read_bytes()
    rewrite_threads(remote, lambda threads: threads.__setitem__("../../t01", threads.pop("t01")))
    for op in (lambda: convgit.fetch(a), lambda: convgit.push(a), lambda: convgit.pull(b)):
        try:
            op()
            raise AssertionError("a hostile refs document was taken")
        except convgit.errors.RemoteCorrupt:
            pass
    (remote / "refs.json").write_bytes(good)

    # The hints lost, or in the layout before tracking.json (the snapshot inside state.json):
    # the same answers, read the long way once.
    cache = a.path / "remotes" / "origin"
    st = json.loads((cache / "state.json").read_bytes())
    body = json.loads((cache / "tracking.json").read_bytes())
    assert body["fp"] == st["tracking"]["fp"] and len(body["refs"]) == 12
    old = {"format": 1, "sizes": st["sizes"], "settled": st["settled"], "tracking": {"fp": body["fp"], "refs": body["refs"]}}
    (cache / "tracking.json").unlink()
    (cache / "state.json").write_text(json.dumps(old))
    for name in ("fetch a", "pull a", "push a"):
        rep = ops[name]()
        assert rep.moved == 0 and rep.bytes == 0, name
    (cache / "state.json").unlink()
    (cache / "tracking.json").unlink()
    for name in ("fetch a", "pull a", "push a"):
        assert ops[name]().moved == 0, name
    seen["parse"] = seen["read_all"] = 0
    for name in ("fetch a", "pull a", "push a"):
        assert ops[name]().moved == 0, name
    assert seen == {"parse": 0, "read_all": 0}, seen  # (keyed again by those)


def test_a_noop_sync_asks_for_the_refs_document_only_if_it_changed(tmp_path, monkeypatch, remote_url):
    """The no-op's one request is conditional on the tag of the document seen last (S3:
    ``If-None-Match``, answered 304 with no body): no byte of ``refs.json`` is sent while it
    is unchanged; once another store moved it, the new bytes come and are parsed."""
    from convgit.remotes import directory, s3

    a, b = _pushed_and_cloned(tmp_path, remote_url, 5)
    for op in (lambda: convgit.fetch(a), lambda: convgit.pull(b), lambda: convgit.push(b)):
        op()

    sent = []  # bytes of the refs document received, per read of it
    inside = []
    for cls in (directory.DirectoryRemote, s3.S3Remote):
        real_get, real_unless = cls.get, cls.get_unless

        def get(self, key, _real=real_get):
            got = _real(self, key)
            if key == "refs.json" and not inside:
                sent.append(len(got[0]) if got else 0)
            return got

        def get_unless(self, key, tag, _real=real_unless):
            inside.append(1)  # (a directory's get_unless reads through its get: counted once)
            try:
                got = _real(self, key, tag)
            finally:
                inside.pop()
            if key == "refs.json":
                sent.append(len(got[0]) if got and got[0] is not None else 0)
            return got

        monkeypatch.setattr(cls, "get", get)
        monkeypatch.setattr(cls, "get_unless", get_unless)
    for op in (lambda: convgit.push(a), lambda: convgit.fetch(a), lambda: convgit.pull(a),
               lambda: convgit.fetch(b), lambda: convgit.pull(b), lambda: convgit.push(b)):
        rep = op()
        assert rep.moved == 0 and rep.bytes == 0
    assert len(sent) == 6, sent  # one read each
    if remote_url.startswith("s3://"):
        assert sent == [0] * 6, sent  # 304s: no byte of it sent (a directory's file is read, and hashed)
    convgit.commit(b, {"messages": [{"role": "user", "content": "question 2"}, {"role": "assistant", "content": "b"}]},
                   thread="t2")
    assert convgit.push(b).moved == 1
    sent.clear()
    assert {t["thread"]: t["action"] for t in convgit.fetch(a).threads}["t2"] == "updated"
    assert sent and sent[0] > 0  # the changed document, sent whole
    assert convgit.pull(a).moved == 1 and convgit.push(a).moved == 0


def test_a_noop_index_sync_parses_nothing_and_still_sees_a_change(tmp_path, monkeypatch, remote_url):
    """An index sync with nothing to do is a fetch's no-op (the refs document's digest, or on
    S3 its ETag, compared with the snapshot's; no parse) followed by a pull's: its report names
    the packs from the snapshot's header, so the document is neither parsed nor read again
    (S3: the one conditional request, answered 304). A real change is still picked up, and a
    header written before it noted the packs is keyed again by one parse."""
    import json

    from convgit.remotes import directory, s3

    a = convgit.init(tmp_path / "a")
    for i in range(6):
        convgit.commit(a, {"messages": [{"role": "user", "content": f"question {i}"}]}, thread=f"t{i}")
    convgit.add_remote(a, "origin", remote_url)
    convgit.push(a)
    ix = convgit.init(tmp_path / "ix")
    convgit.add_remote(ix, "origin", remote_url)
    first = convgit.index_sync(ix)
    assert first.moved == 6 and first.packs >= 1 and first.pack_bytes > 0
    convgit.index_sync(ix)  # (the first no-op keys the pull's marker: it reads the threads once)

    reads = []  # reads of the refs document: bytes received each
    for cls in (directory.DirectoryRemote, s3.S3Remote):
        real_get, real_unless = cls.get, cls.get_unless

        def get(self, key, _real=real_get):
            got = _real(self, key)
            if key == "refs.json" and not getattr(self, "_in_unless", False):
                reads.append(len(got[0]) if got else 0)
            return got

        def get_unless(self, key, tag, _real=real_unless):
            self._in_unless = True  # (a directory's get_unless reads through its get: counted once)
            try:
                got = _real(self, key, tag)
            finally:
                self._in_unless = False
            if key == "refs.json":
                reads.append(len(got[0]) if got and got[0] is not None else 0)
            return got

        monkeypatch.setattr(cls, "get", get)
        monkeypatch.setattr(cls, "get_unless", get_unless)
    seen = _count_parses(monkeypatch)
    for _ in range(2):
        rep = convgit.index_sync(ix)
        assert rep.moved == 0 and rep.bytes_read == 0 and rep.requests == 0
        assert (rep.packs, rep.pack_bytes, rep.generation) == (first.packs, first.pack_bytes, first.generation)
    assert seen == {"parse": 0, "read_all": 0}, seen
    assert len(reads) == 2, reads  # one read each
    if remote_url.startswith("s3://"):
        assert reads == [0, 0], reads  # 304s: no byte of the document sent

    # The remote moved (another store pushed): picked up, the document parsed.
    convgit.commit(a, {"messages": [{"role": "user", "content": "question 2"}, {"role": "assistant", "content": "walrus"}]},
                   thread="t2")
    assert convgit.push(a).moved == 1
    seen["parse"] = 0
    rep = convgit.index_sync(ix)
    assert rep.moved == 1 and seen["parse"] == 1 and rep.packs == first.packs + 1
    assert [h.threads for h in convgit.search(ix, "walrus")] == [["t2"]]
    seen["parse"] = 0
    assert convgit.index_sync(ix).moved == 0 and seen["parse"] == 0

    # A header written before it noted the packs (an older state.json): parsed once, keyed again.
    state = ix.path / "remotes" / "origin" / "state.json"
    st = json.loads(state.read_bytes())
    del st["tracking"]["packs"]
    state.write_text(json.dumps(st))
    assert convgit.index_sync(ix).packs == first.packs + 1 and seen["parse"] == 1
    assert convgit.index_sync(ix).packs == first.packs + 1 and seen["parse"] == 1
