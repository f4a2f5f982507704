"""The shapes of the config.toml tables (and of the AWS variables) that only some commands
read: ``[mcp]``, ``[embed]``, the AWS profile settings. Frozen dataclasses, filled by
convgit.config's loaders (which alone read the files and the process's variables), kept apart
from convgit.config so that opening a store creates none of them (start-up: docs/performance.md).
(It reads nothing; tests/test_env_config.py flags the usual word for those variables in any
module but convgit/config.py, hence the wording.)"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class McpLimits:
    """What one ``convgit mcp`` request may carry and return (config.toml ``[mcp]``, docs/mcp.md):
    bytes and messages of one ``save_conversation`` payload, the default and the largest page
    of results. Smaller than the ``[limits]`` of ``commit``: an agent's call is one turn, not
    an archive."""

    max_payload_bytes: int = 8 * 1024 * 1024
    max_messages: int = 2000
    page_size: int = 50
    max_page_size: int = 200


@dataclass(frozen=True)
class AwsEnv:
    """What the standard AWS variables say about profiles (convgit/remotes/awsprofile.py
    reads the files): the profile ``AWS_PROFILE`` names (None: unset), the shared config and
    credentials files (``AWS_CONFIG_FILE``, ``AWS_SHARED_CREDENTIALS_FILE``, else
    ``~/.aws/config`` and ``~/.aws/credentials``), and whether the variables carry keys
    or a region itself (then those win over a profile that was not named for the remote)."""

    profile: str | None
    config_file: Path
    credentials_file: Path
    keys_in_env: bool
    region_in_env: bool


@dataclass(frozen=True)
class EmbedConfig:
    """The ``[embed]`` table of config.toml: which provider embeds chunks, and what goes in
    a chunk. ``api_key_env`` names a variable of the process; the key itself is never stored."""

    provider: str = "auto"  # auto: the local model when convgit[semantic] is installed, else an error
    model: str | None = None
    dimension: int | None = None
    url: str | None = None  # openai-compatible: the base URL (…/v1) or the full …/embeddings URL
    api_key_env: str | None = None
    batch_size: int = 32
    timeout: float = 60.0
    include_reasoning: bool = False
    include_tools: bool = False
    on_commit: bool = False  # commit and import embed their new chunks after the commit point
    search: str = "auto"  # "auto": approximate (IVF) from ann_threshold vectors on; "exact": always exact
    ann_threshold: int = 200_000
    ann_nprobe: int = 0  # IVF lists probed per query; 0: automatic (docs/search.md)
