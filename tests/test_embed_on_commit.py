"""``embed.on_commit`` (issue 13): commit and import embed what they added right after the
commit point and say how many chunks in ``embedded_chunks``; a failing or missing provider
never fails the write (a warning, the chunks failed or pending); the commit result carries the
memory-hub contract's fields (``status`` ``ok``, ``id``, ``embedded_chunks``) beside
convgit's own ``action``."""

from __future__ import annotations

import json

import convgit

from helpers.cli import cli, env, ok, proj  # noqa: F401  (fixtures)
from helpers.embeddings import FakeEmbeddings
from helpers.store import NOW, conv, fast_repo, set_config

ON = "[core]\nfsync = false\n[embed]\nprovider = \"hash\"\non_commit = true\n"


def test_a_commit_embeds_its_new_messages_and_says_how_many(tmp_path):
    repo = set_config(fast_repo(tmp_path / "s"), ON)
    r = convgit.commit(repo, {"messages": conv("the GPU question", "buy the cheaper card")}, now_ms=NOW)
    assert r.embedded_chunks == 2 and not r.warnings
    doc = r.to_json()
    assert (doc["status"], doc["action"], doc["id"], doc["embedded_chunks"]) == ("ok", "created", r.thread, 2)
    assert convgit.embed_status(repo)["pending"] == 0
    # A re-send embeds nothing: the messages (and so the chunks) are the same.
    again = convgit.commit(repo, {"messages": conv("the GPU question", "buy the cheaper card")}, now_ms=NOW)
    assert again.to_json()["action"] == "deduplicated" and again.embedded_chunks == 0
    more = convgit.commit(repo, {"messages": conv("the GPU question", "buy the cheaper card", "and a PSU?")},
                          now_ms=NOW)
    assert more.to_json()["action"] == "appended" and more.embedded_chunks == 1
    hits = convgit.search(repo, "PSU", mode="semantic", count=1)
    assert hits and hits[0].threads == [r.thread]


def test_off_by_default_nothing_is_embedded(tmp_path):
    repo = set_config(fast_repo(tmp_path / "s"), "[core]\nfsync = false\n[embed]\nprovider = \"hash\"\n")
    r = convgit.commit(repo, {"messages": conv("hello", "hi")}, now_ms=NOW)
    assert r.embedded_chunks == 0 and r.to_json()["embedded_chunks"] == 0
    assert not (repo.path / "vectors").exists() or convgit.embed_status(repo)["pending"] == 2


def test_cli_commit_and_import_report_embedded_chunks(cli, proj, tmp_path):
    (proj / ".convgit" / "config.toml").write_text(ON)
    f = tmp_path / "c.json"
    f.write_text(json.dumps({"messages": conv("what is a b-tree", "a balanced search tree")}))
    doc = ok(cli("commit", str(f), "--json")).json()
    assert doc["status"] == "ok" and doc["action"] == "created" and doc["embedded_chunks"] == 2
    g = tmp_path / "more.jsonl"
    g.write_text("\n".join(json.dumps({"messages": conv(f"question {i}", f"answer {i}")}) for i in range(3)) + "\n")
    rep = ok(cli("import", str(g), "--json")).json()
    assert rep["status"] == "ok" and rep["new_messages"] == 6 and rep["embedded_chunks"] == 6
    st = ok(cli("embed", "--status", "--json")).json()
    assert st["pending"] == 0


def test_a_failing_provider_never_fails_the_commit(tmp_path):
    with FakeEmbeddings(dim=16, fail_every=1) as fake:
        repo = set_config(fast_repo(tmp_path / "s"), "[core]\nfsync = false\n" + fake.config()
                          + "on_commit = true\n")
        r = convgit.commit(repo, {"messages": conv("kept whatever happens", "yes")}, now_ms=NOW)
        assert r.tip and r.thread and r.embedded_chunks == 0
        assert any("embedding failed for 2 chunk(s)" in w for w in r.warnings), r.warnings
        assert convgit.rev_parse(repo, r.thread) == r.tip  # the write stood
        assert convgit.embed_status(repo)["failed"] == 2
        fake.fail_every = 0
        assert convgit.embed(repo).embedded == 2  # retried by the next embed
        assert convgit.embed_status(repo)["failed"] == 0


def test_an_unreachable_provider_leaves_the_chunks_pending_with_a_warning(cli, proj, tmp_path):
    (proj / ".convgit" / "config.toml").write_text(
        "[core]\nfsync = false\n[embed]\nprovider = \"openai-compatible\"\nurl = \"http://127.0.0.1:9/v1\"\n"
        "model = \"m\"\ndimension = 8\ntimeout = 2\non_commit = true\n")
    f = tmp_path / "c.json"
    f.write_text(json.dumps({"messages": conv("offline", "still stored")}))
    r = ok(cli("commit", str(f), "--json"))
    doc = r.json()
    assert doc["status"] == "ok" and doc["embedded_chunks"] == 0 and doc["warnings"]
    assert "convgit: warning:" in r.err
    assert ok(cli("log", "--json")).json()  # the commit is there


def test_a_bad_on_commit_value_is_rejected_before_anything_is_written(cli, proj, tmp_path):
    (proj / ".convgit" / "config.toml").write_text("[embed]\non_commit = \"yes\"\n")
    f = tmp_path / "c.json"
    f.write_text(json.dumps({"messages": conv("a", "b")}))
    r = cli("commit", str(f), "--json")
    assert r.rc != 0 and r.json()["error_code"] == "invalid_input"
    assert not list((proj / ".convgit" / "refs").rglob("*")) or not any(
        p.is_file() for p in (proj / ".convgit" / "refs").rglob("*"))


def test_embed_switch_moves_searches_to_the_new_namespace_only_once_it_is_complete(cli, proj, tmp_path):
    cfg = proj / ".convgit" / "config.toml"
    cfg.write_text("# my settings\n[core]\nfsync = false\n\n[embed]\nprovider = \"hash\"\nbatch_size = 2\n"
                   "on_commit = false\n")
    f = tmp_path / "c.json"
    f.write_text(json.dumps({"messages": conv("a question about quokkas", "they live on Rottnest")}))
    ok(cli("commit", str(f)))
    old = ok(cli("embed", "--json")).json()["namespace"]["key"]
    with FakeEmbeddings(dim=8, fail_every=1) as fake:
        # The new namespace cannot be completed (every batch fails): nothing is switched.
        r = cli("embed", "--provider", "openai-compatible", "--url", fake.url, "--model", "m", "--dimension", "8",
                "--switch", "--json")
        assert r.rc != 0 and r.json()["switched"] is False
        assert "provider = \"hash\"" in cfg.read_text()
        fake.fail_every = 0
        doc = ok(cli("embed", "--provider", "openai-compatible", "--url", fake.url, "--model", "m", "--dimension", "8",
                     "--switch", "--json")).json()
        assert doc["switched"] is True and doc["namespace"]["key"] != old
        text = cfg.read_text()
        assert text.startswith("# my settings\n[core]\nfsync = false\n")  # the rest of the file kept
        st = ok(cli("embed", "--status", "--json")).json()
        assert st["namespace"]["key"] == doc["namespace"]["key"] and st["pending"] == 0
        assert {n["key"] for n in st["namespaces"]} >= {old, doc["namespace"]["key"]}  # the old one kept
        assert "batch_size = 2" in text and "on_commit = false" in text
        hits = ok(cli("search", "quokkas", "--semantic", "--json")).json()
        assert hits and hits[0]["chunk"]
    assert_bad = cli("embed", "--switch")
    assert assert_bad.rc != 0 and "--switch needs --provider" in assert_bad.err


def test_a_batch_size_above_the_per_write_limit_still_embeds_on_commit(tmp_path):
    """``batch_size`` larger than what one write embeds (EMBED_ON_WRITE): the batches are cut
    to that limit (they used to be refused whole, so nothing was ever embedded on commit, and
    an idle `convgit serve` committer retried at once, forever)."""
    from convgit import semantic

    limit = semantic.EMBED_ON_WRITE
    repo = set_config(fast_repo(tmp_path / "s"), ON + f"batch_size = {limit + 100}\n")
    said = [f"message {i} about graphics cards" for i in range(limit + 40)]  # more chunks than one write embeds
    r = convgit.commit(repo, {"messages": conv(*said)}, now_ms=NOW)
    assert r.embedded_chunks == limit, (r.embedded_chunks, r.warnings)
    assert convgit.embed_status(repo)["pending"] == 40
