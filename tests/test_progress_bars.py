"""Progress bars with counts for the long maintenance work (issue 11): gc, a store or bundle
merge, bundle create/verify, reindex and export report ``(done, total)`` through the public
API, and the CLI draws a bar from it on a terminal only (never piped, never with --json)."""

from __future__ import annotations

import pytest

import convgit
from cli_helpers import cli, dumps, env, ok, proj, run  # noqa: F401
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


def _big_store(cli, tmp_path):
    ok(cli("import", "-q", _big_jsonl(tmp_path / "many.jsonl", 700)))  # > 2000 objects: worth a bar


def test_bundle_create_draws_a_bar_on_a_terminal_only(cli, proj, env, tmp_path, run):
    _big_store(cli, tmp_path)
    rc, out = run_pty(["bundle", "create", tmp_path / "c.db"], cwd=proj, env=env)
    assert rc == 0 and "writing" in out and "/" in out.split("writing", 1)[1][:200], out[-2000:]
    r = ok(run("bundle", "create", tmp_path / "d.db"))  # piped: nothing of it
    assert "writing" not in r.err and "\x1b" not in r.err


@pytest.mark.slow
def test_every_long_operation_draws_a_bar_on_a_terminal(cli, proj, env, tmp_path):
    _big_store(cli, tmp_path)
    ok(cli("bundle", "create", tmp_path / "c.db"))
    for args, label in ((["bundle", "verify", tmp_path / "c.db"], "verifying"),
                        (["reindex"], "rebuilding the index"),
                        (["export", "--all", "-f", "jsonl", "-o", tmp_path / "all.jsonl"], "exporting threads"),
                        (["gc"], "gc: marking and packing objects")):
        rc, out = run_pty(args, cwd=proj, env=env)
        assert rc == 0 and label in out and "/" in out.split(label, 1)[1][:200], (args, out[-2000:])
    ok(cli("init", cwd=tmp_path / "other"))
    rc, out = run_pty(["merge", tmp_path / "c.db"], cwd=tmp_path / "other", env=env)
    assert rc == 0 and "merging objects" in out, out[-2000:]
    rc, out = run_pty(["reindex", "--json"], cwd=proj, env=env)
    assert rc == 0 and "rebuilding" not in out
