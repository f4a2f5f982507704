"""S3 remotes configured by AWS profiles (docs/remotes.md "S3: credentials, endpoint, region"):
``~/.aws/config`` / ``~/.aws/credentials`` (or AWS_CONFIG_FILE / AWS_SHARED_CREDENTIALS_FILE),
chosen by AWS_PROFILE or ``remote.NAME.profile``, their keys, region and endpoint used against
the session's real SeaweedFS server, which refuses unsigned and wrongly signed requests."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest

from convgit.config import AwsEnv
from convgit.errors import InvalidInput, NotFound
from convgit.remotes.awsprofile import read_profile, s3_settings
from helpers.cli import assert_error, cli, env, ok, proj, run  # noqa: F401 (fixtures)
from helpers.s3 import ACCESS_KEY, SECRET_KEY

H = [{"role": "user", "content": "hello"}, {"role": "assistant", "content": "hi there"}]


def _no_aws(env: dict[str, str]) -> dict[str, str]:
    """``env`` without any AWS variable: only the profile files can say how to reach S3."""
    return {k: v for k, v in env.items() if not k.startswith("AWS_")}


def test_push_and_clone_through_profiles_only(tmp_path, weed, run, env):
    home = Path(env["HOME"])
    (home / ".aws").mkdir()
    (home / ".aws" / "config").write_text(f"[default]\nregion = eu-north-1\n\n[profile sw]\nregion = us-east-1\n"
                                          f"endpoint_url = {weed.endpoint}\n")
    (home / ".aws" / "credentials").write_text(f"[sw]\naws_access_key_id = {ACCESS_KEY}\n"
                                               f"aws_secret_access_key = {SECRET_KEY}\n")
    e = _no_aws(env) | {"AWS_PROFILE": "sw"}
    url = f"s3://convgit-test/{uuid.uuid4().hex}"
    ok(run("init", env_=e))
    ok(run("commit", "-t", "main", input=json.dumps({"messages": H}), env_=e))
    ok(run("remote", "add", "origin", url, env_=e))
    pushed = ok(run("push", "--json", env_=e)).json()
    assert pushed["bytes"] > 0 and pushed["moved"] == 1

    # Another machine: its own config file (AWS_CONFIG_FILE, keys in it, no credentials file),
    # its profile named on the command line and kept in config.toml by name only.
    other = tmp_path / "other-aws-config"
    other.write_text(f"[profile team]\naws_access_key_id = {ACCESS_KEY}\naws_secret_access_key = {SECRET_KEY}\n"
                     f"services = local\n\n[services local]\ns3 =\n  endpoint_url = {weed.endpoint}\n")
    e2 = _no_aws(env) | {"AWS_CONFIG_FILE": str(other), "AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "none")}
    cloned = ok(run("clone", "--json", "--profile", "team", url, str(tmp_path / "b"), cwd=tmp_path, env_=e2)).json()
    assert cloned["moved"] == 1
    cfg = (tmp_path / "b" / ".convgit" / "config.toml").read_text()
    assert 'profile = "team"' in cfg and SECRET_KEY not in cfg and "key" not in cfg.split("[remote.origin]")[1]
    shown = ok(run("show", "main", "--json", cwd=tmp_path / "b", env_=e2)).json()
    assert [m["text"] for m in shown["messages"]] == ["hello", "hi there"]
    assert ok(run("pull", "--json", cwd=tmp_path / "b", env_=e2)).json()["bytes"] == 0

    # The keys really come from the profile: a wrong secret there is refused by the server.
    (home / ".aws" / "credentials").write_text(f"[sw]\naws_access_key_id = {ACCESS_KEY}\n"
                                               "aws_secret_access_key = not-the-secret\n")
    assert_error(run("fetch", "--json", env_=e), "remote_failed")


def test_missing_profile_is_not_found_and_moves_nothing(tmp_path, weed, run, env):
    url = f"s3://convgit-test/{uuid.uuid4().hex}"
    e = _no_aws(env) | {"AWS_ENDPOINT_URL": weed.endpoint}
    ok(run("init", env_=e))
    ok(run("commit", "-t", "main", input=json.dumps({"messages": H}), env_=e))
    ok(run("remote", "add", "origin", url, "--profile", "nope", env_=e))
    doc = assert_error(run("push", "--json", env_=e), "not_found")
    assert "'nope'" in doc["error_message"] and ".aws" in doc["error_message"]
    r = run("push", env_=e | {"AWS_PROFILE": "ghost"})  # the remote's own profile still wins
    assert_error(r, "not_found")
    assert "'nope'" in r.err
    ok(run("remote", "add", "other", url + "-2", env_=e))
    r = run("push", "other", env_=e | {"AWS_PROFILE": "ghost"})
    assert_error(r, "not_found")
    assert "AWS_PROFILE=ghost" in r.err
    assert_error(run("clone", "--json", "--profile", "nope", url, str(tmp_path / "c"), cwd=tmp_path, env_=e), "not_found")
    assert not (tmp_path / "c").exists()
    # (a directory remote reads no profile; a profile name is a name)
    assert_error(run("remote", "add", "d", str(tmp_path / "r"), "--profile", "sw", "--json", env_=e), "invalid_input")
    assert_error(run("remote", "add", "s", url, "--profile", "../x y", "--json", env_=e), "invalid_input")


def _env(d: Path, profile=None, keys=False, region=False) -> AwsEnv:
    return AwsEnv(profile, d / "config", d / "credentials", keys, region)


def test_what_wins(tmp_path):
    d = tmp_path / "aws"
    d.mkdir()
    (d / "config").write_text("[default]\nregion = eu-west-1\naws_access_key_id = CONF\naws_secret_access_key = CS\n"
                              "[profile p]\nregion = ap-south-1\nendpoint_url = http://p.example:1\n"
                              "[profile sso]\nsso_session = corp\nregion = us-east-2\n"
                              "[profile half]\naws_access_key_id = ONLY\n")
    (d / "credentials").write_text("[default]\naws_access_key_id = CRED\naws_secret_access_key = CRS\n"
                                   "[p]\naws_access_key_id = PK\naws_secret_access_key = PS\naws_session_token = PT\n")
    # the credentials file wins over the config file for keys; the config file gives the region
    p = read_profile("default", d / "config", d / "credentials")
    assert (p.access_key_id, p.secret_access_key, p.region) == ("CRED", "CRS", "eu-west-1")
    assert "CRS" not in repr(p) and "CRS" not in repr(s3_settings(env=_env(d)))
    # the environment's keys and region win over AWS_PROFILE's (obstore reads them), not over
    # the remote's own profile
    s = s3_settings(env=_env(d, "p", keys=True, region=True))
    assert (s.access_key_id, s.region, s.endpoint) == (None, None, "http://p.example:1")
    s = s3_settings(profile="p", env=_env(d, None, keys=True, region=True))
    assert (s.access_key_id, s.secret_access_key, s.session_token, s.region) == ("PK", "PS", "PT", "ap-south-1")
    # config.toml's region and endpoint, then the environment's endpoint, win over the profile's
    s = s3_settings(profile="p", region="us-west-1", env_endpoint="http://env:2", env=_env(d))
    assert (s.region, s.endpoint) == ("us-west-1", "http://env:2")
    assert s3_settings(profile="p", endpoint="http://cfg:3", env_endpoint="http://env:2", env=_env(d)).endpoint == \
        "http://cfg:3"
    # no files, no profile named: nothing from profiles
    s = s3_settings(env=_env(d / "absent"))
    assert (s.profile, s.access_key_id, s.region) == (None, None, None)
    with pytest.raises(NotFound) as e:
        s3_settings(env=_env(d / "absent", "gone"))
    assert e.value.code == "not_found" and "AWS_PROFILE=gone" in e.value.message
    # SSO (or a role, a web identity): botocore resolves the keys, for the remote's profile or AWS_PROFILE's
    for s in (s3_settings(profile="sso", env=_env(d)), s3_settings(env=_env(d, "sso"))):
        assert (s.botocore_profile, s.access_key_id, s.region) == ("sso", None, "us-east-2") and "keys=botocore" in repr(s)
    s = s3_settings(env=_env(d, "sso", keys=True))  # keys exported into the environment: its region still applies
    assert (s.access_key_id, s.botocore_profile, s.region) == (None, None, "us-east-2")
    with pytest.raises(InvalidInput, match="only one of"):
        s3_settings(profile="half", env=_env(d))
    (d / "config").write_text("region = nowhere\n[broken\n")
    with pytest.raises(InvalidInput, match="does not parse"):
        s3_settings(env=_env(d))


@pytest.mark.parametrize("opt,value", [("--endpoint", "http://nas:8333"), ("--region", "us-east-1"), ("--profile", "nas")])
def test_s3_options_on_a_directory_remote_are_refused(cli, proj, tmp_path, opt, value):
    """A directory remote has no endpoint, region or profile: each is refused (once,
    --endpoint was stored and never read), and nothing is written."""
    cfg = proj / ".convgit" / "config.toml"
    before = cfg.read_bytes()
    r = cli("remote", "add", "origin", str(tmp_path / "nas"), opt, value)
    assert_error(r, "invalid_input")
    assert "only s3:// remotes" in r.err and cfg.read_bytes() == before
    ok(cli("remote", "add", "origin", str(tmp_path / "nas")))
