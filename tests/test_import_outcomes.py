"""Import outcomes through the CLI (issue 9, defect 7): detection of every shared fixture
(``chat_messages`` is Claude, never ChatGPT), a forced wrong ``--format`` and a file whose
every entry is skipped failing with a code and writing nothing, every skipped conversation
carrying its ``error_code`` and message under ``--json``, and ``import -`` from stdin."""

from __future__ import annotations

import io
import json
import zipfile
from pathlib import Path

import pytest

from helpers.cli import assert_error, cli, env, ok, proj, run, store_state  # noqa: F401
from convgit.ingest.sources import Rejected, detect, iter_path
from test_import import FIX, chatgpt_conv, fx, needs_fixtures
from test_import_formats import _claude_conv

# -- detection --------------------------------------------------------------------------------

# every shared fixture and the format (= the imported conversations' source) it is detected as
FIXTURE_FORMATS = {
    "anthropic/vercel-ai-thinking-text.response.json": "anthropic",
    "chatgpt/librechat-chatgpt-modern-export.json": "chatgpt",
    "chatgpt/librechat-chatgpt-tree.json": "chatgpt",
    "chatgpt/owi-importer-gpt-example.json": "chatgpt",
    "claude/owi-importer-claude-thinking.json": "claude",
    "gemini/aistudio-chunkedprompt.json": "aistudio",
    "gemini/vercel-ai-google-reasoning.response.json": "gemini",
    "gemini/vercel-ai-google-tool-call.response.json": "gemini",
    "librechat/librechat-tree.json": "librechat",
    "llm/sample-logs.db": "llm",
    "openai/cookbook-toy_chat_fine_tuning.jsonl": "native",
    "openai/vercel-ai-deepseek-toolcall-reasoning_content.response.json": "openai-completion",
    "openai/vercel-ai-responses-reasoning.response.json": "openai-responses",
    "openwebui/librechat-openwebui-export.json": "open-webui",
    "openwebui/owi-importer-webui-json.json": "open-webui",
    "sharegpt/axolotl-conversation-missingturns.json": "sharegpt",
    "sharegpt/axolotl-conversation.json": "sharegpt",
    "sharegpt/llamafactory-mllm-demo.json": "messages",
}


@needs_fixtures
def test_every_shared_fixture_is_listed():
    found = {p.relative_to(FIX).as_posix() for p in FIX.glob("*/*") if p.is_file()}
    assert found == set(FIXTURE_FORMATS), "a new fixture: add it to FIXTURE_FORMATS"


@needs_fixtures
@pytest.mark.parametrize("rel", sorted(FIXTURE_FORMATS))
def test_fixture_detected_as_its_format(rel):
    items = list(iter_path(fx(rel)))
    convs = [c for c in items if not isinstance(c, Rejected)]
    assert convs, items
    assert {c.source for c in convs} == {FIXTURE_FORMATS[rel]}
    # the bad rows some fixtures hold on purpose are rejected for what they are, never misread
    assert all(r.error.code in ("schema_validation_failed", "payload_too_large") for r in items if isinstance(r, Rejected))


@pytest.mark.parametrize("extra", [{}, {"current_node": "m2"}, {"conversation_id": "cl-1", "title": "Chat"},
                                   {"mapping": None}, {"current_node": None, "conversation_id": "x", "title": "t"}])
def test_chat_messages_is_claude_never_chatgpt(cli, proj, tmp_path, extra):
    doc = _claude_conv(**extra)
    assert detect(doc) == "claude"
    p = tmp_path / "claude.json"
    p.write_text(json.dumps([doc]))
    rep = ok(cli("import", p, "--json")).json()
    assert rep["counts"]["imported"] == 1 and rep["conversations"][0]["source"] == "claude"
    assert ok(cli("show", "claude/cl-1", "--json")).json()["messages"][1]["text"] == "hello human"


# -- outcomes: forced wrong format, all skipped, reasons under --json --------------------------


@needs_fixtures
def test_forced_wrong_format_fails_with_its_code_and_writes_nothing(cli, proj):
    before = store_state(proj / ".convgit")
    claude = fx("claude/owi-importer-claude-thinking.json")
    r = cli("import", "-f", "chatgpt", claude)
    assert_error(r, "schema_validation_failed")
    assert "looks like claude" in r.err
    doc = assert_error(cli("import", "-f", "chatgpt", claude, "--json"), "schema_validation_failed")
    assert doc["details"]["conversation"].endswith("owi-importer-claude-thinking.json[0]")
    assert_error(cli("import", "-f", "claude", fx("chatgpt/librechat-chatgpt-tree.json")), "schema_validation_failed")
    assert_error(cli("import", "-f", "open-webui", claude, "--json"), "schema_validation_failed")
    assert store_state(proj / ".convgit") == before


def test_file_whose_every_entry_is_skipped_fails(cli, proj, tmp_path):
    """ChatGPT entries without "mapping" are only warnings beside imported ones; a file that
    holds nothing else is a failure, never a silent exit 0."""
    before = store_state(proj / ".convgit")
    empty = [{"id": f"e{i}", "conversation_id": f"e{i}", "title": "gone", "create_time": 1.0} for i in range(2)]
    p = tmp_path / "empty.json"
    p.write_text(json.dumps(empty))
    doc = assert_error(cli("import", p, "--json"), "schema_validation_failed")
    assert [c["error_code"] for c in doc["details"]["report"]["conversations"]] == ["schema_validation_failed"] * 2
    assert_error(cli("import", p), "schema_validation_failed")
    assert store_state(proj / ".convgit") == before
    # beside a good conversation in the same file: a warning, exit 0
    mixed = tmp_path / "mixed.json"
    mixed.write_text(json.dumps([chatgpt_conv("good"), empty[0]]))
    rep = ok(cli("import", mixed, "--json")).json()
    assert rep["status"] == "ok" and rep["counts"] == {**rep["counts"], "imported": 1, "skipped": 1}
    skipped = rep["conversations"][1]
    assert skipped["status"] == "skipped" and skipped["warning"] is True
    assert skipped["error_code"] == "schema_validation_failed" and "mapping" in skipped["error_message"]
    # beside a good file: that file still failed, so the import is partial with its code
    r = cli("import", p, mixed, "--json")
    assert r.rc == 11
    rep = r.json()
    assert rep["status"] == "partial"
    assert [c["status"] for c in rep["conversations"]] == ["skipped", "skipped", "deduplicated", "skipped"]
    assert [c.get("warning", False) for c in rep["conversations"]] == [False, False, False, True]


def test_every_skipped_conversation_carries_its_code_and_message(cli, proj, tmp_path):
    bad_role = chatgpt_conv("bad")
    bad_role["mapping"]["u1"]["message"]["author"]["role"] = "wizard"
    p = tmp_path / "mix.json"
    p.write_text("[" + ",".join([json.dumps(chatgpt_conv("g1")), json.dumps(bad_role), '{"mapping": {"x": NaN}}',
                                 json.dumps(_claude_conv())]) + "]")
    r = cli("import", "-f", "chatgpt", p, "--json")
    assert r.rc == 11 and "Traceback" not in r.err
    rep = r.json()
    assert rep["status"] == "partial"
    convs = rep["conversations"]
    assert [c["status"] for c in convs] == ["imported", "skipped", "skipped", "skipped"]
    for c in convs[1:]:
        assert c["error_code"] in ("schema_validation_failed", "invalid_input"), c
        assert isinstance(c["error_message"], str) and c["error_message"] and c["reason"] == c["error_message"]
    assert [c["error_code"] for c in convs[1:]] == ["schema_validation_failed", "invalid_input", "schema_validation_failed"]
    assert "wizard" in convs[1]["error_message"] and "looks like claude" in convs[3]["error_message"]
    human = cli("import", "-f", "chatgpt", p)
    assert human.rc == 11
    assert "[schema_validation_failed]" in human.err and "[invalid_input]" in human.err


# -- import - (stdin) -------------------------------------------------------------------------


def _no_temp_left(store: Path) -> None:
    assert not [p for p in store.rglob("tmp_*")], list(store.rglob("tmp_*"))


def test_import_stdin_json_zip_and_jsonl(cli, proj, tmp_path):
    store = proj / ".convgit"
    doc = ok(cli("import", "-", "--json", input=json.dumps([chatgpt_conv("s1")]))).json()
    assert doc["counts"]["imported"] == 1 and doc["conversations"][0]["label"] == "-[0]"
    assert ok(cli("show", "chatgpt:u1", "--json")).json()["messages"][0]["text"] == "plot sin(x)"
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        zf.writestr("conversations.json", json.dumps([chatgpt_conv("z1")]))
    doc = ok(cli("import", "-", "--json", input=buf.getvalue())).json()
    assert doc["counts"]["imported"] == 1 and doc["conversations"][0]["label"] == "-:conversations.json[0]"
    jsonl = "\n".join(json.dumps({"messages": [{"role": "user", "content": f"line {i}"}]}) for i in range(3)) + "\n"
    doc = ok(cli("import", "-", "--json", input=jsonl)).json()
    assert doc["counts"]["imported"] == 3 and [c["label"] for c in doc["conversations"]] == ["-:1", "-:2", "-:3"]
    # again: nothing new, and a file and stdin together
    f = tmp_path / "c.json"
    f.write_text(json.dumps([chatgpt_conv("f1")]))
    doc = ok(cli("import", f, "-", "--json", input=json.dumps([chatgpt_conv("s1")]))).json()
    assert [c["status"] for c in doc["conversations"]] == ["imported", "deduplicated"]
    _no_temp_left(store)
    assert ok(cli("fsck", "--json")).json()["status"] == "ok"


@needs_fixtures
def test_import_stdin_llm_database(cli, proj):
    data = fx("llm/sample-logs.db").read_bytes()
    doc = ok(cli("import", "-", "--json", input=data)).json()
    assert doc["counts"]["imported"] > 0 and all(c["source"] == "llm" for c in doc["conversations"])
    assert all(c["label"].startswith("-") for c in doc["conversations"])
    _no_temp_left(proj / ".convgit")


def test_import_stdin_bad_input_writes_nothing(cli, proj):
    store = proj / ".convgit"
    before = store_state(store)
    assert_error(cli("import", "-", input=b""), "invalid_input")
    assert_error(cli("import", "-", "--json", input=b"not json at all {"), "invalid_input")
    assert_error(cli("import", "-", "--json", input=b'{"hello": "world"}'), "schema_validation_failed")
    r = cli("import", "-", "--json", input=b"\xef\xbb\xbf[]")
    assert r.rc in (10, 11) and r.json()["status"] == "error"
    assert_error(cli("import", "-", "-", input=b"[]"), "invalid_input")
    doc = assert_error(cli("import", "-f", "chatgpt", "-", "--json", input=json.dumps([_claude_conv()])),
                       "schema_validation_failed")
    assert doc["details"]["conversation"] == "-[0]"
    assert store_state(store) == before
    # --dry-run spools outside the store
    doc = ok(cli("import", "-n", "-", "--json", input=json.dumps([chatgpt_conv("d1")]))).json()
    assert doc["dry_run"] and doc["counts"]["imported"] == 1
    assert store_state(store) == before


def test_import_stdin_in_a_real_process(run, proj):
    r = run("import", "-", "--json", cwd=proj, input=json.dumps([chatgpt_conv("p1")]))
    assert r.rc == 0, r
    assert r.json()["conversations"][0]["threads"][0]["thread"] == "chatgpt/p1"
    _no_temp_left(proj / ".convgit")


def test_file_without_conversations_fails(cli, proj, tmp_path):
    p = tmp_path / "blank.jsonl"
    p.write_text("\n\n")
    doc = assert_error(cli("import", p, "--json"), "schema_validation_failed")
    assert "no conversations" in doc["error_message"]


def test_stdin_spool_failure_is_storage_failed(cli, proj, monkeypatch):
    import tempfile

    def full(*a, **k):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(tempfile, "mkstemp", full)
    before = store_state(proj / ".convgit")
    assert_error(cli("import", "-", input=b"[]"), "storage_failed")
    assert store_state(proj / ".convgit") == before
