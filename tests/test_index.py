"""The derived index (DESIGN §6): every answer is the same after a rebuild, whatever happened
to ``index.sqlite``; refs that move behind its back are picked up on the next open.
Also: the format version gate, and corrupt objects (DESIGN §3, §4)."""

from __future__ import annotations

import base64
import os
import shutil
import sqlite3

import pytest

import convgit
from convgit import errors
from convgit.objects import TEXT_BLOB_THRESHOLD, Message, TextPart
from convgit.repository import Repository

from helpers.store import NOW, api_view, conv

HISTORY = conv("What is convgit?", "Git for conversations.", "Does it dedup?", "Yes, by content hash.")
LONG = "A long message.\n" + "0123456789 ✓ " * (TEXT_BLOB_THRESHOLD // 10)
PNG = base64.b64encode(b"\x89PNG\r\n\x1a\n" + bytes(100)).decode()


def build_rich_store(repo) -> None:
    """Forks, continuations, a long message in a blob, calls with models, a rename, a delete."""
    t = NOW

    def c(data, **kw):
        nonlocal t
        t += 1000
        return convgit.commit(repo, data, now_ms=t, **kw)

    c({"messages": HISTORY[:2]}, thread="main")
    c({"messages": HISTORY})  # stateless continuation of main
    c({
        "messages": HISTORY + conv("And forks?"),
        "response": {"role": "assistant", "content": "Free: a fork writes no message."},
        "model": "gpt-4o",
        "resolved_model": "gpt-4o-2024-08-06",
        "usage": {"prompt_tokens": 40, "completion_tokens": 9},
        "started_at": "2023-11-14T22:20:00Z",
        "duration_ms": 900,
    })
    convgit.fork(repo, "main~3", "alt", now_ms=t + 1)
    c({"messages": HISTORY[:3] + conv("Another angle", first="assistant")}, thread="alt")
    c({"messages": HISTORY[:2] + conv("Edited question", "Edited answer")}, thread="main", on_conflict="fork")
    # a long message (stored in a blob) as the first user message: it is a thread's title
    c({"messages": [{"role": "user", "content": LONG}], "response": {"role": "assistant", "content": "ok"},
       "model": "claude-x", "started_at": 1_700_000_100_000})
    c({"messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": [
        {"type": "text", "text": "look"},
        {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG}"}},
    ]}], "source": "chatgpt", "upstream_thread_id": "conv-1"})
    c({"messages": conv("tools?"), "response": {"role": "assistant", "content": None, "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]}, "model": "m"},
      thread="tools")
    c({"messages": conv("to be renamed", "fine")}, thread="old-name")
    convgit.rename_thread(repo, "old-name", "renamed/thread")
    c({"messages": conv("to be deleted", "fine")}, thread="doomed")
    convgit.delete_thread(repo, "doomed")
    c({"messages": conv("What is convgit?", "A store.")})  # shares only the root with main
    convgit.switch(repo, "alt")


def full_view(repo) -> dict:
    """Everything the index answers: its canonical dump, the read API, and message texts."""
    view = api_view(repo)
    view["dump"] = repo.index.dump()
    view["texts"] = {m[0]: repo.index.message_text(m[0]) for m in view["dump"]["messages"]}
    return view


@pytest.fixture
def rich(repo):
    build_rich_store(repo)
    path = repo.path
    repo.close()
    return path


@pytest.fixture
def baseline(rich):
    with Repository.open(rich) as r:
        return full_view(r)


def view_of(path) -> dict:
    with Repository.open(path) as r:
        return full_view(r)


def test_the_rich_store_has_what_the_tests_need(rich, baseline):
    names = [t["name"] for t in baseline["threads"]]
    assert {"main", "alt", "tools", "renamed/thread", "chatgpt/conv-1"} <= set(names)
    assert "doomed" not in names
    assert any(n.startswith("main-fork-") for n in names)
    assert any(t["title"] == "A long message." for t in baseline["threads"])
    assert [t["name"] for t in baseline["threads"] if t["current"]] == ["alt"]
    models = {e["model"] for log in baseline["logs"].values() for e in log}
    assert {"gpt-4o-2024-08-06", "claude-x", "m"} <= models
    assert any(e["text"] == LONG for log in baseline["logs"].values() for e in log)
    alt = [t for t in baseline["threads"] if t["name"] == "alt"][0]
    assert alt["forked_from"]["thread"] == "main"


def test_the_incremental_index_equals_a_rebuild(rich, baseline):
    with Repository.open(rich) as r:
        stats = convgit.reindex(r)
        assert stats["threads"] == len(baseline["threads"])
        assert full_view(r) == baseline
    assert view_of(rich) == baseline


def _page_size(path) -> int:
    raw = path.read_bytes()[16:18]
    size = int.from_bytes(raw, "big")
    return 65536 if size == 1 else size


def _delete(p):
    p.unlink()


def _truncate_zero(p):
    p.write_bytes(b"")


def _garbage_header(p):
    data = bytearray(p.read_bytes())
    data[:100] = b"this is not a database, just garbage!" * 2 + b"\x00" * 26
    p.write_bytes(bytes(data))


def _truncate_half(p):
    data = p.read_bytes()
    p.write_bytes(data[: len(data) // 2])


def _zero_middle_page(p):
    data = bytearray(p.read_bytes())
    size = _page_size(p)
    n = len(data) // size
    assert n >= 4, "the index should span several pages"
    page = n // 2
    data[page * size : (page + 1) * size] = bytes(size)
    p.write_bytes(bytes(data))


def _random_bytes(p):
    p.write_bytes(os.urandom(4096 * 3))


def _other_schema_version(p):
    db = sqlite3.connect(p)
    db.execute("PRAGMA user_version=99")
    db.commit()
    db.close()


def _meta_version_mismatch(p):
    db = sqlite3.connect(p)
    db.execute("UPDATE meta SET value='0' WHERE key='schema_version'")
    db.commit()
    db.close()


def _schema_9_layout(p):
    """The index as convgit wrote it before schema 10: message rows naming their parent,
    title and turn by id (each a 64-hex-digit string) instead of by row."""
    db = sqlite3.connect(p)
    db.executescript("""
        DROP VIEW message_ids; DROP VIEW message_tree; DROP VIEW message_text;
        ALTER TABLE messages RENAME TO messages10;
        CREATE TABLE messages (rowid INTEGER PRIMARY KEY, id TEXT NOT NULL UNIQUE, parent TEXT, role TEXT NOT NULL,
          depth INTEGER NOT NULL, title_id TEXT, turn_id TEXT, n_parts INTEGER NOT NULL, meta_json TEXT);
        INSERT INTO messages SELECT m.rowid, m.id, p.id, m.role, m.depth, tm.id, t.id, m.n_parts, m.meta_json
          FROM messages10 m LEFT JOIN messages10 p ON p.rowid = m.parent_rowid
          LEFT JOIN messages10 tm ON tm.rowid = m.title_rowid LEFT JOIN turns t ON t.rowid = m.turn_rowid;
        DROP TABLE messages10;
        CREATE INDEX messages_parent ON messages(parent);
        UPDATE meta SET value = '9' WHERE key = 'schema_version';
        PRAGMA user_version = 9;
    """)
    db.commit()
    db.close()


def _dropped_table(p):
    db = sqlite3.connect(p)
    db.execute("DROP VIEW message_tree")
    db.execute("DROP VIEW message_text")
    db.execute("DROP TABLE parts")
    db.commit()
    db.close()


def _emptied_tables(p):
    db = sqlite3.connect(p)
    for t in ("threads", "messages", "parts", "turns"):
        db.execute(f"DELETE FROM {t}")
    db.commit()
    db.close()


DAMAGE = {
    "deleted": _delete,
    "truncated_to_zero": _truncate_zero,
    "garbage_header": _garbage_header,
    "truncated_to_half": _truncate_half,
    "zeroed_middle_page": _zero_middle_page,
    "random_bytes": _random_bytes,
    "other_schema_version": _other_schema_version,
    "meta_version_mismatch": _meta_version_mismatch,
    "schema_9_layout": _schema_9_layout,
    "dropped_table": _dropped_table,
    "emptied_tables": _emptied_tables,
}


@pytest.mark.parametrize("damage", list(DAMAGE))
def test_every_answer_is_the_same_after_the_index_is_damaged(rich, baseline, damage):
    index = rich / "index.sqlite"
    DAMAGE[damage](index)
    assert view_of(rich) == baseline
    # and the healed index is a good one: it opens again without another rebuild
    with Repository.open(rich) as r:
        assert full_view(r) == baseline
        assert not r.index.rebuilt
        assert r.index.db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        assert "parent_rowid" in {c[1] for c in r.index.db.execute("PRAGMA table_info(messages)")}


@pytest.mark.parametrize("damage", ["deleted", "truncated_to_zero", "zeroed_middle_page"])
def test_a_commit_on_a_damaged_index_works_and_matches_a_rebuild(rich, damage):
    DAMAGE[damage](rich / "index.sqlite")
    with Repository.open(rich) as r:
        res = convgit.commit(r, {"messages": conv("to be renamed", "fine", "after the damage")}, now_ms=NOW + 99_000)
        assert (res.status, res.thread, res.new_messages) == ("appended", "renamed/thread", 1)
        after = full_view(r)
    (rich / "index.sqlite").unlink()
    assert view_of(rich) == after


# -- stale: refs moved behind the index's back ----------------------------------------------


def _rebuilt_view(path) -> dict:
    (path / "index.sqlite").unlink()
    return view_of(path)


def test_a_ref_moved_by_another_handle_is_caught_up_on_the_next_open(rich, baseline):
    with Repository.open(rich) as r:
        assert full_view(r) == baseline
        tip = r.refs.read("main")
    with Repository.open(rich) as other:  # no index involved: plain ref and object writes
        oid, _ = other.objects.write(Message(parent=tip, role="user", parts=(TextPart(text="written behind the index"),)))
        other.refs.update("main", oid, expected=tip, exists=other.objects.contains, time_ms=NOW + 50_000)
        other.refs.update("side", tip, expected=None, exists=other.objects.contains, time_ms=NOW + 50_001)
        other.refs.update("tools", None, time_ms=NOW + 50_002)
    caught_up = view_of(rich)
    assert caught_up != baseline
    main = [t for t in caught_up["threads"] if t["name"] == "main"][0]
    assert main["tip"] == oid and main["messages"] == 7
    assert caught_up["logs"]["main"][0]["text"] == "written behind the index"
    assert {"side"} <= {t["name"] for t in caught_up["threads"]}
    assert "tools" not in {t["name"] for t in caught_up["threads"]}
    assert caught_up == _rebuilt_view(rich)


def test_a_reflog_line_behind_the_index_is_caught_up(rich):
    with Repository.open(rich) as other:
        tip = other.refs.read("alt")
        turn = convgit.commit(other, {"messages": conv("x"), "model": "late"}, now_ms=NOW + 70_000).turn
        # record that turn on alt by hand: same tip, a new reflog line
        other.refs.update("alt", tip, expected=tip, turn=turn, message="recorded", time_ms=NOW + 70_001)
    caught_up = view_of(rich)
    [alt] = [t for t in caught_up["threads"] if t["name"] == "alt"]
    assert alt["updated_at"] == convgit.api.iso(NOW + 70_001)
    assert caught_up == _rebuilt_view(rich)


def test_a_long_lived_handle_refreshes_on_request(rich, baseline):
    with Repository.open(rich) as r, Repository.open(rich) as other:
        assert full_view(r) == baseline
        other.refs.update("copy-of-main", other.refs.read("main"), expected=None, time_ms=NOW + 60_000)
        r.index.refresh()
        assert "copy-of-main" in {t["name"] for t in convgit.threads(r)}


def test_objects_and_refs_copied_from_another_store_are_picked_up(rich, tmp_path):
    other = convgit.init(tmp_path / "other")
    t = NOW + 80_000
    convgit.commit(other, {"messages": HISTORY + conv("from the other store")}, now_ms=t)
    convgit.commit(other, {"messages": conv("only over there", "yes")}, thread="theirs", now_ms=t + 1)
    convgit.commit(other, {"messages": [{"role": "user", "content": LONG + "!"}], "model": "o"}, thread="their-long", now_ms=t + 2)
    other_path = other.path
    other.close()
    view_of(rich)  # the index is current before the copy
    for sub in ("objects", "refs", "logs"):
        for src in (other_path / sub).rglob("*"):
            if src.is_file() and not src.name.endswith(".lock"):
                dst = rich / src.relative_to(other_path)
                dst.parent.mkdir(parents=True, exist_ok=True)
                if not dst.exists():
                    shutil.copy2(src, dst)
    caught_up = view_of(rich)
    names = {t["name"] for t in caught_up["threads"]}
    assert {"theirs", "their-long", "main", "alt"} <= names
    [theirs] = [t for t in caught_up["threads"] if t["name"] == "theirs"]
    assert theirs["title"] == "only over there" and theirs["messages"] == 2
    assert any(e["text"] == LONG + "!" for e in caught_up["logs"]["their-long"])
    assert caught_up == _rebuilt_view(rich)
    # and a stateless continuation of the copied conversation finds its thread
    with Repository.open(rich) as r:
        res = convgit.commit(r, {"messages": conv("only over there", "yes", "and here")}, now_ms=t + 3)
        assert (res.status, res.thread) == ("appended", "theirs")


# -- the format gate ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "content",
    ["convgit-store 4\n", "convgit-store 0\n", "convgit-store 10\n", "git-store 1\n", "convgit-store one\n", "", "\x00\x01"],
)
def test_a_store_of_another_format_version_is_not_opened(repo, content):
    path = repo.path
    repo.close()
    (path / "format").write_text(content)
    for opener in (Repository.open, convgit.open_repo, convgit.init):
        with pytest.raises(errors.NotAStore) as e:
            opener(path if opener is not convgit.open_repo else path.parent)
        assert e.value.code == "not_a_store"
    assert (path / "format").read_text() == content


def test_a_directory_without_a_format_file_is_not_a_store(tmp_path):
    d = tmp_path / "x" / ".convgit"
    d.mkdir(parents=True)
    (d / "junk").write_text("x")
    with pytest.raises(errors.NotAStore):
        Repository.open(d)
    with pytest.raises(errors.NotAStore):
        convgit.init(d)


def test_a_version_2_store_is_refused_before_anything_is_written(repo):
    convgit.commit(repo, {"messages": HISTORY}, thread="main")
    path = repo.path
    repo.close()
    (path / "format").write_text("convgit-store 4\n")
    (path / "index.sqlite").unlink()
    with pytest.raises(errors.NotAStore):
        Repository.open(path)
    assert not (path / "index.sqlite").exists()


# -- corrupt objects ------------------------------------------------------------------------


def _flip_byte(data: bytes) -> bytes:
    i = len(data) // 2
    return data[:i] + bytes([data[i] ^ 0x01]) + data[i + 1 :]


CORRUPT = {
    "flipped_byte": _flip_byte,
    "truncated": lambda d: d[: len(d) - 5],
    "trailing_garbage": lambda d: d + b"\x00garbage",
    "empty": lambda d: b"",
}


@pytest.fixture
def two_threads(repo):
    a = convgit.commit(repo, {"messages": conv("thread a", "reply a", "more a", "last a")}, thread="a", now_ms=NOW)
    b = convgit.commit(repo, {"messages": conv("thread b", "reply b")}, thread="b", now_ms=NOW + 1)
    victim = convgit.rev_parse(repo, "a~1")
    return repo, a.tip, b.tip, victim


def _corrupt_object(repo, oid, how):
    f = repo.path / "objects" / oid[:2] / oid[2:]
    data = f.read_bytes()
    os.chmod(f, 0o644)
    f.write_bytes(CORRUPT[how](data))
    os.chmod(f, 0o444)


@pytest.mark.parametrize("how", list(CORRUPT))
def test_a_corrupt_object_raises_on_read_while_other_threads_stay_readable(two_threads, how):
    repo, a_tip, b_tip, victim = two_threads
    b_before = [e.to_json(repo) for e in convgit.log(repo, "b")]
    _corrupt_object(repo, victim, how)
    with Repository.open(repo.path) as r:
        with pytest.raises(errors.ObjectCorrupt) as e:
            r.objects.read(victim)
        assert e.value.code == "object_corrupt"
        with pytest.raises(errors.ObjectCorrupt):
            convgit.cat_object(r, victim)
        with pytest.raises(errors.ObjectCorrupt):
            convgit.log(r, "a")
        # the tip above the damage still reads; thread b is untouched
        assert convgit.log(r, "a", count=1)[0].id == a_tip
        assert [e.to_json(r) for e in convgit.log(r, "b")] == b_before
        assert {t["name"] for t in convgit.threads(r)} == {"a", "b"}


@pytest.mark.parametrize("how", ["flipped_byte", "truncated"])
def test_other_threads_stay_readable_when_the_index_is_rebuilt_over_a_corrupt_object(two_threads, how):
    repo, a_tip, b_tip, victim = two_threads
    b_before = [e.to_json(repo) for e in convgit.log(repo, "b")]
    _corrupt_object(repo, victim, how)
    path = repo.path
    repo.close()
    (path / "index.sqlite").unlink()
    with Repository.open(path) as r:
        assert [e.to_json(r) for e in convgit.log(r, "b")] == b_before
        assert "b" in {t["name"] for t in convgit.threads(r)}
        with pytest.raises(errors.ObjectCorrupt):
            convgit.log(r, "a")


def test_a_missing_object_is_reported_as_missing(two_threads):
    repo, a_tip, b_tip, victim = two_threads
    f = repo.path / "objects" / victim[:2] / victim[2:]
    f.unlink()
    with pytest.raises(errors.ObjectMissing):
        repo.objects.read(victim)
    with pytest.raises(errors.ObjectMissing):
        convgit.log(repo, "a")
    assert len(convgit.log(repo, "b")) == 2


def test_a_corrupt_object_is_never_trusted_by_commit(two_threads):
    repo, a_tip, b_tip, victim = two_threads
    _corrupt_object(repo, victim, "flipped_byte")
    # re-sending the conversation: the damaged object exists by name, so it is not rewritten
    # (a repair is fsck's job), but nothing reads wrong data either
    r = convgit.commit(repo, {"messages": conv("thread a", "reply a", "more a", "last a", "new")}, now_ms=NOW + 5)
    assert r.thread == "a" and r.new_messages == 1
    with pytest.raises(errors.ObjectCorrupt):
        convgit.log(repo, "a")
