"""Texts stored once by reference: a pack's spliced chunks (docs/format.md §9, pack version 3).

A long string (a pasted document, a system prompt, a file a coding agent read again) that
an earlier chunk of the same pack already holds is left out of the later chunk and named by
its fragment id; every object still reads back as its exact bytes, damage is reported by id
and never turns into wrong data, and ``-f`` finds such a text by ``hash-object``'s id.
"""

from __future__ import annotations

import base64
import json
import random
import struct

import pytest
from blake3 import blake3
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import convgit
from convgit import api, codec, objects
from convgit.errors import ObjectCorrupt
from convgit.pack import CHUNK_TARGET, FRAGMENT_MIN, Pack, fragment_id, write_pack
from helpers.cli import cli_env, run_process


def _doc(seed: int, size: int = 4000) -> str:
    """A text of lines that compresses badly (so a repeat is visible in the pack's size)."""
    return f"doc {seed}\n" + base64.encodebytes(random.Random(seed).randbytes(size * 3 // 4)).decode()


def _messages(texts: list[str]) -> dict[str, bytes]:
    out, parent = {}, None
    for i, t in enumerate(texts):
        m = objects.Message(role="user" if i % 2 else "assistant", parts=[objects.TextPart(text=t)], parent=parent)
        oid, data = codec.encode_and_hash(m)
        out[oid] = data
        parent = oid
    return out


def _pack(tmp_path, items: dict[str, bytes], **kw) -> Pack:
    return Pack(write_pack(tmp_path, list(items), items.__getitem__, fsync=False, **kw))


def _spread(doc: str, copies: int) -> list[str]:
    """``copies`` of ``doc``, each followed by enough other text that they land in different chunks."""
    out = []
    for i in range(copies):
        out += [f"here it is again ({i}):\n" + doc, _doc(1000 + i, CHUNK_TARGET // 2)]
    return out


def test_a_repeated_text_is_stored_once_and_every_object_reads_back(tmp_path):
    doc = _doc(1, 8000)
    items = _messages(_spread(doc, 6))
    p = _pack(tmp_path / "a", items)
    assert p.version == 3 and p.fragments >= 1
    # each copy follows other words: the pieces of it (cut at lines) are the fragments
    pieces = [p.fragment(fid) for fid in p.fragment_ids()]
    assert all(x in doc.encode() for x in pieces) and sum(map(len, pieces)) > 0.75 * len(doc)
    assert all(fid == fragment_id(p.fragment(fid)).hex() for fid in p.fragment_ids())
    for oid, data in items.items():
        assert p.read(oid) == data
    assert p.verify() == []
    # the same objects without splicing (what version 2 wrote) hold the text in every chunk
    import convgit.pack as P

    orig = P.FRAGMENT_MIN
    P.FRAGMENT_MIN = 1 << 30
    try:
        q = _pack(tmp_path / "b", items)
    finally:
        P.FRAGMENT_MIN = orig
    assert q.fragments == 0
    saved = q.pack_path.stat().st_size - p.pack_path.stat().st_size
    # the copies in later chunks than the first (four: two share the first chunk, where zstd
    # finds the repeat) are references, but for their first piece (it starts with other words)
    assert saved > 3 * len(doc) * 0.6


def test_the_fragment_id_is_the_blob_id_of_the_text():
    doc = _doc(2).encode()
    assert fragment_id(doc).hex() == codec.hash_bytes(codec.encode(objects.Blob(data=doc)))
    assert fragment_id(b"x" * 70000).hex() == codec.hash_bytes(codec.encode(objects.Blob(data=b"x" * 70000)))


_texts = st.lists(st.one_of(st.sampled_from(range(4)), st.integers(10, 60_000)), min_size=1, max_size=30)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(_texts, st.booleans())
def test_any_mix_of_repeats_reads_back(tmp_path_factory, picks, compress):
    """Property: whatever the mix of repeated long texts, short and big messages (the
    chunks' limits), every object reads back exactly, every fragment hashes to its id, and
    a fragment is a text the pack was given."""
    pool = [_doc(s, 1500 + 3000 * s) for s in range(4)]
    texts = [pool[x] if x < 4 else _doc(x, x) for x in picks]
    texts += [pool[picks[0]] if picks[0] < 4 else "end"]
    # the same texts also inside tool results (strings of every size class, str16 and str32)
    items = _messages(texts)
    m = objects.Message(role="tool", parent=None, parts=[objects.ToolResultPart(tool_call_id="t", output=texts[0]),
                                                         objects.TextPart(text=texts[-1])])
    oid, data = codec.encode_and_hash(m)
    items[oid] = data
    p = _pack(tmp_path_factory.mktemp("p"), items, compress=compress)
    for oid, data in items.items():
        assert p.read(oid) == data
    assert p.verify() == []
    given_texts = {t.encode() for t in texts}
    for fid in p.fragment_ids():
        assert p.fragment(fid) in given_texts


def _idx_with(p: Pack, mutate) -> None:
    """Rewrite the idx with ``mutate(bytearray)`` applied and its checksum made valid again
    (a hostile or buggy writer, not random damage)."""
    idx = bytearray(p.idx_path.read_bytes())
    mutate(idx)
    idx[-32:] = blake3(bytes(idx[:-32])).digest()
    p.close()
    p.idx_path.write_bytes(bytes(idx))


def _spliced_objects(p: Pack, items) -> list[str]:
    """The ids of the objects whose chunk refers to the fragment (they follow its first copy)."""
    first = p.fragment_location(next(p.fragment_ids()))[0]
    return [oid for oid in items if p._where(p._find(bytes.fromhex(oid)))[0] > first]


def test_damage_to_the_fragments_chunk_is_reported_for_the_objects_that_use_it(tmp_path):
    items = _messages(_spread(_doc(3), 4))
    p = _pack(tmp_path, items)
    later = _spliced_objects(p, items)
    off = p.fragment_location(next(p.fragment_ids()))[0]
    data = bytearray(p.pack_path.read_bytes())
    data[off + 40] ^= 0xFF  # inside the compressed chunk holding the first copy
    p.close()
    p.pack_path.write_bytes(bytes(data))
    p = Pack(p.idx_path)
    bad = 0
    for oid, want in items.items():
        try:
            assert p.read(oid) == want  # never wrong bytes
        except ObjectCorrupt:
            bad += 1
    assert bad > len(later)  # its own chunk's objects and every object that refers to it
    assert p.verify()


def test_a_fragment_table_pointing_elsewhere_is_refused(tmp_path):
    """A table whose location names the referring chunk itself (a cycle) or another place:
    the objects are refused as corrupt, by id, and verify says so."""
    items = _messages(_spread(_doc(4), 3))
    p = _pack(tmp_path, items)
    last_copy = list(items)[-2]  # the third copy of the document (then its filler)
    at = p._floc_at
    own = p._where(p._find(bytes.fromhex(last_copy)))[0]
    n = p.fragments

    def to_self(idx):
        for i in range(n):
            idx[at + 16 * i : at + 16 * i + 8] = struct.pack(">Q", own)

    _idx_with(p, to_self)
    p = Pack(p.idx_path)
    with pytest.raises(ObjectCorrupt, match="earlier chunk"):
        p.read(last_copy)
    assert p.verify()

    def shifted(idx):
        for i in range(n):  # the pack's first chunk, not where the text is
            idx[at + 16 * i : at + 16 * i + 12] = struct.pack(">QI", 8, 0)

    _idx_with(p, shifted)
    p = Pack(p.idx_path)
    with pytest.raises(ObjectCorrupt):
        p.read(last_copy)


def test_a_version_2_pack_still_reads(tmp_path):
    """Packs written before version 3 (no fragment table, no spliced chunk) read unchanged."""
    items = _messages([f"message {i} " * 30 for i in range(50)])
    p = _pack(tmp_path, items)
    assert p.fragments == 0
    pack = bytearray(p.pack_path.read_bytes())
    pack[:8] = b"CGPACK\x00\x02"
    pack[-32:] = blake3(bytes(pack[:-32])).digest()
    idx = bytearray(p.idx_path.read_bytes())
    n = p.count
    end = p._size_at + 4 * n
    idx = idx[:end] + idx[end + 4 : -64]  # drop the (empty) fragment table
    idx[:8] = b"CGIDX\x00\x00\x02"
    idx += pack[-32:]
    idx += blake3(bytes(idx)).digest()
    p.close()
    name = f"pack-{pack[-32:].hex()}"
    (tmp_path / f"{name}.pack").write_bytes(bytes(pack))
    (tmp_path / f"{name}.idx").write_bytes(bytes(idx))
    v2 = Pack(tmp_path / f"{name}.idx")
    assert v2.version == 2 and v2.fragments == 0
    for oid, data in items.items():
        assert v2.read(oid) == data
    assert v2.verify() == []


def test_through_the_cli_a_pasted_document_is_stored_once_and_found_by_its_id(tmp_path):
    """40 conversations paste the same 12 KB document: after gc the pack holds it about once,
    every answer is identical, fsck passes, and ``-f $(hash-object doc)`` finds the 40
    messages although the text is under the blob threshold (no blob of it exists)."""
    doc = _doc(5, 12000)
    assert FRAGMENT_MIN < len(doc) < objects.TEXT_BLOB_THRESHOLD
    (tmp_path / "doc.md").write_text(doc)
    env = cli_env(tmp_path)
    assert run_process(["init", "-q"], cwd=tmp_path, env=env).rc == 0
    for t in range(40):
        msgs = [{"role": "user", "content": f"conversation {t}: check this\n\n"},
                {"role": "assistant", "content": f"Sure {t}"},
                {"role": "user", "content": doc},
                {"role": "assistant", "content": f"answer {t} " + _doc(100 + t, 200)}]
        (tmp_path / "c.json").write_text(json.dumps({"messages": msgs}))
        assert run_process(["commit", "--thread", f"c{t}", "c.json"], cwd=tmp_path, env=env).rc == 0
    before = run_process(["log", "--all", "--json"], cwd=tmp_path, env=env)
    assert run_process(["gc", "-q", "--prune", "now"], cwd=tmp_path, env=env).rc == 0
    after = run_process(["log", "--all", "--json"], cwd=tmp_path, env=env)
    assert before.rc == 0 and after.json() == before.json()
    fsck = run_process(["fsck"], cwd=tmp_path, env=env)
    assert fsck.rc == 0, fsck.err
    with convgit.Repository.open(tmp_path / ".convgit") as repo:
        (pack,) = repo.objects.packs(reload=True)
        assert pack.fragments >= 1
        # 40 copies of a 12 KB text that compresses to ~9 KB: measured 26 KB with splicing,
        # 92 KB without (a copy in each 64 KiB chunk)
        assert pack.pack_path.stat().st_size < 40 * 300 + 2 * len(doc)
    oid = run_process(["hash-object", "doc.md"], cwd=tmp_path, env=env).out.strip()
    found = run_process(["log", "--all", "-f", oid, "--json"], cwd=tmp_path, env=env)
    assert found.rc == 0, found.err
    assert len(found.json()) == 40
    assert run_process(["log", "--all", "-f", oid[:10], "--json"], cwd=tmp_path, env=env).json() == found.json()
    missing = run_process(["log", "--all", "-f", "ab" * 32], cwd=tmp_path, env=env)
    assert missing.rc != 0 and "not_found" in missing.err


def test_a_spliced_pack_reads_back_from_a_remote_by_range_and_through_a_clone(tmp_path):
    """Pushed to a directory remote, a pack with spliced chunks is read by byte range in an
    index-only store (``index sync --from``: no local pack) and copied by a clone: the same
    ``log --all --json`` both ways, fsck clean."""
    doc = _doc(6, 9000)
    src = tmp_path / "a"
    src.mkdir()
    env = cli_env(tmp_path)
    assert run_process(["init", "-q"], cwd=src, env=env).rc == 0
    with convgit.Repository.open(src / ".convgit") as repo:
        convgit.commit_many(repo, [{"messages": [{"role": "user", "content": f"conversation {t}: look\n\n{doc}"},
                                                  {"role": "assistant", "content": f"ok {t} " + _doc(200 + t, 300)}]}
                                   for t in range(30)])
        api.gc(repo, prune="now")
        assert sum(p.fragments for p in repo.objects.packs(reload=True)) >= 1
    want = run_process(["log", "--all", "--json"], cwd=src, env=env).json()
    remote = str(tmp_path / "remote")
    for args in (["remote", "add", "origin", remote], ["push", "-q", "origin"]):
        r = run_process(args, cwd=src, env=env)
        assert r.rc == 0, r.err
    only = tmp_path / "b"
    only.mkdir()
    for args in (["init", "-q"], ["remote", "add", "origin", remote], ["index", "sync", "--from", "origin"]):
        r = run_process(args, cwd=only, env=env)
        assert r.rc == 0, r.err
    assert not list((only / ".convgit" / "objects" / "pack").glob("*.pack"))
    assert run_process(["log", "--all", "--json"], cwd=only, env=env).json() == want
    r = run_process(["clone", "-q", remote, "c"], cwd=tmp_path, env=env)
    assert r.rc == 0, r.err
    assert run_process(["fsck"], cwd=tmp_path / "c", env=env).rc == 0
    assert run_process(["log", "--all", "--json"], cwd=tmp_path / "c", env=env).json() == want
