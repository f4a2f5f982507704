"""``[index] text = false`` (issue 10): the lean index keeps no text, only full-text postings,
lengths and metadata; every answer is read from the objects and is identical to the default
index's, and the index is smaller."""

from __future__ import annotations

import json
import sqlite3

import pytest

from helpers.cli import env, ok, run  # noqa: F401  (fixtures)
from convgit.objects import TEXT_BLOB_THRESHOLD

LONG = ("a very long answer about velvet quokkas " * (TEXT_BLOB_THRESHOLD // 30 + 10)).strip()
CONVS = [
    {"messages": [{"role": "user", "content": "Compare the RTX 5080 with the RX 9070 XT"},
                  {"role": "assistant", "content": "The RTX 5080 is faster; the RX 9070 XT is cheaper."}]},
    {"messages": [{"role": "user", "content": "Tell me about quokkas, à la française: été, naïve"},
                  {"role": "assistant", "content": LONG}]},
    {"messages": [{"role": "user", "content": "What is the weather in Paris?"},
                  {"role": "assistant", "content": "", "tool_calls": [{"id": "c1", "type": "function", "function": {
                      "name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
                  {"role": "tool", "tool_call_id": "c1", "content": "sunny, 21 degrees"},
                  {"role": "assistant", "content": "It is sunny in Paris: 21 degrees.", "reasoning": "the tool said sunny"}]},
    {"messages": [{"role": "user", "content": "日本語のテキストと 한국어 텍스트 and emoji 🦘"},
                  {"role": "assistant", "content": "Multilingual text is stored byte-exact: 🦘"}]},
]
QUERIES = ["quokkas", '"RX 9070"', "sunn*", "get_weather", "paris NOT weather", "été", "🦘", "velvet"]


def _build(run, tmp_path, name: str, lean: bool):
    d = tmp_path / name
    ok(run("init", cwd=d))
    if lean:
        cfg = d / ".convgit" / "config.toml"
        cfg.write_text(cfg.read_text() .replace("text = true", "text = false"))
    for i, c in enumerate(CONVS):
        ok(run("commit", "--thread", f"t{i}", "-", input=json.dumps(c), cwd=d))
    ok(run("fork", "t1~1", "forked", cwd=d))
    return d


def _answers(run, d) -> dict:
    out = {"threads": json.loads(ok(run("threads", "--json", cwd=d)).out),
           "log": json.loads(ok(run("log", "--all", "-n", "0", "--json", cwd=d)).out)}
    for q in QUERIES:
        out[q] = json.loads(ok(run("search", q, "--in", "all", "--json", cwd=d)).out)
    status = json.loads(ok(run("status", "--json", cwd=d)).out)
    out["status"] = {k: status[k] for k in ("messages", "threads") if k in status}
    out["text_bytes"] = json.dumps(status).count("text_bytes") and _find(status, "text_bytes")
    return out


def _find(doc, key):
    if isinstance(doc, dict):
        for k, v in doc.items():
            if k == key:
                return v
            found = _find(v, key)
            if found is not None:
                return found
    return None


def _parts_text(d):
    with sqlite3.connect(d / ".convgit" / "index.sqlite") as db:
        return db.execute("SELECT count(*), count(text), sum(text_bytes) FROM parts").fetchone()


def _set_lean(d, lean: bool):
    cfg = d / ".convgit" / "config.toml"
    old, new = ("text = true", "text = false") if lean else ("text = false", "text = true")
    cfg.write_text(cfg.read_text().replace(old, new))


def test_the_lean_index_answers_exactly_as_the_default_one(run, tmp_path):
    d = _build(run, tmp_path, "s", lean=False)
    a = _answers(run, d)
    assert a["text_bytes"] and a["text_bytes"] > len(LONG)
    for q in QUERIES:
        assert a[q] and all(h.get("snippet") for h in a[q]), q  # every query finds something, with a snippet
    n, with_text, total = _parts_text(d)
    size = (d / ".convgit" / "index.sqlite").stat().st_size
    _set_lean(d, True)  # the next command rebuilds the index in the lean mode
    b = _answers(run, d)
    assert b == a
    n2, with_text2, total2 = _parts_text(d)
    assert (n, total) == (n2, total2) and with_text > 0 and with_text2 == 0  # no text in the lean index
    assert (d / ".convgit" / "index.sqlite").stat().st_size <= size


def test_the_lean_index_stays_right_after_a_delete_gc_and_reindex(run, tmp_path):
    lean = _build(run, tmp_path, "lean", lean=True)
    ok(run("threads", "delete", "t0", cwd=lean))
    assert json.loads(ok(run("search", '"RX 9070"', "--json", cwd=lean)).out) == []  # its postings went
    before = _answers(run, lean)
    ok(run("reindex", cwd=lean))
    assert _answers(run, lean) == before
    ok(run("gc", "--prune", "now", cwd=lean))
    assert _answers(run, lean) == before


def test_the_lean_index_follows_new_commits(run, tmp_path):
    d = _build(run, tmp_path, "lean", lean=True)
    ok(run("commit", "-c", "t0", "-", input=json.dumps({"messages": [{"role": "user", "content": "zyzzyva later"}]}), cwd=d))
    hits = json.loads(ok(run("search", "zyzzyva", "--json", cwd=d)).out)
    assert [h["threads"] for h in hits] == [["t0"]] and "zyzzyva" in hits[0]["snippet"]
    assert _parts_text(d)[1] == 0


def test_a_bad_value_is_invalid_input(run, tmp_path):
    d = tmp_path / "bad"
    ok(run("init", cwd=d))
    cfg = d / ".convgit" / "config.toml"
    cfg.write_text(cfg.read_text().replace("text = true", 'text = "no"'))
    r = run("status", "--json", cwd=d)
    doc = json.loads(r.out or r.err)
    assert r.rc == 10 and doc["error_code"] == "invalid_input" and "index.text must be bool" in doc["error_message"]


def test_semantic_search_reads_the_chunks_of_a_lean_index_from_the_objects(run, tmp_path):
    d = _build(run, tmp_path, "s", lean=False)
    cfg = d / ".convgit" / "config.toml"
    cfg.write_text(cfg.read_text() + '\n[embed]\nprovider = "hash"\n')
    ok(run("embed", cwd=d))
    query = ["search", "graphics card comparison RTX", "--semantic", "--json"]
    before = json.loads(ok(run(*query, cwd=d)).out)
    assert before and all(h.get("snippet") for h in before)
    _set_lean(d, True)
    assert json.loads(ok(run(*query, cwd=d)).out) == before  # vectors reused, chunk text from the objects
    assert _parts_text(d)[1] == 0


@pytest.mark.parametrize("to_lean", [True, False])
def test_changing_the_setting_rebuilds_the_index_in_the_other_mode(run, tmp_path, to_lean):
    d = _build(run, tmp_path, "s", lean=not to_lean)
    before = _answers(run, d)
    _set_lean(d, to_lean)
    assert _answers(run, d) == before
    assert (_parts_text(d)[1] == 0) is to_lean
