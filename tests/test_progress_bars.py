"""Progress bars with counts for the long maintenance work (issue 11): gc, a store or bundle
merge, bundle create/verify, reindex and export report ``(done, total)`` through the public
API, and the CLI draws a bar from it on a terminal only (never piped, never with --json).
The bars are seen through a pseudo-terminal (python's pty, tests/test_cli_terminal.run_pty)."""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest

import convgit
from helpers.cli import PY, cli, dumps, env, ok, proj, run  # noqa: F401
from test_cli_terminal import _big_jsonl, run_pty


def _steady(seen: list) -> bool:
    """Counts that only grow, end at their total, and keep one total."""
    return (bool(seen) and [d for d, _ in seen] == sorted(d for d, _ in seen)
            and len({t for _, t in seen}) == 1 and seen[-1][0] == seen[-1][1])


def test_long_operations_report_counts(cli, proj, tmp_path):
    ok(cli("import", "-q", _big_jsonl(tmp_path / "some.jsonl", 60)))
    repo = convgit.open_repo(proj)
    try:
        seen: dict[str, list] = {k: [] for k in ("gc", "create", "verify", "reindex", "export", "llm-db", "merge")}
        st = convgit.gc(repo, progress=lambda d, t: seen["gc"].append((d, t)))
        assert _steady(seen["gc"]) and seen["gc"][-1][1] == st.objects_before
        b = tmp_path / "b.db"
        info = convgit.bundle_create(repo, b, progress=lambda d, t: seen["create"].append((d, t)))
        assert _steady(seen["create"]) and seen["create"][-1][1] == info.objects
        v = convgit.bundle_verify(b, progress=lambda d, t: seen["verify"].append((d, t)))
        assert not v.problems and all(t == v.objects for _, t in seen["verify"])
        r = convgit.reindex(repo, progress=lambda d, t: seen["reindex"].append((d, t)))
        assert _steady(seen["reindex"]) and seen["reindex"][-1][1] == 2 * r["threads"]
        names = sorted(repo.refs.read_all())
        convgit.export(repo, names, fmt="jsonl", progress=lambda d, t: seen["export"].append((d, t)))
        assert seen["export"][-1] == (60, 60) and _steady(seen["export"])
        convgit.export_llm_db(repo, names[:7], tmp_path / "l.db", progress=lambda d, t: seen["llm-db"].append((d, t)))
        assert seen["llm-db"] == [(i, 7) for i in range(1, 8)]
        other = convgit.init(tmp_path / "other" / ".convgit")
        convgit.merge(other, proj / ".convgit", objects_progress=lambda d, t: seen["merge"].append((d, t)))
        assert _steady(seen["merge"]) and seen["merge"][-1][1] >= info.objects
        other.close()
    finally:
        repo.close()


@pytest.fixture(scope="module")
def big(tmp_path_factory):
    """A store worth a bar (> 2000 objects: 700 conversations of 2 messages and a turn, their
    text ~1.5 KB each so that their llm logs.db passes 1 MiB), a bundle and an llm logs.db of
    it; built once through the library (tests copy what they change)."""
    base = tmp_path_factory.mktemp("bars")
    repo = convgit.init(base / "proj")
    try:
        convgit.import_paths(repo, [_big_jsonl(base / "many.jsonl", 700, 1500)])
        convgit.bundle_create(repo, base / "c.db")
        convgit.export_llm_db(repo, sorted(repo.refs.read_all()), base / "l.db")
    finally:
        repo.close()
    return base


def _bar_seen(out: str, label: str) -> bool:
    """``label`` drawn with a count (``12/2100``, ``0.5/1.2 MB``) after it."""
    plain = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", out)  # colours and cursor moves
    return label in plain and bool(re.search(r"\d/\d", plain.split(label, 1)[1][:400]))


def test_every_long_operation_draws_a_bar_on_a_terminal_only(big, env, tmp_path):
    """gc, reindex, bundle create and verify, export (jsonl and llm-db) and merge (a store,
    a bundle, an llm logs.db) draw a bar on a terminal (a pty), and nothing of it when stderr
    is piped."""
    proj = tmp_path / "proj"
    shutil.copytree(big / "proj", proj)
    for name in ("c.db", "l.db"):
        shutil.copy(big / name, tmp_path / name)
    for name in ("a", "b", "c"):
        convgit.init(tmp_path / name).close()
    # relative paths: the labels name the files, and a long path would leave the 120-column
    # terminal no room for the count (rich cuts it to "20…")
    steps = [  # (args, cwd, label); gc last: it packs what the others read
        (["bundle", "create", "../n.db"], proj, "writing"),
        (["bundle", "verify", "../c.db"], proj, "verifying"),
        (["reindex"], proj, "rebuilding the index"),
        (["export", "--all", "-f", "jsonl", "-o", "../all.jsonl"], proj, "exporting threads"),
        (["export", "--all", "-f", "llm-db", "-o", "../back.db"], proj, "exporting threads"),
        (["merge", "../c.db"], tmp_path / "a", "merging objects"),
        (["merge", "../proj"], tmp_path / "b", "merging objects"),
        (["merge", "../l.db"], tmp_path / "c", "merging"),
        (["gc"], proj, "gc: marking and packing objects"),
    ]
    for args, cwd, label in steps:
        rc, out = run_pty(args, cwd=cwd, env=env)
        assert rc == 0 and _bar_seen(out, label), (args, out[-2000:])
    # piped (stderr not a terminal): the same work draws nothing
    for name in ("a", "b", "c"):
        shutil.rmtree(tmp_path / name)
        convgit.init(tmp_path / name).close()
    (tmp_path / "n.db").unlink()
    (tmp_path / "back.db").unlink()
    for args, cwd, label in steps:
        p = subprocess.run([PY, "-m", "convgit", *map(str, args)], cwd=cwd, env=env, capture_output=True, timeout=120)
        assert p.returncode == 0 and label.encode() not in p.stderr and b"\x1b" not in p.stderr, (args, p.stderr[-2000:])
