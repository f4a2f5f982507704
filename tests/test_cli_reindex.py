"""The index is a cache: every command answers exactly the same after it is rebuilt (DESIGN
§6), whether it was deleted, emptied, garbled, or rebuilt with `convgit reindex`."""

from __future__ import annotations

import pytest

from helpers.cli import cli, conv, dumps, env, ok, proj  # noqa: F401  (fixtures)

COMMANDS = [
    ["log", "--json"],
    ["log", "--all", "--json"],
    ["log", "side", "--json"],
    ["log", "--all", "--reverse", "-n", "5", "--json"],
    ["show", "--json"],
    ["show", "main~1", "--json"],
    ["show", "side", "--json"],
    ["threads", "--json"],
    ["rev-parse", "main", "main~2", "HEAD", "side~1", "--json"],
    ["show-ref", "--json"],
    # Search and the filters read the full-text index and the unreachable rows the delete left.
    ["search", "q1 OR a1 OR s1 OR other OR edited OR a3", "-n", "0", "--in", "all", "--json"],
    ["search", "q*", "--latest", "--json"],
    ["log", "--all", "--id-gte", "0", "--json"],
    ["log", "--all", "-m", "gpt-4o", "--role", "assistant", "--json"],
    ["log", "-u", "-s", "--json"],
    # The human forms read the same index.
    ["log"],
    ["log", "--all", "--oneline"],
    ["log", "--all", "--graph"],
    ["show"],
    ["threads"],
]


@pytest.fixture
def busy(cli, proj):
    """Continuations, a recorded call, forks (by commit and by `fork`), a rename, a delete."""
    def c(doc, *args):
        return ok(cli("commit", "-", "--json", *args, input=dumps(doc))).json()

    c(conv("q1", "a1"), "--thread", "main")
    c(conv("q1", "a1", "q2", "a2"))  # stateless continuation of main
    c({"model": "gpt-4o", "messages": conv("q1", "a1", "q2", "a2", "q3"),
       "response": {"object": "chat.completion", "model": "gpt-4o-2024-08-06",
                    "choices": [{"message": {"role": "assistant", "content": "a3"}, "finish_reason": "stop"}],
                    "usage": {"prompt_tokens": 5, "completion_tokens": 1}}})
    c(conv("q1", "a1", "other"))  # a new thread sharing a prefix
    c(conv("q1", "a1", "q2", "edited"), "--thread", "main", "--on-conflict", "fork")
    ok(cli("fork", "main~4", "side-tmp"))  # at a1
    c(conv("q1", "a1", "s1", "s2"), "--thread", "side-tmp")  # fast-forward the fork
    ok(cli("threads", "rename", "side-tmp", "side"))
    ok(cli("fork", "main", "doomed"))
    ok(cli("threads", "delete", "doomed"))
    c(conv("unrelated root"), "--thread", "solo", "-m", "m1")
    ok(cli("switch", "main"))
    return proj / ".convgit"


def snapshot(cli) -> dict[str, str]:
    return {" ".join(args): ok(cli(*args)).out for args in COMMANDS}


def _delete(store):
    for f in store.glob("index.sqlite*"):
        f.unlink()


def _empty(store):
    _delete(store)
    (store / "index.sqlite").write_bytes(b"")


def _garble(store):
    _delete(store)
    (store / "index.sqlite").write_bytes(b"SQLite format 3\x00" + b"\x17" * 4000)


@pytest.mark.parametrize("damage", [_delete, _empty, _garble, "reindex"], ids=["deleted", "empty", "garbled", "reindex"])
def test_every_command_answers_the_same_after_a_rebuild(cli, busy, damage):
    before = snapshot(cli)
    assert len(ok(cli("threads", "--json")).json()) == 5
    if damage == "reindex":
        ok(cli("reindex"))
    else:
        damage(busy)
    after = snapshot(cli)
    for k in before:
        assert after[k] == before[k], k
    assert (busy / "index.sqlite").stat().st_size > 0


def test_rebuilt_index_keeps_turn_details(cli, busy):
    top = ok(cli("log", "main", "-n", "1", "--json")).json()[0]
    assert top["model"] == "gpt-4o-2024-08-06" and top["started_at"]
    _delete(busy)
    assert ok(cli("log", "main", "-n", "1", "--json")).json()[0] == top
