"""Where candidate code runs: a fresh process per candidate source, forked from a warm zygote, that decides nothing.

The judge (tools.worker) forks a zygote at start-up, after importing torch and Triton but before touching
CUDA, so a candidate process costs a fork and a CUDA context (0.25 s on the H200), not the 5 s of a fresh
`import torch`. Each candidate process, before any candidate code is loaded:
- starts its own session, dies with the zygote (PR_SET_PDEATHSIG), keeps no descriptor but its socket to the
  judge, and writes its stdout and stderr to a size-limited file;
- puts itself in a Landlock sandbox (tools.landlock): it may read anything, write only in its own directory
  (so nothing of MARATHON_HOME: log, token, compile cache; nothing of the project, nor of another source's
  directory), open no TCP connection, signal or ptrace nothing outside its sandbox (not the judge, not the
  server); where it runs as root its capabilities are dropped;
- gets an environment that names no state directory and holds no credentials;
- keeps its Triton cache per source (a repeat profile of the same source skips the JIT), never shared between
  sources (one source could plant binaries for another's kernels).
Where Landlock is missing (an old kernel), `Sandbox.describe()` says so and every report carries it.
The zygote is the candidates' subreaper: `reap` kills the candidate and every process it started, however it
detached, so nothing a candidate leaves behind runs into the next job or the baseline's timing.
"""

from __future__ import annotations

import ctypes
import fcntl
import hashlib
import os
import resource
import select
import shutil
import signal
import socket
import stat
import sys
import termios
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tools import landlock, wire

KEEP_SOURCE_DIRS = 48  # per-source directories (with their Triton caches) kept, newest first
_PR_SET_PDEATHSIG = 1
_PR_SET_CHILD_SUBREAPER = 36
# The candidate's environment: only what torch, Triton and the CUDA driver need.
_DROP_ENV = ("MARATHON_HOME", "XDG_STATE_HOME", "XDG_CACHE_HOME", "MARATHON_TOKEN", "MARATHON_RUN_ID",
             "MARATHON_SANDBOX_DIR", "VIRTUAL_ENV", "TORCHINDUCTOR_CACHE_DIR", "TRITON_HOME")
# Device files a CUDA process opens for writing; nothing else under /dev is writable from the sandbox.
_DEVICE_GLOBS = ("nvidia*", "nvidia-caps/*", "null", "zero", "full", "random", "urandom", "tty")


def _prctl(option: int, value: int) -> None:
    try:
        ctypes.CDLL(None, use_errno=True).prctl(option, value, 0, 0, 0)
    except (OSError, AttributeError):  # not Linux: the zygote's reap still kills by process group
        pass


DRAIN_WAIT_S = 0.1  # the longest a live process's already written output is waited for


def _pending(fd: int) -> bool:
    """Whether the pipe `fd` holds bytes not yet read (FIONREAD); False once it is closed."""
    try:
        count = fcntl.ioctl(fd, termios.FIONREAD, b"\0\0\0\0")
    except OSError:
        return False
    return int.from_bytes(count, sys.byteorder) > 0


class OutputTail:
    """What a candidate prints, drained from its pipe by a thread of the judge: the last `keep` bytes and the
    count. A candidate that prints without end costs a thread's reads, never a full disk or a blocked write.

    The thread reads only when the pipe is readable and holds the lock from the read to the count, so that with
    the lock held an empty pipe means every byte written so far is counted: what `snapshot` of a live process
    (one kept for a repeat profile) relies on, instead of waiting for a close that does not come."""

    def __init__(self, fd: int, keep: int = 4096) -> None:
        self.keep = keep
        self.total = 0
        self._tail = b""
        self._lock = threading.Lock()
        self._fd = fd
        self._closed = False
        self._thread = threading.Thread(target=self._drain, args=(fd,), daemon=True, name="candidate-output")
        self._thread.start()

    def _drain(self, fd: int) -> None:
        try:
            poller = select.poll()  # not select(): no limit on the descriptor's number
            poller.register(fd, select.POLLIN)
            while True:
                poller.poll()
                with self._lock:
                    chunk = os.read(fd, 1 << 16)  # readable: returns at once, with bytes or at the end
                    if not chunk:
                        return
                    self.total += len(chunk)
                    self._tail = (self._tail + chunk)[-self.keep:]
        except (OSError, ValueError):
            return
        finally:
            with self._lock:
                self._closed = True
                os.close(fd)

    def snapshot(self, limit: int = 2000, wait_s: float = 0.5) -> dict[str, Any]:
        """The tail so far. `wait_s`: how long to wait for the pipe to close (after the process ended, its last
        writes). With 0, for a process that lives on, what its pipe already holds is counted first (waiting at
        most DRAIN_WAIT_S for a process that prints without end)."""
        if wait_s > 0:
            self._thread.join(timeout=wait_s)
        deadline = time.monotonic() + DRAIN_WAIT_S
        while True:
            with self._lock:
                if self._closed or not _pending(self._fd) or time.monotonic() >= deadline:
                    return {"output_bytes": self.total,
                            "output_tail": self._tail[-limit:].decode("utf-8", "replace")}
            time.sleep(0.001)


class ZygoteLost(RuntimeError):
    """The zygote stopped answering in step: the worker must be replaced."""


@dataclass(frozen=True)
class Spawned:
    """A candidate process as the judge holds it: its pid, the judge's end of its socket, its output."""

    pid: int
    sock: socket.socket
    workdir: Path
    output: OutputTail


class Sandbox:
    """The judge's handle on its zygote. Create it before CUDA is initialised in this process."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.landlock_abi = landlock.abi_version()
        root.mkdir(parents=True, exist_ok=True, mode=0o700)
        judge_end, zygote_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        pid = os.fork()
        if pid == 0:  # the zygote
            judge_end.close()
            code = 1
            try:
                code = _zygote_main(zygote_end, root)
            finally:
                os._exit(code)
        zygote_end.close()
        self.zygote_pid = pid
        self._sock = judge_end

    def describe(self) -> dict[str, Any]:
        if self.landlock_abi >= 1:
            return {"process": "fresh per candidate source", "landlock_abi": self.landlock_abi,
                    "filesystem": "writes only to its own directory",
                    "network": "no TCP" if self.landlock_abi >= 4 else "unrestricted",
                    "signals": "own processes only" if self.landlock_abi >= 6 else "unrestricted",
                    "note": None}
        return {"process": "fresh per candidate source", "landlock_abi": 0, "filesystem": "unrestricted",
                "network": "unrestricted", "signals": "unrestricted",
                "note": "this kernel has no Landlock: candidate processes are separate and decide nothing, but could "
                        "write to this user's files"}

    def spawn(self, sha: str, source: str, timeout: float = 30.0) -> Spawned:
        wire.send(self._sock, {"op": "spawn", "sha": sha, "source": source})
        msg = self._answer(timeout)
        if msg.header.get("error") or len(msg.fds) != 2:
            msg.close_fds()
            raise RuntimeError(f"the zygote could not start a candidate process: {msg.header.get('error')}")
        sock = socket.socket(fileno=msg.fds[0])
        return Spawned(int(msg.header["pid"]), sock, Path(msg.header["workdir"]), OutputTail(msg.fds[1]))

    def reap(self, spawned: Spawned, timeout: float = 30.0) -> str:
        """Kill the candidate and everything it started; how it ended ('exited with code 0', 'killed by ...')."""
        try:
            spawned.sock.close()
        except OSError:
            pass
        wire.send(self._sock, {"op": "reap", "pid": spawned.pid})
        return str(self._answer(timeout).header.get("status", "unknown"))

    def _answer(self, timeout: float) -> wire.Message:
        """The zygote's answer. Any fault here (a late answer would answer the next request) is fatal to the
        worker: ZygoteLost, which the worker reports and then exits on, to be replaced by the pool."""
        try:
            return wire.recv(self._sock, timeout)
        except wire.WireError as exc:
            raise ZygoteLost(f"the candidates' zygote did not answer: {exc}") from None

    def close(self) -> None:
        try:
            self._sock.close()
        except OSError:
            pass
        try:
            os.kill(self.zygote_pid, signal.SIGKILL)
            os.waitpid(self.zygote_pid, 0)
        except (ProcessLookupError, ChildProcessError):
            pass


# -- the zygote (a child of the judge that never touches CUDA) ---------------------------------------


def _describe_status(status: int) -> str:
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        try:
            return f"killed by signal {signal.Signals(sig).name}"
        except ValueError:
            return f"killed by signal {sig}"
    return f"exited with code {os.WEXITSTATUS(status)}"


def _zygote_main(sock: socket.socket, root: Path) -> int:
    _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    _prctl(_PR_SET_CHILD_SUBREAPER, 1)
    _close_fds_but(sock.fileno(), 0, 1, 2)
    ended: dict[int, str] = {}
    while True:
        try:
            msg = wire.recv(sock, timeout=3600 * 24 * 365)
        except wire.WireError:
            _kill_descendants()
            return 0
        op = msg.header.get("op")
        msg.close_fds()
        _collect(ended)
        if op == "spawn":
            try:
                sha, source = str(msg.header["sha"]), str(msg.header["source"])
                workdir = _source_dir(root, sha)
                judge_end, child_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
                out_r, out_w = os.pipe()
                pid = os.fork()
                if pid == 0:
                    judge_end.close()
                    sock.close()
                    os.close(out_r)
                    code = 0
                    try:
                        _candidate_main(child_end, out_w, workdir, source)
                    except BaseException:
                        code = 70
                    os._exit(code)
                child_end.close()
                os.close(out_w)
                wire.send(sock, {"pid": pid, "workdir": str(workdir)}, [judge_end.fileno(), out_r])
                judge_end.close()
                os.close(out_r)
            except Exception as exc:
                wire.send(sock, {"error": f"{type(exc).__name__}: {exc}"})
        elif op == "reap":
            wire.send(sock, {"status": _reap(int(msg.header["pid"]), ended)})


def _close_fds_but(*keep: int) -> None:
    for fd in _open_fds():
        if fd not in keep:
            try:
                os.close(fd)
            except OSError:
                pass


def _open_fds() -> list[int]:
    try:
        return [int(name) for name in os.listdir("/proc/self/fd")]
    except OSError:
        return list(range(3, 1024))


def _collect(ended: dict[int, str]) -> None:
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        ended[pid] = _describe_status(status)


def process_parents() -> dict[int, int]:
    """pid -> parent pid of every process, from /proc (empty where there is none)."""
    parents: dict[int, int] = {}
    try:
        names = os.listdir("/proc")
    except OSError:
        return parents
    for name in names:
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat") as f:
                    parents[int(name)] = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
    return parents


def descendants(root: int) -> list[int]:
    """Every process below `root` by the parent links, whatever session or group it moved to."""
    parents = process_parents()
    found: list[int] = []
    frontier = {root}
    while frontier:
        frontier = {p for p, parent in parents.items() if parent in frontier and p not in found}
        found.extend(sorted(frontier))
    return found


def running_strays(zygote_pid: int, candidate_pid: int) -> list[str]:
    """The processes below the zygote, other than the candidate's own, that are alive (zombies aside), each as
    "pid (name)": what a candidate started. Its descendants that daemonised are below the zygote too, which is their
    subreaper."""
    found = []
    for pid in descendants(zygote_pid):
        if pid == candidate_pid:
            continue
        try:
            with open(f"/proc/{pid}/stat") as f:
                head, tail = f.read().rsplit(")", 1)
        except OSError:
            continue  # gone since
        if tail.split()[0] in ("Z", "X"):
            continue
        found.append(f"{pid} ({head.split('(', 1)[-1]})")
    return found


def _kill_descendants() -> int:
    """SIGKILL every process below the zygote (orphans a candidate left behind reparent here: the subreaper)."""
    killed = 0
    for _ in range(5):  # a fork racing the kill shows up in the next sweep
        below = descendants(os.getpid())
        if not below:
            break
        for pid in below:
            try:
                os.kill(pid, signal.SIGKILL)
                killed += 1
            except OSError:
                pass
        time.sleep(0.002)
    return killed


def _reap(pid: int, ended: dict[int, str]) -> str:
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    _kill_descendants()  # one candidate at a time per zygote: everything below it belongs to this one
    deadline = time.monotonic() + 20
    while pid not in ended and time.monotonic() < deadline:
        _collect(ended)
        if pid not in ended:
            time.sleep(0.002)
    # Orphans it left reparent here (the subreaper): wait until every one is killed and collected, so none is
    # running, or even a zombie, when the judge moves on.
    while time.monotonic() < deadline:
        _collect(ended)
        me = os.getpid()
        if not any(parent == me for parent in process_parents().values()):
            break
        _kill_descendants()
        time.sleep(0.002)
    for other in [p for p in ended if p != pid]:
        del ended[other]  # the candidate's own children, collected by the subreaper
    return ended.pop(pid, "still running after SIGKILL")


def triton_cache_of(root: Path, sha: str) -> Path:
    """The Triton cache that the processes of one source (sha) share, under a sandbox root."""
    return root / sha[:16] / "triton-cache"


def _source_dir(root: Path, sha: str) -> Path:
    """`root/<sha16>/`: `work/` emptied for each process, `triton-cache/` kept for the same source.

    The candidate may write anything beneath `root/<sha16>/`, links included (a `work` that points at the token or
    at the project's code, so that this process, unconfined, would write the next candidate's source there): what
    is not a plain folder of ours is removed, never followed."""
    folder = root / sha[:16]
    work = folder / "work"
    if _is_link_or_foreign(folder):
        _remove(folder)  # not ours (another user's server): never reuse it
    _remove(work)
    cache = folder / "triton-cache"
    if _is_link_or_foreign(cache):
        _remove(cache)
    for d in (folder, work, cache):
        d.mkdir(mode=0o700, exist_ok=True)
    os.utime(folder)
    _prune(root, keep=folder)
    return work


def _is_link_or_foreign(path: Path) -> bool:
    try:
        st = path.lstat()
    except FileNotFoundError:
        return False
    return stat.S_ISLNK(st.st_mode) or not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid()


def _remove(path: Path) -> None:
    """Remove a file, a link (not what it points at) or a folder tree (links inside it unfollowed)."""
    try:
        st = path.lstat()
    except FileNotFoundError:
        return
    if stat.S_ISDIR(st.st_mode):
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


def _prune(root: Path, keep: Path) -> None:
    folders = sorted((p for p in root.iterdir() if p.is_dir() and p != keep), key=lambda p: p.stat().st_mtime,
                     reverse=True)
    for old in folders[KEEP_SOURCE_DIRS:]:
        shutil.rmtree(old, ignore_errors=True)


# -- the candidate process (forked from the zygote) --------------------------------------------------


def _devices() -> list[str]:
    import glob

    return sorted({p for pattern in _DEVICE_GLOBS for p in glob.glob(f"/dev/{pattern}")})


def confine(writable: Path, cuda: bool) -> dict[str, Any] | None:
    """Close the sandbox around this process (every process that runs candidate code calls it before loading
    the candidate: the profile's candidate process, the census and Nsight targets, the compile steps).

    With `cuda`, the CUDA driver sets itself up first (its device files and bookkeeping), then Landlock allows
    writes under `writable` and to CUDA's device files only; where this is root, its capabilities go."""
    if cuda:
        import torch

        torch.cuda.init()
        torch.empty(1, device="cuda")
        torch.cuda.synchronize()
    applied = None
    if landlock.abi_version() >= 1:
        applied = landlock.restrict(read=["/"], write=[str(writable)], devices=_devices())
    if os.geteuid() == 0:
        landlock.drop_capabilities()
    return applied


def _candidate_main(sock: socket.socket, out_fd: int, workdir: Path, source: str) -> None:
    os.setsid()
    os.dup2(out_fd, 1)
    os.dup2(out_fd, 2)
    _close_fds_but(sock.fileno(), 0, 1, 2)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    # Into the folder the zygote just made, by a descriptor that refuses a link (a process of this source that
    # outlived its reaping could have swapped one in since).
    work_fd = os.open(workdir, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    os.fchdir(work_fd)
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    for name in _DROP_ENV:
        os.environ.pop(name, None)
    os.environ.update(HOME=str(workdir), TMPDIR=str(workdir),
                      TRITON_CACHE_DIR=str(workdir.parent / "triton-cache"))
    import tempfile

    tempfile.tempdir = str(workdir)  # the zygote's parent may have cached /tmp, which the sandbox does not let it write
    name = f"cand_{hashlib.sha256(source.encode()).hexdigest()[:12]}.py"
    confine(workdir.parent, cuda=os.environ.get("TRITON_INTERPRET") != "1")
    # Written once the sandbox is closed, new and not through a link: whatever the folder holds, this write lands
    # only where the candidate itself may write.
    fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600, dir_fd=work_fd)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(source)
    os.close(work_fd)
    path = workdir / name
    sys.stdout = open(1, "w", buffering=1, closefd=False)
    sys.stderr = open(2, "w", buffering=1, closefd=False)
    from tools.candidate_host import serve

    serve(sock, path)
