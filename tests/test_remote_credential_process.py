"""An AWS profile whose keys come from a ``credential_process`` (docs/remotes.md "S3:
credentials, endpoint, region"): convgit runs the command, as the AWS CLI does, and hands
obstore what it prints, against the session's real SeaweedFS (which refuses wrong keys). The
command here is a real script writing the keys it is told to, and counting its runs; a
failing one and one printing junk are refused with a clear error; a role or SSO beside it
goes to botocore, as the AWS CLI would use those first."""

from __future__ import annotations

import json
import shlex
import sys
import uuid
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from convgit.errors import RemoteFailed
from convgit.remotes.awsprofile import CredentialProcess, read_profile
from helpers.cli import assert_error, env, ok, run  # noqa: F401 (fixtures)
from helpers.s3 import ACCESS_KEY, SECRET_KEY

H = [{"role": "user", "content": "hello"}, {"role": "assistant", "content": "hi there"}]

SCRIPT = """
import json, sys
from pathlib import Path
spec = json.loads(Path(sys.argv[1]).read_text())
runs = Path(sys.argv[1]).with_suffix(".runs")
runs.write_text(str(int(runs.read_text() or 0) + 1) if runs.exists() else "1")
if spec.get("fail"):
    print("no session: log in first", file=sys.stderr)
    sys.exit(3)
sys.stdout.write(spec["out"] if "out" in spec else json.dumps(spec["doc"]))
"""


def _no_aws(env: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in env.items() if not k.startswith("AWS_")}


def _setup(tmp_path: Path, endpoint: str) -> tuple[Path, Path]:
    script = tmp_path / "creds.py"
    script.write_text(SCRIPT)
    spec = tmp_path / "spec.json"
    cfg = tmp_path / "aws-config"
    cmd = f"{shlex.quote(sys.executable)} {shlex.quote(str(script))} {shlex.quote(str(spec))}"
    cfg.write_text(f"[profile proc]\ncredential_process = {cmd}\nendpoint_url = {endpoint}\nregion = us-east-1\n"
                   f"[profile role]\nrole_arn = arn:aws:iam::1:role/x\nsource_profile = proc\n"
                   f"[profile both]\ncredential_process = {cmd}\nsso_session = corp\n")
    return spec, cfg


def _doc(secret: str = SECRET_KEY, expires: datetime | None = None) -> dict:
    d = {"Version": 1, "AccessKeyId": ACCESS_KEY, "SecretAccessKey": secret}
    if expires is not None:
        d["Expiration"] = expires.isoformat().replace("+00:00", "Z")
    return d


def _runs(spec: Path) -> int:
    f = spec.with_suffix(".runs")
    return int(f.read_text()) if f.exists() else 0


def test_push_and_clone_with_keys_from_a_credential_process(tmp_path, weed, run, env):
    spec, cfg = _setup(tmp_path, weed.endpoint)
    spec.write_text(json.dumps({"doc": _doc()}))
    e = _no_aws(env) | {"AWS_CONFIG_FILE": str(cfg), "AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "none")}
    url = f"s3://convgit-test/{uuid.uuid4().hex}"
    ok(run("init", env_=e))
    ok(run("commit", "-t", "main", input=json.dumps({"messages": H}), env_=e))
    ok(run("remote", "add", "origin", url, "--profile", "proc", env_=e))
    assert ok(run("push", "--json", env_=e)).json()["moved"] == 1
    assert _runs(spec) == 1  # keys without an expiry: run once per command
    cloned = ok(run("clone", "--json", url, str(tmp_path / "b"), cwd=tmp_path, env_=e | {"AWS_PROFILE": "proc"})).json()
    assert cloned["moved"] == 1
    assert SECRET_KEY not in (tmp_path / "b" / ".convgit" / "config.toml").read_text()
    assert _runs(spec) > 1  # (run by the clone: once per remote it opens)

    # the keys really are the process's: a wrong secret from it is refused by the server
    spec.write_text(json.dumps({"doc": _doc("not-the-secret")}))
    assert_error(run("fetch", "--json", env_=e), "remote_failed")
    # a process that fails: remote_failed naming the profile and what it said, nothing moved
    spec.write_text(json.dumps({"fail": True}))
    r = run("push", "--json", env_=e)
    doc = assert_error(r, "remote_failed")
    assert "'proc'" in doc["error_message"] and "exited with 3" in doc["error_message"] and "log in" in doc["error_message"]
    # junk on stdout: refused, and what it printed is not shown (it could be a key)
    spec.write_text(json.dumps({"out": "AKIA-SECRET-LOOKING-JUNK"}))
    doc = assert_error(run("pull", "--json", env_=e), "remote_failed")
    assert "Version" in doc["error_message"] and "JUNK" not in json.dumps(doc)
    # keys that expired already: refused
    spec.write_text(json.dumps({"doc": _doc(expires=datetime.now(timezone.utc) - timedelta(hours=1))}))
    assert "expired" in assert_error(run("fetch", "--json", env_=e), "remote_failed")["error_message"]
    # a role or SSO (even beside a process) goes to botocore, as the AWS CLI would use them
    # first: here no STS or SSO portal can be reached, so remote_failed naming the profile
    # (tests/test_remote_aws_sts.py has them working against a local STS and SSO portal)
    ok(run("remote", "add", "r2", url, "--profile", "role", env_=e))
    doc = assert_error(run("fetch", "r2", "--json", env_=e | {"AWS_ENDPOINT_URL_STS": "http://127.0.0.1:9"}),
                       "remote_failed")
    assert "'role'" in doc["error_message"] and "could not be resolved" in doc["error_message"]
    ok(run("remote", "add", "r3", url, "--profile", "both", env_=e))
    doc = assert_error(run("fetch", "r3", "--json", env_=e), "remote_failed")
    assert "'both'" in doc["error_message"]
    spec.write_text(json.dumps({"doc": _doc()}))
    assert ok(run("pull", "--json", env_=e)).json()["bytes"] == 0


def test_keys_that_expire_are_asked_for_again(tmp_path):
    spec, cfg = _setup(tmp_path, "http://127.0.0.1:9")
    p = read_profile("proc", cfg, tmp_path / "none")
    assert p.access_key_id is None and p.credential_process and "keys=process" in repr(p)
    provider = CredentialProcess(p.credential_process, "proc")
    later = datetime.now(timezone.utc) + timedelta(hours=1)
    spec.write_text(json.dumps({"doc": _doc(expires=later)}))
    got = provider()
    assert (got["access_key_id"], got["secret_access_key"], got["token"]) == (ACCESS_KEY, SECRET_KEY, None)
    assert abs((got["expires_at"] - later).total_seconds()) < 1
    assert provider() is got and _runs(spec) == 1  # kept while valid
    # keys about to expire (inside the minute obstore's requests could take) are renewed
    soon = datetime.now(timezone.utc) + timedelta(seconds=20)
    spec.write_text(json.dumps({"doc": {**_doc(expires=soon), "SessionToken": "tok"}}))
    provider._cached = None
    provider()
    assert _runs(spec) > 1  # (run by the clone: once per remote it opens)
    spec.write_text(json.dumps({"doc": _doc(expires=later)}))
    assert provider()["expires_at"] > soon and _runs(spec) == 3
    assert "SECRET" not in repr(provider)
    with pytest.raises(RemoteFailed, match="was not found"):
        CredentialProcess("/nonexistent/convgit-creds", "x").resolve()
    with pytest.raises(RemoteFailed, match="does not parse"):
        CredentialProcess("'unbalanced", "x").resolve()
    role = read_profile("role", cfg, tmp_path / "none")
    assert role.indirect == ("role_arn", "source_profile") and "keys=botocore" in repr(role)
