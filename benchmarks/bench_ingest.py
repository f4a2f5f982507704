"""convgit ingestion benchmark, with Simon Willison's `llm` as a peer in the same run.

    .venv/bin/python benchmarks/bench_ingest.py            # full run (~3-4 minutes)
    .venv/bin/python benchmarks/bench_ingest.py --quick    # 100 conversations, fewer repeats
    .venv/bin/python benchmarks/bench_ingest.py --profile  # cProfile of the API ingest only

Prints a markdown table and writes benchmarks/out/results.json. All data lives in a temp
directory (removed at the end unless --keep); nothing is written into the repository except
benchmarks/out/ and, on first use, the llm venv benchmarks/.venv-llm (see README.md).

Durable writes: every headline figure runs with fsync on (the store default). CONVGIT_FSYNC
is removed from the environment; the fsync-off figure is a separate, labelled row.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import os
import platform
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
OUT = HERE / "out"
LLM_VENV = HERE / ".venv-llm"
LLM_SPEC = "llm==0.36"

if os.environ.pop("CONVGIT_FSYNC", None) is not None:
    print("note: CONVGIT_FSYNC was set; removed it (headline figures run with fsync on)", file=sys.stderr)

import convgit  # noqa: E402
from convgit import codec  # noqa: E402
from convgit.object_store import ObjectStore  # noqa: E402

TARGETS = {
    "api_first_ingest_msgs_per_s": 7000,
    "continuation_ms": 30,
    "version_s": 0.15,
}

# -- the corpus ---------------------------------------------------------------------------

_WORDS = """
the of and to a in is that for it as with was on be by this are or from at an not have
which but can has all one more when will there their if about into than other some only
also its these any new may such used what time most two first each would over then so
them like no way data system value model file function user request response error
memory thread process message store index query cache table column row key hash object
commit branch merge history parent tree node graph path directory config option default
python rust sqlite json schema type string number list map field record event token
latency throughput disk write read sync lock batch buffer stream chunk page block server
client network timeout retry version format parse encode decode compress test check
result output input argument command script library module package import build release
simple fast small large safe exact stable clear useful common careful explicit
""".split()
_WEIGHTS = [1.0 / (i + 8) for i in range(len(_WORDS))]  # Zipf-ish: function words first
_QUESTIONS = [
    "How do I", "What is the best way to", "Can you explain why", "Why does", "Is it possible to",
    "Could you show me how to", "What happens if I", "When should I",
]
_CODE = [
    "def {a}({b}):\n    return {b}.{c}()",
    "for {a} in {b}:\n    print({a}.{c})",
    "{a} = load_{b}(path)\n{a}.{c}(timeout=30)",
    "with open({a}) as f:\n    {b} = json.load(f)",
    "SELECT {a}, {b} FROM {c} WHERE id = ?;",
]


def _sentence(rng: random.Random, n: int) -> str:
    ws = rng.choices(_WORDS, weights=_WEIGHTS, k=n)
    s = " ".join(ws)
    return s[0].upper() + s[1:] + rng.choices(".?!", weights=(8, 1, 1))[0]


def _paragraph(rng: random.Random) -> str:
    return " ".join(_sentence(rng, rng.randint(6, 22)) for _ in range(rng.randint(2, 5)))


def _text(rng: random.Random, role: str, target: int) -> str:
    """Realistic-looking prose (and, for answers, lists and code) of exactly ``target`` chars."""
    blocks: list[str] = []
    if role == "user":
        w = rng.choices(_WORDS, weights=_WEIGHTS, k=rng.randint(5, 12))
        blocks.append(f"{rng.choice(_QUESTIONS)} {' '.join(w)}?")
    size = len(blocks[0]) if blocks else 0
    while size < target:
        r = rng.random()
        if role == "assistant" and r < 0.15:
            a, b, c = rng.sample(_WORDS[40:], 3)
            blocks.append("```python\n" + rng.choice(_CODE).format(a=a, b=b, c=c) + "\n```")
        elif role == "assistant" and r < 0.3:
            blocks.append("\n".join(f"- {_sentence(rng, rng.randint(4, 10))}" for _ in range(rng.randint(2, 5))))
        else:
            blocks.append(_paragraph(rng))
        size += len(blocks[-1]) + 2
    text = "\n\n".join(blocks)[:target].rstrip()
    if len(text) < 200:  # a cut that ended in whitespace: pad back into range
        text = (text + " " + _paragraph(rng))[:target].rstrip()
    return text


def make_conversation(rng: random.Random, n: int, start_role: str = "user") -> list[dict]:
    roles = ("user", "assistant") if start_role == "user" else ("assistant", "user")
    return [{"role": roles[i % 2], "content": _text(rng, roles[i % 2], rng.randint(200, 2000))} for i in range(n)]


def make_corpus(n_conv: int, n_msg: int, seed: int) -> tuple[list[list[dict]], list[list[dict]]]:
    """(corpus, extended): extended[i] = corpus[i] + 2 more messages (user, assistant)."""
    rng = random.Random(seed)
    corpus = [make_conversation(rng, n_msg) for _ in range(n_conv)]
    rng2 = random.Random(seed + 1)
    start = "user" if n_msg % 2 == 0 else "assistant"
    extended = [c + make_conversation(rng2, 2, start) for c in corpus]
    return corpus, extended


# -- measuring helpers --------------------------------------------------------------------


def disk_usage(path: Path) -> dict:
    """Like ``du -s --block-size=1`` (allocated blocks, directories included, hard links
    once) plus the apparent size of the regular files and their count."""
    seen: set[tuple[int, int]] = set()
    du = apparent = files = 0
    if not path.exists():
        return {"du": 0, "apparent": 0, "files": 0}
    for dirpath, dirnames, filenames in os.walk(path):
        st = os.lstat(dirpath)
        du += st.st_blocks * 512
        for name in filenames:
            st = os.lstat(os.path.join(dirpath, name))
            key = (st.st_dev, st.st_ino)
            if key in seen:
                continue
            seen.add(key)
            du += st.st_blocks * 512
            apparent += st.st_size
            files += 1
    return {"du": du, "apparent": apparent, "files": files}


def list_objects(objects: Path) -> set[str]:
    """Every stored object id, loose or packed, read through convgit's own object store."""
    store = ObjectStore(objects, fsync=False)
    try:
        return set(store.iter_oids())
    finally:
        getattr(store, "close", lambda: None)()


def object_files(objects: Path) -> dict:
    """How the objects are laid out: loose files and pack files."""
    loose = packs = 0
    if objects.exists():
        for d in os.listdir(objects):
            if len(d) == 2:
                loose += sum(1 for n in os.listdir(objects / d) if not n.startswith("tmp_"))
        if (objects / "pack").is_dir():
            packs = sum(1 for n in os.listdir(objects / "pack") if n.endswith(".pack"))
    return {"loose_files": loose, "packs": packs}


def classify(objects: Path, oids) -> dict:
    counts = {"message": 0, "turn": 0, "blob": 0}
    store = ObjectStore(objects, fsync=False)
    try:
        for oid in oids:
            counts[codec.type_name(codec.decode(store.read_bytes(oid), oid))] += 1
    finally:
        getattr(store, "close", lambda: None)()
    return counts


def snapshot(store: Path) -> dict:
    """Every file of the store except the index: relpath -> (size, BLAKE3 of the bytes)."""
    snap = {}
    for dirpath, _, filenames in os.walk(store):
        for name in filenames:
            p = Path(dirpath) / name
            rel = str(p.relative_to(store))
            if rel.startswith("index.sqlite") or rel in ("lock", "index.lock"):
                continue
            data = p.read_bytes()
            snap[rel] = (len(data), codec.hash_bytes(data))
    return snap


def snapshot_diff(before: dict, after: dict) -> dict:
    """Bytes added per area (objects, refs, logs, other): new files + growth of changed ones."""
    areas: dict[str, dict] = {}
    for rel, (size, h) in after.items():
        area = rel.split(os.sep)[0] if os.sep in rel else rel
        a = areas.setdefault(area, {"files_added": 0, "files_changed": 0, "bytes_added": 0})
        if rel not in before:
            a["files_added"] += 1
            a["bytes_added"] += size
        elif before[rel][1] != h:
            a["files_changed"] += 1
            a["bytes_added"] += size - before[rel][0]
    removed = sorted(set(before) - set(after))
    return {"areas": areas, "removed": removed}


def run(cmd: list[str], *, env=None, cwd=None, check=True) -> tuple[float, subprocess.CompletedProcess]:
    t = time.perf_counter()
    p = subprocess.run(cmd, env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    dt_ = time.perf_counter() - t
    if check and p.returncode != 0:
        raise RuntimeError(f"{cmd[:4]}... exited {p.returncode}: {p.stderr.decode(errors='replace')[-2000:]}")
    return dt_, p


def median_run(cmd, n, **kw) -> dict:
    times = []
    last = None
    for _ in range(n):
        t, last = run(cmd, **kw)
        times.append(t)
    return {"median_s": statistics.median(times), "min_s": min(times), "max_s": max(times), "runs": n,
            "stdout_bytes": len(last.stdout)}


def fs_type(path: Path) -> str:
    best = ("", "?")
    try:
        with open("/proc/mounts") as f:
            for line in f:
                parts = line.split()
                mnt, typ = parts[1], parts[2]
                if str(path).startswith(mnt) and len(mnt) > len(best[0]):
                    best = (mnt, typ)
    except OSError:
        pass
    return best[1]


def cpu_busy(seconds: float = 1.0) -> float:
    """Fraction of all CPUs busy over ``seconds`` (from /proc/stat), to spot other work."""
    def sample():
        with open("/proc/stat") as f:
            v = [int(x) for x in f.readline().split()[1:]]
        return sum(v), v[3] + v[4]
    try:
        t1, i1 = sample()
        time.sleep(seconds)
        t2, i2 = sample()
    except OSError:
        return 0.0
    return 1 - (i2 - i1) / max(1, t2 - t1)


def cpu_account() -> tuple[float, float]:
    """(CPU seconds used by the whole machine, by this process and its waited-for children)."""
    hz = os.sysconf("SC_CLK_TCK")
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    busy = (sum(v[:8]) - v[3] - v[4]) / hz  # user nice system (idle iowait) irq softirq steal
    t = os.times()
    return busy, t.user + t.system + t.children_user + t.children_system


def wait_idle(limit_s: float) -> float:
    """Wait (up to ``limit_s``) until the other processes leave the CPUs mostly idle."""
    t0 = time.time()
    busy = cpu_busy()
    while busy > 0.15 and time.time() - t0 < limit_s:
        print(f"  waiting for an idle machine (CPU {busy:.0%} busy)", file=sys.stderr, flush=True)
        time.sleep(4)
        busy = cpu_busy()
    return busy


def git_state() -> dict:
    """Which convgit was measured: HEAD and a digest of the uncommitted changes under convgit/."""
    def git(*a):
        p = subprocess.run(["git", "-C", str(REPO), *a], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        return p.stdout
    dirty = git("status", "--porcelain", "--", "convgit").decode().split("\n")
    diff = git("diff", "HEAD", "--", "convgit")
    untracked = sorted(l[3:] for l in dirty if l.startswith("??"))
    h = codec.hash_bytes(diff + b"".join((REPO / u).read_bytes() for u in untracked if (REPO / u).is_file()))
    return {"head": git("rev-parse", "--short", "HEAD").decode().strip(),
            "dirty_files": sorted(l[3:] for l in dirty if l.strip()), "dirty_digest": h[:16]}


class Bench:
    def __init__(self, args) -> None:
        self.args = args
        self.quick = args.quick
        self.n_conv = args.conversations or (100 if args.quick else 1000)
        self.n_msg = 10
        self.root = Path(tempfile.mkdtemp(prefix="convgit-bench-"))
        self.convgit_bin = str(Path(sys.executable).parent / "convgit")
        self.res: dict = {}
        self.problems: list[str] = []

    @contextlib.contextmanager
    def phase(self, name: str):
        t = time.perf_counter()
        try:
            yield
        finally:
            self.res.setdefault("phase_s", {})[name] = round(time.perf_counter() - t, 1)

    def note(self, msg: str) -> None:
        print(f"  {msg}", file=sys.stderr, flush=True)

    def problem(self, msg: str) -> None:
        self.problems.append(msg)
        print(f"  PROBLEM: {msg}", file=sys.stderr, flush=True)

    def env_for(self, store: Path) -> dict:
        env = os.environ.copy()
        env.pop("CONVGIT_FSYNC", None)
        env["CONVGIT_DIR"] = str(store)
        env["NO_COLOR"] = "1"
        return env

    # -- corpus -----------------------------------------------------------------------------

    def make_corpus(self) -> None:
        t = time.perf_counter()
        self.corpus, self.extended = make_corpus(self.n_conv, self.n_msg, self.args.seed)
        for name, conv in (("corpus", self.corpus), ("corpus-ext", self.extended)):
            d = self.root / name
            d.mkdir()
            for i, c in enumerate(conv):
                (d / f"c{i:05d}.json").write_text(json.dumps({"messages": c}, ensure_ascii=False), "utf-8")
            (self.root / f"{name}.json").write_text(json.dumps(conv, ensure_ascii=False), "utf-8")
        lens = [len(m["content"]) for c in self.corpus for m in c]
        self.res["corpus"] = {
            "conversations": self.n_conv, "messages_per_conversation": self.n_msg,
            "messages": len(lens), "chars_min": min(lens), "chars_max": max(lens),
            "chars_mean": round(statistics.mean(lens), 1), "text_bytes": sum(len(m["content"].encode()) for c in self.corpus for m in c),
            "seed": self.args.seed, "generated_s": round(time.perf_counter() - t, 2),
        }
        self.files = [f"c{i:05d}.json" for i in range(self.n_conv)]
        self.note(f"corpus: {self.res['corpus']}")

    # -- API ----------------------------------------------------------------------------------

    def _ingest_api(self, repo, conv, *, many: bool) -> tuple[float, list]:
        t = time.perf_counter()
        if many:
            results = convgit.commit_many(repo, [{"messages": c} for c in conv])
        else:
            results = [convgit.commit(repo, {"messages": c}) for c in conv]
        return time.perf_counter() - t, results

    def api_suite(self, label: str, *, many: bool, fsync: bool = True, phases=("first", "reingest", "extend"), after_first=None) -> dict:
        if not fsync:
            os.environ["CONVGIT_FSYNC"] = "0"
        try:
            repo = convgit.init(self.root / label)
        finally:
            os.environ.pop("CONVGIT_FSYNC", None)
        assert repo.config.fsync == fsync, "fsync setting not as intended"
        store = repo.path
        objects = store / "objects"
        out: dict = {"api": "commit_many" if many else "commit", "fsync": repo.config.fsync, "store": label}
        n_msgs = self.n_conv * self.n_msg

        # (a) first ingest
        dt_, results = self._ingest_api(repo, self.corpus, many=many)
        objs = list_objects(objects)
        kinds = classify(objects, objs)
        first_threads = [r.thread for r in results]
        bad = [r for r in results if r.status != "created" or r.new_messages != self.n_msg]
        if bad:
            self.problem(f"{label} first ingest: {len(bad)} results not 'created' with {self.n_msg} new messages (e.g. {bad[0].to_json()})")
        if kinds["message"] != n_msgs:
            self.problem(f"{label} first ingest wrote {kinds['message']} message objects, expected {n_msgs}")
        du_obj, du_all = disk_usage(objects), disk_usage(store)
        out["first"] = {
            "seconds": dt_, "messages": n_msgs, "msgs_per_s": n_msgs / dt_,
            "objects_written": len(objs), "objects_by_type": kinds, "layout": object_files(objects),
            "new_objects_reported": sum(r.new_objects for r in results),
            "objects_du": du_obj, "store_du": du_all,
            "objects_du_per_msg": du_obj["du"] / n_msgs, "objects_apparent_per_msg": du_obj["apparent"] / n_msgs,
            "store_du_per_msg": du_all["du"] / n_msgs,
            "index_bytes": (store / "index.sqlite").stat().st_size if (store / "index.sqlite").exists() else 0,
            "threads": len(set(first_threads)),
        }
        self.note(f"{label} (a) first ingest: {n_msgs / dt_:,.0f} msg/s, {len(objs)} objects {kinds} {out['first']['layout']}")
        if after_first is not None:
            after_first(store, sorted(set(first_threads)))

        if "reingest" in phases:
            # (b) exact re-ingest: must write nothing
            before, objs_before = snapshot(store), objs
            idx_before = (store / "index.sqlite").stat().st_size
            dt_, results = self._ingest_api(repo, self.corpus, many=many)
            after = snapshot(store)
            diff = snapshot_diff(before, after)
            new_objs = list_objects(objects) - objs_before
            added = sum(a["bytes_added"] for a in diff["areas"].values())
            statuses = sorted({r.status for r in results})
            out["reingest"] = {
                "seconds": dt_, "msgs_per_s": n_msgs / dt_, "statuses": statuses,
                "new_objects": len(new_objs), "new_objects_reported": sum(r.new_objects for r in results),
                "bytes_added": added, "bytes_added_by_area": {k: v for k, v in diff["areas"].items() if v["bytes_added"] or v["files_added"] or v["files_changed"]},
                "files_removed": diff["removed"],
                "index_bytes_delta": (store / "index.sqlite").stat().st_size - idx_before,
            }
            if added or new_objs or diff["removed"]:
                self.problem(f"{label} exact re-ingest changed the store: {out['reingest']['bytes_added_by_area']}, {len(new_objs)} new objects")
            if statuses != ["deduplicated"]:
                self.problem(f"{label} exact re-ingest statuses {statuses} (expected only 'deduplicated')")
            self.note(f"{label} (b) re-ingest: {n_msgs / dt_:,.0f} msg/s, {added} bytes added, {len(new_objs)} objects")

        if "extend" in phases:
            # (c) every conversation re-sent with 2 more messages: exactly 2 new messages each
            objs_before = list_objects(objects)
            du_before = disk_usage(store)
            dt_, results = self._ingest_api(repo, self.extended, many=many)
            new = list_objects(objects) - objs_before
            kinds = classify(objects, new)
            du_after = disk_usage(store)
            n_payload = self.n_conv * (self.n_msg + 2)
            wrong = [i for i, r in enumerate(results) if r.status != "appended" or r.new_messages != 2 or r.thread != first_threads[i]]
            out["extend"] = {
                "seconds": dt_, "payload_messages": n_payload, "payload_msgs_per_s": n_payload / dt_,
                "new_messages": kinds["message"], "new_msgs_per_s": kinds["message"] / dt_,
                "new_turns": kinds["turn"], "new_blobs": kinds["blob"], "new_objects": len(new),
                "layout_after": object_files(objects),
                "new_messages_reported": sum(r.new_messages for r in results),
                "wrong_results": len(wrong),
                "store_du_added": du_after["du"] - du_before["du"],
                "objects_apparent_added": disk_usage(objects)["apparent"] - du_obj["apparent"],
            }
            if kinds["message"] != 2 * self.n_conv:
                self.problem(f"{label} +2 continuation wrote {kinds['message']} messages, expected {2 * self.n_conv}")
            if wrong:
                r = results[wrong[0]]
                self.problem(f"{label} +2 continuation: {len(wrong)} results not 'appended' to the same thread with 2 new messages (e.g. {r.to_json()})")
            self.note(f"{label} (c) +2: {kinds} in {dt_:.2f}s")
        out["store_path"] = str(store)
        repo.close()
        return out

    def fs_floor(self) -> dict:
        """Diagnostic: the file system alone. Create as many small files as the first ingest
        writes objects (temp file, write, rename into a fan-out directory), then one syncfs:
        the floor for any one-file-per-object store on this disk."""
        n_files = self.n_conv * (self.n_msg + 1)
        d = self.root / "fs-floor"
        d.mkdir()
        fans = [d / f"{i:02x}" for i in range(256)]
        for f in fans:
            f.mkdir()
        data = os.urandom(1200)
        t = time.perf_counter()
        for i in range(n_files):
            fan = str(fans[i % 256])
            tmp = f"{fan}/tmp_{i}"
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o444)
            os.write(fd, data)
            os.close(fd)
            os.rename(tmp, f"{fan}/{i:062x}")
        create_s = time.perf_counter() - t
        from convgit import fsio

        t = time.perf_counter()
        fsio.sync_filesystem(d)
        sync_s = time.perf_counter() - t
        n_msgs = self.n_conv * self.n_msg
        out = {"files": n_files, "create_s": create_s, "per_file_us": create_s / n_files * 1e6, "syncfs_s": sync_s,
               "ceiling_msgs_per_s": n_msgs / (create_s + sync_s)}
        self.note(f"fs floor: {out['per_file_us']:.0f} us per file, ceiling {out['ceiling_msgs_per_s']:,.0f} msg/s")
        shutil.rmtree(d, ignore_errors=True)
        return out

    def tmpfs_api(self) -> dict | None:
        """Diagnostic: commit_many into a store on tmpfs (/dev/shm): no disk at all, so what
        remains is convgit's own CPU cost. Not durable; never a headline figure."""
        if not Path("/dev/shm").is_dir():
            return None
        base = Path(tempfile.mkdtemp(prefix="convgit-bench-shm-", dir="/dev/shm"))
        try:
            repo = convgit.init(base)
            dt_, results = self._ingest_api(repo, self.corpus, many=True)
            repo.close()
        finally:
            shutil.rmtree(base, ignore_errors=True)
        n_msgs = self.n_conv * self.n_msg
        out = {"seconds": dt_, "msgs_per_s": n_msgs / dt_, "fs": fs_type(base)}
        self.note(f"tmpfs commit_many: {out['msgs_per_s']:,.0f} msg/s")
        return out

    # -- CLI ----------------------------------------------------------------------------------

    def cli_single(self) -> dict:
        """One `convgit commit FILE` process per conversation (a subset: it is slow)."""
        n = min(self.n_conv, 20 if self.quick else 50)
        store = self.root / "cli-single" / ".convgit"
        convgit.init(store).close()
        env = self.env_for(store)
        times = []
        for f in self.files[:n]:
            t, _ = run([self.convgit_bin, "commit", f], env=env, cwd=self.root / "corpus")
            times.append(t)
        total = sum(times)
        msgs = n * self.n_msg
        objs = list_objects(store / "objects")
        out = {"files": n, "messages": msgs, "seconds": total, "msgs_per_s": msgs / total, "layout": object_files(store / "objects"),
               "per_call_median_s": statistics.median(times), "objects_by_type": classify(store / "objects", objs),
               "objects_du_per_msg": disk_usage(store / "objects")["du"] / msgs,
               "store_du_per_msg": disk_usage(store)["du"] / msgs}
        self.note(f"cli single-file: {out['msgs_per_s']:,.0f} msg/s over {n} processes, median {out['per_call_median_s'] * 1000:.0f} ms/call")
        return out

    def _cli_batches(self, store: Path, corpus_dir: str, limit: int | None = None) -> tuple[float, list[dict]]:
        env = self.env_for(store)
        b = self.args.batch
        total = 0.0
        results: list[dict] = []
        files = self.files[:limit] if limit else self.files
        for i in range(0, len(files), b):
            chunk = files[i : i + b]
            t, p = run([self.convgit_bin, "commit", "--json", *chunk], env=env, cwd=self.root / corpus_dir)
            total += t
            doc = json.loads(p.stdout)
            results.extend(doc if isinstance(doc, list) else [doc])
        return total, results

    def cli_batch(self) -> dict:
        """`convgit commit --json f1 ... fN`, N files per process: (a), (b), (c)."""
        store = self.root / "cli-batch" / ".convgit"
        convgit.init(store).close()
        objects = store / "objects"
        n_msgs = self.n_conv * self.n_msg
        out: dict = {"files_per_call": self.args.batch, "calls": -(-self.n_conv // self.args.batch)}
        dt_, results = self._cli_batches(store, "corpus")
        objs = list_objects(objects)
        kinds = classify(objects, objs)
        threads = [r["thread"] for r in results]
        if kinds["message"] != n_msgs or any(r["status"] != "created" for r in results):
            self.problem(f"cli batch first ingest: {kinds}, statuses {sorted({r['status'] for r in results})}")
        du_obj, du_all = disk_usage(objects), disk_usage(store)
        out["first"] = {"seconds": dt_, "msgs_per_s": n_msgs / dt_, "objects_written": len(objs), "objects_by_type": kinds,
                        "layout": object_files(objects),
                        "objects_du_per_msg": du_obj["du"] / n_msgs, "store_du_per_msg": du_all["du"] / n_msgs}
        self.note(f"cli batch (a): {n_msgs / dt_:,.0f} msg/s")

        before = snapshot(store)
        dt_, results = self._cli_batches(store, "corpus")
        diff = snapshot_diff(before, snapshot(store))
        added = sum(a["bytes_added"] for a in diff["areas"].values())
        new_objs = list_objects(objects) - objs
        statuses = sorted({r["status"] for r in results})
        out["reingest"] = {"seconds": dt_, "msgs_per_s": n_msgs / dt_, "bytes_added": added, "new_objects": len(new_objs),
                           "statuses": statuses,
                           "bytes_added_by_area": {k: v for k, v in diff["areas"].items() if v["bytes_added"] or v["files_added"] or v["files_changed"]}}
        if added or new_objs or statuses != ["deduplicated"]:
            self.problem(f"cli batch exact re-ingest: {added} bytes added, {len(new_objs)} objects, statuses {statuses}")
        self.note(f"cli batch (b): {n_msgs / dt_:,.0f} msg/s, {added} bytes added")

        # (c) on the first 2 batches only: it checks the CLI path; the API runs cover the rest.
        objs = list_objects(objects)
        n_ext = min(self.n_conv, 2 * self.args.batch)
        dt_, results = self._cli_batches(store, "corpus-ext", limit=n_ext)
        new = list_objects(objects) - objs
        kinds = classify(objects, new)
        wrong = [i for i, r in enumerate(results) if r["status"] != "appended" or r["new_messages"] != 2 or r["thread"] != threads[i]]
        out["extend"] = {"conversations": n_ext, "seconds": dt_, "payload_msgs_per_s": n_ext * (self.n_msg + 2) / dt_,
                         "new_messages": kinds["message"], "new_turns": kinds["turn"], "new_blobs": kinds["blob"],
                         "wrong_results": len(wrong)}
        if kinds["message"] != 2 * n_ext or wrong:
            self.problem(f"cli batch +2: {kinds}, {len(wrong)} wrong results")
        self.note(f"cli batch (c): {kinds}")
        return out

    # -- log, start-up ------------------------------------------------------------------------

    def log_times(self, store: Path, thread: str) -> dict:
        env = self.env_for(store)
        n1, nall = (3, 2) if self.quick else (5, 3)
        out = {
            "log_thread": median_run([self.convgit_bin, "log", thread], n1, env=env),
            "log_thread_json": median_run([self.convgit_bin, "log", "--json", thread], n1, env=env),
            "log_all": median_run([self.convgit_bin, "log", "--all"], nall, env=env),
            "log_all_json": median_run([self.convgit_bin, "log", "--all", "--json"], nall, env=env),
        }
        _, p = run([self.convgit_bin, "log", "--all", "--json"], env=env)
        out["log_all_json_entries"] = len(json.loads(p.stdout))
        _, p = run([self.convgit_bin, "log", "--json", thread], env=env)
        out["log_thread_json_entries"] = len(json.loads(p.stdout))
        if out["log_all_json_entries"] != self.n_conv * self.n_msg:
            self.problem(f"log --all --json returned {out['log_all_json_entries']} entries, expected {self.n_conv * self.n_msg}")
        self.note("log: " + ", ".join(f"{k} {v['median_s']:.3f}s" for k, v in out.items() if isinstance(v, dict)))
        return out

    def startup(self) -> dict:
        n = 20
        env = os.environ.copy()
        env["CONVGIT_DIR"] = str(self.root / "unused-store")
        out = {
            "convgit_version": median_run([self.convgit_bin, "--version"], n, env=env),
            "python_pass": median_run([sys.executable, "-c", "pass"], n),
        }
        self.note(f"startup: convgit --version {out['convgit_version']['median_s'] * 1000:.0f} ms, python -c pass {out['python_pass']['median_s'] * 1000:.0f} ms")
        return out

    # -- the 1,000-message stateless continuation ----------------------------------------------

    def continuation(self) -> dict:
        rng = random.Random(self.args.seed + 7)
        history = make_conversation(rng, 1000)
        repo = convgit.init(self.root / "continuation")
        assert repo.config.fsync
        t = time.perf_counter()
        r0 = convgit.commit(repo, {"messages": history})
        first_s = time.perf_counter() - t
        thread = r0.thread
        runs = 4 if self.quick else 9
        times, wrong = [], []
        msgs = list(history)
        for i in range(runs):
            role = "user" if len(msgs) % 2 == 0 else "assistant"
            msgs = msgs + [{"role": role, "content": f"[extra {i}] " + _text(rng, role, rng.randint(200, 2000))}]
            before = list_objects(repo.objects.path)
            t = time.perf_counter()
            r = convgit.commit(repo, {"messages": msgs})
            times.append(time.perf_counter() - t)
            new = list_objects(repo.objects.path) - before
            kinds = classify(repo.objects.path, new)
            if r.status != "appended" or r.new_messages != 1 or r.thread != thread or kinds["message"] != 1:
                wrong.append({"run": i, "status": r.status, "new_messages": r.new_messages, "thread": r.thread, "objects": kinds})
        # The same through the CLI (process start-up included).
        env = self.env_for(repo.path)
        cli_times = []
        for i in range(2 if self.quick else 3):
            role = "user" if len(msgs) % 2 == 0 else "assistant"
            msgs = msgs + [{"role": role, "content": f"[cli extra {i}] " + _text(rng, role, 500)}]
            f = self.root / f"cont-{i}.json"
            f.write_text(json.dumps({"messages": msgs}), "utf-8")
            t, p = run([self.convgit_bin, "commit", "--json", str(f)], env=env)
            cli_times.append(t)
            doc = json.loads(p.stdout)
            if doc["status"] != "appended" or doc["new_messages"] != 1 or doc["thread"] != thread:
                wrong.append({"cli_run": i, **doc})
        repo.close()
        if wrong:
            self.problem(f"1,000-message continuation did not append exactly 1 message: {wrong[:3]}")
        out = {
            "history_messages": len(history), "first_commit_s": first_s, "runs": runs,
            "median_ms": statistics.median(times) * 1000, "min_ms": min(times) * 1000, "max_ms": max(times) * 1000,
            "all_ms": [round(x * 1000, 2) for x in times], "wrong": wrong,
            "cli_median_ms": statistics.median(cli_times) * 1000,
        }
        self.note(f"continuation: median {out['median_ms']:.1f} ms (API), {out['cli_median_ms']:.0f} ms (CLI)")
        return out

    # -- llm ----------------------------------------------------------------------------------

    def ensure_llm(self) -> Path | None:
        py = LLM_VENV / "bin" / "python"
        if py.exists():
            return py
        if self.args.no_llm_install:
            return None
        self.note(f"creating {LLM_VENV} with {LLM_SPEC} (one-time)")
        try:
            subprocess.run([sys.executable, "-m", "venv", str(LLM_VENV)], check=True)
            subprocess.run([str(py), "-m", "pip", "install", "-q", LLM_SPEC], check=True)
        except (subprocess.CalledProcessError, OSError) as e:
            self.res["llm_error"] = f"could not create the llm venv: {e}"
            return None
        return py

    def llm_suite(self) -> dict:
        py = self.ensure_llm()
        if py is None:
            self.problem(self.res.get("llm_error", "llm venv missing (--no-llm-install)"))
            return {"error": self.res.get("llm_error", "llm venv missing")}
        llm_bin = str(LLM_VENV / "bin" / "llm")
        d = self.root / "llm"
        d.mkdir()
        env = os.environ.copy()
        env["LLM_USER_PATH"] = str(d / "user")  # never the real ~/.config/io.datasette.llm
        driver = str(HERE / "llm_driver.py")

        def drive(mode: str, corpus: str, db: Path) -> dict:
            size0 = db.stat().st_size if db.exists() else 0
            _, p = run([str(py), driver, mode, str(self.root / corpus), str(db)], env=env)
            doc = json.loads(p.stdout)
            doc["db_bytes_added"] = doc["db_bytes"] - size0
            doc["rows_added"] = {k: doc["rows_after"][k] - doc["rows_before"][k] for k in doc["rows_after"]}
            return doc

        n_msgs = self.n_conv * self.n_msg
        out: dict = {}
        chat = drive("chat", "corpus.json", d / "chat.db")
        chat["msgs_per_s"] = n_msgs / chat["log_to_db_s"]
        chat["msgs_per_s_incl_prompt"] = n_msgs / chat["total_s"]
        chat["db_bytes_per_msg"] = chat["db_bytes"] / n_msgs
        out["chat"] = chat
        self.note(f"llm chat-style: {chat['msgs_per_s']:,.0f} msg/s (log_to_db), {chat['db_bytes_per_msg']:.0f} B/msg")
        st = drive("stateless", "corpus.json", d / "stateless.db")
        st["msgs_per_s"] = n_msgs / st["log_to_db_s"]
        st["db_bytes_per_msg"] = st["db_bytes"] / n_msgs
        out["stateless"] = st
        st2 = drive("stateless", "corpus.json", d / "stateless.db")
        st2["msgs_per_s"] = n_msgs / st2["log_to_db_s"]
        out["stateless_reingest"] = st2
        st3 = drive("stateless", "corpus-ext.json", d / "stateless.db")
        st3["payload_msgs_per_s"] = self.n_conv * (self.n_msg + 2) / st3["log_to_db_s"]
        out["stateless_extend"] = st3
        self.note(f"llm stateless: {st['msgs_per_s']:,.0f} msg/s; re-ingest added {st2['db_bytes_added']} B, rows {st2['rows_added']}; +2 rows {st3['rows_added']}")
        out["llm_version"] = median_run([llm_bin, "--version"], 5 if self.quick else 10, env=env)
        out["llm_version"]["text"] = run([llm_bin, "--version"], env=env)[1].stdout.decode().strip()
        out["logs_list_json"] = median_run([llm_bin, "logs", "list", "--json", "-n", "0", "-d", str(d / "chat.db")], 2 if self.quick else 3, env=env)
        _, p = run([llm_bin, "logs", "list", "--json", "-n", "0", "-d", str(d / "chat.db")], env=env)
        out["logs_list_json"]["entries"] = len(json.loads(p.stdout))
        self.note(f"llm --version {out['llm_version']['median_s'] * 1000:.0f} ms, logs list --json -n 0 {out['logs_list_json']['median_s']:.2f}s")
        return out

    # -- the whole run --------------------------------------------------------------------------

    def run_all(self) -> dict:
        busy = wait_idle(self.args.wait_idle) if self.args.wait_idle else cpu_busy()
        t0 = time.perf_counter()
        acct0 = cpu_account()
        r = self.res
        r["meta"] = {
            "date": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "cpus": os.cpu_count(), "machine": platform.machine(), "kernel": platform.release(),
            "python": platform.python_version(), "convgit": convgit.__version__,
            "data_dir_fs": fs_type(self.root), "fsync": True, "quick": self.quick,
            "git": git_state(),
            "cpu_busy_before": round(busy, 3), "loadavg_before": os.getloadavg(),
        }
        with self.phase("corpus"):
            self.make_corpus()
        with self.phase("api_commit_many"):
            r["api_commit_many"] = self.api_suite("api-many", many=True)
            reps = [r["api_commit_many"]["first"]["msgs_per_s"]]
            for i in range(1, self.args.reps):
                reps.append(self.api_suite(f"api-many-rep{i}", many=True, phases=("first",))["first"]["msgs_per_s"])
            r["api_commit_many"]["first_reps_msgs_per_s"] = reps
            r["api_commit_many"]["first_median_msgs_per_s"] = statistics.median(reps)

        def logs(store: Path, threads: list[str]) -> None:
            with self.phase("log"):
                r["log"] = self.log_times(store, threads[0])
            r["log"]["thread"] = threads[0]
            r["log"]["store"] = f"{len(threads)} threads, {self.n_conv * self.n_msg} messages (after the first ingest)"

        with self.phase("api_commit"):
            r["api_commit"] = self.api_suite("api-commit", many=False, after_first=logs)
        with self.phase("api_nofsync"):
            r["api_commit_many_nofsync"] = self.api_suite("api-many-nofsync", many=True, fsync=False, phases=("first",))
        with self.phase("diag_fs_floor"):
            r["diag_fs_floor"] = self.fs_floor()
        with self.phase("diag_tmpfs"):
            r["diag_tmpfs_commit_many"] = self.tmpfs_api()
        with self.phase("cli_single"):
            r["cli_single"] = self.cli_single()
        with self.phase("cli_batch"):
            r["cli_batch"] = self.cli_batch()
        with self.phase("startup"):
            r["startup"] = self.startup()
        with self.phase("continuation"):
            r["continuation"] = self.continuation()
        if not self.args.no_llm:
            with self.phase("llm"):
                r["llm"] = self.llm_suite()
        r["meta"]["loadavg_after"] = os.getloadavg()
        r["meta"]["git_after"] = git_state()
        if r["meta"]["git_after"] != r["meta"]["git"]:
            self.problem("convgit's source changed during the run (git HEAD or working tree differ from the start)")
        acct1 = cpu_account()
        wall = time.perf_counter() - t0
        other = max(0.0, (acct1[0] - acct0[0]) - (acct1[1] - acct0[1]))
        r["meta"]["cpu_s_this_run"] = round(acct1[1] - acct0[1], 1)
        r["meta"]["cpu_s_other_processes"] = round(other, 1)
        r["meta"]["other_processes_cpu_share"] = round(other / (wall * (os.cpu_count() or 1)), 3)
        if r["meta"]["other_processes_cpu_share"] > 0.1:
            self.problem(f"other processes used {r['meta']['other_processes_cpu_share']:.0%} of the machine's CPU during the run: timings are noisier than on an idle machine")
        r["problems"] = self.problems
        r["meta"]["wall_s"] = round(wall, 1)
        return r


# -- reporting --------------------------------------------------------------------------------


def _f(x, unit="", nd=0) -> str:
    if x is None:
        return "n/a"
    return f"{x:,.{nd}f}{unit}"


def table(r: dict) -> str:
    m, c = r["meta"], r["corpus"]
    am, ac, an = r["api_commit_many"], r["api_commit"], r["api_commit_many_nofsync"]
    cs, cb, lg, su, co = r["cli_single"], r["cli_batch"], r["log"], r["startup"], r["continuation"]
    L = r.get("llm") or {}
    ok = lambda good: "met" if good else "**MISSED**"  # noqa: E731
    rows = []
    add = rows.append
    add("| Measure | convgit | Target | llm | convgit / llm |")
    add("|---|---|---|---|---|")

    def ratio(a, b, inv=False):
        if not a or not b:
            return ""
        return f"{(b / a if inv else a / b):.2f}x"

    llm_chat = L.get("chat", {})
    llm_st = L.get("stateless", {})
    head_rate = am.get("first_median_msgs_per_s", am["first"]["msgs_per_s"])
    reps = am.get("first_reps_msgs_per_s", [am["first"]["msgs_per_s"]])
    add(f"| (a) first ingest, API `commit_many`, fsync on (median of {len(reps)} fresh stores: {', '.join(f'{x:,.0f}' for x in reps)}) | {_f(head_rate)} msg/s "
        f"| >= 7,000 msg/s: {ok(head_rate >= TARGETS['api_first_ingest_msgs_per_s'])} "
        f"| chat-style `log_to_db`: {_f(llm_chat.get('msgs_per_s'))} msg/s | {ratio(head_rate, llm_chat.get('msgs_per_s'))} |")
    add(f"| (a) first ingest, API `commit` per conversation, fsync on | {_f(ac['first']['msgs_per_s'])} msg/s ({ac['first']['seconds']:.2f} s) | | "
        f"stateless `log_to_db` per conversation: {_f(llm_st.get('msgs_per_s'))} msg/s | {ratio(ac['first']['msgs_per_s'], llm_st.get('msgs_per_s'))} |")
    add(f"| (a) first ingest, API `commit_many`, fsync **off** (not the headline) | {_f(an['first']['msgs_per_s'])} msg/s | | | |")
    fl, tf = r.get("diag_fs_floor"), r.get("diag_tmpfs_commit_many")
    if tf:
        add(f"| diagnostic: API `commit_many` into a store on tmpfs (no disk; convgit's CPU cost only) | {_f(tf['msgs_per_s'])} msg/s | | | |")
    if fl:
        add(f"| diagnostic: this disk's floor: create {fl['files']:,} small files (temp, write, rename) + 1 syncfs | {fl['per_file_us']:.0f} us/file, {fl['create_s'] + fl['syncfs_s']:.2f} s: ceiling {_f(fl['ceiling_msgs_per_s'])} msg/s for one file per object | | | |")
    add(f"| (a) first ingest, CLI `convgit commit FILE` (1 process per file, {cs['files']} files) | {_f(cs['msgs_per_s'])} msg/s ({cs['per_call_median_s'] * 1000:.0f} ms/call) | | | |")
    add(f"| (a) first ingest, CLI `convgit commit f1..f{cb['files_per_call']}` ({cb['calls']} call{'s' if cb['calls'] != 1 else ''}) | {_f(cb['first']['msgs_per_s'])} msg/s ({cb['first']['seconds']:.1f} s) | | | |")
    lay = am["first"]["layout"]
    add(f"| (a) objects written (API `commit_many`) | {am['first']['objects_written']:,} ({am['first']['objects_by_type']['message']:,} messages, {am['first']['objects_by_type']['turn']:,} turns, {am['first']['objects_by_type']['blob']} blobs) in {lay['loose_files']:,} loose file(s) + {lay['packs']} pack(s) | | {_f(llm_chat.get('rows_added', {}).get('messages'))} message rows, {_f(llm_chat.get('rows_added', {}).get('turns'))} turn rows (chat-style) | |")
    fo = am["first"]
    add(f"| (a) bytes on disk per message: `du` objects/ | {_f(fo['objects_du_per_msg'])} B (apparent {_f(fo['objects_apparent_per_msg'])} B) | | | |")
    add(f"| (a) bytes on disk per message: whole store incl. index | {_f(fo['store_du_per_msg'])} B (index {fo['index_bytes'] / 1e6:.1f} MB) | | logs.db: {_f(llm_chat.get('db_bytes_per_msg'))} B chat-style, {_f(llm_st.get('db_bytes_per_msg'))} B stateless | {ratio(fo['store_du_per_msg'], llm_chat.get('db_bytes_per_msg'))} |")
    add(f"| corpus text per message (UTF-8) | {c['text_bytes'] / c['messages']:,.0f} B | | | |")
    rb = am["reingest"]
    st2 = L.get("stateless_reingest", {})
    add(f"| (b) exact re-ingest, API `commit_many`: bytes added | {rb['bytes_added']} B, {rb['new_objects']} objects ({_f(rb['msgs_per_s'])} msg/s) "
        f"| 0 B: {ok(rb['bytes_added'] == 0 and rb['new_objects'] == 0)} | stateless re-log: +{_f(st2.get('db_bytes_added'))} B, +{st2.get('rows_added', {}).get('turns', 'n/a')} turn rows, +{st2.get('rows_added', {}).get('messages', 'n/a')} message rows | |")
    if "reingest" in ac:
        add(f"| (b) exact re-ingest, API `commit` per conversation: bytes added | {ac['reingest']['bytes_added']} B, {ac['reingest']['new_objects']} objects ({_f(ac['reingest']['msgs_per_s'])} msg/s) | 0 B: {ok(ac['reingest']['bytes_added'] == 0 and ac['reingest']['new_objects'] == 0)} | | |")
    add(f"| (b) exact re-ingest, CLI batches: bytes added | {cb['reingest']['bytes_added']} B, {cb['reingest']['new_objects']} objects ({_f(cb['reingest']['msgs_per_s'])} msg/s) | 0 B: {ok(cb['reingest']['bytes_added'] == 0)} | | |")
    ex = am["extend"]
    st3 = L.get("stateless_extend", {})
    add(f"| (c) +2 messages per conversation, API `commit_many`: new objects | {ex['new_messages']:,} messages (= 2 x {c['conversations']:,}: {ok(ex['new_messages'] == 2 * c['conversations'])}), {ex['new_turns']:,} turns, {ex['new_blobs']} blobs; {ex['seconds']:.2f} s, {_f(ex['new_msgs_per_s'])} new msg/s | exactly 2 per conversation | stateless: +{st3.get('rows_added', {}).get('messages', 'n/a')} message rows, +{st3.get('rows_added', {}).get('turns', 'n/a')} turn rows | |")
    if "extend" in ac:
        e2 = ac["extend"]
        add(f"| (c) +2 messages per conversation, API `commit` per conversation | {e2['new_messages']:,} messages, {e2['new_turns']:,} turns, {e2['new_blobs']} blobs; {e2['seconds']:.1f} s, {_f(e2['new_msgs_per_s'])} new msg/s | exactly 2 per conversation: {ok(e2['new_messages'] == 2 * c['conversations'] and not e2['wrong_results'])} | | |")
    ce = cb["extend"]
    add(f"| (c) +2 messages per conversation, CLI batches (first {ce['conversations']:,} conversations) | {ce['new_messages']:,} messages, {ce['new_turns']:,} turns ({ce['seconds']:.1f} s) | exactly 2 per conversation: {ok(ce['new_messages'] == 2 * ce['conversations'] and not ce['wrong_results'])} | | |")
    add(f"| (d) `convgit log THREAD` ({lg['log_thread_json_entries']} messages) | {lg['log_thread']['median_s'] * 1000:.0f} ms (`--json` {lg['log_thread_json']['median_s'] * 1000:.0f} ms) | | | |")
    ll = L.get("logs_list_json", {})
    add(f"| (d) `convgit log --all` ({lg['log_all_json_entries']:,} messages) | {lg['log_all']['median_s']:.2f} s (`--json` {lg['log_all_json']['median_s']:.2f} s) | | `llm logs list --json -n 0`: {_f(ll.get('median_s'), ' s', 2)} ({ll.get('entries', 'n/a')} responses) | {ratio(lg['log_all_json']['median_s'], ll.get('median_s'), inv=True)} faster |")
    v = su["convgit_version"]["median_s"]
    lv = L.get("llm_version", {}).get("median_s")
    add(f"| (e) `convgit --version` (median of {su['convgit_version']['runs']}) | {v * 1000:.0f} ms (`python -c pass`: {su['python_pass']['median_s'] * 1000:.0f} ms) | < 150 ms: {ok(v < TARGETS['version_s'])} | `llm --version`: {_f(lv and lv * 1000, ' ms')} | {ratio(v, lv, inv=True)} faster |")
    add(f"| stateless continuation of a {co['history_messages']:,}-message history, API `commit` (median of {co['runs']}) | {co['median_ms']:.1f} ms (min {co['min_ms']:.1f}, max {co['max_ms']:.1f}) | < 30 ms: {ok(co['median_ms'] < TARGETS['continuation_ms'])} | | |")
    add(f"| same through the CLI (`convgit commit FILE`, start-up included) | {co['cli_median_ms']:.0f} ms | | | |")
    head = (f"Run {m['date']}: {m['cpus']} cores, {m['machine']}, Linux {m['kernel']}, Python {m['python']}, convgit {m['convgit']}, "
            f"data on {m['data_dir_fs']}, fsync on; corpus {c['conversations']:,} x {c['messages_per_conversation']} messages "
            f"({c['chars_min']}-{c['chars_max']} chars, mean {c['chars_mean']}); {L.get('llm_version', {}).get('text', 'llm: not run')}; "
            f"convgit at {m['git']['head']}{' + uncommitted changes in ' + str(len(m['git']['dirty_files'])) + ' file(s)' if m['git']['dirty_files'] else ''}; "
            f"other processes used {m['other_processes_cpu_share']:.0%} of the CPU during the run (load {m['loadavg_before'][0]:.2f} -> {m['loadavg_after'][0]:.2f}); wall {m['wall_s']} s.")
    return head + "\n\n" + "\n".join(rows) + "\n"


def profile(args) -> None:
    import cProfile
    import pstats

    n = args.conversations or 1000
    corpus, _ = make_corpus(n, 10, args.seed)
    root = Path(tempfile.mkdtemp(prefix="convgit-prof-"))
    try:
        repo = convgit.init(root)
        assert repo.config.fsync
        payloads = [{"messages": c} for c in corpus]
        pr = cProfile.Profile()
        t = time.perf_counter()
        pr.enable()
        convgit.commit_many(repo, payloads)
        pr.disable()
        dt_ = time.perf_counter() - t
        print(f"commit_many of {n * 10} messages under cProfile: {dt_:.2f} s ({n * 10 / dt_:,.0f} msg/s with profiling overhead)")
        for key in ("cumulative", "tottime"):
            print(f"\n-- top {args.top} by {key} --")
            pstats.Stats(pr).sort_stats(key).print_stats(args.top)
        repo.close()
    finally:
        shutil.rmtree(root, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="100 conversations, fewer repeats (a smoke run)")
    ap.add_argument("--conversations", type=int, help="override the number of conversations")
    ap.add_argument("--batch", type=int, default=100, help="files per `convgit commit` call in the CLI batch run")
    ap.add_argument("--seed", type=int, default=20240601)
    ap.add_argument("--reps", type=int, default=5, help="fresh-store repeats of the headline commit_many first ingest")
    ap.add_argument("--wait-idle", type=float, default=0, metavar="S", help="first wait up to S seconds for other processes to leave the CPUs idle")
    ap.add_argument("--no-llm", action="store_true", help="skip the llm comparison")
    ap.add_argument("--no-llm-install", action="store_true", help="do not create benchmarks/.venv-llm if missing")
    ap.add_argument("--keep", action="store_true", help="keep the temp directory")
    ap.add_argument("--out", type=Path, default=OUT / "results.json")
    ap.add_argument("--profile", action="store_true", help="only profile the API ingest (cProfile)")
    ap.add_argument("--top", type=int, default=12, help="rows per profile listing")
    args = ap.parse_args()
    if args.profile:
        profile(args)
        return
    b = Bench(args)
    print(f"data in {b.root}", file=sys.stderr)
    try:
        res = b.run_all()
    finally:
        if args.keep:
            print(f"kept {b.root}", file=sys.stderr)
        else:
            shutil.rmtree(b.root, ignore_errors=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    doc = json.dumps(res, indent=2, default=str)
    args.out.write_text(doc, "utf-8")
    if args.out == OUT / "results.json":  # keep every run: results-<UTC time>.json beside it
        (OUT / f"results-{dt.datetime.now(dt.timezone.utc):%Y%m%dT%H%M%SZ}{'-quick' if args.quick else ''}.json").write_text(doc, "utf-8")
    print(table(res))
    if res["problems"]:
        print("Problems:\n" + "\n".join(f"- {p}" for p in res["problems"]))
    print(f"(results: {args.out})")


if __name__ == "__main__":
    main()
