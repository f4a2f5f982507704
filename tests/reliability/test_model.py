"""T9: a hypothesis state machine over a store and a model of it.

Rules: commit (to a thread, nested names included), fork, commit in a second store and merge it
in, gc (--prune=now), a stale compare-and-swap (refused, nothing changes), delete the index,
corrupt an object file (loose or packed) and check fsck detects it, then repair by restoring it.
Invariants: every thread's conversation equals the model's (after every step); fsck clean
(objects, refs, reflogs, packs) after every step; the index equals a rebuild (at the end of
each example and after gc/merge). Examples and steps follow the hypothesis profile (tests/
conftest.py: "ci" 100 examples; steps here 30, CONVGIT_STATEFUL_STEPS to change).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

import convgit
from convgit import api, errors
from convgit.fsck import fsck
from convgit.index import Index
from convgit.repository import Repository

from .helpers import NOW, chain_texts, new_store, user

THREADS = ["a", "b", "team/c"]
FORKS = ["f1", "f2"]
SRC_THREADS = ["a", "s1", "x/y"]
STEPS = int(os.environ.get("CONVGIT_STATEFUL_STEPS", "30"))
_SHM = "/dev/shm" if os.access("/dev/shm", os.W_OK) else None


def _index_equals_rebuild(repo) -> list[str]:
    repo.index.refresh()
    have = repo.index.dump()
    with tempfile.TemporaryDirectory(dir=_SHM) as td:
        fresh = Index(repo, path=Path(td) / "fresh.sqlite", autorefresh=False)
        want = fresh.dump()
        fresh.close()
    return [k for k in want if want[k] != have.get(k)]


class StoreMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.dir = Path(tempfile.mkdtemp(prefix="convgit-model-", dir=_SHM))
        self.repo = new_store(self.dir / "main", fsync=False)
        self.src = new_store(self.dir / "src", fsync=False)
        self.model: dict[str, list[str]] = {}
        self.src_model: dict[str, list[str]] = {}
        self.n = 0

    def _next(self) -> tuple[str, int]:
        self.n += 1
        return f"m{self.n}", NOW + self.n

    def _reopen(self) -> None:
        self.repo.close()
        self.repo = Repository.open(self.repo.path)

    # -- rules ------------------------------------------------------------------------------

    @rule(t=st.sampled_from(THREADS + FORKS))
    def commit(self, t):
        if t in FORKS and t not in self.model:
            return  # forks are made by fork(), then committed to like any thread
        text, now = self._next()
        msgs = [user(x) for x in self.model.get(t, [])] + [user(text)]
        convgit.commit(self.repo, {"messages": msgs}, thread=t, now_ms=now)
        self.model[t] = self.model.get(t, []) + [text]

    @precondition(lambda self: any(t in self.model for t in THREADS))
    @rule(src=st.sampled_from(THREADS), name=st.sampled_from(FORKS), back=st.integers(0, 3))
    def fork(self, src, name, back):
        if src not in self.model or name in self.model:
            return
        back = min(back, len(self.model[src]) - 1)
        rev = f"{src}~{back}" if back else src
        _, now = self._next()
        convgit.fork(self.repo, rev, name, now_ms=now)
        self.model[name] = self.model[src][: len(self.model[src]) - back]

    @rule(t=st.sampled_from(SRC_THREADS), shared=st.booleans())
    def commit_in_the_other_store(self, t, shared):
        """The other store's thread, sometimes continuing this store's history of the same name."""
        text, now = self._next()
        if t not in self.src_model and shared and t in self.model:
            base = list(self.model[t])
        else:
            base = self.src_model.get(t, [])
        convgit.commit(self.src, {"messages": [user(x) for x in base + [f"src {text}"]]}, thread=t, now_ms=now)
        self.src_model[t] = base + [f"src {text}"]

    @precondition(lambda self: self.src_model)
    @rule()
    def merge(self):
        rep = api.merge(self.repo, self.src.path)
        tips = self.src.refs.read_all()
        for name, msgs in sorted(self.src_model.items()):
            mine = self.model.get(name)
            if mine is None:
                want, target = msgs, name
            elif mine == msgs or msgs == mine[: len(msgs)]:
                want, target = mine, name  # same, or kept (ours is ahead)
            elif mine == msgs[: len(mine)]:
                want, target = msgs, name  # fast-forward
            else:
                want, target = msgs, f"{name}-merged-{tips[name][:10]}"
            self.model[target] = list(want)
        assert {r["thread"] for r in rep.refs} == set(self.src_model)
        assert _index_equals_rebuild(self.repo) == []

    @rule()
    def gc(self):
        api.gc(self.repo, prune="now")
        assert _index_equals_rebuild(self.repo) == []

    @precondition(lambda self: len(self.model) >= 1)
    @rule(data=st.data())
    def stale_compare_and_swap(self, data):
        t = data.draw(st.sampled_from(sorted(self.model)))
        cur = self.repo.refs.read(t)
        others = [x for x in self.repo.refs.read_all().values() if x != cur] or ["0" * 63 + "1"]
        wrong = data.draw(st.sampled_from(others))
        with pytest.raises((errors.RefStale, errors.ObjectMissing)):
            self.repo.refs.update(t, cur, expected=wrong, exists=self.repo.objects.contains)
        assert self.repo.refs.read(t) == cur

    @rule()
    def delete_index(self):
        self.repo.close()
        for suffix in ("", "-journal"):
            p = self.repo.path / f"index.sqlite{suffix}"
            if p.exists():
                p.unlink()
        self.repo = Repository.open(self.repo.path)

    @precondition(lambda self: self.model)
    @rule(data=st.data())
    def corrupt_detect_and_repair(self, data):
        """Flip a byte of an object file or a pack: fsck must report it; then restore it."""
        self.repo.close()  # no mapped pack may see the file change under it
        objdir = self.repo.path / "objects"
        files = sorted(p for p in objdir.rglob("*") if p.is_file() and not p.name.startswith("tmp_")
                       and (len(p.parent.name) == 2 or p.suffix in (".pack", ".idx")))
        victim = data.draw(st.sampled_from(files))
        saved, mode = victim.read_bytes(), victim.stat().st_mode
        at = data.draw(st.integers(0, len(saved) - 1))
        os.chmod(victim, 0o644)
        victim.write_bytes(saved[:at] + bytes([saved[at] ^ 0x5A]) + saved[at + 1:])
        with Repository.open(self.repo.path) as r:
            problems = fsck(r, check_index=False).errors
        assert problems, f"a flipped byte at {at} of {victim.relative_to(self.repo.path)} went unnoticed"
        victim.write_bytes(saved)
        os.chmod(victim, mode)
        self.repo = Repository.open(self.repo.path)

    # -- invariants ---------------------------------------------------------------------------

    @invariant()
    def store_equals_model(self):
        refs = self.repo.refs.read_all()
        assert set(refs) == set(self.model), (sorted(refs), sorted(self.model))
        for t, msgs in self.model.items():
            assert chain_texts(self.repo, refs[t]) == msgs, t

    @invariant()
    def fsck_is_clean(self):
        assert [p.message for p in fsck(self.repo, check_index=False).errors] == []

    def teardown(self):
        try:
            if self.model:
                assert _index_equals_rebuild(self.repo) == []
                assert [p.message for p in fsck(self.repo).errors] == []
        finally:
            self.repo.close()
            self.src.close()
            shutil.rmtree(self.dir, ignore_errors=True)


StoreMachine.TestCase.settings = settings(
    stateful_step_count=STEPS, deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
TestStoreMachine = StoreMachine.TestCase


def test_mutation_a_compare_and_swap_that_does_not_compare_is_found(monkeypatch):
    """Power check: against refs whose update ignores the expected value, the machine finds a
    failing sequence (a thread, then a stale compare-and-swap that is not refused)."""
    from hypothesis.stateful import run_state_machine_as_test

    from convgit.refs import ANY, RefStore

    real = RefStore.update
    monkeypatch.setattr(RefStore, "update", lambda self, name, new, *, expected=ANY, **kw: real(self, name, new, **kw))
    with pytest.raises(BaseException) as e:
        run_state_machine_as_test(StoreMachine, settings=settings(
            max_examples=50, stateful_step_count=STEPS, deadline=None, database=None,
            phases=[Phase.generate], suppress_health_check=list(HealthCheck)))
    assert not isinstance(e.value, (KeyboardInterrupt, SystemExit))
