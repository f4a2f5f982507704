"""fsck while others write: a commit made during the check is not corruption.

fsck reads for seconds to minutes on a large store while ``convgit serve`` or another shell
keeps committing. Each test makes a second process-like writer (another ``Repository`` on
the same store) act at a chosen moment inside fsck: during the object scan (through the
progress callback the CLI's bar uses), or between the index rebuild and the reading of the
live index. Before the fix, fsck listed the objects first and read the refs after, and so
reported a commit made meanwhile as a thread pointing at a corrupt or missing message and a
reflog naming a turn that is not stored.
"""

from __future__ import annotations

import json
import subprocess
import sys

from convgit import api
from convgit.fsck import INDEX_CHECK_TRIES


def _payload(i: int) -> dict:
    return {"messages": [{"role": "user", "content": f"question {i}"},
                         {"role": "assistant", "content": f"answer {i}"}]}


def _store(tmp_path, n: int = 40):
    repo = api.init(tmp_path / ".convgit")
    api.commit_many(repo, [_payload(i) for i in range(n)])
    return repo


def test_commit_during_the_object_scan_is_not_reported(tmp_path):
    repo = _store(tmp_path)
    other = api.open_repo(tmp_path)
    made = []

    def progress(done, total):
        if not made:  # the first tick: the scan has listed the objects and is reading them
            made.append(api.commit(other, _payload(1000)))

    rep = api.fsck(repo, progress=progress)
    assert made and made[0].new_messages == 2
    assert rep.ok, [p.message for p in rep.errors]
    assert not [p for p in rep.problems if p.kind in ("bad_ref", "bad_reflog")]
    # The thread made meanwhile is there, and the next fsck checks it as any other.
    after = api.fsck(api.open_repo(tmp_path))
    assert after.ok and after.threads == rep.threads + 1


def test_gc_started_during_fsck_is_skipped(tmp_path):
    repo = _store(tmp_path)
    other = api.open_repo(tmp_path)
    seen = []

    def progress(done, total):
        if not seen:
            seen.append(api.gc(other, prune="now"))

    rep = api.fsck(repo, progress=progress)
    assert rep.ok
    assert seen[0].status == "skipped" and "fsck" in seen[0].reason
    assert api.gc(other, prune="now").status == "done"  # once fsck is over


def test_a_commit_between_rebuild_and_live_index_is_compared_again(tmp_path, monkeypatch):
    repo = _store(tmp_path)
    other = api.open_repo(tmp_path)
    index_type = type(repo.index)
    real_dump = index_type.dump
    calls = []

    def dump(self):
        out = real_dump(self)
        calls.append(1)
        if len(calls) == 1:  # the rebuild's dump is taken: a writer commits before the live one
            api.commit(other, _payload(2000))
        return out

    monkeypatch.setattr(index_type, "dump", dump)
    rep = api.fsck(repo)
    assert rep.ok and not [p for p in rep.problems if p.kind == "index"], rep.problems
    assert len(calls) == 4  # compared twice: the first comparison saw the commit


def test_a_store_that_never_stops_moving_is_a_warning_not_an_error(tmp_path, monkeypatch):
    repo = _store(tmp_path)
    other = api.open_repo(tmp_path)
    index_type = type(repo.index)
    real_dump = index_type.dump
    n = [0]

    def dump(self):
        out = real_dump(self)
        n[0] += 1
        if n[0] % 2 == 1:
            api.commit(other, _payload(3000 + n[0]))
        return out

    monkeypatch.setattr(index_type, "dump", dump)
    rep = api.fsck(repo)
    assert rep.ok
    warn = [p for p in rep.problems if p.kind == "index"]
    assert len(warn) == 1 and warn[0].severity == "warning" and "not compared" in warn[0].message
    assert n[0] == 2 * INDEX_CHECK_TRIES


def test_damaged_index_is_still_an_error(tmp_path):
    """The retry must not hide a real difference: rows deleted behind the index's back."""
    import sqlite3

    repo = _store(tmp_path)
    repo.index.close() if hasattr(repo.index, "close") else None
    db = sqlite3.connect(tmp_path / ".convgit" / "index.sqlite")
    db.execute("DELETE FROM turns WHERE rowid IN (SELECT rowid FROM turns LIMIT 3)")
    db.commit()
    db.close()
    rep = api.fsck(api.open_repo(tmp_path))
    found = [p.severity for p in rep.problems if p.kind == "index"]
    assert found and set(found) == {"error"} and not rep.ok


def test_cli_fsck_beside_a_committing_process(tmp_path):
    """Through the CLI, with a real second process committing the whole time."""
    _store(tmp_path, 200)
    script = (
        "import json, sys; from convgit import api\n"
        "repo = api.open_repo(sys.argv[1])\n"
        "for i in range(60):\n"
        "    api.commit(repo, {'messages': [{'role': 'user', 'content': f'busy {i}'},"
        " {'role': 'assistant', 'content': 'ok'}]})\n"
    )
    writer = subprocess.Popen([sys.executable, "-c", script, str(tmp_path)])
    try:
        reports = []
        while writer.poll() is None and len(reports) < 6:
            out = subprocess.run([sys.executable, "-m", "convgit", "fsck", "--json"], cwd=tmp_path,
                                 capture_output=True, text=True)
            reports.append((out.returncode, json.loads(out.stdout)))
    finally:
        writer.wait(timeout=120)
    assert reports
    for code, rep in reports:
        assert code == 0 and rep["errors"] == 0, rep["problems"]
