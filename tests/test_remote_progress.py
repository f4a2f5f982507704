"""Progress of the syncing commands (docs/remotes.md "Progress"): what push, fetch, pull,
clone, index sync and gc --remote report to a progress callback (bytes done of a total that
is the packs they move), and what a real terminal shows (a byte bar on a pseudo-terminal;
nothing with -q, --json or when stderr is piped)."""

from __future__ import annotations

import base64
import hashlib
from pathlib import Path

import convgit
from helpers.cli import cli, env, ok, run  # noqa: F401 (fixtures)
from test_cli_terminal import run_pty


def _noise(seed: str, n: int) -> str:
    """``n`` characters that compress poorly (so the packs are about that big)."""
    out, i = [], 0
    while sum(map(len, out)) < n:
        out.append(base64.b64encode(hashlib.sha512(f"{seed}/{i}".encode()).digest()).decode())
        i += 1
    return "".join(out)[:n]


def _commit(repo, thread: str, n: int, size: int) -> None:
    msgs = [{"role": "user" if k % 2 == 0 else "assistant", "content": f"{thread} {k} " + _noise(f"{thread}{k}", size)}
            for k in range(n)]
    convgit.commit(repo, {"messages": msgs}, thread=thread)


def _calls() -> tuple[list, callable]:
    seen: list[tuple[int, int]] = []
    return seen, lambda done, total: seen.append((done, total))


def _pack_sizes(remote: Path) -> dict[str, int]:
    return {p.stem: p.stat().st_size for p in (remote / "packs").glob("*.pack")}


def _check(seen, total: int) -> None:
    """The calls end at ``total`` and never go back or past their total."""
    assert seen and seen[-1] == (total, total), seen
    assert all(d <= t for d, t in seen), seen
    assert [d for d, _ in seen] == sorted(d for d, _ in seen), seen


def test_progress_counts_the_packs_each_operation_moves(tmp_path, monkeypatch):
    monkeypatch.setenv("CONVGIT_PUSH_PACK_BYTES", "20000")  # several packs
    remote = tmp_path / "remote"
    a = convgit.init(tmp_path / "a")
    for i in range(4):
        _commit(a, f"t{i}", 4, 3000)
    convgit.add_remote(a, "origin", str(remote))
    seen, tick = _calls()
    pushed = convgit.push(a, progress=tick)
    sizes = _pack_sizes(remote)
    assert pushed.packs == len(sizes) >= 2
    _check(seen, sum(sizes.values()))

    seen, tick = _calls()
    b, cloned = convgit.clone(str(remote), tmp_path / "b", progress=tick)
    assert cloned.bytes == sum(sizes.values())
    _check(seen, cloned.bytes)

    # a pushes more: b's fetch counts only the new packs (the others are settled there)
    _commit(a, "t9", 4, 3000)
    convgit.push(a)
    new = {k: v for k, v in _pack_sizes(remote).items() if k not in sizes}
    seen, tick = _calls()
    fetched = convgit.fetch(b, progress=tick)
    assert fetched.bytes == sum(new.values()) > 0
    _check(seen, fetched.bytes)
    seen, tick = _calls()
    pulled = convgit.pull(b, progress=tick)
    assert pulled.bytes == 0 and seen in ([], [(0, 0)])  # nothing left to move
    # a's own packs are settled by its push: its fetch has nothing to count
    seen, tick = _calls()
    assert convgit.fetch(a, progress=tick).bytes == 0 and all(t == 0 for _, t in seen)

    # an index-only store reads (by range) about the packs' size, counted against it
    c = convgit.init(tmp_path / "c")
    convgit.add_remote(c, "origin", str(remote))
    seen, tick = _calls()
    synced = convgit.index_sync(c, progress=tick)
    total = sum(_pack_sizes(remote).values())
    assert synced.pack_bytes == total and seen[-1] == (total, total)
    assert all(d <= t == total for d, t in seen) and len(seen) > 2  # it moved along the way
    assert synced.bytes_read <= total

    # gc --remote: the small packs it downloads to repack
    for i in range(8):
        _commit(a, f"s{i}", 1, 50)
        convgit.push(a)
    smalls = {k: v for k, v in _pack_sizes(remote).items() if v < 4 << 20}
    seen, tick = _calls()
    rep = convgit.gc_remote(a, progress=tick)
    assert rep.repacked == len(smalls)
    _check(seen, sum(smalls.values()))


def test_a_terminal_shows_the_bar_and_q_silences_it(tmp_path, cli, env, run):
    a = convgit.init(tmp_path / "a")
    for i in range(3):
        _commit(a, f"t{i}", 4, 200_000)  # ~2.4 MB that does not compress: over the bar's 1 MiB
    a.close()
    remote = tmp_path / "remote"
    ok(cli("remote", "add", "origin", str(remote), cwd=tmp_path / "a"))
    rc, out = run_pty(["push"], cwd=tmp_path / "a", env=env)
    assert rc == 0 and "pushing" in out and "left" in out and "MB" in out, out
    rc, out = run_pty(["clone", str(remote), str(tmp_path / "b")], cwd=tmp_path, env=env)
    assert rc == 0 and "cloning" in out and "left" in out and "MB" in out, out
    rc, out = run_pty(["clone", "-q", str(remote), str(tmp_path / "c")], cwd=tmp_path, env=env)
    assert rc == 0 and out == "", out
    ok(cli("init", cwd=tmp_path / "d"))
    ok(cli("remote", "add", "origin", str(remote), cwd=tmp_path / "d"))
    rc, out = run_pty(["index", "sync", "--from", "origin"], cwd=tmp_path / "d", env=env)
    assert rc == 0 and "syncing the index" in out and "left" in out, out
    # piped: the same clone says what it did, and draws nothing
    r = ok(run("clone", str(remote), str(tmp_path / "e"), cwd=tmp_path))
    assert "cloned" in r.out and "\x1b" not in r.err and "cloning" not in r.err
