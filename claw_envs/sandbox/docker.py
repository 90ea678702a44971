"""``DockerSandbox``: the same interface as ``LocalSandbox``, inside a Docker container.

One container per sandbox (built from ``containers/sandbox/Dockerfile``), kept alive by a process
of another user; each command is a ``docker exec`` as the unprivileged ``sandbox`` user, and when it
ends (or times out) every process of that user in the container is killed. Limits are the
container's: memory, pids, rlimits (CPU, file size, open files), no capabilities, no network.
The docker SDK is the ``[docker]`` extra and is imported only when a DockerSandbox is made.
"""

from __future__ import annotations

import contextlib
import io
import posixpath
import tarfile
import threading
import time
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from claw_envs.sandbox.base import Bind, ExecResult, Sandbox, SandboxError
from claw_envs.sandbox.limits import Limits, limit_note, with_note
from claw_envs.sandbox.output import CappedOutput

DEFAULT_IMAGE = "claw-sandbox:latest"
SANDBOX_USER = "sandbox"
KEEPER_USER = "65534:65534"  # runs the container's idle process, so the sandbox user cannot kill it
DRAIN_WAIT = 5.0
NO_ENGINE_HINT = "Start a Docker engine (or point DOCKER_HOST at one), or use the local backend: make_sandbox('local')."


class DockerSandbox(Sandbox):
    """A container from ``image`` (see ``containers/README.md`` to build the default one).

    ``client`` is an existing ``docker.DockerClient``; by default one comes from the environment
    (``DOCKER_HOST`` or the local socket). With no reachable engine the constructor raises
    :class:`SandboxError` naming the cause.
    """

    def __init__(
        self,
        image: str = DEFAULT_IMAGE,
        *,
        memory_mb: int = 1024,
        cpu_seconds: int = 30,
        max_processes: int = 128,
        max_file_mb: int = 64,
        output_limit: int = 65536,
        network: bool = False,
        workspace: str = "/workspace",
        python: str = "python3",
        client: Any = None,
    ):
        if not isinstance(output_limit, int) or output_limit < 2:
            raise ValueError(f"output_limit must be an integer >= 2, got {output_limit!r}")
        self.limits = Limits(memory_mb, cpu_seconds, max_processes, max_file_mb)
        self.output_limit = output_limit
        self.image = image
        self.workspace = workspace
        self.python = python
        self.isolation = "docker"
        self.container: Any = None
        docker = _import_docker()
        self.client = client if client is not None else _client_from_env(docker)
        _ping(self.client)
        types = docker.types
        try:
            self.container = self.client.containers.run(
                image,
                ["sleep", "infinity"],
                detach=True,
                init=True,
                user=KEEPER_USER,
                working_dir=workspace,
                network_mode="bridge" if network else "none",
                mem_limit=f"{memory_mb}m",
                memswap_limit=f"{memory_mb}m",
                pids_limit=max_processes,
                ulimits=[
                    types.Ulimit(name="cpu", soft=cpu_seconds, hard=cpu_seconds + 1),
                    types.Ulimit(name="fsize", soft=max_file_mb << 20, hard=max_file_mb << 20),
                    types.Ulimit(name="nofile", soft=self.limits.open_files, hard=self.limits.open_files),
                    types.Ulimit(name="core", soft=0, hard=0),
                ],
                cap_drop=["ALL"],
                security_opt=["no-new-privileges"],
                labels={"claw.sandbox": "1"},
            )
        except docker.errors.ImageNotFound as err:
            raise SandboxError(
                f"Docker image {image!r} not found; build it with `docker build -t {DEFAULT_IMAGE} containers/sandbox` "
                "or use the local backend"
            ) from err
        except docker.errors.DockerException as err:
            raise SandboxError(f"could not start a container from {image!r}: {err}") from err

    def run(
        self,
        cmd: str | Sequence[str],
        timeout: float = 30.0,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
        stdin: str | bytes | None = None,
        *,
        binds: Sequence[Bind] = (),
    ) -> ExecResult:
        """Run ``cmd`` with ``docker exec``; the same result conventions as ``LocalSandbox.run`` (no ``binds``)."""
        if self.container is None:
            raise SandboxError("this sandbox is closed")
        if binds:
            raise SandboxError("the docker backend cannot bind host folders for one command; use the local backend")
        if not timeout > 0:
            raise ValueError(f"timeout must be a positive number of seconds, got {timeout!r}")
        argv = ["bash", "-c", cmd] if isinstance(cmd, str) else [str(a) for a in cmd]
        if not argv:
            return ExecResult(127, "", "sandbox: empty command")
        if stdin:
            stdin_path = f"/tmp/.claw-stdin-{uuid.uuid4().hex}"
            self.write_file(stdin_path, stdin)
            argv = ["sh", "-c", 'f="$0"; exec "$@" < "$f"', stdin_path, *argv]
        workdir = posixpath.normpath(posixpath.join(self.workspace, cwd or "."))
        api = self.client.api
        start = time.monotonic()
        try:
            exec_id = api.exec_create(
                self.container.id,
                argv,
                user=SANDBOX_USER,
                environment={str(k): str(v) for k, v in (env or {}).items()},
                workdir=workdir,
            )["Id"]
            stream = api.exec_start(exec_id, stream=True, demux=True)
        except Exception as err:  # any engine/transport failure is the sandbox's, not the command's
            raise SandboxError(f"docker exec failed: {err}") from err
        out, err_out = CappedOutput(self.output_limit), CappedOutput(self.output_limit)
        reader = threading.Thread(target=_drain, args=(stream, out, err_out), daemon=True)
        reader.start()
        reader.join(timeout)
        timed_out = reader.is_alive()
        self._kill_leftovers()
        reader.join(DRAIN_WAIT)
        try:
            code = api.exec_inspect(exec_id).get("ExitCode")
        except Exception as err:
            raise SandboxError(f"docker exec inspect failed: {err}") from err
        code = 137 if timed_out or code is None else int(code)
        return ExecResult(
            returncode=code,
            stdout=out.text(),
            stderr=with_note(err_out.text(), limit_note(self.limits, code, timed_out, timeout)),
            timed_out=timed_out,
            duration=time.monotonic() - start,
            truncated=out.truncated or err_out.truncated,
        )

    def read_file(self, path: str) -> bytes:
        """Bytes of ``path`` (relative paths are inside the workspace)."""
        docker = _import_docker()
        full = self._path(path)
        try:
            chunks, _stat = self.container.get_archive(full)
            archive = b"".join(chunks)
        except docker.errors.NotFound as err:
            raise FileNotFoundError(full) from err
        with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
            member = tar.next()
            if member is None or not member.isfile():
                raise IsADirectoryError(full)
            extracted = tar.extractfile(member)
            return extracted.read() if extracted else b""

    def write_file(self, path: str, data: str | bytes) -> None:
        """Create or replace ``path`` as the sandbox user; parents are created."""
        full = self._path(path)
        parent, name = posixpath.split(full)
        made = self.run(["mkdir", "-p", parent], timeout=30)
        if not made.ok:
            raise SandboxError(f"cannot create {parent} in the container: {made.stderr.strip()}")
        payload = data.encode() if isinstance(data, str) else bytes(data)
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w") as tar:
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(payload), 0o644, int(time.time())
            info.uid = info.gid = 1000
            info.uname = info.gname = SANDBOX_USER
            tar.addfile(info, io.BytesIO(payload))
        if not self.container.put_archive(parent, buf.getvalue()):
            raise SandboxError(f"docker refused to write {full}")

    def close(self) -> None:
        """Remove the container; safe to call twice."""
        container, self.container = self.container, None
        if container is not None:
            with contextlib.suppress(Exception):
                container.remove(force=True)

    def _path(self, path: str) -> str:
        return posixpath.normpath(posixpath.join(self.workspace, path))

    def _kill_leftovers(self) -> None:
        """Kill every process of the sandbox user (what the command left running, or all of it on timeout)."""
        with contextlib.suppress(Exception):
            self.container.exec_run(["kill", "-9", "-1"], user=SANDBOX_USER)


def _drain(stream: Any, out: CappedOutput, err: CappedOutput) -> None:
    with contextlib.suppress(Exception):
        for stdout_chunk, stderr_chunk in stream:
            if stdout_chunk:
                out.feed(stdout_chunk)
            if stderr_chunk:
                err.feed(stderr_chunk)


def _import_docker() -> Any:
    try:
        import docker
    except ImportError as err:
        raise SandboxError(
            "the docker backend needs the docker SDK (pip install 'claw-rl[docker]'); or use the local backend"
        ) from err
    return docker


def _client_from_env(docker: Any) -> Any:
    try:
        return docker.from_env()
    except docker.errors.DockerException as err:
        raise SandboxError(
            f"no Docker engine reachable: docker.from_env() raised {type(err).__name__}: {err}. {NO_ENGINE_HINT}"
        ) from err


def _ping(client: Any) -> None:
    """Raise :class:`SandboxError` unless the engine answers (a ping can raise requests errors, not DockerException)."""
    try:
        client.ping()
    except Exception as err:
        raise SandboxError(
            f"no Docker engine reachable: ping raised {type(err).__name__}: {err}. {NO_ENGINE_HINT}"
        ) from err
