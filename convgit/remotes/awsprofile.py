"""AWS profiles for S3 remotes: the shared config and credentials files (``~/.aws/config``,
``~/.aws/credentials``, or ``AWS_CONFIG_FILE`` / ``AWS_SHARED_CREDENTIALS_FILE``), as the AWS
CLI writes them, read with configparser (docs/remotes.md "S3: credentials, endpoint, region").

obstore (Rust ``object_store``) reads only the process's AWS variables and what it is
given; it reads no profile file (its own way to them is boto3, a dependency this does not
take). So a profile's
static keys, region and endpoint are read here and handed to obstore; nothing is signed here.
The keys live in memory only: convgit's config.toml names a profile (``remote.NAME.profile``),
never a key.

Which profile: ``remote.NAME.profile``, else ``AWS_PROFILE``, else ``default``. A profile
named by either that is in neither file is ``not_found``; ``default`` absent is no profile.
What wins (as the AWS CLI, with a remote's own profile counting as its ``--profile``):

- keys: a remote's own profile, else ``AWS_ACCESS_KEY_ID`` / ``AWS_SECRET_ACCESS_KEY``
  (obstore reads them), else the profile's (``AWS_PROFILE`` or ``default``); in a profile
  the credentials file wins over the config file;
- region: ``remote.NAME.region``, else the remote's own profile's, else ``AWS_REGION``, else
  the profile's;
- endpoint: ``remote.NAME.endpoint``, else ``AWS_ENDPOINT_URL(_S3)``, else the profile's
  ``endpoint_url`` (or its ``services`` section's ``s3`` ``endpoint_url``).

A profile without static keys whose ``credential_process`` names a command gets its keys
from that command, as the AWS CLI does (``CredentialProcess``: run without a shell, its JSON
read, Version 1; run again when the keys it gave expire). Profiles whose credentials come
from SSO, an assumed role (``role_arn``, ``source_profile``, ``credential_source``) or a web
identity file get them from botocore, the AWS SDK's own resolver (``BotocoreCredentials``):
it makes the STS or SSO calls and signs them, exactly as the AWS CLI does; obstore then
signs the S3 requests with the keys it returns.
"""

from __future__ import annotations

import configparser
from dataclasses import dataclass
from pathlib import Path

from ..config import AwsEnv, aws_env
from ..errors import InvalidInput, NotFound

# Profile keys that get credentials some other way than static keys (botocore resolves them).
_INDIRECT = ("sso_session", "sso_start_url", "role_arn", "credential_process", "web_identity_token_file",
             "credential_source", "source_profile", "login_session")


@dataclass(frozen=True)
class Profile:
    """What one profile gives an S3 client (None: the profile does not say)."""

    name: str
    access_key_id: str | None = None
    secret_access_key: str | None = None
    session_token: str | None = None
    region: str | None = None
    endpoint: str | None = None
    credential_process: str | None = None  # the command that prints its keys (no static keys)
    indirect: tuple[str, ...] = ()  # the keys that make botocore resolve its credentials (SSO, a role...)

    def __repr__(self) -> str:  # never print a secret (a traceback, a log line)
        keys = "yes" if self.access_key_id else ("process" if self.credential_process else
                                                 ("botocore" if self.indirect else "no"))
        return f"Profile({self.name!r}, keys={keys}, region={self.region!r}, endpoint={self.endpoint!r})"


@dataclass(frozen=True)
class S3Settings:
    """What an S3 remote is opened with: the explicit settings obstore gets (keys None: obstore
    reads the variables' itself)."""

    region: str | None = None
    endpoint: str | None = None
    access_key_id: str | None = None
    secret_access_key: str | None = None
    session_token: str | None = None
    profile: str | None = None  # the profile that was read, if any
    credential_process: str | None = None  # keys from this command (the profile's credential_process)
    botocore_profile: str | None = None  # keys that botocore resolves for this profile (SSO, a role...)

    def __repr__(self) -> str:
        keys = "profile" if self.access_key_id else ("process" if self.credential_process else
                                                     ("botocore" if self.botocore_profile else "variables"))
        return f"S3Settings(region={self.region!r}, endpoint={self.endpoint!r}, profile={self.profile!r}, keys={keys})"


def _read_ini(path: Path) -> configparser.RawConfigParser | None:
    ini = configparser.RawConfigParser(default_section="\0convgit-no-default", strict=False, interpolation=None)
    try:
        text = path.read_text("utf-8")
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as e:
        raise InvalidInput(f"cannot read the AWS file {path}: {e}") from e
    try:
        ini.read_string(text, source=str(path))
    except configparser.Error as e:
        raise InvalidInput(f"the AWS file {path} does not parse: {str(e).splitlines()[0]}") from None
    return ini


def _nested(value: str | None, key: str) -> str | None:
    """``key`` in a nested block (``s3 =`` followed by indented ``endpoint_url = ...`` lines)."""
    for line in (value or "").splitlines():
        k, sep, v = line.partition("=")
        if sep and k.strip().lower() == key:
            return v.strip() or None
    return None


def read_profile(name: str, config_file: Path, credentials_file: Path, *, keys: bool = True) -> Profile | None:
    """Profile ``name`` from the two files, or None if neither has it. ``keys=False``: its
    keys are not wanted (the variables' are used), so a profile without static keys is fine."""
    conf, cred = _read_ini(config_file), _read_ini(credentials_file)
    section = "default" if name == "default" else f"profile {name}"
    c = dict(conf.items(section)) if conf is not None and conf.has_section(section) else None
    if c is None and name == "default" and conf is not None and conf.has_section("profile default"):
        c = dict(conf.items("profile default"))
    k = dict(cred.items(name)) if cred is not None and cred.has_section(name) else None
    if c is None and k is None:
        return None
    c, k = c or {}, k or {}

    def key(n: str) -> str | None:
        return (k.get(n) or c.get(n) or "").strip() or None

    access, secret = key("aws_access_key_id"), key("aws_secret_access_key")
    process = None
    indirect: list[str] = []
    if not (access and secret) and keys:
        indirect = [n for n in _INDIRECT if c.get(n) or k.get(n)]
        if indirect == ["credential_process"] and not (access or secret):
            process = key("credential_process")  # (with a role or SSO too, the AWS CLI uses those: botocore)
            indirect = [] if process else indirect
        if access or secret:
            raise InvalidInput(f"AWS profile {name!r} has only one of aws_access_key_id and aws_secret_access_key",
                               profile=name)
    endpoint = None
    if str(c.get("ignore_configured_endpoint_urls", "")).strip().lower() != "true":
        endpoint = (c.get("endpoint_url") or "").strip() or _nested(c.get("s3"), "endpoint_url")
        services = (c.get("services") or "").strip()
        if not endpoint and services and conf is not None and conf.has_section(f"services {services}"):
            endpoint = _nested(conf.get(f"services {services}", "s3", fallback=None), "endpoint_url")
    return Profile(name, access if secret else None, secret if access else None, key("aws_session_token"),
                   (c.get("region") or "").strip() or None, endpoint or None, process, tuple(indirect))


def s3_settings(*, endpoint: str | None = None, region: str | None = None, profile: str | None = None,
                env: AwsEnv | None = None, env_endpoint: str | None = None) -> S3Settings:
    """The settings an S3 remote opens with, from its config.toml values (``endpoint``,
    ``region``, ``profile``), the AWS variables (``env``, default: this process's) and the
    profile files (module docstring: what wins). NotFound when a named profile is absent."""
    env = env if env is not None else aws_env()
    own = profile is not None
    name = profile or env.profile
    p = None
    if name is not None or env.config_file.exists() or env.credentials_file.exists():
        p = read_profile(name or "default", env.config_file, env.credentials_file, keys=own or not env.keys_in_env)
        if p is None and name is not None:
            how = "the remote's profile in config.toml" if own else f"AWS_PROFILE={name}"
            raise NotFound(f"AWS profile {name!r} ({how}) is in neither {env.config_file} nor {env.credentials_file}",
                           profile=name)
    if p is None:
        return S3Settings(region=region, endpoint=endpoint or env_endpoint)
    mine = own or not env.keys_in_env
    keys = p.access_key_id is not None and mine
    if region is None:
        region = p.region if (own or not env.region_in_env) else None
    return S3Settings(region=region, endpoint=endpoint or env_endpoint or p.endpoint,
                      access_key_id=p.access_key_id if keys else None,
                      secret_access_key=p.secret_access_key if keys else None,
                      session_token=p.session_token if keys else None, profile=p.name,
                      credential_process=p.credential_process if mine else None,
                      botocore_profile=p.name if p.indirect and mine else None)


class CredentialProcess:
    """The keys of a profile's ``credential_process``, as obstore's ``credential_provider``
    asks for them: the command is run (split as a shell would split it, but without a
    shell, as the AWS CLI runs it on POSIX) and must print ``{"Version": 1, "AccessKeyId",
    "SecretAccessKey"[, "SessionToken"][, "Expiration" (ISO 8601)]}``; kept until that
    expiration (obstore asks again then). A command that fails, times out or prints anything
    else is ``remote_failed`` naming the profile, never showing what it printed on stdout
    (keys). ``resolve()`` runs it once at once (a bad process fails the command up front)."""

    TIMEOUT = 60.0

    from datetime import timedelta as _td

    EARLY = _td(seconds=60)
    del _td

    def __init__(self, command: str, profile: str) -> None:
        self.command, self.profile = command, profile
        self._cached: dict | None = None
        self.runs = 0

    def __repr__(self) -> str:
        return f"CredentialProcess(profile={self.profile!r})"

    def _fail(self, why: str):
        from ..errors import RemoteFailed

        return RemoteFailed(f"AWS profile {self.profile!r}: its credential_process {why}", profile=self.profile)

    def resolve(self) -> dict:
        """Run the command (again) and return the credential obstore takes."""
        import json
        import shlex
        import subprocess
        from datetime import datetime, timezone

        try:
            argv = shlex.split(self.command)
        except ValueError as e:
            raise self._fail(f"does not parse as a command line ({e})") from None
        if not argv:
            raise self._fail("is empty")
        try:
            p = subprocess.run(argv, capture_output=True, timeout=self.TIMEOUT, stdin=subprocess.DEVNULL)
        except FileNotFoundError:
            raise self._fail(f"{argv[0]!r} was not found") from None
        except subprocess.TimeoutExpired:
            raise self._fail(f"did not finish in {self.TIMEOUT:.0f} s") from None
        except OSError as e:
            raise self._fail(f"could not run: {e.strerror}") from None
        self.runs += 1
        if p.returncode != 0:
            err = p.stderr.decode("utf-8", "replace").strip().splitlines()
            raise self._fail(f"exited with {p.returncode}" + (f": {err[-1][:300]}" if err else ""))
        try:
            doc = json.loads(p.stdout)
            ok = isinstance(doc, dict) and doc.get("Version") == 1
        except ValueError:
            ok = False
        if not ok:
            raise self._fail('did not print a JSON object with "Version": 1')
        access, secret, token = doc.get("AccessKeyId"), doc.get("SecretAccessKey"), doc.get("SessionToken")
        if not (isinstance(access, str) and access and isinstance(secret, str) and secret) or \
                (token is not None and not isinstance(token, str)):
            raise self._fail("printed no AccessKeyId and SecretAccessKey strings")
        expires = None
        if doc.get("Expiration") is not None:
            try:
                expires = datetime.fromisoformat(str(doc["Expiration"]).replace("Z", "+00:00"))
            except ValueError:
                raise self._fail(f"printed an Expiration that is not an ISO 8601 time: {doc['Expiration']!r}") from None
            if expires.tzinfo is None:
                expires = expires.replace(tzinfo=timezone.utc)
            if expires <= datetime.now(timezone.utc):
                raise self._fail(f"printed keys that expired at {doc['Expiration']}")
        self._cached = {"access_key_id": access, "secret_access_key": secret, "token": token or None,
                        "expires_at": expires}
        return self._cached

    def __call__(self) -> dict:
        """The credential (obstore's ``credential_provider`` call): kept, or asked for again."""
        from datetime import datetime, timezone

        c = self._cached
        if c is None or (c["expires_at"] is not None and c["expires_at"] - datetime.now(timezone.utc) < self.EARLY):
            c = self.resolve()  # (a minute early, as the AWS CLI refreshes: no request goes out with stale keys)
        return c


class BotocoreCredentials:
    """The keys of a profile that gets them through SSO, an assumed role or a web identity
    file, resolved by botocore (the AWS SDK's credential chain for that profile: its STS and
    SSO calls, its caches, its refresh ahead of expiry), as obstore's ``credential_provider``
    asks for them. botocore reads the same files and variables as the AWS CLI
    (``AWS_CONFIG_FILE``, ``AWS_ENDPOINT_URL_STS``...). A failure (no SSO login, a role that
    cannot be assumed, an STS that cannot be reached) is ``remote_failed`` naming the profile;
    ``resolve()`` asks at once, so a bad profile fails the command before any S3 request."""

    KEEP = 300  # seconds obstore keeps a credential before asking again (botocore refreshes it)

    def __init__(self, profile: str) -> None:
        try:
            import botocore.session
        except ImportError as e:
            from ..errors import MissingDependency

            raise MissingDependency(
                f"AWS profile {profile!r} gets its credentials through SSO, a role or a web identity, which "
                "convgit resolves with botocore: pip install 'convgit[remote]' (or export keys: aws configure "
                f"export-credentials --profile {profile} --format env)", profile=profile) from e
        self.profile = profile
        self._session = botocore.session.Session(profile=profile)
        self._creds = None
        self.calls = 0

    def __repr__(self) -> str:
        return f"BotocoreCredentials(profile={self.profile!r})"

    def resolve(self) -> dict:
        """Ask botocore (again) and return the credential obstore takes."""
        from datetime import datetime, timedelta, timezone

        from ..errors import RemoteFailed

        try:
            if self._creds is None:
                self._creds = self._session.get_credentials()
            frozen = self._creds.get_frozen_credentials() if self._creds is not None else None
        except Exception as e:  # botocore's own errors (no SSO login, AccessDenied from STS, no endpoint...)
            why = str(e).splitlines()[0][:300] if str(e) else type(e).__name__
            raise RemoteFailed(f"AWS profile {self.profile!r}: its credentials could not be resolved: {why}",
                               profile=self.profile) from None
        if frozen is None or not frozen.access_key or not frozen.secret_key:
            raise RemoteFailed(f"AWS profile {self.profile!r}: botocore found no credentials for it", profile=self.profile)
        self.calls += 1
        return {"access_key_id": frozen.access_key, "secret_access_key": frozen.secret_key,
                "token": frozen.token or None, "expires_at": datetime.now(timezone.utc) + timedelta(seconds=self.KEEP)}

    def __call__(self) -> dict:
        """The credential (obstore's ``credential_provider`` call)."""
        return self.resolve()


__all__ = ["BotocoreCredentials", "CredentialProcess", "Profile", "S3Settings", "read_profile", "s3_settings"]
