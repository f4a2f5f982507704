"""convgit serve: the latency the proxy adds, and how many calls per second it logs.

    .venv/bin/python benchmarks/bench_serve.py                 # defaults: 400 calls per cell
    .venv/bin/python benchmarks/bench_serve.py --calls 1000

The upstream is the tests' fake provider (tests/serve_helpers.py: a real HTTP server on
127.0.0.1, threaded, answering at once), in its own process; the proxy is the real ``convgit serve`` process on a
fresh store with fsync on. In the same run, each cell makes the same calls to the upstream
directly and through the proxy (alternating, so both see the same machine load) with httpx's
async client: time to the first response byte (TTFB) and to the last, streaming (SSE chat
completions) and not, 1 and 32 concurrent clients. "added" is proxy minus direct, per
percentile. Then the sustained rate: 32 clients, stateless conversations starting at 8
messages and growing by 2 per call, until every call is committed to the store (the proxy's
``--json`` line per recorded call). Last, ``convgit.capture``'s cost per call: the openai SDK
bare and wrapped, alternating, on the fake upstream (median µs per call).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))

import httpx  # noqa: E402

import convgit  # noqa: E402
from serve_helpers import ServeProcess  # noqa: E402


UPSTREAM = "from serve_helpers import FakeUpstream; import time; u = FakeUpstream().start(); print(u.url, flush=True); time.sleep(1e9)"


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


async def cell(direct: str, proxy: str, *, stream: bool, conc: int, calls: int) -> dict:
    res = {"direct": ([], []), "proxy": ([], [])}
    limits = httpx.Limits(max_connections=conc * 2, max_keepalive_connections=conc * 2)
    async with httpx.AsyncClient(timeout=60, limits=limits) as client:
        async def worker(k: int) -> None:
            for i in range(calls // conc):
                body = {"model": "gpt-fake", "stream": stream,
                        "messages": [{"role": "user", "content": f"bench {k} {i} {time.time_ns()}"}]}
                for name, url in (("direct", direct), ("proxy", proxy)) if i % 2 == 0 else (("proxy", proxy), ("direct", direct)):
                    ttfb, total = await one(client, url, body)
                    res[name][0].append(ttfb * 1000)
                    res[name][1].append(total * 1000)

        await asyncio.gather(*(worker(k) for k in range(conc)))
    out = {}
    for what, i in (("ttfb", 0), ("total", 1)):
        for p in (50, 99):
            d, v = pct(res["direct"][i], p), pct(res["proxy"][i], p)
            out[f"{what}_p{p}"] = {"direct": round(d, 2), "proxy": round(v, 2), "added": round(v - d, 2)}
    return out


async def sustained(proxy: str, clients: int, calls: int) -> float:
    t0 = time.perf_counter()
    async with httpx.AsyncClient(timeout=60) as client:
        async def worker(k: int) -> None:
            hist = []
            for j in range(4):
                hist += [{"role": "user", "content": f"c{k} warm {j}"}, {"role": "assistant", "content": f"a {j}"}]
            for i in range(calls // clients):
                hist.append({"role": "user", "content": f"c{k} q{i}"})
                r = await client.post(proxy + "/v1/chat/completions", json={"model": "gpt-fake", "messages": hist})
                hist.append(r.json()["choices"][0]["message"])

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


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--calls", type=int, default=400, help="calls per latency cell (each made directly and via the proxy)")
    ap.add_argument("--sustained", type=int, default=2000, help="calls of the sustained-rate run")
    args = ap.parse_args()
    # The fake upstream in its own process: in this one it would share the GIL with the client.
    up = subprocess.Popen([sys.executable, "-c", UPSTREAM], stdout=subprocess.PIPE, text=True,
                          cwd=str(HERE.parent / "tests"))
    up.url = up.stdout.readline().strip()
    up.stop = up.kill
    tmp = Path(tempfile.mkdtemp(prefix="bench-serve-"))
    sp = None
    try:
        convgit.init(tmp / "s").close()
        sp = ServeProcess(tmp / "s", up.url, "--no-store-raw")
        url = sp.wait_listening()
        rows = []
        for stream in (False, True):
            for conc in (1, 32):
                r = asyncio.run(cell(up.url, url, stream=stream, conc=conc, calls=args.calls))
                rows.append(({"stream": stream, "clients": conc}, r))
                print(json.dumps({"stream": stream, "clients": conc, **r}), flush=True)
        sp.stop()
        # sustained: a fresh store, raw bodies kept (the default), fsync on
        shutil.rmtree(tmp / "s")
        convgit.init(tmp / "s").close()
        sp = ServeProcess(tmp / "s", up.url)
        url = sp.wait_listening()
        answered = asyncio.run(sustained(url, 32, args.sustained))
        t0 = time.perf_counter()
        n = (args.sustained // 32) * 32
        sp.wait_calls(n, timeout=600)
        logged = answered + (time.perf_counter() - t0)
        sp.stop()
        print(json.dumps({"sustained_calls": n, "answered_s": round(answered, 2), "all_logged_s": round(logged, 2),
                          "calls_per_s_logged": round(n / logged, 1)}), flush=True)
        shutil.rmtree(tmp / "s")
        convgit.init(tmp / "s").close()
        print(json.dumps(capture_overhead(up.url, tmp / "s", min(args.calls, 300))), flush=True)
        print("\n| calls | clients | TTFB p50 direct / proxy (added) | TTFB p99 (added) | total p50 (added) | total p99 (added) |")
        print("|---|---|---|---|---|---|")
        for k, r in rows:
            def f(key):
                c = r[key]
                return f"{c['direct']} / {c['proxy']} (+{c['added']})"
            print(f"| {'stream' if k['stream'] else 'whole'} | {k['clients']} | {f('ttfb_p50')} | {f('ttfb_p99')} | "
                  f"{f('total_p50')} | {f('total_p99')} |")
    finally:
        if sp is not None:
            sp.stop()  # (a no-op when it stopped already)
        up.stop()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
