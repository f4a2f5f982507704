"""An S3 remote (``s3://bucket/prefix``: AWS S3, R2, GCS's S3 API, MinIO, SeaweedFS, Ceph)
through obstore (the Rust ``object_store`` crate: request signing, retries, conditional puts;
the ``[remote]`` extra). No signing is written here.

Where the settings come from: obstore's own reading of the standard AWS variables
(``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``, ``AWS_SESSION_TOKEN``, ``AWS_REGION``,
``AWS_ENDPOINT_URL``, web identity and instance metadata), the AWS profile files (obstore
reads none: awsprofile.py does, for ``remote.NAME.profile``, ``AWS_PROFILE`` or ``default``),
and config.toml's ``[remote.NAME]`` ``endpoint`` and ``region`` over both.

The two conditional writes map onto S3's: create-only is ``PutMode`` ``create``
(``If-None-Match: *``, 412 when the key exists), compare-and-swap is an update on the ETag
(``If-Match``; 412, or 409 for a concurrent conflicting write, means another writer won; an
``If-Match`` on a missing key is 412 on SeaweedFS and 404 on AWS: both are a lost race).
"""

from __future__ import annotations

from datetime import timedelta

from ..config import aws_endpoint
from ..errors import MissingDependency, RemoteCorrupt, RemoteFailed
from .awsprofile import BotocoreCredentials, CredentialProcess, s3_settings
from .base import CasLost


def _obstore():
    try:
        import obstore
        from obstore import exceptions
        from obstore.store import S3Store
    except ImportError as e:
        raise MissingDependency("s3:// remotes need obstore: pip install 'convgit[remote]'") from e
    return obstore, exceptions, S3Store


class S3Remote:
    """A remote (format 2, docs/format.md §13) in an S3 bucket under a prefix."""

    def __init__(self, bucket: str, prefix: str, *, url: str, endpoint: str | None = None,
                 region: str | None = None, profile: str | None = None) -> None:
        self.url = url
        self._ob, self._exc, S3Store = _obstore()
        settings = s3_settings(endpoint=endpoint, region=region, profile=profile, env_endpoint=aws_endpoint())
        self.profile = settings.profile
        endpoint, region = settings.endpoint, settings.region
        kwargs: dict = {}
        if settings.access_key_id:  # a profile's keys (in memory only; config.toml names the profile)
            kwargs["access_key_id"] = settings.access_key_id
            kwargs["secret_access_key"] = settings.secret_access_key
            if settings.session_token:
                kwargs["token"] = settings.session_token
        elif settings.credential_process:  # the profile's command gives them (run now: a bad one fails here)
            provider = CredentialProcess(settings.credential_process, settings.profile or "default")
            provider.resolve()
            kwargs["credential_provider"] = provider
        elif settings.botocore_profile:  # SSO, a role, a web identity: botocore makes those calls
            provider = BotocoreCredentials(settings.botocore_profile)
            provider.resolve()
            kwargs["credential_provider"] = provider
        client: dict = {"timeout": timedelta(seconds=60), "connect_timeout": timedelta(seconds=10)}
        if endpoint:
            kwargs["endpoint"] = endpoint
            kwargs["virtual_hosted_style_request"] = False  # S3-compatible servers: path style
            if endpoint.startswith("http://"):
                client["allow_http"] = True
        if region:
            kwargs["region"] = region
        retry = {"max_retries": 3, "retry_timeout": timedelta(seconds=30),
                 "backoff": {"init_backoff": timedelta(milliseconds=100), "max_backoff": timedelta(seconds=5), "base": 2}}
        try:
            self._store = S3Store(bucket, prefix=prefix or None, client_options=client, retry_config=retry, **kwargs)
        except Exception as e:  # a bad endpoint or region string
            raise RemoteFailed(f"remote {url}: {e}") from e

    def _fail(self, what: str, key: str, e: Exception) -> RemoteFailed:
        text = str(e).splitlines()[0][:300] if str(e) else type(e).__name__
        return RemoteFailed(f"remote {self.url}: cannot {what} {key}: {text}")

    def get(self, key: str) -> tuple[bytes, str] | None:
        """The bytes under ``key`` and their ETag, or None."""
        try:
            r = self._ob.get(self._store, key)
            meta = r.meta
            data = bytes(r.bytes())
        except FileNotFoundError:
            return None
        except Exception as e:
            raise self._fail("read", key, e) from e
        return data, meta.get("e_tag") or ""

    def get_unless(self, key: str, tag: str) -> tuple[bytes | None, str] | None:
        """``get``, unless the ETag is still ``tag``: ``(None, tag)`` (``If-None-Match``: 304, no body)."""
        try:
            r = self._ob.get(self._store, key, options={"if_none_match": tag})
            meta = r.meta
            data = bytes(r.bytes())
        except self._exc.NotModifiedError:
            return None, tag
        except FileNotFoundError:
            return None
        except Exception as e:
            raise self._fail("read", key, e) from e
        return data, meta.get("e_tag") or ""

    def size(self, key: str) -> int | None:
        """The size of ``key`` (a HEAD request), or None."""
        try:
            return int(self._ob.head(self._store, key)["size"])
        except FileNotFoundError:
            return None
        except Exception as e:
            raise self._fail("look up", key, e) from e

    def get_range(self, key: str, start: int, length: int) -> bytes:
        """``length`` bytes of ``key`` from ``start`` (a ranged GET), fewer at its end."""
        if length <= 0:
            return b""
        try:
            return bytes(self._ob.get_range(self._store, key, start=start, length=length))
        except FileNotFoundError:
            raise RemoteCorrupt(f"remote {self.url}: {key} is missing", key=key) from None
        except Exception as e:
            # A range past the end is refused by S3 (416): read what there is.
            size = self.size(key) if "range" in str(e).lower() else None
            if size is not None and start < size:
                return self.get_range(key, start, size - start)
            if size is not None:
                return b""
            raise self._fail("read", key, e) from e

    def put_new(self, key: str, data: bytes) -> bool:
        """Create ``key`` unless it exists (``If-None-Match: *``)."""
        try:
            self._ob.put(self._store, key, data, mode="create")
        except self._exc.AlreadyExistsError:
            return False
        except self._exc.PreconditionError:
            return False
        except Exception as e:
            raise self._fail("write", key, e) from e
        return True

    def put_if_match(self, key: str, data: bytes, tag: str | None) -> str:
        """Replace ``key`` if its ETag is ``tag`` (None: create it if absent)."""
        mode = "create" if tag is None else {"e_tag": tag}
        try:
            r = self._ob.put(self._store, key, data, mode=mode)
        except (self._exc.AlreadyExistsError, self._exc.PreconditionError, FileNotFoundError) as e:
            raise CasLost(key) from e
        except Exception as e:
            if "409" in str(e) or "ConditionalRequestConflict" in str(e):
                raise CasLost(key) from e
            raise self._fail("write", key, e) from e
        return r.get("e_tag") or ""

    def delete(self, key: str) -> None:
        """Remove ``key``."""
        try:
            self._ob.delete(self._store, key)
        except FileNotFoundError:
            pass
        except Exception as e:
            raise self._fail("delete", key, e) from e

    def list(self, prefix: str) -> dict[str, float]:
        """Every key under ``prefix`` and its last-modified time (gc --remote only)."""
        try:
            return dict(sorted((m["path"], m["last_modified"].timestamp())
                               for batch in self._ob.list(self._store, prefix or None) for m in batch))
        except Exception as e:
            raise self._fail("list", prefix, e) from e
