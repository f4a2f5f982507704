"""convgit import / export through the CLI: reports, exit codes, failure modes (bad file,
corrupt ZIP, unknown format, one bad conversation among good ones), and the bad-input corpus
(research/reliability.md T7.1): every case rejected with its specific code, no traceback,
nothing written — through both `commit` and `import`."""

from __future__ import annotations

import json
import zipfile

import pytest

from helpers.cli import assert_error, cli, env, ok, proj, store_state  # noqa: F401
from test_import import chatgpt_conv

BIG = 2**64


def test_import_report_json_and_reimport(cli, proj, tmp_path):
    p = tmp_path / "c.json"
    p.write_text(json.dumps([chatgpt_conv("a"), chatgpt_conv("b")]))
    r = ok(cli("import", p, "--json"))
    doc = r.json()
    assert doc["status"] == "ok" and doc["counts"]["imported"] == 2
    c = doc["conversations"][0]
    assert c["status"] == "imported" and c["upstream_id"] == "a" and c["threads"][0]["thread"] == "chatgpt/a"
    again = ok(cli("import", p, "--json")).json()
    assert again["counts"]["deduplicated"] == 2 and again["new_objects"] == 0
    assert ok(cli("show", "chatgpt:u1", "--json")).json()["messages"][0]["text"] == "plot sin(x)"
    human = ok(cli("import", p))
    assert "deduplicated" in human.err


def test_import_zip_export(cli, proj, tmp_path):
    z = tmp_path / "export.zip"
    with zipfile.ZipFile(z, "w") as zf:
        zf.writestr("conversations.json", json.dumps([chatgpt_conv("z")]))
        zf.writestr("user.json", "{}")
    doc = ok(cli("import", z, "--json")).json()
    assert doc["counts"]["imported"] == 1


def test_import_failure_modes(cli, proj, tmp_path):
    store = proj / ".convgit"
    before = store_state(store)
    bad_zip = tmp_path / "bad.zip"
    bad_zip.write_bytes(b"PK\x03\x04garbage")
    assert_error(cli("import", bad_zip, "--json"), "invalid_input")
    assert_error(cli("import", tmp_path / "missing.json"), "invalid_input")
    assert_error(cli("import", "--format", "nope", bad_zip), "invalid_input")
    garbage = tmp_path / "g.json"
    garbage.write_text('{"hello": "world"}')
    assert_error(cli("import", garbage, "--json"), "schema_validation_failed")
    assert store_state(store) == before
    # one bad conversation among good ones: the others import, the exit code names the failure
    mix = tmp_path / "mix.json"
    mix.write_text("[" + json.dumps(chatgpt_conv("g1")) + ', {"mapping": {"x": NaN}}, ' + json.dumps(chatgpt_conv("g2")) + "]")
    r = cli("import", mix, "--json")
    assert r.rc == 10 and "Traceback" not in r.err
    doc = r.json()
    assert doc["status"] == "partial" and [c["status"] for c in doc["conversations"]] == ["imported", "skipped", "imported"]


def test_export_cli(cli, proj, tmp_path):
    p = tmp_path / "c.json"
    p.write_text(json.dumps([chatgpt_conv("a")]))
    ok(cli("import", p))
    native = ok(cli("export", "chatgpt/a")).json()
    assert native["thread"] == "chatgpt/a" and all("id" in m for m in native["messages"])
    md = ok(cli("export", "chatgpt/a", "--format", "markdown")).out
    assert md.startswith("# chatgpt/a")
    bundle = ok(cli("export", "--all")).json()  # one document holding every thread
    assert bundle["convgit"]["version"] == 1 and len(bundle["threads"]) == 3
    lines = ok(cli("export", "--all", "-f", "jsonl")).out.splitlines()
    assert len(lines) == 3 and all(json.loads(x)["messages"] for x in lines)
    out = tmp_path / "o.json"
    ok(cli("export", "chatgpt/a", "-f", "openai", "-o", out))
    assert json.loads(out.read_text())["messages"][0]["role"] == "user"
    assert_error(cli("export", "nope"), "not_found")
    assert_error(cli("export", "chatgpt/a", "-f", "yaml"), "invalid_input")


# -- the bad-input corpus ---------------------------------------------------------------------

M = [{"role": "user", "content": "hi"}]


def _j(doc) -> bytes:
    return json.dumps(doc, ensure_ascii=False).encode()


CORPUS: list[tuple[str, bytes, str]] = [
    # encoding
    ("lone_surrogate", b'{"messages": [{"role": "user", "content": "\\ud800"}]}', "invalid_input"),
    ("lone_low_surrogate", b'{"messages": [{"role": "user", "content": "x\\udc00y"}]}', "invalid_input"),
    ("invalid_utf8", b'{"messages": [{"role": "user", "content": "\xc3\x28"}]}', "invalid_input"),
    ("overlong_utf8", b'{"messages": [{"role": "user", "content": "\xc0\xaf"}]}', "invalid_input"),
    ("bom", b"\xef\xbb\xbf" + _j({"messages": M}), "invalid_input"),
    ("utf16", _j({"messages": M}).decode().encode("utf-16"), "invalid_input"),
    ("latin1_byte", b'{"messages": [{"role": "user", "content": "caf\xe9"}]}', "invalid_input"),
    ("nul_in_role", b'{"messages": [{"role": "us\\u0000er", "content": "x"}]}', "schema_validation_failed"),
    ("surrogate_in_key", b'{"messages": [{"role": "user", "content": "x", "\\ud800": 1}]}', "invalid_input"),
    ("stray_continuation", b'{"messages": [{"role": "user", "content": "\x80"}]}', "invalid_input"),
    # syntax
    ("truncated", _j({"messages": M})[:-3], "invalid_input"),
    ("trailing_garbage", _j({"messages": M}) + b" garbage", "invalid_input"),
    ("nan", b'{"messages": [{"role": "user", "content": "x", "meta": {"v": NaN}}]}', "invalid_input"),
    ("infinity", b'{"messages": [{"role": "user", "content": "x", "meta": {"v": Infinity}}]}', "invalid_input"),
    # valid JSON, but a value msgpack cannot store: the conversation is invalid
    ("int_beyond_64_bits", b'{"messages": [{"role": "user", "content": "x", "meta": {"v": %d}}]}' % BIG, "schema_validation_failed"),
    ("negative_huge_int", b'{"messages": [{"role": "user", "content": "x", "meta": {"v": -%d}}]}' % (BIG * 4), "schema_validation_failed"),
    ("nesting_bomb", b'{"messages": [{"role": "user", "content": "x", "meta": {"v": ' + b"[" * 3000 + b"]" * 3000 + b"}}]}", "invalid_input"),
    ("deep_meta", b'{"messages": [{"role": "user", "content": "x", "meta": ' + b'{"a":' * 80 + b"1" + b"}" * 80 + b"}]}", "schema_validation_failed"),
    ("empty_file", b"", "invalid_input"),
    ("whitespace_only", b"   \n ", "invalid_input"),
    ("single_quotes", b"{'messages': []}", "invalid_input"),
    ("unquoted_key", b'{messages: []}', "invalid_input"),
    ("trailing_comma", b'{"messages": [{"role": "user", "content": "x"},]}', "invalid_input"),
    ("comment", b'// hi\n{"messages": []}', "invalid_input"),
    ("two_documents", _j({"messages": M}) + _j({"messages": M}), "invalid_input"),
    ("hex_number", b'{"messages": [{"role": "user", "content": "x", "meta": {"v": 0x10}}]}', "invalid_input"),
    ("unterminated_string", b'{"messages": [{"role": "user", "content": "x}]}', "invalid_input"),
    ("control_char_in_string", b'{"messages": [{"role": "user", "content": "a\x01b"}]}', "invalid_input"),
    ("bad_escape", b'{"messages": [{"role": "user", "content": "\\q"}]}', "invalid_input"),
    # schema
    ("missing_role", _j({"messages": [{"content": "x"}]}), "schema_validation_failed"),
    ("missing_content", _j({"messages": [{"role": "user"}]}), "schema_validation_failed"),
    ("content_number", _j({"messages": [{"role": "user", "content": 5}]}), "schema_validation_failed"),
    ("content_bool", _j({"messages": [{"role": "user", "content": True}]}), "schema_validation_failed"),
    ("role_list", _j({"messages": [{"role": [], "content": "x"}]}), "schema_validation_failed"),
    ("role_number", _j({"messages": [{"role": 1, "content": "x"}]}), "schema_validation_failed"),
    ("unknown_role", _j({"messages": [{"role": "wizard", "content": "x"}]}), "schema_validation_failed"),
    ("empty_role", _j({"messages": [{"role": "", "content": "x"}]}), "schema_validation_failed"),
    ("empty_content", _j({"messages": [{"role": "user", "content": ""}]}), "schema_validation_failed"),
    ("empty_parts", _j({"messages": [{"role": "user", "content": []}]}), "schema_validation_failed"),
    ("no_messages", _j({"messages": []}), "schema_validation_failed"),
    ("messages_not_list", _j({"messages": "hi"}), "schema_validation_failed"),
    ("message_not_object", _j({"messages": ["hi"]}), "schema_validation_failed"),
    ("top_level_number", b"42", "schema_validation_failed"),
    ("top_level_string", b'"hello"', "schema_validation_failed"),
    ("top_level_null", b"null", "schema_validation_failed"),
    ("part_not_object", _j({"messages": [{"role": "user", "content": [5]}]}), "schema_validation_failed"),
    ("text_not_string", _j({"messages": [{"role": "user", "content": [{"type": "text", "text": 5}]}]}), "schema_validation_failed"),
    ("tool_call_no_name", _j({"messages": [{"role": "assistant", "tool_calls": [{"id": "1", "function": {"arguments": "{}"}}]}]}), "schema_validation_failed"),
    ("tool_calls_not_list", _j({"messages": [{"role": "assistant", "content": "x", "tool_calls": {}}]}), "schema_validation_failed"),
    ("bad_base64", _j({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "data:image/png;base64,@@@"}}]}]}), "schema_validation_failed"),
    ("parent_not_hex", _j({"messages": [{"role": "user", "content": "x", "parent": "zz"}]}), "schema_validation_failed"),
    ("id_mismatch", _j({"messages": [{"role": "user", "content": "x", "id": "ab" * 32}]}), "hash_mismatch"),
    ("started_at_out_of_range", _j({"messages": M, "started_at": 10**16}), "schema_validation_failed"),
    ("started_at_bad_string", _j({"messages": M, "started_at": "yesterday"}), "schema_validation_failed"),
    ("usage_not_object", _j({"messages": M, "usage": [1]}), "schema_validation_failed"),
    ("model_not_string", _j({"messages": M, "model": 5}), "schema_validation_failed"),
    ("meta_not_object", _j({"messages": [{"role": "user", "content": "x", "meta": [1]}]}), "schema_validation_failed"),
    ("sharegpt_unknown_speaker", _j({"conversations": [{"from": "alien", "value": "x"}]}), "schema_validation_failed"),
    ("anthropic_bad_content", _j({"system": "s", "messages": [{"role": "user", "content": 5}]}), "schema_validation_failed"),
    ("gemini_parts_not_list", _j({"contents": [{"role": "user", "parts": "x"}]}), "schema_validation_failed"),
    ("aistudio_no_chunks", _j({"chunkedPrompt": {}}), "schema_validation_failed"),
    ("responses_no_items", _j({"object": "response", "output": []}), "schema_validation_failed"),
    # size (limits set in the store's config.toml below)
    ("too_many_messages", _j({"messages": [{"role": "user", "content": str(i)} for i in range(6)]}), "payload_too_large"),
    ("message_too_big", _j({"messages": [{"role": "user", "content": "x" * 3000}]}), "payload_too_large"),
    ("payload_too_big", _j({"messages": M, "options": {"pad": "y" * 9000}}), "payload_too_large"),
]

LIMITS = "[limits]\nmax_messages = 5\nmax_message_bytes = 2048\nmax_payload_bytes = 8192\n[core]\nfsync = false\n"


@pytest.fixture
def limited(cli, proj):
    (proj / ".convgit" / "config.toml").write_text(LIMITS)
    return proj


def test_corpus_has_60_cases():
    assert len(CORPUS) >= 60 and len({c[0] for c in CORPUS}) == len(CORPUS)


@pytest.mark.parametrize("name,raw,code", CORPUS, ids=[c[0] for c in CORPUS])
def test_bad_input_rejected_by_commit_and_import(cli, limited, tmp_path, name, raw, code):
    store = limited / ".convgit"
    before = store_state(store)
    f = tmp_path / f"{name}.json"
    f.write_bytes(raw)
    assert_error(cli("commit", f, "--json"), code)
    assert_error(cli("import", f, "--json"), code)
    assert store_state(store) == before


def test_a_first_message_naming_an_unknown_parent_is_rejected_by_commit_and_import(cli, limited, tmp_path):
    """commit reads a first message's "parent" as the stored message it continues (unknown:
    not_found); import reads a file as whole conversations, whose first message has no parent
    (docs/import.md: a claimed parent that does not match is hash_mismatch)."""
    store = limited / ".convgit"
    before = store_state(store)
    f = tmp_path / "parent.json"
    f.write_bytes(_j({"messages": [{"role": "user", "content": "x", "parent": "cd" * 32}]}))
    assert_error(cli("commit", f, "--json"), "not_found")
    assert_error(cli("import", f, "--json"), "hash_mismatch")
    assert store_state(store) == before

