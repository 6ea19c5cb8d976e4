"""A throwaway PostgreSQL server for tests.

`find_pg_bin_dir()` locates the server binaries (initdb, pg_ctl): on PATH first, then the highest
version under /usr/lib/postgresql/*/bin (where Debian's `postgresql` package puts them).
`PostgresServer` starts one in a temporary folder, listening on 127.0.0.1 only on a free TCP port,
with trust authentication and fsync off (commits still written to the WAL before they are
answered), creates the database `dse`, and gives its URL in the form SQLAlchemy and Optuna take
(`postgresql+psycopg2://<user>@127.0.0.1:<port>/dse`). `stop()` shuts it down (`pg_ctl stop -m fast`)
and removes the folder.

initdb and postgres refuse to run as root, so when the tests run as root the server runs as an
existing unprivileged user (`postgres`, else `nobody`, else one made with useradd) through runuser
(or su), and the temporary folder is handed to that user.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import pwd
import re
import shlex
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

DATABASE = "dse"
START_TIMEOUT_S = 30.0
_CANDIDATE_USERS = ("postgres", "nobody")
_CREATED_USER = "dse-pgtest"


class PostgresServerError(RuntimeError):
    """The throwaway server could not be set up, started or reached."""


def _version_key(path: Path) -> tuple[int, ...]:
    # /usr/lib/postgresql/<version>/bin -> numeric version parts, so 16 sorts above 9.6.
    return tuple(int(p) for p in re.findall(r"\d+", path.parent.name)) or (-1,)


def find_pg_bin_dir() -> Path | None:
    """The folder holding initdb and pg_ctl, or None where the server binaries are not installed."""
    initdb, pg_ctl = shutil.which("initdb"), shutil.which("pg_ctl")
    if initdb and pg_ctl:
        # Debian's /usr/local/bin or /usr/bin entries may be symlinks or wrappers: resolve them so the
        # sibling binaries (postgres, pg_isready) come from the same installation.
        real = Path(initdb).resolve().parent
        if (real / "pg_ctl").exists():
            return real
        return Path(initdb).parent
    found = [
        d
        for d in Path("/usr/lib/postgresql").glob("*/bin")
        if os.access(d / "initdb", os.X_OK) and os.access(d / "pg_ctl", os.X_OK)
    ]
    return max(found, key=_version_key) if found else None


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _others_can_enter(path: Path) -> bool:
    """Whether every folder down to `path` lets other users through (o+x)."""
    try:
        return all(p.stat().st_mode & 0o001 for p in [path.resolve(), *path.resolve().parents])
    except OSError:
        return False


def _server_user() -> str | None:
    """The OS user to run the server as: None means the current user (not root)."""
    if os.geteuid() != 0:
        return None
    for name in _CANDIDATE_USERS:
        with contextlib.suppress(KeyError):
            pwd.getpwnam(name)
            return name
    with contextlib.suppress(KeyError):
        pwd.getpwnam(_CREATED_USER)
        return _CREATED_USER
    useradd = shutil.which("useradd")
    if useradd is None:
        raise PostgresServerError(
            "running as root, and no unprivileged user (postgres, nobody) nor useradd to make one: "
            "initdb/postgres refuse to run as root"
        )
    subprocess.run(
        [useradd, "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", _CREATED_USER],
        check=True,
        capture_output=True,
    )
    return _CREATED_USER


def _as_user(user: str | None, cmd: list[str]) -> list[str]:
    if user is None:
        return cmd
    runuser = shutil.which("runuser")
    if runuser:
        return [runuser, "-u", user, "--", *cmd]
    su = shutil.which("su")
    if su:
        return [su, "-s", "/bin/sh", user, "-c", shlex.join(cmd)]
    raise PostgresServerError(f"running as root, and neither runuser nor su to run the server as {user!r}")


class PostgresServer:
    """One throwaway server. Use `start()` / `stop()`, or as a context manager."""

    def __init__(self, bin_dir: Path | None = None) -> None:
        found = bin_dir or find_pg_bin_dir()
        if found is None:
            raise PostgresServerError("PostgreSQL server binaries not found (initdb/pg_ctl)")
        self.bin_dir = found
        self.os_user = _server_user()
        self.db_user = self.os_user or pwd.getpwuid(os.geteuid()).pw_name
        self.port: int | None = None
        self.root: Path | None = None
        self._started = False

    # -- paths -------------------------------------------------------------------------------------
    @property
    def data_dir(self) -> Path:
        assert self.root is not None
        return self.root / "data"

    @property
    def log_file(self) -> Path:
        assert self.root is not None
        return self.root / "server.log"

    @property
    def url(self) -> str:
        if not self._started:
            raise PostgresServerError("server not started")
        return f"postgresql+psycopg2://{self.db_user}@127.0.0.1:{self.port}/{DATABASE}"

    def _bin(self, name: str) -> str:
        path = self.bin_dir / name
        return str(path) if path.exists() else (shutil.which(name) or name)

    def _run(self, cmd: list[str], what: str, timeout: float = 60.0) -> subprocess.CompletedProcess[str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
        env.update(LC_ALL="C", LANG="C")
        try:
            proc = subprocess.run(
                _as_user(self.os_user, cmd),
                cwd=self.root,  # the server user may not be able to enter the caller's folder
                env=env,
                capture_output=True,
                text=True,
                timeout=timeout,
                stdin=subprocess.DEVNULL,
            )
        except subprocess.TimeoutExpired as e:
            raise PostgresServerError(f"{what} timed out after {timeout:.0f} s{self._log_tail()}") from e
        if proc.returncode != 0:
            raise PostgresServerError(
                f"{what} failed (exit {proc.returncode}): {shlex.join(cmd)}\n"
                f"stdout: {proc.stdout.strip()}\nstderr: {proc.stderr.strip()}{self._log_tail()}"
            )
        return proc

    def _log_tail(self, lines: int = 30) -> str:
        if self.root is None or not self.log_file.exists():
            return ""
        with contextlib.suppress(OSError):
            tail = self.log_file.read_text(errors="replace").splitlines()[-lines:]
            return "\nserver log (tail):\n" + "\n".join(tail)
        return ""

    # -- lifecycle ---------------------------------------------------------------------------------
    def start(self, attempts: int = 3) -> str:
        """Start the server and create the database; return its URL."""
        if self._started:
            return self.url
        base = tempfile.gettempdir()
        if self.os_user is not None and not _others_can_enter(Path(base)):
            base = "/tmp"  # the server user must be able to reach its folder
        self.root = Path(tempfile.mkdtemp(prefix="dse-pg-", dir=base))
        try:
            if self.os_user is not None:
                pw = pwd.getpwnam(self.os_user)
                os.chown(self.root, pw.pw_uid, pw.pw_gid)
            os.chmod(self.root, 0o700)
            self._initdb()
            last: Exception | None = None
            for _ in range(attempts):  # another process may take the free port before the server does
                self.port = _free_port()
                try:
                    self._pg_ctl_start()
                    break
                except PostgresServerError as e:
                    last = e
                    self._kill_leftover()
            else:
                raise PostgresServerError(f"server did not start after {attempts} attempts: {last}")
            self._started = True
            atexit.register(self.stop)
            self._create_database()
        except BaseException:
            self.stop()
            raise
        return self.url

    def _initdb(self) -> None:
        self._run(
            [
                self._bin("initdb"),
                "-D", str(self.data_dir),
                "-U", self.db_user,
                "--auth=trust",
                "--encoding=UTF8",
                "--locale=C",
                "--no-sync",
            ],
            "initdb",
            timeout=120,
        )  # fmt: skip
        # Trust, but only over the server's own socket and from 127.0.0.1.
        (self.data_dir / "pg_hba.conf").write_text("local all all trust\nhost all all 127.0.0.1/32 trust\n")
        socket_dir = str(self.root).replace("'", "''")
        with (self.data_dir / "postgresql.conf").open("a") as conf:
            conf.write(
                "\n# dse tests: a throwaway server\n"
                "listen_addresses = '127.0.0.1'\n"
                f"unix_socket_directories = '{socket_dir}'\n"
                # no flush to disk, but a commit is written to the WAL before it is answered: the
                # tests stop the server with `-m immediate` and count what it had committed
                # (synchronous_commit off lost the last ~200 ms of commits: 2 trials stored of 3)
                "fsync = off\n"
                "synchronous_commit = on\n"
                "full_page_writes = off\n"
                "max_connections = 100\n"
            )

    def _pg_ctl_start(self) -> None:
        options = f"-p {self.port}"  # everything else is in postgresql.conf (see _initdb)
        self._run(
            [
                self._bin("pg_ctl"),
                "-D", str(self.data_dir),
                "-l", str(self.log_file),
                "-o", options,
                "-w", "-t", str(int(START_TIMEOUT_S)),
                "start",
            ],
            "pg_ctl start",
            timeout=START_TIMEOUT_S + 15,
        )  # fmt: skip
        self._wait_ready()

    def _wait_ready(self) -> None:
        """pg_ctl -w already waits; make sure TCP on 127.0.0.1 answers too."""
        import psycopg2

        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            try:
                conn = psycopg2.connect(
                    host="127.0.0.1", port=self.port, user=self.db_user, dbname="postgres", connect_timeout=3
                )
                conn.close()
                return
            except psycopg2.OperationalError as e:
                if time.monotonic() > deadline:
                    raise PostgresServerError(
                        f"server on 127.0.0.1:{self.port} not reachable after {START_TIMEOUT_S:.0f} s: "
                        f"{e}{self._log_tail()}"
                    ) from e
                time.sleep(0.2)

    def _create_database(self) -> None:
        import psycopg2

        conn = psycopg2.connect(host="127.0.0.1", port=self.port, user=self.db_user, dbname="postgres")
        try:
            conn.autocommit = True
            with conn.cursor() as cur:
                cur.execute(f'CREATE DATABASE "{DATABASE}"')
        finally:
            conn.close()

    def _kill_leftover(self) -> None:
        """Stop a postmaster this object started, even if pg_ctl lost track of it."""
        if self.root is None or not self.data_dir.exists():
            return
        with contextlib.suppress(PostgresServerError):
            self._run(
                [self._bin("pg_ctl"), "-D", str(self.data_dir), "-m", "fast", "-w", "stop"], "pg_ctl stop"
            )
            return
        pid_file = self.data_dir / "postmaster.pid"
        with contextlib.suppress(OSError, ValueError, IndexError):
            lines = pid_file.read_text().splitlines()
            pid, pid_data_dir = int(lines[0]), lines[1]
            # Only our own postmaster: the pid file names its data folder, and so does /proc.
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            if pid_data_dir == str(self.data_dir) and "postgres" in cmdline:
                os.kill(pid, signal.SIGKILL)

    def restart(self, down_s: float = 2.0) -> None:
        """Stop the server (fast shutdown, dropping every connection), stay down ``down_s``
        seconds, start it again on the same port with the same data."""
        self._run([self._bin("pg_ctl"), "-D", str(self.data_dir), "-m", "fast", "-w", "stop"], "pg_ctl stop")
        time.sleep(down_s)
        self._pg_ctl_start()

    def stop(self) -> None:
        """Stop the server (fast shutdown) and remove its folder. Safe to call more than once."""
        if self.root is None:
            return
        if (self.data_dir / "postmaster.pid").exists():
            self._kill_leftover()
        shutil.rmtree(self.root, ignore_errors=True)
        self.root = None
        self._started = False
        with contextlib.suppress(Exception):
            atexit.unregister(self.stop)

    def __enter__(self) -> PostgresServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
