"""A real PostgreSQL server for the tests and benchmarks: Debian's ``postgresql`` binaries,
``initdb`` in a fresh temporary directory, listening on 127.0.0.1 (a free port) only, fsync
off. Run as the ``postgres`` user when this process is root (the server refuses root).

``PgServer.start()`` returns the server or raises ``Unavailable`` with the precise reason
(no binaries, root without a ``postgres`` user, initdb or start failed): the fixtures skip on
it. The data directory is made with ``tempfile.mkdtemp`` in the system temporary directory,
not under pytest's ``tmp_path``: that one is mode 0700 and owned by root, so the ``postgres``
user could not reach a data directory inside it.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import uuid


class Unavailable(Exception):
    """PostgreSQL cannot be started here (the message says why)."""


def find_bindir() -> str | None:
    """The directory holding ``initdb`` and ``pg_ctl``: PATH, else Debian's versioned directory."""
    if os.environ.get("CONVGIT_TEST_PG_BINDIR"):
        return os.environ["CONVGIT_TEST_PG_BINDIR"]
    initdb = shutil.which("initdb")
    if initdb:
        return os.path.dirname(initdb)
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(p.split("/")[4]) if p.split("/")[4].isdigit() else 0)
    return os.path.dirname(found[-1]) if found else None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class PgServer:
    """One running server: ``dsn(dbname)``, ``create_database()``, ``stop()``."""

    def __init__(self, bindir: str, root: str, port: int, user: str | None) -> None:
        self.bindir, self.root, self.port, self.user = bindir, root, port, user
        self.data = os.path.join(root, "data")

    @classmethod
    def start(cls) -> "PgServer":
        """initdb and start a server (about half a second), or raise Unavailable."""
        bindir = find_bindir()
        if bindir is None or not os.path.exists(os.path.join(bindir, "pg_ctl")):
            raise Unavailable("PostgreSQL is not installed (no initdb on PATH or in /usr/lib/postgresql/*/bin; "
                              "apt-get install postgresql)")
        user = None
        if os.geteuid() == 0:
            try:
                pw = pwd.getpwnam("postgres")
            except KeyError:
                raise Unavailable("running as root and there is no 'postgres' user to run the server as") from None
            user = "postgres"
        root = tempfile.mkdtemp(prefix="convgit-pg-")
        if user:
            os.chown(root, pw.pw_uid, pw.pw_gid)
        last = ""
        server = None
        try:
            r = cls._run(user, [os.path.join(bindir, "initdb"), "-D", os.path.join(root, "data"), "-U", "postgres",
                                "--auth=trust", "-E", "UTF8", "--locale=C", "--no-sync"])
            if r.returncode != 0:
                raise Unavailable(f"initdb failed: {r.stderr.strip()[-400:]}")
            for _ in range(5):  # a port picked free can be taken before the server binds it
                server = cls(bindir, root, _free_port(), user)
                opts = (f"-c listen_addresses=127.0.0.1 -p {server.port} -c unix_socket_directories={root} "
                        "-c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=200")
                r = cls._run(user, [os.path.join(bindir, "pg_ctl"), "-D", server.data, "-l",
                                    os.path.join(root, "log"), "-o", opts, "-w", "-t", "30", "start"])
                if r.returncode == 0:
                    return server
                last = r.stderr.strip() or r.stdout.strip()
                try:
                    with open(os.path.join(root, "log")) as f:
                        last += f.read()[-400:]
                except OSError:
                    pass
            raise Unavailable(f"the PostgreSQL server did not start: {last[-600:]}")
        except BaseException:
            if server is not None:
                server.stop()
            shutil.rmtree(root, ignore_errors=True)
            raise

    @staticmethod
    def _run(user: str | None, argv: list[str]) -> subprocess.CompletedProcess:
        if user:
            argv = ["runuser", "-u", user, "--", *argv]
        return subprocess.run(argv, capture_output=True, text=True, timeout=120, cwd="/")

    def dsn(self, dbname: str = "postgres") -> str:
        """A libpq connection string to ``dbname`` on this server."""
        return f"host=127.0.0.1 port={self.port} user=postgres dbname={dbname} connect_timeout=5"

    def create_database(self) -> str:
        """A new, empty database of its own (for one test); its DSN."""
        import psycopg

        name = "t_" + uuid.uuid4().hex[:16]
        with psycopg.connect(self.dsn(), autocommit=True) as c:
            c.execute(f'CREATE DATABASE "{name}" TEMPLATE template0 ENCODING \'UTF8\'')
        return self.dsn(name)

    def stop(self) -> None:
        """Stop the server (immediately: it holds nothing worth a checkpoint) and remove its files."""
        self._run(self.user, [os.path.join(self.bindir, "pg_ctl"), "-D", self.data, "-m", "immediate", "-w", "stop"])
        shutil.rmtree(self.root, ignore_errors=True)
