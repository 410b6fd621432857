"""The operating-system confinement of learner code (cudacourse/sandbox/, issue 14).

Each test runs a small hostile program (C built with g++ here, or Python) under ``confined_popen`` and
checks that its effect did not happen (files checksummed before and after, the victim processes still
alive, the server never accepted, nothing left running) and that the worker saw the refusal. A test whose
mechanism is unavailable on this machine is skipped with a reason naming that mechanism.

Runs as root and as an unprivileged user (see docs/CONFINEMENT.md, "Testing").
"""

from __future__ import annotations

import hashlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from cudacourse import sandbox
from cudacourse.sandbox import ConfinementUnavailable, Limits, confined_popen

HOSTILE_C = r"""
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

static void say(const char* what, int ok) { printf("%s: %s\n", what, ok ? "DONE" : strerror(errno)); fflush(stdout); }

int main(int argc, char** argv) {
    const char* mode = argv[1];
    if (!strcmp(mode, "write")) {            /* argv[2]: file to overwrite, argv[3]: dir to add a file to */
        FILE* f = fopen(argv[2], "w");
        say("overwrite", f != NULL);
        if (f) { fputs("forged\n", f); fclose(f); }
        char p[4096]; snprintf(p, sizeof p, "%s/planted.txt", argv[3]);
        int fd = open(p, O_WRONLY | O_CREAT, 0644);
        say("create", fd >= 0);
        say("unlink", unlink(argv[2]) == 0);
        char q[4096]; snprintf(q, sizeof q, "%s.moved", argv[2]);
        say("rename", rename(argv[2], q) == 0);
        f = fopen(argv[4], "w");               /* argv[4]: inside scratch, must work */
        say("scratch", f != NULL);
        if (f) { fputs("mine\n", f); fclose(f); }
    } else if (!strcmp(mode, "read")) {      /* print every file named */
        for (int i = 2; i < argc; i++) {
            int fd = open(argv[i], O_RDONLY);
            char buf[256] = {0};
            if (fd >= 0 && read(fd, buf, sizeof buf - 1) >= 0) printf("read %s: %s\n", argv[i], buf);
            else printf("read %s: refused: %s\n", argv[i], strerror(errno));
        }
    } else if (!strcmp(mode, "connect")) {   /* argv[2]: a TCP port on 127.0.0.1 */
        int s = socket(AF_INET, SOCK_STREAM, 0);
        struct sockaddr_in a = {0};
        a.sin_family = AF_INET; a.sin_port = htons(atoi(argv[2])); a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        say("connect", s >= 0 && connect(s, (struct sockaddr*)&a, sizeof a) == 0);
        int l = socket(AF_INET, SOCK_STREAM, 0);
        a.sin_port = htons(0);
        say("bind", l >= 0 && bind(l, (struct sockaddr*)&a, sizeof a) == 0);
    } else if (!strcmp(mode, "kill")) {      /* kill the parent and every pid named */
        say("kill parent", kill(getppid(), SIGKILL) == 0);
        for (int i = 2; i < argc; i++) say(argv[i], kill(atoi(argv[i]), SIGKILL) == 0);
        say("kill -1", kill(-1, SIGKILL) == 0);
    } else if (!strcmp(mode, "daemon")) {    /* a setsid() grandchild that edits argv[2] later */
        if (fork() == 0) {
            setsid();
            if (fork() == 0) {
                for (int i = 0; i < 40; i++) {
                    sleep(1);
                    FILE* f = fopen(argv[2], "a");
                    if (f) { fputs("daemon was here\n", f); fclose(f); }
                }
                _exit(0);
            }
            _exit(0);
        }
        wait(NULL);
        printf("daemon spawned\n");
    } else if (!strcmp(mode, "forkbomb")) {
        int n = 0;
        for (;;) {
            pid_t p = fork();
            if (p == 0) { pause(); _exit(0); }
            if (p < 0) break;
            n++;
            if (n > 100000) break;
        }
        printf("forked %d: %s\n", n, strerror(errno));
    } else if (!strcmp(mode, "alloc")) {     /* argv[2]: GiB */
        size_t n = (size_t)atol(argv[2]) << 30;
        char* p = malloc(n);
        say("malloc", p != NULL);
        if (p) { for (size_t i = 0; i < n; i += 4096) p[i] = 1; printf("touched\n"); }
    } else if (!strcmp(mode, "spin")) {
        volatile unsigned long x = 0;
        for (;;) x++;
    } else if (!strcmp(mode, "bigfile")) {   /* argv[2]: path, argv[3]: MiB */
        int fd = open(argv[2], O_WRONLY | O_CREAT | O_TRUNC, 0644);
        static char buf[1 << 20];
        memset(buf, 'x', sizeof buf);
        signal(SIGXFSZ, SIG_IGN);          /* so the refused write is visible as EFBIG, not only a signal */
        long total = 0;
        for (int i = 0; i < atoi(argv[3]); i++) {
            ssize_t w = write(fd, buf, sizeof buf);
            if (w <= 0) { printf("write after %ld bytes: %s\n", total, strerror(errno)); return 3; }
            total += w;
        }
        printf("wrote %ld\n", total);
    } else if (!strcmp(mode, "abstract")) {  /* argv[2]: abstract socket name */
        int s = socket(AF_UNIX, SOCK_STREAM, 0);
        struct sockaddr_un a = {0};
        a.sun_family = AF_UNIX;
        strncpy(a.sun_path + 1, argv[2], sizeof a.sun_path - 2);
        say("abstract connect", connect(s, (struct sockaddr*)&a, sizeof(sa_family_t) + 1 + strlen(argv[2])) == 0);
    }
    return 0;
}
"""

CONF = sandbox.available()
# Where some mechanism is missing (a container, an old kernel), the tests still check every promise whose
# mechanism exists (the others skip, naming it); confined_popen then needs leave to start the worker.
ALLOW = not CONF.confined


def need(*what: str) -> None:
    """Skip, naming the mechanism, when this machine lacks it."""
    missing = []
    if "landlock" in what and CONF.landlock_abi < 6:
        missing.append("Landlock ABI >= 6 (" + "; ".join(m for m in CONF.missing if "Landlock" in m) + ")")
    if "namespaces" in what and not CONF.namespaces:
        missing.append("user/PID/network namespaces")
    if "proc" in what and not CONF.private_proc:
        missing.append("a private /proc in a mount namespace")
    if "nproc" in what and not CONF.process_limit:
        missing.append("a process limit (pids cgroup or RLIMIT_NPROC)")
    if missing:
        pytest.skip("confinement mechanism unavailable here: " + ", ".join(missing))


def _open_dir() -> Path:
    """A temporary folder uid 65534 can enter (pytest's own temp root is private to its user)."""
    d = Path(tempfile.mkdtemp(prefix="cc-confine-test-", dir="/tmp"))
    d.chmod(0o755)
    return d


@pytest.fixture
def tmp_path(tmp_path: Path) -> Iterator[Path]:
    """pytest's tmp_path, except where the worker runs as uid 65534 (a root grader without namespaces):
    then a folder that uid can enter, as a grader must give it."""
    if CONF.worker_uid is None:
        yield tmp_path
        return
    d = _open_dir()
    yield d
    shutil.rmtree(d, ignore_errors=True)


def python_for_workers() -> str:
    """This Python, or a skip where the worker's uid cannot run it."""
    if CONF.worker_uid is not None:
        p = Path(sys.executable).resolve()
        for q in [*reversed(p.parents), p]:
            if not q.stat().st_mode & 0o001:
                pytest.skip(f"the worker runs as uid {CONF.worker_uid} (root without namespaces), which cannot "
                            f"run {sys.executable}: {q} is closed to other users")
    return sys.executable


@pytest.fixture(scope="module")
def hostile(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The hostile C program, built once with g++."""
    d = tmp_path_factory.mktemp("hostile") if CONF.worker_uid is None else _open_dir()
    (d / "hostile.c").write_text(HOSTILE_C)
    subprocess.run(["g++", "-x", "c", "-O1", "-o", str(d / "hostile"), str(d / "hostile.c")], check=True)
    yield d / "hostile"
    if CONF.worker_uid is not None:
        shutil.rmtree(d, ignore_errors=True)


@pytest.fixture()
def fence(tmp_path: Path) -> dict[str, Path]:
    """A scratch dir for the worker, and outside it an instructor dir and a hidden-tests dir with files."""
    inst = tmp_path / "instructor"
    hidden = tmp_path / "hidden"
    for d in (inst, hidden, tmp_path / "scratch"):
        d.mkdir()
    (inst / "report.json").write_text('{"earned": 3}\n')
    (hidden / "test_secret.py").write_text("SECRET = 'hidden-case-4242'\n")
    return {"scratch": tmp_path / "scratch", "instructor": inst, "hidden": hidden}


def checksums(*dirs: Path) -> dict[str, str]:
    """Every file (and directory) under ``dirs`` with the hash of its content."""
    out = {}
    for d in dirs:
        for p in sorted(d.rglob("*")):
            out[str(p)] = hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "dir"
    return out


def run(argv: list[str], scratch: Path, read_only: list[Path] = (), limits: Limits | None = None,
        **kw) -> subprocess.CompletedProcess:
    """Run ``argv`` confined and wait for it (no wall-clock limit: the CPU limit ends spinning programs)."""
    kw.setdefault("allow_unconfined", ALLOW)
    with tempfile.TemporaryFile("w+") as log:  # (a pipe would stay open as long as any child of the worker)
        p = confined_popen(argv, scratch=scratch, env={"PATH": "/usr/bin:/bin", "LANG": "C"},
                           read_only=list(read_only), limits=limits or Limits(), stdout=log, stderr=subprocess.STDOUT,
                           **kw)
        p.wait()
        sandbox.stop_group(p)  # what it left behind, as the grader does
        log.seek(0)
        return subprocess.CompletedProcess(argv, p.returncode, log.read(), "")


def survivors(marker: str) -> list[int]:
    """Processes whose command line mentions ``marker`` (the hostile binary's unique path)."""
    out = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                if marker.encode() in Path(f"/proc/{d}/cmdline").read_bytes():
                    out.append(int(d))
            except OSError:
                pass
    return out


# ----------------------------------------------------------------------------------------------------
# Reporting what is in force
# ----------------------------------------------------------------------------------------------------


def test_describe_names_the_mechanisms_or_says_unconfined() -> None:
    text = sandbox.describe()
    if CONF.confined:
        assert "landlock ABI" in text and "namespaces" in text and "rlimits" in text, text
    else:
        assert text.startswith("unconfined: "), text
        for m in CONF.missing:
            assert m in text


def test_a_missing_mechanism_is_reported_and_refused(monkeypatch: pytest.MonkeyPatch, fence, hostile) -> None:
    monkeypatch.setenv("CUDA_COURSE_CONFINE_OFF", "landlock")
    try:
        conf = sandbox.available(refresh=True)
        assert not conf.confined
        assert conf.describe().startswith("unconfined: ") and "Landlock" in conf.describe()
        with pytest.raises(ConfinementUnavailable, match="Landlock"):
            run([str(hostile), "read", "/etc/hostname"], fence["scratch"], [hostile.parent], allow_unconfined=False)
        # the caller may decide to run it anyway; then it is the caller's report that says "unconfined"
        r = run([python_for_workers(), "-c", "print('ran')"], fence["scratch"], allow_unconfined=True)
        assert r.returncode == 0 and "ran" in r.stdout
    finally:
        monkeypatch.undo()  # the knob as it was before this test, then what is available with it
        sandbox.available(refresh=True)


def test_bad_arguments_are_refused_clearly(fence) -> None:
    with pytest.raises(ValueError, match="argv is empty"):
        confined_popen([], scratch=fence["scratch"], env={})
    with pytest.raises(ValueError, match="start_new_session"):
        confined_popen(["true"], scratch=fence["scratch"], env={"PATH": "/usr/bin"}, start_new_session=False)
    with pytest.raises(ValueError, match="not on the worker's PATH"):
        confined_popen(["no-such-tool-xyz"], scratch=fence["scratch"], env={"PATH": "/usr/bin"},
                       allow_unconfined=True)
    with pytest.raises(ValueError, match="Limits.cpu_s"):
        Limits(cpu_s=0)


def test_source_size_limit(tmp_path: Path) -> None:
    small, big = tmp_path / "ok.cu", tmp_path / "padded.cu"
    small.write_text("__global__ void k() {}\n")
    big.write_bytes(b"// pad\n" * 200_000)
    sandbox.check_source_size([small], max_bytes=1 << 20)
    with pytest.raises(sandbox.SourceTooLarge, match=r"padded\.cu is too large \(1\.4 MB\).*at most 1\.0 MB"):
        sandbox.check_source_size([small, big], max_bytes=1 << 20)


# ----------------------------------------------------------------------------------------------------
# Filesystem
# ----------------------------------------------------------------------------------------------------


def test_cannot_write_outside_scratch(fence, hostile) -> None:
    need("landlock")
    before = checksums(fence["instructor"], fence["hidden"], hostile.parent)
    target = fence["instructor"] / "report.json"
    r = run([str(hostile), "write", str(target), str(fence["hidden"]), str(fence["scratch"] / "mine.txt")],
            fence["scratch"], [hostile.parent])
    assert checksums(fence["instructor"], fence["hidden"], hostile.parent) == before, r.stdout
    for step in ("overwrite", "create", "unlink", "rename"):
        assert f"{step}: Permission denied" in r.stdout, r.stdout
    assert "scratch: DONE" in r.stdout and (fence["scratch"] / "mine.txt").read_text() == "mine\n"


def test_python_cannot_write_outside_scratch(fence) -> None:
    need("landlock")
    before = checksums(fence["instructor"])
    code = textwrap.dedent(f"""
        import os, pathlib
        for p in [{str(fence['instructor'] / 'report.json')!r}, {str(fence['instructor'] / 'new.py')!r}]:
            try:
                pathlib.Path(p).write_text('forged')
                print('WROTE', p)
            except PermissionError as e:
                print('refused', e.errno)
        pathlib.Path(os.environ['TMPDIR'], 'ok').write_text('fine')
        print('tmp ok')
    """)
    r = run([python_for_workers(), "-c", code], fence["scratch"])
    assert checksums(fence["instructor"]) == before
    assert "WROTE" not in r.stdout and r.stdout.count("refused 13") == 2 and "tmp ok" in r.stdout, r.stdout


def test_cannot_read_hidden_tests_or_system_secrets(fence, hostile) -> None:
    need("landlock")
    r = run([str(hostile), "read", str(fence["hidden"] / "test_secret.py"), str(fence["instructor"] / "report.json"),
             "/etc/passwd", "/etc/ld.so.cache"], fence["scratch"], [hostile.parent])
    assert "hidden-case-4242" not in r.stdout and '"earned"' not in r.stdout and "root:" not in r.stdout, r.stdout
    assert r.stdout.count("refused: Permission denied") == 3, r.stdout
    assert "read /etc/ld.so.cache: " in r.stdout and "read /etc/ld.so.cache: refused" not in r.stdout


def test_nested_build_and_python_work_inside(fence, tmp_path: Path) -> None:
    """The grader's worker builds with g++ (toolchain readable, its own output dir writable) and runs
    Python with the course package importable."""
    need("landlock")
    src = tmp_path / "staged"
    src.mkdir()
    (src / "k.cpp").write_text("#include <cstdio>\nint main() { std::puts(\"built and ran\"); }\n")
    # the package as the grader stages it (staging.stage_harness): a copy in the readable staged folder, on
    # PYTHONPATH. (Not the checkout's root: workers may read its cudacourse/ but not list the root, so an import
    # through a root on sys.path, as a .pth or PYTHONPATH gives an uninstalled checkout, finds nothing.)
    shutil.copytree(Path(sandbox.__file__).parents[1], src / "cudacourse",
                    ignore=shutil.ignore_patterns("__pycache__"))
    out = fence["scratch"] / "build"
    script = (f"mkdir -p {out} && g++ -O1 -o {out}/k {src}/k.cpp && {out}/k && "
              f"PYTHONPATH={src} {python_for_workers()} -c "
              f"'import cudacourse.sandbox as c, sys; print(\"python ok\", c.__file__)'")
    r = run(["/bin/sh", "-c", script], fence["scratch"], [src])
    assert r.returncode == 0, r.stdout
    assert "built and ran" in r.stdout and "python ok" in r.stdout, r.stdout


# ----------------------------------------------------------------------------------------------------
# Network, signals, processes
# ----------------------------------------------------------------------------------------------------


def test_cannot_connect_to_a_loopback_port(fence, hostile) -> None:
    need("landlock")
    srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    srv.setblocking(False)
    try:
        r = run([str(hostile), "connect", str(srv.getsockname()[1])], fence["scratch"], [hostile.parent])
        with pytest.raises(BlockingIOError):
            srv.accept()  # nobody ever connected
    finally:
        srv.close()
    assert "connect: DONE" not in r.stdout and "bind: DONE" not in r.stdout, r.stdout
    assert "connect: " in r.stdout and "bind: " in r.stdout


def test_cannot_reach_an_abstract_unix_socket(fence, hostile) -> None:
    need("landlock")
    name = f"cudacourse-test-{os.getpid()}"
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind("\0" + name)
    srv.listen(1)
    srv.setblocking(False)
    try:
        r = run([str(hostile), "abstract", name], fence["scratch"], [hostile.parent])
        with pytest.raises(BlockingIOError):
            srv.accept()
    finally:
        srv.close()
    assert "abstract connect: DONE" not in r.stdout and "abstract connect: " in r.stdout, r.stdout


def test_cannot_signal_the_parent_or_siblings(fence, hostile, tmp_path: Path) -> None:
    need("landlock")
    victim = subprocess.Popen(["sleep", "300"])  # an unconfined process of the grader's user
    sibling = confined_popen(["/bin/sleep", "300"], scratch=tmp_path / "sib", env={"PATH": "/usr/bin:/bin"},
                             allow_unconfined=ALLOW)
    try:
        r = run([str(hostile), "kill", str(victim.pid), str(sibling.pid), str(os.getpid())], fence["scratch"],
                [hostile.parent])
        assert r.returncode == 0, r.stdout  # it killed neither its init nor itself with kill(-1)
        assert victim.poll() is None and sibling.poll() is None
        for pid in (victim.pid, sibling.pid, os.getpid()):
            assert f"{pid}: DONE" not in r.stdout, r.stdout
    finally:
        victim.kill()
        victim.wait()
        assert sandbox.stop_group(sibling) == -signal.SIGKILL


def test_sees_no_grader_process(fence) -> None:
    need("namespaces", "proc")
    code = "import os; print(sorted(int(p) for p in os.listdir('/proc') if p.isdigit()))"
    r = run([python_for_workers(), "-c", code], fence["scratch"])
    pids = eval(r.stdout.strip())  # noqa: S307 - a list of ints printed by the line above
    assert 1 in pids and len(pids) <= 3 and max(pids) < 10, r.stdout  # its init and itself, nothing else


def test_setsid_daemon_dies_with_the_worker(fence, hostile) -> None:
    need("landlock", "namespaces")
    diary = fence["scratch"] / "diary.txt"
    diary.write_text("")
    r = run([str(hostile), "daemon", str(diary)], fence["scratch"], [hostile.parent])
    assert "daemon spawned" in r.stdout and r.returncode == 0
    assert survivors(str(hostile)) == []  # gone as soon as the worker was
    time.sleep(2.5)  # the daemon would write once a second
    assert diary.read_text() == ""


def test_stop_group_stops_everything(fence, hostile, tmp_path: Path) -> None:
    need("namespaces")
    diary = fence["scratch"] / "diary.txt"
    script = f"{hostile} daemon {diary}; exec sleep 300"
    p = confined_popen(["/bin/sh", "-c", script], scratch=fence["scratch"], env={"PATH": "/usr/bin:/bin"},
                       read_only=[hostile.parent], stdout=subprocess.PIPE, text=True, allow_unconfined=ALLOW)
    assert p.stdout.readline().strip() == "daemon spawned"
    assert survivors(str(hostile))  # the daemon runs
    assert sandbox.stop_group(p) == -signal.SIGKILL
    assert survivors(str(hostile)) == []
    size = diary.stat().st_size if diary.exists() else 0
    time.sleep(2.5)
    assert (diary.stat().st_size if diary.exists() else 0) == size


def test_fork_bomb_hits_the_process_limit(fence, hostile) -> None:
    need("nproc")
    r = run([str(hostile), "forkbomb"], fence["scratch"], [hostile.parent], limits=Limits(processes=20))
    line = next(ln for ln in r.stdout.splitlines() if ln.startswith("forked"))
    n = int(line.split()[1].rstrip(":"))
    assert 5 <= n <= 20 and "Resource temporarily unavailable" in line, r.stdout
    if CONF.namespaces:  # (without, the process-group kill is asynchronous and escapable: reported unconfined)
        assert survivors(str(hostile)) == []


def test_huge_allocation_hits_the_memory_limit(fence, hostile) -> None:
    r = run([str(hostile), "alloc", "64"], fence["scratch"], [hostile.parent], limits=Limits(memory=1 << 30))
    assert "malloc: Cannot allocate memory" in r.stdout and "touched" not in r.stdout, r.stdout


HOG_SRC = r"""
__global__ void put(int* out, int v) { out[0] = v; }
// Host code that reserves 1 GiB at a time (never touched), up to 64, and reports how many it got.
void reserve_gib(int* out) {
    int got = 0;
    while (got < 64 && malloc(1ul << 30)) ++got;
    put<<<1, 1>>>(out, got);
}
"""


def test_the_simulators_worker_has_a_memory_limit_while_grading(tmp_path: Path) -> None:
    """While grading, a launcher's host code runs in the simulator's worker under an address-space limit
    (sandbox.learner_memory): a host allocation of many GB fails there instead of filling the machine (the attack
    host-alloc-many-gb grades it). Reservations only, so a missing limit costs no memory."""
    import torch

    from cudacourse import loader, settings

    src = tmp_path / "hog.cu"
    src.write_text(HOG_SRC)
    out = torch.zeros(1, dtype=torch.int32)
    with settings.using(confine="best-effort"):
        m = loader.load(src, backend="sim", check=False)
        m.reserve_gib(out)
        m.close()
    limit = sandbox.learner_memory()
    assert limit is not None and 0 < out.item() < limit / (1 << 30), out.item()


def test_endless_loop_hits_the_cpu_limit(fence, hostile) -> None:
    r = run([str(hostile), "spin"], fence["scratch"], [hostile.parent], limits=Limits(cpu_s=1))
    assert r.returncode in (-signal.SIGXCPU, -signal.SIGKILL), r


def test_huge_file_hits_the_file_size_limit(fence, hostile) -> None:
    big = fence["scratch"] / "big.bin"
    r = run([str(hostile), "bigfile", str(big), "64"], fence["scratch"], [hostile.parent],
            limits=Limits(file_size=4 << 20))
    assert "write after 4194304 bytes: File too large" in r.stdout, r.stdout
    assert big.stat().st_size == 4 << 20


def test_a_worker_can_be_niced_below_the_grader(fence) -> None:
    """``Limits.nice``: the grader's task processes give way to the builds they wait for (issue 14's GPU grade)."""
    r = run(["/bin/sh", "-c", "echo nice=$(nice)"], fence["scratch"], limits=Limits(nice=5))
    assert r.returncode == 0 and f"nice={min(19, os.nice(0) + 5)}" in r.stdout, r.stdout
    for bad in (-1, 20, True, 1.5):
        with pytest.raises(ValueError, match="nice"):
            Limits(nice=bad)  # type: ignore[arg-type]


def test_signals_reach_the_worker(fence) -> None:
    """A signal sent to the returned Popen reaches the worker (the simulator asks a stuck worker where it
    is with SIGUSR1), and SIGTERM without a handler ends it as SIGTERM."""
    # The handler writes with os.write: the signal may land while print('ready') still holds stdout's lock (after
    # the line reached the pipe), and a print inside the handler then raised "reentrant call" (H200, 2026-11-30).
    code = textwrap.dedent("""
        import os, signal, sys, time
        signal.signal(signal.SIGUSR1, lambda *a: os.write(1, b'got USR1\\n'))
        print('ready', flush=True)
        while True:
            time.sleep(0.05)
    """)
    p = confined_popen([python_for_workers(), "-c", code], scratch=fence["scratch"], env={"PATH": "/usr/bin:/bin"},
                       stdout=subprocess.PIPE, text=True, allow_unconfined=ALLOW)
    try:
        assert p.stdout.readline().strip() == "ready"
        p.send_signal(signal.SIGUSR1)
        assert p.stdout.readline().strip() == "got USR1"
        p.send_signal(signal.SIGTERM)
        assert p.wait() == -signal.SIGTERM
    finally:
        sandbox.stop_group(p)


def test_worker_exit_status_is_passed_through(fence) -> None:
    code = "import os, sys; sys.stdout.write('x'); sys.stdout.flush(); os.kill(os.getpid(), 11)"
    r = run([python_for_workers(), "-c", code], fence["scratch"])
    assert r.returncode == -signal.SIGSEGV and r.stdout == "x"
    r = run([python_for_workers(), "-c", "raise SystemExit(7)"], fence["scratch"])
    assert r.returncode == 7


# ----------------------------------------------------------------------------------------------------
# The hostile corpus (tests/attacks): well-formed, and every attack still applies to the course
# ----------------------------------------------------------------------------------------------------

ROOT = Path(__file__).resolve().parent.parent
FAKE_PATHS = {"REPORT": "/grade/report.json", "JUNIT": "/grade/junit.xml", "HIDDEN": "/grade/hidden",
              "COURSE": "/grade/course", "NEIGHBOUR": "/grade/subs/bob", "BUILD": "/grade/build"}


def _corpus():
    sys.path.insert(0, str(ROOT))
    try:
        from tests.attacks import corpus
    finally:
        sys.path.remove(str(ROOT))
    return corpus


def test_attack_corpus_covers_the_issue_and_applies() -> None:
    corpus = _corpus()
    attacks = corpus.load()
    assert len(attacks) >= 15
    ids = {a.id for a in attacks}
    # issue 14's list, each present
    for need_id in ("ctor-rewrites-report", "ctor-rewrites-junit", "ctor-rewrites-hidden-tests",
                    "ctor-rewrites-course-tests", "atexit-appends-pass-records", "kill-parent", "exit0-from-launcher",
                    "setsid-daemon-edits-later", "setenv-grader-variables", "endless-host-loop", "host-alloc-many-gb",
                    "cpu-answer-no-launch", "python-answers-with-torch", "read-hidden-tests", "read-solution",
                    "include-hidden-test", "batch-writes-neighbour", "build-never-ends", "many-mb-source",
                    "python-getattr-builtins", "python-subclasses", "python-importlib", "python-torch-save-load",
                    "python-torch-ops"):
        assert need_id in ids, need_id
    for a in attacks:
        files = corpus.build(a, ROOT, FAKE_PATHS)
        (target, text), = files.items()
        assert target == f"lessons/{a.base}" and (ROOT / "solutions" / a.base).is_file()
        assert "@" + "REPORT@" not in text and "BEGIN SOLUTION" not in text, a.id
        assert text != (ROOT / "solutions" / a.base).read_text(), a.id
        if "many-mb" in a.id:
            assert len(text) > 50_000_000
        for placeholder, value in FAKE_PATHS.items():
            if f"@{placeholder}@" in str(a.edits):
                assert value in text, (a.id, placeholder)


def test_attack_corpus_rejects_malformed_entries(tmp_path: Path) -> None:
    corpus = _corpus()
    bad = tmp_path / "bad.toml"
    bad.write_text('[[attack]]\nid = "x"\nissue = "y"\nbase = "01_relu/relu.cu"\nfail = ["1.1"]\n'
                   'must_not = ["nothing-happens"]\n[[attack.edit]]\nop = "append"\ncode = ""\n')
    with pytest.raises(ValueError, match="attack x: must_not needs entries from"):
        corpus.load(bad)
    a = corpus.load()[0]
    a.edits = [{"op": "patch_launcher", "at": "no_such_launcher", "code": "return;"}]
    with pytest.raises(ValueError, match="launcher no_such_launcher found 0 times"):
        corpus.build(a, ROOT, FAKE_PATHS)


def test_nested_confinement(fence, tmp_path: Path) -> None:
    """A confined worker starts its own confined worker (the grader's task process starting the simulator's
    worker): the inner one is confined as well, and cannot read what only the outer one may read."""
    need("landlock", "namespaces")
    if not CONF.confined:
        pytest.skip("nested confinement is checked where every mechanism is available: " + CONF.describe())
    outer_only = tmp_path / "outer_only.txt"
    outer_only.write_text("for the outer worker only\n")
    inner = textwrap.dedent(f"""
        import os
        print('inner uid', os.getuid())
        try:
            print('inner read', open({str(outer_only)!r}).read())
        except PermissionError:
            print('inner refused')
    """)
    outer = textwrap.dedent(f"""
        import pathlib, subprocess, sys
        from cudacourse import sandbox
        print('outer read', open({str(outer_only)!r}).read().strip())
        print('inner confinement:', sandbox.describe())
        p = sandbox.confined_popen([sys.executable, '-c', {inner!r}], scratch=pathlib.Path('inner'),
                                   env={{'PATH': '/usr/bin:/bin'}}, stdout=subprocess.PIPE, text=True)
        print(p.communicate()[0], 'inner exit', p.returncode)
    """)
    r = run([python_for_workers(), "-c", outer], fence["scratch"], [outer_only])
    assert "outer read for the outer worker only" in r.stdout, r.stdout
    assert "inner refused" in r.stdout and "inner exit 0" in r.stdout, r.stdout
    assert "inner confinement: landlock ABI" in r.stdout, r.stdout  # confined, not "unconfined: ..."


# ----------------------------------------------------------------------------------------------------
# The GPU worker (runs only where an NVIDIA GPU is present: the lead's GPU machine)
# ----------------------------------------------------------------------------------------------------

HAS_GPU = sandbox.has_gpu_devices()


@pytest.mark.skipif(not HAS_GPU, reason="needs an NVIDIA GPU (/dev/nvidiactl absent): run on the GPU machine")
def test_gpu_worker_is_confined_and_computes(fence) -> None:
    """A confined gpu=True worker owns a CUDA context and computes (torch), and still cannot read the hidden
    tests or open a socket. (Tensors cross to it by CUDA VMM file descriptors: the GpuWorker test below;
    torch.multiprocessing's legacy CUDA IPC does not work across PID namespaces.)"""
    need("landlock", "namespaces")
    code = textwrap.dedent(f"""
        import socket, torch
        a = torch.randn(256, 256, device='cuda')
        print('matmul ok', bool(torch.allclose((a @ a).cpu(), a.cpu() @ a.cpu(), atol=1e-3)))
        try:
            open({str(fence['hidden'] / 'test_secret.py')!r}).read()
            print('READ HIDDEN')
        except PermissionError:
            print('hidden refused')
        try:
            socket.create_connection(('127.0.0.1', 22), timeout=2)
            print('CONNECTED')
        except OSError as e:
            print('socket refused', e.errno)
    """)
    r = run([python_for_workers(), "-c", code], fence["scratch"], gpu=True, limits=Limits(memory=16 << 30))
    assert "matmul ok True" in r.stdout, r.stdout
    assert "hidden refused" in r.stdout and "socket refused" in r.stdout, r.stdout


def test_gpu_policy_opens_only_the_workers_own_proc_entries(fence) -> None:
    """A gpu=True worker may write /proc/self/task/<tid>/comm (the CUDA driver names its threads there and
    fails with error 304 when it cannot), while every system file of /proc stays read-only (here too,
    without a GPU: the policy is the same)."""
    need("landlock", "namespaces", "proc")
    code = textwrap.dedent("""
        import os, threading
        tid = threading.get_native_id()
        with open(f"/proc/self/task/{tid}/comm", "w") as f:
            f.write("renamed")
        print("comm", open(f"/proc/self/task/{tid}/comm").read().strip())
        for path in ("/proc/sys/kernel/hostname", "/proc/sys/vm/drop_caches", "/proc/sysrq-trigger"):
            try:
                with open(path, "w") as f:
                    f.write("1")
                print("WROTE", path)
            except OSError as e:
                print("refused", path, e.errno)
    """)
    r = run([python_for_workers(), "-c", code], fence["scratch"], gpu=True)
    assert "comm renamed" in r.stdout, r.stdout
    assert "WROTE" not in r.stdout and r.stdout.count("refused") == 3, r.stdout


GPU_KERNELS = r"""
__global__ void scale_kernel(const float* x, float* y, float a, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i];
}
void scale(const float* x, float* y, float a, int n) { scale_kernel<<<(n + 255) / 256, 256>>>(x, y, a, n); }

// writes far past the end of y: on a GPU worker y is a buffer of its own, so nothing of the caller's is hit
__global__ void overrun_kernel(float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n + 4096) y[i] = 99.0f;
}
void overrun(float* y, int n) { overrun_kernel<<<(n + 4096 + 255) / 256, 256>>>(y, n); }

// the classic missing bounds check: the last partial block stores up to 255 floats past the end; or one before it
__global__ void unchecked_kernel(float* y, int n, int before) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    y[before ? i - 1 : i] = 7.0f;
}
void unchecked(float* y, int n, int before) { unchecked_kernel<<<(n + 255) / 256, 256>>>(y, n, before); }

__global__ void trap_kernel(float* y) { if (threadIdx.x == 0) __trap(); y[threadIdx.x] = 1.0f; }
void trap(float* y) { trap_kernel<<<1, 32>>>(y); }

void bad_launch(float* y) { trap_kernel<<<1, 4096>>>(y); }

// where x lies modulo 256 bytes, and its first value: what a float4 launcher checks before it vectorises
__global__ void where_kernel(const float* x, float* out) {
    out[0] = (float)((unsigned long long)x % 256);
    out[1] = x[0];
}
void where(const float* x, float* out) { where_kernel<<<1, 1>>>(x, out); }

// host code that forks (a daemon, a shell-out) and waits: the child shares the worker's socket and CUDA state;
// how = 0: the child calls exit(0) (the CUDA runtime's exit handlers run in it); how = 1: it returns
#include <cstdlib>
#include <sys/wait.h>
#include <unistd.h>
void forks(const float* x, float* y, float a, int n, int how) {
    pid_t child = fork();
    if (child == 0) {
        if (how == 0) exit(0);
        return;
    }
    waitpid(child, nullptr, 0);
    scale_kernel<<<(n + 255) / 256, 256>>>(x, y, a, n);
}
"""


@pytest.mark.skipif(not HAS_GPU, reason="needs an NVIDIA GPU (/dev/nvidiactl absent): run on the GPU machine")
def test_grading_on_a_gpu_runs_learner_libraries_in_a_gpu_worker(tmp_path: Path) -> None:
    """While grading (settings.confine set) a cuda module runs in the GPU worker (workers/gpu.py), not in this
    process: results arrive through CUDA IPC; a kernel writing out of bounds cannot reach this process's
    tensors, and one writing past a tensor's end or before its start is an OutOfBoundsError (guards around each
    staged copy); a trapping kernel costs only its call; a bad launch is a LaunchError; timing works; a misaligned
    view stays misaligned; a launcher's forked child neither answers for the worker nor breaks its context."""
    import torch

    from cudacourse import loader, settings
    from cudacourse.bench import time_kernel
    from cudacourse.errors import KernelError, LaunchError, OutOfBoundsError
    from cudacourse.workers.gpu import GpuWorker

    src = tmp_path / "k.cu"
    src.write_text(GPU_KERNELS)
    with settings.using(confine="best-effort"):
        m = loader.load(src, backend="cuda")
        assert isinstance(m._lib, GpuWorker)
        n = 100_003
        x = torch.randn(n, device="cuda")
        y = torch.full((n,), float("nan"), device="cuda")
        m.scale(x, y, 2.0, n)
        assert torch.equal(y, 2 * x)
        assert str(m._lib.so) not in _maps(), "the learner's library is loaded in the checking process"
        out = torch.empty(2, device="cuda")
        for k in (0, 1, 3):  # a view k floats into x keeps its misalignment in the worker (task 1.3's fallback)
            m.where(x[k:], out)
            assert out.tolist() == [float((x.data_ptr() + 4 * k) % 256), x[k].item()], (k, out.tolist())
        pid = m._lib._chan.proc.pid
        for how in (0, 1):  # a forked child that exits, or returns into the worker's loop: the worker goes on
            m.forks(x, y, 5.0 + how, n, how)
            assert torch.equal(y, (5.0 + how) * x) and m._lib._chan.proc.pid == pid, how
        guard = torch.zeros(1 << 20, device="cuda")  # allocated next to y by the caching allocator
        with pytest.raises(OutOfBoundsError, match=rf"overrun\(\): .* past the end of y \(from element {n},"):
            m.overrun(y, n)
        assert bool((y == 99.0).all()), "the values inside y came back as the kernel wrote them"
        assert bool((guard == 0).all()), "the overrun reached the caller's memory"
        for before, where in ((0, rf"past the end of y \(from element {n}, "), (1, r"before the start of y \(4 bytes")):
            with pytest.raises(OutOfBoundsError, match=where):
                m.unchecked(y, n, before)
        with pytest.raises(KernelError):
            m.trap(y)
        m.scale(x, y, 3.0, n)  # a fresh worker after the trap
        assert torch.equal(y, 3 * x)
        with pytest.raises(LaunchError):
            m.bad_launch(y)
        ms = time_kernel(lambda: m.scale(x, y, 4.0, n))
        assert ms > 0 and torch.equal(y, 4 * x)
        m.close()


def _maps() -> list[str]:
    """Files mapped into this process."""
    return [line.split()[-1] for line in Path("/proc/self/maps").read_text().splitlines() if "/" in line]



@pytest.mark.skipif(os.getuid() != 0, reason="the uid-65534 fallback is used only by a grader running as root")
def test_root_without_namespaces_runs_the_worker_as_nobody(monkeypatch: pytest.MonkeyPatch) -> None:
    """Root, and namespaces unavailable: the worker runs as uid 65534 and the report says "unconfined"."""
    need("landlock")
    monkeypatch.setenv("CUDA_COURSE_CONFINE_OFF", "namespaces")
    scratch = Path(tempfile.mkdtemp(prefix="cc-confine-nobody-", dir="/tmp"))  # reachable by uid 65534
    try:
        conf = sandbox.available(refresh=True)
        assert conf.worker_uid == 65534 and conf.describe().startswith("unconfined: ") and "uid 65534" in \
            conf.describe()
        r = run(["/bin/sh", "-c", 'id -u; echo mine > "$TMPDIR/f" && cat "$TMPDIR/f"; cat /etc/passwd'], scratch,
                allow_unconfined=True)
        assert r.stdout.splitlines()[:2] == ["65534", "mine"], r.stdout
        assert "Permission denied" in r.stdout and "root:" not in r.stdout, r.stdout
    finally:
        monkeypatch.undo()  # the knob as it was before this test, then what is available with it
        sandbox.available(refresh=True)
        shutil.rmtree(scratch, ignore_errors=True)


def test_shared_memory_of_others_is_out_of_reach(fence) -> None:
    """The worker gets an empty private /dev/shm; when its caller hands it one shared-memory file (the
    simulator's tensors), it can use that file and still no other."""
    need("landlock")
    secret = Path(f"/dev/shm/cc-confine-test-{os.getpid()}-grader")
    mine = Path(f"/dev/shm/cc-confine-test-{os.getpid()}-worker")
    secret.write_text("tensors of another task")
    mine.write_text("")
    code = textwrap.dedent(f"""
        import os
        try:
            print('listing', sorted(n for n in os.listdir('/dev/shm') if n.startswith('cc-confine-test')))
        except PermissionError:
            print('listing refused')
        try:
            print('READ', open({str(secret)!r}).read())
        except (PermissionError, FileNotFoundError) as e:
            print('secret refused', type(e).__name__)
    """)
    try:
        r = run([python_for_workers(), "-c", code], fence["scratch"])
        assert "READ" not in r.stdout and "secret refused" in r.stdout, r.stdout
        if CONF.private_proc:
            assert "listing []" in r.stdout, r.stdout  # a private, empty /dev/shm
        r = run([python_for_workers(), "-c", code + f"open({str(mine)!r}, 'w').write('mine')\n"], fence["scratch"],
                read_write=[mine])
        assert "READ" not in r.stdout and "secret refused PermissionError" in r.stdout, r.stdout
        assert mine.read_text() == "mine" and secret.read_text() == "tensors of another task"
    finally:
        secret.unlink()
        mine.unlink()


FILL_SRC = r"""
__global__ void fill(float* y, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) y[i] = 2.0f; }
void fill_all(float* y, int n) { fill<<<(n + 63) / 64, 64>>>(y, n); }
"""
UNDER_A_THREAD_LIMIT = r"""
import ctypes, os, resource, sys
if os.getuid() == 0:  # root is never held to RLIMIT_NPROC: nobody is
    os.setgid(65534)
    os.setuid(65534)
libc = ctypes.CDLL(None, use_errno=True)
if libc.unshare(0x10000000) != 0:  # CLONE_NEWUSER: RLIMIT_NPROC applies there, root or not
    print("no user namespace:", os.strerror(ctypes.get_errno()))
    sys.exit(3)
resource.setrlimit(resource.RLIMIT_NPROC, (3, 3))  # this thread and two more
os.environ["CCSIM_WORKERS"] = "16"
lib = ctypes.CDLL(sys.argv[1])
lib.ccsim_api_init.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_uint, ctypes.c_int]
lib.ccsim_api_init(0, 0, 1, 2)
n = 1000
y, nn = (ctypes.c_float * n)(), ctypes.c_int(n)
argv = (ctypes.c_void_p * 2)(ctypes.addressof(y), ctypes.addressof(nn))
fn = lib.ccsim_entry_fill_all
fn.argtypes, fn.restype = [ctypes.c_void_p], ctypes.c_int
print(fn(argv), sum(y))
"""


def test_the_simulator_runs_with_the_threads_its_process_may_start(tmp_path: Path) -> None:
    """A grading worker's process limit counts threads, and a task process's simulator workers share it: a
    runtime that may not start all its pool threads runs with fewer, instead of dying (std::terminate), which cost
    a neighbouring task its verdict on the H100 machine."""
    from cudacourse.sim import SimLibrary
    from cudacourse.source import find_launchers

    lib = SimLibrary.build(FILL_SRC, "fill.cu", list(find_launchers(FILL_SRC).values()), checked=False)
    lib.close()
    shared = Path(tempfile.mkdtemp(prefix="cc-threads-"))  # readable by nobody (the child drops root)
    try:
        so = shared / "fill.so"
        shutil.copy(lib.lib, so)
        shared.chmod(0o755)
        so.chmod(0o755)
        r = subprocess.run([sys.executable, "-c", UNDER_A_THREAD_LIMIT, str(so)], capture_output=True, text=True,
                           cwd=shared)
    finally:
        shutil.rmtree(shared, ignore_errors=True)
    if r.returncode == 3:
        pytest.skip(r.stdout.strip())
    assert r.returncode == 0 and r.stdout.split() == ["0", "2000.0"], (r.returncode, r.stdout, r.stderr[-2000:])
