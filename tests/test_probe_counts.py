"""How many pack-index probes one stateless call makes: counted, not timed.

An id that is in no pack costs a probe of every pack's index (the Bloom filter is only
built for a process that probes often). A continuation asks for its new messages while
deciding (the chain's last id in the search, and again after it), and the write asked
again for each: now each id found absent is probed once per pack, and what was decided
absent is written without another probe (as commit_many does). The objects written, the
counts reported and the store after the call are unchanged."""

from __future__ import annotations

from collections import Counter

import pytest

import convgit
from convgit import pack as pack_mod

NOW = 1_765_000_000_000


def conv(i: int, n: int = 2) -> list[dict]:
    return [{"role": "user" if k % 2 == 0 else "assistant", "content": f"thread {i} message {k}"} for k in range(n)]


@pytest.fixture
def repo(tmp_path):
    r = convgit.init(tmp_path / ".convgit")
    for batch in range(3):  # three packs (a batch of more than PACK_THRESHOLD objects is one pack)
        convgit.commit_many(r, [{"messages": conv(batch * 10 + i)} for i in range(10)], now_ms=NOW + batch)
    assert len(r.objects.packs()) == 3
    yield r
    r.close()


def probes(monkeypatch) -> Counter:
    seen: Counter = Counter()
    real, real_raw = pack_mod.Pack.contains, pack_mod.Pack.contains_raw

    def contains(self, oid):
        seen[(self.name, oid)] += 1
        return real(self, oid)

    def contains_raw(self, raw):
        seen[(self.name, raw.hex())] += 1
        return real_raw(self, raw)

    monkeypatch.setattr(pack_mod.Pack, "contains", contains)
    monkeypatch.setattr(pack_mod.Pack, "contains_raw", contains_raw)
    return seen


@pytest.mark.parametrize("thread", [0, 15, 29])
def test_a_stateless_continuation_probes_each_pack_for_an_id_at_most_once(repo, monkeypatch, thread):
    seen = probes(monkeypatch)
    hist = conv(thread)
    out = convgit.commit(repo, {"messages": hist + [{"role": "user", "content": "one more"}],
                                "response": {"role": "assistant", "content": "one more answer"}, "model": "m"},
                         now_ms=NOW + 100)
    assert out.status == "appended" and out.appended_messages == 2 and out.new_messages == 2
    assert out.new_objects == 3  # the two messages and the turn, each written once
    assert max(seen.values()) == 1, [k for k, v in seen.items() if v > 1]
    assert repo.objects.contains(out.tip) and repo.objects.contains(out.turn)
    log = convgit.log(repo, out.thread)
    assert [e.text for e in log] == ["one more answer", "one more", *[m["content"] for m in reversed(hist)]]
    assert log[0].id == out.tip and log[0].turn is not None
