"""The packed-ref tests again, with ``packed-refs`` mapped into memory and searched by name,
as convgit reads a file over 1 MiB (about 11,000 packed threads): every file here is mapped
(``fsio.SMALL_MAP`` 0) and searched, not parsed (``PACKED_SCAN_BYTES`` 0), so each operation
on a packed ref, the packing, its kill points, damage and the symlink refusal are checked
through the mapping (docs/format.md §4.1, "Finding one name")."""

from __future__ import annotations

import mmap

import pytest

import convgit
from convgit import fsio, refformat

from test_packed_refs import *  # noqa: F401,F403  (every test of the module, run again here)
from test_packed_refs import commit, loose_refs


@pytest.fixture(autouse=True)
def _mapped(monkeypatch):
    monkeypatch.setattr(fsio, "SMALL_MAP", 0)
    monkeypatch.setattr(refformat, "PACKED_SCAN_BYTES", 0)


def test_the_file_is_mapped_and_a_replaced_file_is_read_again(repo):
    for i in range(40):
        commit(repo, {"messages": [{"role": "user", "content": f"m{i}"}]}, thread=f"t{i:02d}")
    repo.refs.pack_refs()
    assert loose_refs(repo) == []
    packed = repo.refs.packed()
    assert isinstance(packed._data, mmap.mmap)
    tips = {f"t{i:02d}": repo.refs.read(f"t{i:02d}") for i in range(40)}
    assert all(tips.values()) and repo.refs.read("t40") is None and repo.refs.read("t0") is None
    commit(repo, {"messages": [{"role": "user", "content": "m5"}, {"role": "user", "content": "more"}]}, thread="t05")
    convgit.delete_thread(repo, "t07")
    repo.refs.pack_refs()  # packed-refs replaced (by rename) while the old one is mapped here
    assert repo.refs.packed() is not packed
    assert repo.refs.read("t05") != tips["t05"] and repo.refs.read("t07") is None
    assert {n: repo.refs.read(n) for n in tips if n not in ("t05", "t07")} == {n: t for n, t in tips.items()
                                                                              if n not in ("t05", "t07")}
