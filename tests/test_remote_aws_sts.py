"""AWS profiles whose keys come through STS or SSO (docs/remotes.md "S3: credentials,
endpoint, region"): an assumed role (``role_arn`` + ``source_profile``), a web identity
token file, and an SSO session. botocore, the AWS SDK's resolver, makes the calls, against a
real HTTP server on 127.0.0.1 playing STS and the SSO portal (the internet is not reachable
here); the keys it hands out are the only ones the session's real SeaweedFS accepts, so a
push and a clone that work prove they were used. The source profile's own keys are wrong
for the S3 server, and the STS side checks the call was signed with them."""

from __future__ import annotations

import hashlib
import json
import threading
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlparse

import pytest

from helpers.cli import assert_error, env, ok, run  # noqa: F401 (fixtures)
from helpers.s3 import ACCESS_KEY, SECRET_KEY

pytest.importorskip("botocore")

H = [{"role": "user", "content": "hello"}, {"role": "assistant", "content": "hi there"}]
SOURCE_KEY = "AKIASOURCEKEYONLY"


class FakeAws(BaseHTTPRequestHandler):
    """STS (POST, the query API: AssumeRole, AssumeRoleWithWebIdentity) and the SSO portal
    (GET /federation/credentials), each answering with the S3 server's keys."""

    calls: list[dict] = []
    refuse = False

    def log_message(self, *a) -> None:
        pass

    def _send(self, status: int, body: str, ctype: str) -> None:
        data = body.encode()
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_POST(self) -> None:
        form = {k: v[0] for k, v in parse_qs(self.rfile.read(int(self.headers["Content-Length"])).decode()).items()}
        FakeAws.calls.append({"action": form.get("Action"), "form": form, "auth": self.headers.get("Authorization", "")})
        action = form.get("Action")
        if FakeAws.refuse:
            self._send(403, "<ErrorResponse><Error><Type>Sender</Type><Code>AccessDenied</Code><Message>not allowed "
                            "to assume this role</Message></Error><RequestId>1</RequestId></ErrorResponse>", "text/xml")
            return
        creds = (f"<Credentials><AccessKeyId>{ACCESS_KEY}</AccessKeyId><SecretAccessKey>{SECRET_KEY}</SecretAccessKey>"
                 "<SessionToken></SessionToken><Expiration>2099-01-01T00:00:00Z</Expiration></Credentials>"
                 "<AssumedRoleUser><AssumedRoleId>AROA1:s</AssumedRoleId><Arn>arn:aws:sts::1:assumed-role/r/s</Arn>"
                 "</AssumedRoleUser>")
        self._send(200, f'<{action}Response xmlns="https://sts.amazonaws.com/doc/2011-06-15/"><{action}Result>'
                        f"{creds}</{action}Result><ResponseMetadata><RequestId>1</RequestId></ResponseMetadata>"
                        f"</{action}Response>", "text/xml")

    def do_GET(self) -> None:
        u = urlparse(self.path)
        q = {k: v[0] for k, v in parse_qs(u.query).items()}
        FakeAws.calls.append({"action": u.path, "form": q, "auth": self.headers.get("x-amz-sso_bearer_token", "")})
        if u.path != "/federation/credentials" or self.headers.get("x-amz-sso_bearer_token") != "sso-token":
            self._send(401, json.dumps({"message": "Session token not found or invalid"}), "application/json")
            return
        self._send(200, json.dumps({"roleCredentials": {"accessKeyId": ACCESS_KEY, "secretAccessKey": SECRET_KEY,
                                                        "sessionToken": "", "expiration": 4070908800000}}),
                   "application/json")


@pytest.fixture(scope="module")
def aws():
    srv = ThreadingHTTPServer(("127.0.0.1", 0), FakeAws)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{srv.server_address[1]}"
    srv.shutdown()


def _setup(tmp_path: Path, s3: str, sts: str) -> dict[str, str]:
    home = tmp_path / "home"
    (home / ".aws" / "sso" / "cache").mkdir(parents=True)
    token = tmp_path / "web-identity-token"
    token.write_text("a-token-from-the-platform")
    cfg = home / ".aws" / "config"
    cfg.write_text(
        "[profile src]\naws_access_key_id = " + SOURCE_KEY + "\naws_secret_access_key = source-secret\nregion = us-east-1\n"
        "[profile role]\nrole_arn = arn:aws:iam::123456789012:role/convgit\nsource_profile = src\n"
        "role_session_name = laptop\nregion = us-east-1\nservices = local\n"
        f"[profile web]\nrole_arn = arn:aws:iam::123456789012:role/ci\nweb_identity_token_file = {token}\n"
        "region = us-east-1\nservices = local\n"
        "[profile corp]\nsso_session = corp\nsso_account_id = 123456789012\nsso_role_name = Dev\nregion = us-east-1\n"
        "services = local\n"
        "[sso-session corp]\nsso_start_url = https://corp.awsapps.example/start\nsso_region = us-east-1\n"
        f"[services local]\ns3 =\n  endpoint_url = {s3}\nsts =\n  endpoint_url = {sts}\n")
    # What `aws sso login --sso-session corp` leaves: the token, cached under sha1(session name).
    (home / ".aws" / "sso" / "cache" / (hashlib.sha1(b"corp").hexdigest() + ".json")).write_text(json.dumps(
        {"startUrl": "https://corp.awsapps.example/start", "region": "us-east-1", "accessToken": "sso-token",
         "expiresAt": "2099-01-01T00:00:00Z"}))
    return {"HOME": str(home), "AWS_CONFIG_FILE": str(cfg), "AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "none"),
            "AWS_ENDPOINT_URL_SSO": sts, "AWS_EC2_METADATA_DISABLED": "true"}


@pytest.mark.parametrize("profile,action", [("role", "AssumeRole"), ("web", "AssumeRoleWithWebIdentity"),
                                            ("corp", "/federation/credentials")])
def test_push_and_clone_with_keys_from_sts_or_sso(tmp_path, weed, aws, run, env, profile, action):
    e = {k: v for k, v in env.items() if not k.startswith("AWS_")} | _setup(tmp_path, weed.endpoint, aws)
    url = f"s3://convgit-test/{uuid.uuid4().hex}"
    FakeAws.calls.clear()
    ok(run("init", env_=e))
    ok(run("commit", "-t", "main", input=json.dumps({"messages": H}), env_=e))
    ok(run("remote", "add", "origin", url, "--profile", profile, env_=e))
    assert ok(run("push", "--json", env_=e)).json()["moved"] == 1
    call = FakeAws.calls[0]
    assert call["action"] == action
    if profile == "role":  # signed with the source profile's keys, for the role and session named
        assert f"Credential={SOURCE_KEY}/" in call["auth"]
        assert call["form"]["RoleArn"].endswith(":role/convgit") and call["form"]["RoleSessionName"] == "laptop"
    elif profile == "web":
        assert call["form"]["WebIdentityToken"] == "a-token-from-the-platform"
    else:
        assert (call["form"]["role_name"], call["form"]["account_id"], call["auth"]) == ("Dev", "123456789012", "sso-token")
    cloned = ok(run("clone", "--json", url, str(tmp_path / "b"), cwd=tmp_path, env_=e | {"AWS_PROFILE": profile})).json()
    assert cloned["moved"] == 1
    assert SECRET_KEY not in (tmp_path / "b" / ".convgit" / "config.toml").read_text()
    assert [m["text"] for m in ok(run("log", "main", "--json", cwd=tmp_path / "b", env_=e)).json()] == ["hi there", "hello"]


def test_a_role_that_cannot_be_assumed_or_an_sso_login_missing_is_remote_failed(tmp_path, weed, aws, run, env):
    e = {k: v for k, v in env.items() if not k.startswith("AWS_")} | _setup(tmp_path, weed.endpoint, aws)
    url = f"s3://convgit-test/{uuid.uuid4().hex}"
    ok(run("init", env_=e))
    ok(run("commit", "-t", "main", input=json.dumps({"messages": H}), env_=e))
    ok(run("remote", "add", "origin", url, "--profile", "role", env_=e))
    FakeAws.refuse = True
    try:
        doc = assert_error(run("push", "--json", env_=e), "remote_failed")
    finally:
        FakeAws.refuse = False
    assert "'role'" in doc["error_message"] and "AccessDenied" in doc["error_message"]
    assert "source-secret" not in json.dumps(doc)
    for f in (Path(e["HOME"]) / ".aws" / "sso" / "cache").iterdir():
        f.unlink()  # logged out: botocore finds no SSO token
    ok(run("remote", "add", "sso", url, "--profile", "corp", env_=e))
    doc = assert_error(run("push", "sso", "--json", env_=e), "remote_failed")
    assert "'corp'" in doc["error_message"]
    # nothing was pushed by either: the remote holds no thread
    ok(run("remote", "add", "keys", url, env_=e | {"AWS_ACCESS_KEY_ID": ACCESS_KEY, "AWS_SECRET_ACCESS_KEY": SECRET_KEY}))
    got = ok(run("fetch", "keys", "--json", env_=e | {"AWS_ACCESS_KEY_ID": ACCESS_KEY, "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
                                                        "AWS_ENDPOINT_URL": weed.endpoint, "AWS_REGION": "us-east-1"})).json()
    assert (got["threads"], got["bytes"]) == ([], 0)
