"""convgit serve: the latency the proxy adds, and how many calls per second it logs.

    .venv/bin/python benchmarks/bench_serve.py                 # defaults: 400 calls per cell
    .venv/bin/python benchmarks/bench_serve.py --calls 1000

The load harness (``--harness lean``, the default; benchmarks/serve_load.py): the fake
provider's answers (tests/helpers/serve.py) served by a lean asyncio HTTP/1.1 server in its
own process, answering at once (``--upstream-delay MS``: after MS, as a model's first token),
and a lean asyncio client with a keep-alive connection per client: together ~0.2-0.3 ms of CPU
a call, so what is measured is the proxy (``--harness httpx``: httpx's async client and the
tests' threaded fake upstream, the harness of the figures before session 11, which answered
only 360-670 calls/s with no proxy at all). The proxy is the real ``convgit serve`` process
on a fresh store with fsync on. In the same run, each cell makes the same calls to the upstream
directly and through the proxy (alternating, so both see the same machine load): time to the
first response byte (TTFB) and to the last, streaming (SSE chat completions) and not, 1 and
32 concurrent clients. "added" is proxy minus direct, per
percentile. Then the sustained rate: 32 clients, stateless conversations starting at 8
messages and growing by 2 per call, until every call is committed to the store (the proxy's
``--json`` line per recorded call); each round first makes the same calls to the upstream
directly (nothing logged: the machine's ceiling for this client and upstream). Last, ``convgit.capture``'s cost per call: the openai SDK
bare and wrapped, alternating, on the fake upstream (median µs per call).

More parts (``--parts``): ``committer``, the committer alone on the sustained run's calls
already spooled (``Recorder.commit_batch`` in batches of 512, a committer behind a burst, and
32, one keeping up); ``drain``, the same through ``convgit serve --drain``; ``llm``, the same
calls logged by llm 0.36's ``log_to_db`` (benchmarks/llm_driver.py in benchmarks/.venv-llm).
``packed``, the committer in batches of 32 once the conversations' threads are packed (their
first calls committed, then ``gc``), with batch moves of packed threads in ``packed-refs``
(docs/format.md §6.3) on and off (``refs.PACKED_MOVES_MIN`` set out of reach), in
alternation. ``growth``, the committer in batches of 32 on a longer run: milliseconds per batch in the
first and the last eighth of the batches, and how much of it is the hole check
(``graph.first_missing``: every batch writes a pack, so a long conversation's messages are
spread over many); with a code that has it, each batch is followed by the idle committer's
pack merge (convgit/serve/compact.py), its time counted in the batch's. ``--sizes`` runs the sustained, committer and drain parts on stores already holding that many
conversations; ``--before DIR`` runs the convgit source tree DIR (e.g. ``git archive main |
tar -x -C DIR``) in alternation with this one, round by round (``--rounds``; medians).

    .venv/bin/python benchmarks/bench_serve.py --parts committer,sustained --sizes 0,10000 --rounds 2 --before /tmp/main
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))
sys.path.insert(0, str(HERE))

import httpx  # noqa: E402

import convgit  # noqa: E402
from helpers.serve import ServeProcess  # noqa: E402


UPSTREAM = "from helpers.serve import FakeUpstream; import time; u = FakeUpstream().start(); print(u.url, flush=True); time.sleep(1e9)"


def pct(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


async def one(client: httpx.AsyncClient, url: str, body: dict) -> tuple[float, float]:
    t0 = time.perf_counter()
    first = None
    async with client.stream("POST", url + "/v1/chat/completions", json=body) as r:
        async for _ in r.aiter_raw():
            if first is None:
                first = time.perf_counter()
    end = time.perf_counter()
    return (first or end) - t0, end - t0


async def cell_lean(direct: str, proxies: dict[str, str], *, stream: bool, conc: int, calls: int) -> dict:
    """``cell`` with the lean client (serve_load.Conn): a keep-alive connection per client and target."""
    from serve_load import Conn

    urls = {"direct": direct, **proxies}
    names = list(urls)
    res = {n: ([], []) for n in names}

    async def worker(k: int) -> None:
        conns = {n: Conn(u) for n, u in urls.items()}
        for i in range(calls // conc):
            body = json.dumps({"model": "gpt-fake", "stream": stream,
                               "messages": [{"role": "user", "content": f"bench {k} {i} {time.time_ns()}"}]}).encode()
            order = names[i % len(names):] + names[:i % len(names)]
            for name in order:
                status, _, ttfb, total = await conns[name].post("/v1/chat/completions", body)
                assert status == 200, status
                res[name][0].append(ttfb * 1000)
                res[name][1].append(total * 1000)
        for c in conns.values():
            await c.close()

    await asyncio.gather(*(worker(k) for k in range(conc)))
    return _added(res, proxies)


def _added(res: dict, proxies: dict) -> dict:
    out = {}
    for name in proxies:
        for what, i in (("ttfb", 0), ("total", 1)):
            for p in (50, 99):
                d, v = pct(res["direct"][i], p), pct(res[name][i], p)
                key = f"{what}_p{p}" if name == "after" else f"{name}_{what}_p{p}"
                out[key] = {"direct": round(d, 2), "proxy": round(v, 2), "added": round(v - d, 2)}
    return out


async def cell(direct: str, proxies: dict[str, str], *, stream: bool, conc: int, calls: int) -> dict:
    """The same calls made directly and through each proxy (``proxies``: name → url), in
    rotating order; per proxy the p50/p99 TTFB and total and what it adds to the direct call."""
    urls = {"direct": direct, **proxies}
    names = list(urls)
    res = {n: ([], []) for n in names}
    limits = httpx.Limits(max_connections=conc * len(names), max_keepalive_connections=conc * len(names))
    async with httpx.AsyncClient(timeout=60, limits=limits) as client:
        async def worker(k: int) -> None:
            for i in range(calls // conc):
                body = {"model": "gpt-fake", "stream": stream,
                        "messages": [{"role": "user", "content": f"bench {k} {i} {time.time_ns()}"}]}
                order = names[i % len(names):] + names[:i % len(names)]
                for name in order:
                    ttfb, total = await one(client, urls[name], body)
                    res[name][0].append(ttfb * 1000)
                    res[name][1].append(total * 1000)

        await asyncio.gather(*(worker(k) for k in range(conc)))
    return _added(res, proxies)


async def sustained_lean(proxy: str, clients: int, calls: int, path: str = "/v1/chat/completions") -> float:
    """``sustained`` with the lean client (serve_load.Conn): a keep-alive connection per client."""
    from serve_load import Conn

    t0 = time.perf_counter()

    async def worker(k: int) -> None:
        conn = Conn(proxy)
        hist = []
        for j in range(4):
            hist += [{"role": "user", "content": f"c{k} warm {j}"}, {"role": "assistant", "content": f"a {j}"}]
        for i in range(calls // clients):
            hist.append({"role": "user", "content": f"c{k} q{i}"})
            status, data, _, _ = await conn.post(path, json.dumps({"model": "gpt-fake", "messages": hist}).encode())
            assert status == 200, data[:300]
            doc = json.loads(data)
            hist.append(doc["choices"][0]["message"] if "choices" in doc else {"role": "assistant", "content": f"r {i}"})
        await conn.close()

    await asyncio.gather(*(worker(k) for k in range(clients)))
    return time.perf_counter() - t0


async def sustained(proxy: str, clients: int, calls: int, path: str = "/v1/chat/completions") -> float:
    """Seconds for ``calls`` stateless calls by ``clients`` concurrent clients. ``path``
    ``/v1/embeddings``: the same request bodies to a path the proxy relays and does not log
    (the fake answers a short JSON; the client adds an answer of its own to the history)."""
    t0 = time.perf_counter()
    async with httpx.AsyncClient(timeout=60) as client:
        async def worker(k: int) -> None:
            hist = []
            for j in range(4):
                hist += [{"role": "user", "content": f"c{k} warm {j}"}, {"role": "assistant", "content": f"a {j}"}]
            for i in range(calls // clients):
                hist.append({"role": "user", "content": f"c{k} q{i}"})
                r = await client.post(proxy + path, json={"model": "gpt-fake", "messages": hist})
                assert r.status_code == 200, r.text
                doc = r.json()
                hist.append(doc["choices"][0]["message"] if "choices" in doc else {"role": "assistant", "content": f"r {i}"})

        await asyncio.gather(*(worker(k) for k in range(clients)))
    return time.perf_counter() - t0


def capture_overhead(upstream: str, store: Path, calls: int) -> dict:
    """Median wall time per ``chat.completions.create`` with the bare openai SDK and with the
    same client wrapped by ``convgit.capture`` (alternating), and the difference in µs."""
    import openai

    from convgit.capture import capture, flush

    bare = openai.OpenAI(base_url=upstream + "/v1", api_key="k", max_retries=0)
    wrapped = capture(openai.OpenAI(base_url=upstream + "/v1", api_key="k", max_retries=0), repo=store)
    times = {"bare": [], "capture": []}
    for i in range(calls):
        for name, c in (("bare", bare), ("capture", wrapped)) if i % 2 == 0 else (("capture", wrapped), ("bare", bare)):
            msgs = [{"role": "user", "content": f"cap {i} {name}"}]
            t = time.perf_counter()
            c.chat.completions.create(model="gpt-fake", messages=msgs)
            times[name].append((time.perf_counter() - t) * 1e6)
    flush()
    b, w = statistics.median(times["bare"]), statistics.median(times["capture"])
    return {"capture_calls": calls, "bare_us": round(b), "capture_us": round(w), "added_us": round(w - b)}


def llm_rate(tmp: Path, calls: int, clients: int = 32) -> dict:
    """The same calls as the sustained run (32 stateless conversations starting at 8 messages,
    growing by 2 per call, the fake upstream's answers) logged by llm 0.36's own
    ``Response.log_to_db`` (benchmarks/llm_driver.py ``stateless``: one ``model.prompt(messages=
    history)`` + ``log_to_db`` per call, a logs.db opened as the llm CLI opens it), in its venv."""
    from bench_scale import ensure_llm, llm_drive
    from helpers.serve import FakeUpstream

    py = ensure_llm()
    if py is None:
        return {"llm": "skipped (no llm venv)"}
    fake = FakeUpstream()
    corpus = []
    hists = []
    for k in range(clients):
        h = []
        for j in range(4):
            h += [{"role": "user", "content": f"c{k} warm {j}"}, {"role": "assistant", "content": f"a {j}"}]
        hists.append(h)
    for i in range(calls // clients):
        for k, h in enumerate(hists):
            h.append({"role": "user", "content": f"c{k} q{i}"})
            req = {"model": "gpt-fake", "messages": h}
            answer = fake.chat_completion(req, json.dumps(req).encode())["choices"][0]["message"]
            h.append({"role": "assistant", "content": answer["content"]})
            corpus.append([dict(m) for m in h])
    doc = llm_drive(py, corpus, tmp / "logs.db", tmp, {k: v for k, v in os.environ.items()
                                                         if not k.startswith("LLM_")} | {"LLM_USER_PATH": str(tmp)})
    (tmp / "logs.db").unlink()
    return {"llm_version": doc["llm_version"], "llm_calls": doc["calls"],
            "llm_log_to_db_calls_per_s": round(doc["calls"] / doc["log_to_db_s"], 1),
            "llm_ms_per_call": round(doc["log_to_db_s"] * 1000 / doc["calls"], 2), "llm_db_bytes": doc["db_bytes"]}


def sustained_records(calls: int, clients: int = 32) -> list:
    """The sustained run's calls as the proxy spools them (CallRecords with the fake
    upstream's answers), without the network."""
    import uuid

    from convgit.serve.record import CallRecord
    from helpers.serve import FakeUpstream

    fake = FakeUpstream()
    hists = []
    for k in range(clients):
        h = []
        for j in range(4):
            h += [{"role": "user", "content": f"c{k} warm {j}"}, {"role": "assistant", "content": f"a {j}"}]
        hists.append(h)
    out = []
    for i in range(calls // clients):
        for k, h in enumerate(hists):
            h.append({"role": "user", "content": f"c{k} q{i}"})
            req = {"model": "gpt-fake", "messages": h}
            body = json.dumps(req).encode()
            resp = fake.chat_completion(req, body)
            out.append(CallRecord(id=uuid.uuid4().hex, api="openai-chat", request=body, response=json.dumps(resp).encode(),
                                  status=200, started_at=int(time.time() * 1000), duration_ms=2))
            h.append(resp["choices"][0]["message"])
    return out


def drain_rate(base: Path, work: Path, records: list, code: str | None) -> float:
    """Logging capacity: the spooled calls committed by ``convgit serve --drain`` (the
    committer's own path: batches of 512, fsync on) on a copy of ``base``; calls/s."""
    from convgit.serve.record import encode_record
    from convgit.serve.spool import frame

    shutil.copytree(base, work)
    d = work / ".convgit" / "spool"
    d.mkdir(exist_ok=True)
    (d / f"{int(time.time() * 1000)}-1-0.spool").write_bytes(b"".join(frame(encode_record(r)) for r in records))
    env = {k: v for k, v in os.environ.items() if not k.startswith("CONVGIT_")} | (serve_env(code) or {})
    t = time.perf_counter()
    p = subprocess.run([sys.executable, "-m", "convgit", "-C", str(work), "serve", "--drain", "--json"], env=env,
                       capture_output=True, text=True, check=True, cwd=str(work.parent))
    el = time.perf_counter() - t
    doc = json.loads(p.stdout.strip().splitlines()[-1])
    assert doc.get("recorded") == len(records), (doc, p.stderr[-2000:])
    shutil.rmtree(work)
    return len(records) / el


COMMITTER = """
import sys, time
from pathlib import Path
from convgit.repository import Repository
from convgit.serve.record import decode_record
from convgit.serve.recorder import Recorder
from convgit.serve.spool import read_frames
store, frames, batch = sys.argv[1], sys.argv[2], int(sys.argv[3])
records = [decode_record(f) for f in read_frames(Path(frames))]
repo = Repository.open(Path(store) / ".convgit")
try:  # the serve committer's: HEAD left to it when idle (a code that has it)
    rec = Recorder(repo, follow_head=False)
except TypeError:
    rec = Recorder(repo)
t, c = time.perf_counter(), time.process_time()
for i in range(0, len(records), batch):
    docs = rec.commit_batch(records[i:i + batch])
    assert all("not_recorded" not in d for d in docs), docs[0]
print(len(records) / (time.perf_counter() - t), (time.process_time() - c) * 1000 / len(records))
"""


GROWTH = """
import json, statistics, sys, time
from pathlib import Path
from convgit import decide
from convgit.repository import Repository
from convgit.serve.record import decode_record
from convgit.serve.recorder import Recorder
from convgit.serve.spool import read_frames
store, frames, batch = sys.argv[1], sys.argv[2], int(sys.argv[3])
records = [decode_record(f) for f in read_frames(Path(frames))]
repo = Repository.open(Path(store) / ".convgit")
rec = Recorder(repo)
spent = [0.0]
real = decide.first_missing
def timed(*a, **k):
    t = time.perf_counter()
    try:
        return real(*a, **k)
    finally:
        spent[0] += time.perf_counter() - t
decide.first_missing = timed
try:  # what the committer does between batches when no call waits (this code has it?)
    from convgit.serve.compact import compact, merge_due
except ImportError:
    compact = None
rows = []
for i in range(0, len(records), batch):
    spent[0] = 0.0
    t = time.perf_counter()
    rec.commit_batch(records[i:i + batch])
    if compact is not None and merge_due(repo.objects):
        compact(repo, loose=False)
    rows.append(((time.perf_counter() - t) * 1000, spent[0] * 1000))
k = max(1, len(rows) // 8)
f = lambda part, j: round(statistics.median(r[j] for r in part), 1)
print(json.dumps({"batches": len(rows), "packs": len(repo.objects.packs()), "first_ms": f(rows[:k], 0),
                  "first_hole_check_ms": f(rows[:k], 1), "last_ms": f(rows[-k:], 0), "last_hole_check_ms": f(rows[-k:], 1)}))
"""


PACKED = """
import sys, time
from pathlib import Path
from convgit import refs
from convgit.gc import gc
from convgit.repository import Repository
from convgit.serve.record import decode_record
from convgit.serve.recorder import Recorder
from convgit.serve.spool import read_frames
store, frames, batch, mode = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
records = [decode_record(f) for f in read_frames(Path(frames))]
repo = Repository.open(Path(store) / ".convgit")
Recorder(repo).commit_batch(records[:32])  # each conversation's first call: its thread
gc(repo)  # packs the refs (and the objects)
repo.close()
if mode == "off":
    refs.PACKED_MOVES_MIN = 10 ** 9
repo = Repository.open(Path(store) / ".convgit")
rec = Recorder(repo)
rest = records[32:]
t = time.perf_counter()
for i in range(0, len(rest), batch):
    docs = rec.commit_batch(rest[i:i + batch])
    assert all("not_recorded" not in d for d in docs), docs[0]
el = time.perf_counter() - t
loose = sum(1 for _ in (Path(store) / ".convgit" / "refs" / "threads").iterdir())
print(len(rest) / el, loose)
"""


def committer_rate(base: Path, work: Path, frames: Path, batch: int, code: str | None) -> tuple[float, float]:
    """Logging capacity: the committer alone (``Recorder.commit_batch``: build each record,
    commit the batch, fsync on) on spooled calls, in batches of ``batch`` (512: a committer
    behind a burst; 32: one keeping up with 32 clients), on a copy of ``base``; calls/s."""
    shutil.copytree(base, work)
    env = {k: v for k, v in os.environ.items() if not k.startswith("CONVGIT_")} | (serve_env(code) or {})
    # (cwd: not this checkout, whose convgit would come first on sys.path)
    p = subprocess.run([sys.executable, "-c", COMMITTER, str(work), str(frames), str(batch)], env=env,
                       capture_output=True, text=True, check=True, cwd=str(work.parent))
    shutil.rmtree(work)
    rate, cpu = p.stdout.strip().splitlines()[-1].split()
    return float(rate), float(cpu)


def prefill(store: Path, conversations: int) -> None:
    """A store holding ``conversations`` earlier 8-message conversations (bulk commits of
    2,000, then ``gc --auto``)."""
    convgit.init(store).close()
    if not conversations:
        return
    repo = convgit.open_repo(store)
    try:
        for i in range(0, conversations, 2000):
            docs = [{"messages": [{"role": ("user", "assistant")[j % 2], "content": f"old {k} message {j}"}
                                  for j in range(8)]} for k in range(i, min(conversations, i + 2000))]
            convgit.commit_many(repo, docs)
        # as the command line would have left it: gc --auto merges the build's packs (one per
        # 2,000 conversations; else the proxy's first check starts that merge mid-run)
        convgit.gc(repo, auto=True)
    finally:
        repo.close()


def _cpu_of(pid: int) -> float:
    """CPU seconds (user + system) process ``pid`` and its live children (the committer
    process) have used, all their threads (Linux /proc)."""
    total = 0.0
    for p in [pid] + _children(pid):
        try:
            f = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")
    return total


def _children(pid: int) -> list[int]:
    out = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            out += [int(x) for x in (task / "children").read_text().split()]
        except OSError:
            pass
    return out


def _befores(trees: str | None) -> list[tuple[str, str]]:
    """--before's trees as (name, path): "before", then "before 2", "before 3" ..."""
    paths = [t for t in (trees or "").split(",") if t]
    return [("before" if i == 0 else f"before {i + 1}", p) for i, p in enumerate(paths)]


def serve_env(code: str | None) -> dict | None:
    """The environment that makes the proxy run the convgit at ``code`` (a source tree)."""
    return None if code is None else {"PYTHONPATH": code}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--calls", type=int, default=400, help="calls per latency cell (each made directly and via the proxy)")
    ap.add_argument("--sustained", type=int, default=2000, help="calls of the sustained-rate run")
    ap.add_argument("--parts", default="latency,sustained,capture",
                    help="which parts to run (comma-separated: latency, sustained, relay, committer, packed, growth, drain, capture, llm)")
    ap.add_argument("--sizes", default="0", help="sustained: conversations already in the store (comma-separated)")
    ap.add_argument("--rounds", type=int, default=1, help="sustained: runs per size and code (interleaved; medians)")
    ap.add_argument("--before", default=None,
                    help="source trees of other convgits (comma-separated; e.g. `git archive` of main), each "
                         "run by the proxy in alternation with this one: before/after in the same run")
    ap.add_argument("--committers", default="process",
                    help="sustained: the committer of each proxy run, in alternation (comma-separated: process, "
                         "thread; 'default' passes no --committer, for a --before code that has no such option)")
    ap.add_argument("--harness", choices=("lean", "httpx"), default="lean",
                    help="lean: the load harness of serve_load.py (asyncio HTTP/1.1 client and upstream); httpx: "
                         "httpx's async client and the tests' threaded fake upstream (the figures before session 11)")
    ap.add_argument("--cells", default="whole:1,whole:32,stream:1,stream:32",
                    help="latency: which cells to run (comma-separated: whole:1, whole:32, stream:1, stream:32)")
    ap.add_argument("--upstream-delay", type=float, default=0.0,
                    help="lean harness: ms the fake upstream waits before each answer (a model's time to first "
                         "token; 0: at once, and 32 clients then load the proxy to its limit)")
    args = ap.parse_args()
    parts = set(args.parts.split(","))
    global sustained, cell, arun
    if args.harness == "lean":
        from serve_load import run as arun

        sustained, cell = sustained_lean, cell_lean
        upstream_cmd = [sys.executable, str(HERE / "serve_load.py"), "upstream", "0", str(args.upstream_delay)]
    else:
        arun = asyncio.run
        upstream_cmd = [sys.executable, "-c", UPSTREAM]
    # The fake upstream in its own process: in this one it would share the GIL with the client.
    up = subprocess.Popen(upstream_cmd, stdout=subprocess.PIPE, text=True, cwd=str(HERE.parent / "tests"))
    up.url = up.stdout.readline().strip()
    up.stop = up.kill
    tmp = Path(tempfile.mkdtemp(prefix="bench-serve-"))
    sp = None
    try:
        rows = []
        if "latency" in parts:
            # this code's proxy ("after") and, with --before, the other one's, each on its own
            # store, called in rotation with the upstream directly
            procs = {}
            for name, code in [("after", None)] + _befores(args.before):
                for c in args.committers.split(","):
                    variant = name if c == "process" else f"{name} (--committer {c})"
                    convgit.init(tmp / variant).close()
                    extra = ("--committer", c) if c != "default" else ()
                    procs[variant] = ServeProcess(tmp / variant, up.url, "--no-store-raw", *extra, env=serve_env(code))
            urls = {name: p.wait_listening() for name, p in procs.items()}
            for stream in (False, True):
                for conc in (1, 32):
                    if f"{'stream' if stream else 'whole'}:{conc}" not in args.cells.split(","):
                        continue
                    r = arun(cell(up.url, urls, stream=stream, conc=conc, calls=args.calls))
                    rows.append(({"stream": stream, "clients": conc}, r))
                    print(json.dumps({"stream": stream, "clients": conc, **r}), flush=True)
            for name, p in procs.items():
                p.stop()
                shutil.rmtree(tmp / name)
        if "sustained" in parts:
            # a store per size, copied for each run; raw bodies kept (the default), fsync on
            codes = [("after", None)] + _befores(args.before)
            committers = args.committers.split(",")
            codes = [(name if c == "process" else f"{name} (--committer {c})", code, c) for name, code in codes
                     for c in committers]
            rates: dict[tuple[int, str], list[float]] = {}
            cpus: dict[tuple[int, str], list[float]] = {}
            for size in (int(x) for x in args.sizes.split(",")):
                prefill(tmp / f"base-{size}", size)
                for rnd in range(args.rounds):
                    # the ceiling: the same calls made to the upstream directly, nothing logged
                    direct = arun(sustained(up.url, 32, args.sustained))
                    n = (args.sustained // 32) * 32
                    rates.setdefault((size, "direct (nothing logged)"), []).append(n / direct)
                    print(json.dumps({"code": "direct", "sustained_calls": n, "answered_s": round(direct, 2),
                                      "calls_per_s": round(n / direct, 1)}), flush=True)
                    for name, code, committer in (codes if rnd % 2 == 0 else codes[::-1]):
                        shutil.copytree(tmp / f"base-{size}", tmp / "s")
                        # A copy has a new ref journal (another inode), so its index reads every
                        # ref once: done here, as on the store a user has, not in the timed run.
                        subprocess.run([sys.executable, "-m", "convgit", "-C", str(tmp / "s"), "status"], cwd=str(tmp),
                                       env={**os.environ, **(serve_env(code) or {})}, check=True, capture_output=True)
                        extra = ("--committer", committer) if committer != "default" else ()
                        sp = ServeProcess(tmp / "s", up.url, *extra, env=serve_env(code))
                        url = sp.wait_listening()
                        time.sleep(1.0)  # (the committer process's start-up is not a call's cost)
                        c0 = _cpu_of(sp.proc.pid)
                        answered = arun(sustained(url, 32, args.sustained))
                        t0 = time.perf_counter()
                        n = (args.sustained // 32) * 32
                        sp.wait_calls(n, timeout=600)
                        logged = answered + (time.perf_counter() - t0)
                        cpu = (_cpu_of(sp.proc.pid) - c0) * 1000 / n  # the server process (and its committer's)
                        sp.stop()
                        shutil.rmtree(tmp / "s")
                        rate = n / logged
                        rates.setdefault((size, name), []).append(rate)
                        cpus.setdefault((size, name), []).append(cpu)
                        print(json.dumps({"code": name, "store_conversations": size, "sustained_calls": n,
                                          "answered_s": round(answered, 2), "all_logged_s": round(logged, 2),
                                          "calls_per_s_logged": round(rate, 1), "proxy_cpu_ms_per_call": round(cpu, 2)}),
                              flush=True)
                shutil.rmtree(tmp / f"base-{size}")
            print("\n| store (conversations) | code | runs | calls/s logged (median) | proxy CPU ms per call (median) |")
            print("|---|---|---|---|---|")
            for (size, name), xs in rates.items():
                c = cpus.get((size, name))
                print(f"| {size:,} | {name} | {len(xs)} | {statistics.median(xs):.0f} | "
                      f"{statistics.median(c):.2f} |" if c else f"| {size:,} | {name} | {len(xs)} | {statistics.median(xs):.0f} | - |")
        if "relay" in parts:
            # Is the relaying the ceiling? In each round, in rotation: the upstream directly,
            # the proxy on a path it relays without logging (nothing spooled or committed),
            # and the proxy logging every call (until each one is committed).
            relay: dict[str, list[tuple[float, float]]] = {}
            n = (args.sustained // 32) * 32
            for rnd in range(args.rounds):
                convgit.init(tmp / "r").close()
                sp = ServeProcess(tmp / "r", up.url)
                url = sp.wait_listening()
                pid = sp.proc.pid
                kinds = [("direct", up.url, "/v1/chat/completions"), ("proxy, not logged", url, "/v1/embeddings"),
                         ("proxy, logged", url, "/v1/chat/completions")]
                for kind, target, path in (kinds if rnd % 2 == 0 else kinds[::-1]):
                    c0, w0 = _cpu_of(pid), time.perf_counter()
                    answered = arun(sustained(target, 32, args.sustained, path))
                    if kind == "proxy, logged":
                        sp.wait_calls(n, timeout=600)  # (the only logged calls of this server)
                    el = time.perf_counter() - w0
                    cpu = _cpu_of(pid) - c0 if target == url else 0.0
                    relay.setdefault(kind, []).append((n / el, cpu * 1000 / n))
                    print(json.dumps({"relay": kind, "round": rnd, "calls": n, "answered_s": round(answered, 2),
                                      "done_s": round(el, 2), "calls_per_s": round(n / el, 1),
                                      "proxy_cpu_ms_per_call": round(cpu * 1000 / n, 2)}), flush=True)
                sp.stop()
                sp = None
                shutil.rmtree(tmp / "r")
            print("\n| what | runs | calls/s (median) | proxy process CPU ms per call (median) |")
            print("|---|---|---|---|")
            for kind, xs in relay.items():
                print(f"| {kind} | {len(xs)} | {statistics.median(x[0] for x in xs):.0f} | "
                      f"{statistics.median(x[1] for x in xs):.2f} |")
        if "drain" in parts:
            codes = [("after", None)] + _befores(args.before)
            records = sustained_records(args.sustained)
            drates: dict[tuple[int, str], list[float]] = {}
            for size in (int(x) for x in args.sizes.split(",")):
                prefill(tmp / f"base-{size}", size)
                for rnd in range(args.rounds):
                    for name, code in (codes if rnd % 2 == 0 else codes[::-1]):
                        rate = drain_rate(tmp / f"base-{size}", tmp / "d", records, code)
                        drates.setdefault((size, name), []).append(rate)
                        print(json.dumps({"drain": name, "store_conversations": size, "calls": len(records),
                                          "calls_per_s": round(rate, 1)}), flush=True)
                shutil.rmtree(tmp / f"base-{size}")
            print("\n| store (conversations) | code | runs | spooled calls committed per s (median) |")
            print("|---|---|---|---|")
            for (size, name), xs in drates.items():
                print(f"| {size:,} | {name} | {len(xs)} | {statistics.median(xs):.0f} |")
        if "committer" in parts:
            from convgit.serve.record import encode_record
            from convgit.serve.spool import frame

            codes = [("after", None)] + _befores(args.before)
            frames = tmp / "calls.frames"
            frames.write_bytes(b"".join(frame(encode_record(r)) for r in sustained_records(args.sustained)))
            crates: dict[tuple[int, int, str], list[float]] = {}
            for size in (int(x) for x in args.sizes.split(",")):
                prefill(tmp / f"base-{size}", size)
                for rnd in range(args.rounds):
                    for batch in (512, 32):
                        for name, code in (codes if rnd % 2 == 0 else codes[::-1]):
                            rate, cpu = committer_rate(tmp / f"base-{size}", tmp / "c", frames, batch, code)
                            crates.setdefault((size, batch, name), []).append((rate, cpu))
                            print(json.dumps({"committer": name, "store_conversations": size, "batch": batch,
                                              "calls_per_s": round(rate, 1), "cpu_ms_per_call": round(cpu, 3)}),
                                  flush=True)
                shutil.rmtree(tmp / f"base-{size}")
            print("\n| store (conversations) | batch | code | runs | calls committed per s (median) | CPU ms per call (median) |")
            print("|---|---|---|---|---|---|")
            for (size, batch, name), xs in crates.items():
                print(f"| {size:,} | {batch} | {name} | {len(xs)} | {statistics.median(x[0] for x in xs):.0f} "
                      f"| {statistics.median(x[1] for x in xs):.2f} |")
        if "packed" in parts:
            from convgit.serve.record import encode_record
            from convgit.serve.spool import frame

            frames = tmp / "calls.frames"
            frames.write_bytes(b"".join(frame(encode_record(r)) for r in sustained_records(args.sustained)))
            prates: dict[str, list[float]] = {}
            env = {k: v for k, v in os.environ.items() if not k.startswith("CONVGIT_")}
            for rnd in range(args.rounds):
                for mode in (("on", "off") if rnd % 2 == 0 else ("off", "on")):
                    convgit.init(tmp / "p").close()
                    p = subprocess.run([sys.executable, "-c", PACKED, str(tmp / "p"), str(frames), "32", mode], env=env,
                                       capture_output=True, text=True, check=True, cwd=str(tmp))
                    shutil.rmtree(tmp / "p")
                    rate, loose = p.stdout.strip().splitlines()[-1].split()
                    prates.setdefault(mode, []).append(float(rate))
                    print(json.dumps({"packed_moves": mode, "calls_per_s": round(float(rate), 1),
                                      "loose_refs_after": int(loose)}), flush=True)
            print("\n| ref moves through packed-refs | runs | calls committed per s (median) |")
            print("|---|---|---|")
            for mode, xs in prates.items():
                print(f"| {mode} | {len(xs)} | {statistics.median(xs):.0f} |")
        if "growth" in parts:
            from convgit.serve.record import encode_record
            from convgit.serve.spool import frame

            codes = [("after", None)] + _befores(args.before)
            frames = tmp / "calls.frames"
            frames.write_bytes(b"".join(frame(encode_record(r)) for r in sustained_records(args.sustained)))
            grows: dict[str, list[dict]] = {}
            for rnd in range(args.rounds):
                for name, code in (codes if rnd % 2 == 0 else codes[::-1]):
                    convgit.init(tmp / "g").close()
                    env = {k: v for k, v in os.environ.items() if not k.startswith("CONVGIT_")} | (serve_env(code) or {})
                    p = subprocess.run([sys.executable, "-c", GROWTH, str(tmp / "g"), str(frames), "32"], env=env,
                                       capture_output=True, text=True, check=True, cwd=str(tmp))
                    shutil.rmtree(tmp / "g")
                    doc = json.loads(p.stdout.strip().splitlines()[-1])
                    grows.setdefault(name, []).append(doc)
                    print(json.dumps({"growth": name, **doc}), flush=True)
            print("\n| code | runs | batches (packs) | ms per batch, first eighth (hole check) | last eighth (hole check) |")
            print("|---|---|---|---|---|")
            for name, docs in grows.items():
                def med(key):
                    return statistics.median(d[key] for d in docs)
                print(f"| {name} | {len(docs)} | {docs[0]['batches']} ({docs[0]['packs']}) | {med('first_ms'):.0f} "
                      f"({med('first_hole_check_ms'):.1f}) | {med('last_ms'):.0f} ({med('last_hole_check_ms'):.1f}) |")
        if "llm" in parts:
            print(json.dumps(llm_rate(tmp, args.sustained)), flush=True)
        if "capture" in parts:
            convgit.init(tmp / "s").close()
            print(json.dumps(capture_overhead(up.url, tmp / "s", min(args.calls, 300))), flush=True)
            shutil.rmtree(tmp / "s")
        if rows:
            print("\n| calls | clients | TTFB p50 direct / proxy (added) | TTFB p99 (added) | total p50 (added) | total p99 (added) |")
            print("|---|---|---|---|---|---|")
        for k, r in rows:
            variants = [""] + sorted({key[:-len("ttfb_p50")] for key in r if key.endswith("_ttfb_p50")})
            for prefix in variants:
                def f(key):
                    c = r[prefix + key]
                    return f"{c['direct']} / {c['proxy']} (+{c['added']})"
                label = ("stream" if k["stream"] else "whole") + (f" ({prefix[:-1]})" if prefix else "")
                print(f"| {label} | {k['clients']} | {f('ttfb_p50')} | {f('ttfb_p99')} | "
                      f"{f('total_p50')} | {f('total_p99')} |")
    finally:
        if sp is not None:
            sp.stop()  # (a no-op when it stopped already)
        up.stop()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
