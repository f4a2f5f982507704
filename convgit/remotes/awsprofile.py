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

Profiles whose credentials come from SSO, an assumed role or a ``credential_process`` are
refused (``invalid_input``) when they carry no static keys: ``aws configure
export-credentials --profile NAME --format env`` gives keys obstore reads from the variables.
"""

from __future__ import annotations

import configparser
from dataclasses import dataclass
from pathlib import Path

from ..config import AwsEnv, aws_env
from ..errors import InvalidInput, NotFound

# Profile keys that get credentials some other way than static keys (not supported here).
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

    def __repr__(self) -> str:  # never print a secret (a traceback, a log line)
        return f"Profile({self.name!r}, keys={'yes' if self.access_key_id else 'no'}, region={self.region!r}, " \
               f"endpoint={self.endpoint!r})"


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

    def __repr__(self) -> str:
        return f"S3Settings(region={self.region!r}, endpoint={self.endpoint!r}, profile={self.profile!r}, " \
               f"keys={'profile' if self.access_key_id else 'variables'})"


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
    if not (access and secret) and keys:
        indirect = [n for n in _INDIRECT if c.get(n) or k.get(n)]
        if indirect:
            raise InvalidInput(f"AWS profile {name!r} gets its credentials through {', '.join(indirect)}, which convgit "
                               f"does not read: export keys (aws configure export-credentials --profile {name} "
                               "--format env) or give the profile aws_access_key_id and aws_secret_access_key",
                               profile=name)
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
                   (c.get("region") or "").strip() or None, endpoint or None)


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
    keys = p.access_key_id is not None and (own or not env.keys_in_env)
    if region is None:
        region = p.region if (own or not env.region_in_env) else None
    return S3Settings(region=region, endpoint=endpoint or env_endpoint or p.endpoint,
                      access_key_id=p.access_key_id if keys else None,
                      secret_access_key=p.secret_access_key if keys else None,
                      session_token=p.session_token if keys else None, profile=p.name)


__all__ = ["Profile", "S3Settings", "read_profile", "s3_settings"]
