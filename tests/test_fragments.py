"""Fragments (issue 11, llm's -f): a long text reused by many prompts (a system prompt, a
pasted file) is stored once, as one blob, and ``-f/--fragment`` (a file, an alias from
config.toml [fragments], or the stored text's id) keeps the messages that hold it."""

from __future__ import annotations

from helpers.cli import assert_error, cli, dumps, env, ok, proj  # noqa: F401

DOC = "".join(f"Section {i}: the pelican's pouch holds up to eleven litres of water. " for i in range(600))  # > 32 KiB


def _setup(cli, proj):
    for i in range(3):
        ok(cli("commit", "-", "--thread", f"t{i}", input=dumps({"messages": [
            {"role": "system", "content": f"You are reader number {i}."}, {"role": "user", "content": DOC},
            {"role": "assistant", "content": f"answer {i}"}]})))
    ok(cli("commit", "-", "--thread", "other", input=dumps({"messages": [
        {"role": "user", "content": "Quote: the pelican's pouch holds up to eleven litres"},
        {"role": "assistant", "content": "noted"}]})))
    f = proj / "doc.txt"
    f.write_text(DOC)
    return f


def test_a_reused_document_is_stored_once_and_filtered_by(cli, proj):
    f = _setup(cli, proj)
    blob = ok(cli("hash-object", f)).out.strip()
    assert ok(cli("cat-object", "-t", blob)).out.strip() == "blob"  # the text is stored, once, under its id
    # three messages (each under another system prompt), one stored copy of the document
    systems = [e for e in ok(cli("log", "--all", "--json")).json() if e["text"] == DOC]
    assert len(systems) == 3 and {e["parts"][0].get("blob") for e in systems} == {blob}
    ids = lambda *a: sorted(e["id"] for e in ok(cli("log", "--all", "--json", *a)).json())  # noqa: E731
    by_file = ids("-f", f)
    assert len(by_file) == 3 and by_file == sorted(e["id"] for e in systems)
    assert ids("-f", blob) == by_file and ids("-f", blob[:8]) == by_file
    (proj / ".convgit" / "config.toml").write_text(
        (proj / ".convgit" / "config.toml").read_text() + '\n[fragments]\npouch = "doc.txt"\n')
    assert ids("-f", "pouch") == by_file
    # a short fragment matches inside any message; several must all match
    part = proj / "part.txt"
    part.write_text("holds up to eleven litres")
    assert len(ids("-f", part)) == 4
    quote = proj / "quote.txt"
    quote.write_text("Quote:")
    assert len(ids("-f", part, "-f", quote)) == 1
    hits = ok(cli("search", "pelican", "--in", "all", "-f", quote, "--json")).json()
    assert [h["role"] for h in hits] == ["user"]
    # what is not a fragment is a clear error
    assert_error(cli("log", "-f", "nosuch"), "not_found")
    assert_error(cli("log", "--graph", "-f", f), "invalid_input")


def test_log_turns_keeps_the_calls_that_sent_or_brought_back_a_fragment(cli, proj):
    """``log --turns -f`` (was refused): the calls whose prompt, covered messages or answer
    hold the text, a re-sent call that added no message included; -n counts what is kept."""
    ask = {"model": "gpt-4o", "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": DOC}],
           "response": {"role": "assistant", "content": "It holds eleven litres."}}
    ok(cli("commit", "-", "--thread", "doc", input=dumps(ask)))
    ok(cli("commit", "-", "--thread", "doc", input=dumps({**ask, "model": "gpt-4o-mini"})))  # re-sent: adds nothing
    ok(cli("commit", "-", "--thread", "chat", input=dumps({
        "model": "gpt-4o", "messages": [{"role": "user", "content": "hello"}],
        "response": {"role": "assistant", "content": "Hi: eleven litres, as they say."}})))
    f = proj / "doc.txt"
    f.write_text(DOC)
    answer = proj / "answer.txt"
    answer.write_text("eleven litres")
    rows = lambda *a: ok(cli("log", "--turns", "--json", *a)).json()  # noqa: E731
    assert len(rows()) == 3
    by_doc = rows("-f", f)
    assert sorted(r["requested_model"] for r in by_doc) == ["gpt-4o", "gpt-4o-mini"]
    assert {r["thread"] for r in by_doc} == {"doc"}
    assert len(rows("-f", answer)) == 3 and len(rows("-f", answer, "-f", f)) == 2
    assert len(rows("-f", f, "-n", "1")) == 1
    assert rows("-f", f, "-m", "gpt-4o-mini")[0]["requested_model"] == "gpt-4o-mini"
    assert_error(cli("log", "--turns", "-f", "nosuch"), "not_found")
