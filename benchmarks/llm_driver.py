"""Drive Simon Willison's `llm` logging path on a benchmark corpus (peer comparison).

Runs inside the separate venv benchmarks/.venv-llm (never imports convgit). bench_ingest.py
calls it as a subprocess:

    .venv-llm/bin/python llm_driver.py MODE CORPUS.json LOGS.db

CORPUS.json is a list of conversations, each a list of {"role", "content"} alternating
user/assistant. MODE:

- ``chat``: what `llm chat` / `llm -c` do. One ``Conversation`` per conversation; each
  user message is a prompt, answered by a scripted model that returns the corpus's next
  assistant message; every response is logged with ``response.log_to_db(db)`` right after it
  completes (one SQLite transaction per response, as the CLI does).
- ``stateless``: what a program re-sending the whole history does. One response per
  conversation: ``model.prompt(messages=all but the last message)`` answered with the last
  (assistant) message, logged with ``log_to_db`` (one transaction per conversation).

The model is a tiny in-process ``llm.Model`` ("replay"): no network, no plugin. Everything
after the model's answer — ``Response.log_to_db`` → ``llm.logs.LogStore.log`` (migrations
check, message hashing, dedup look-ups, inserts, turn row, commit) — is llm's own code,
on a logs.db opened the way the CLI opens it (``sqlite_utils.Database(path)``, SQLite's
defaults: rollback journal, synchronous=FULL).

Prints one JSON document: timings (total and log_to_db only), counts, file size, pragmas.
"""

from __future__ import annotations

import json
import os
import sys
import time

import llm
import sqlite_utils
from llm.logs import LogStore
from llm.parts import Message, TextPart


class Replay(llm.Model):
    """Answers each prompt with the next scripted text."""

    model_id = "replay"
    can_stream = False

    def __init__(self) -> None:
        self.script: list[str] = []

    def execute(self, prompt, stream, response, conversation=None):
        yield self.script.pop()


def msg(m: dict) -> Message:
    return Message(role=m["role"], parts=[TextPart(text=m["content"])])


def run_chat(model: Replay, db, corpus) -> tuple[float, int]:
    log_s = 0.0
    calls = 0
    for conv in corpus:
        c = model.conversation()
        for i in range(0, len(conv) - 1, 2):
            user, answer = conv[i], conv[i + 1]
            assert user["role"] == "user" and answer["role"] == "assistant"
            model.script.append(answer["content"])
            r = c.prompt(user["content"], stream=False)
            r.text()
            t = time.perf_counter()
            r.log_to_db(db)
            log_s += time.perf_counter() - t
            calls += 1
    return log_s, calls


def run_stateless(model: Replay, db, corpus) -> tuple[float, int]:
    log_s = 0.0
    calls = 0
    for conv in corpus:
        assert conv[-1]["role"] == "assistant"
        model.script.append(conv[-1]["content"])
        r = model.prompt(messages=[msg(m) for m in conv[:-1]], stream=False)
        r.text()
        t = time.perf_counter()
        r.log_to_db(db)
        log_s += time.perf_counter() - t
        calls += 1
    return log_s, calls


def main() -> None:
    mode, corpus_path, db_path = sys.argv[1:4]
    with open(corpus_path, encoding="utf-8") as f:
        corpus = json.load(f)
    db = sqlite_utils.Database(db_path)
    # Open + migrate outside the timed loop (log_to_db re-checks migrations on every call).
    LogStore(db)
    before = {t: db[t].count for t in ("messages", "parts", "turns", "threads")}
    model = Replay()
    t0 = time.perf_counter()
    if mode == "chat":
        log_s, calls = run_chat(model, db, corpus)
    elif mode == "stateless":
        log_s, calls = run_stateless(model, db, corpus)
    else:
        raise SystemExit(f"unknown mode {mode}")
    total_s = time.perf_counter() - t0
    after = {t: db[t].count for t in ("messages", "parts", "turns", "threads")}
    pragmas = {
        "journal_mode": db.execute("pragma journal_mode").fetchone()[0],
        "synchronous": db.execute("pragma synchronous").fetchone()[0],
        "page_size": db.execute("pragma page_size").fetchone()[0],
    }
    db.close()
    print(json.dumps({
        "mode": mode,
        "llm_version": llm.__version__ if hasattr(llm, "__version__") else _version(),
        "calls": calls,
        "conversations": len(corpus),
        "messages_in_corpus": sum(len(c) for c in corpus),
        "total_s": total_s,
        "log_to_db_s": log_s,
        "rows_before": before,
        "rows_after": after,
        "db_bytes": os.path.getsize(db_path),
        "pragmas": pragmas,
    }))


def _version() -> str:
    from importlib.metadata import version

    return version("llm")


if __name__ == "__main__":
    main()
