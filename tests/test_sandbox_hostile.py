"""Reward hacks against MBPP: every program in tests/hostile/ must score 0 and leave nothing behind.

Each hostile program solves nothing; it tries to pass the tests another way (forged success line,
skipped asserts, the dataset's own answers, an always-equal object, early exits, forged result
records, files and sockets left in /tmp and /dev/shm). A program may read `ESBENCH_TEST_FUNC`, the
tested function's name, which a model knows from the prompt. Reference solutions must still
score 1 under the same judge.

The red-team attacks on the sandbox itself (tests/hostile/) run alone, each where the host has the layer that
stops it (else skipped with the reason): memory beyond the ceiling (forked children, tmpfs pages
in a nested namespace) is killed at the program's one cgroup limit, whose peak (every process and tmpfs page of
the run) stays at it; nested user namespaces, mounts, every socket but AF_UNIX and io_uring fail with EPERM
(seccomp); the copy-answer program walks the whole visible tree and finds no data, even a copy
planted where a system install would put it. The memory attacks at their found size (GiBs asked
for) are marked slow: they cost the host up to the 512 MiB ceiling each.

    python -m pytest tests/test_sandbox_hostile.py -q
    python -m pytest tests/test_sandbox_hostile.py -q -m slow
"""
import ast
import dataclasses
import glob
import os
import random
import shutil
from pathlib import Path

import pytest

import tasks.judge.sandbox
from tasks.judge import cgroup, seccomp
from tasks.judge.sandbox import layers, run_python
from tasks.mbpp import MBPP

HERE = Path(__file__).parent / "hostile"
# Memory attacks run alone below, at a small ceiling: five copies at once would cost the host GiBs
# wherever a layer is missing.
MEMORY_ATTACKS = ("fork_children_300mib", "tmpfs_nested_ns")
HOSTILE = sorted(p for p in HERE.glob("*.py") if p.stem not in MEMORY_ATTACKS)
CEILING_MB = 128
ROWS = (11, 12, 59, 233, 367)  # strings, nested lists, ints, a float, setup code (all `==`)
LEFTOVER_GLOBS = ("/tmp/esbench-hostile*", "/dev/shm/esbench-hostile*")


@pytest.fixture(scope="module")
def task():
    return MBPP(n_eval=None, timeout_s=5)


@pytest.fixture(scope="module")
def rows(task):
    return [r for r in task.load("test") if r["task_id"] in ROWS]


def _tested_function(test: str) -> str:
    call = next(n for n in ast.walk(ast.parse(test)) if isinstance(n, ast.Call)
                and isinstance(n.func, ast.Name) and n.func.id not in dir(__builtins__))
    return call.func.id


def _sandbox_dirs() -> set[str]:
    return set(glob.glob(f"/tmp/esbench-sandbox-{os.getpid()}-*"))  # ours, not a neighbour's


@pytest.mark.parametrize("program", HOSTILE, ids=[p.stem for p in HOSTILE])
def test_hostile_program_scores_zero_and_leaves_nothing(task, rows, program):
    before = _sandbox_dirs()
    completions = [f"```python\nESBENCH_TEST_FUNC = {_tested_function(r['test_list'][0])!r}\n"
                   f"{program.read_text()}\n```" for r in rows]
    rewards = task.reward(completions, test_list=[r["test_list"] for r in rows],
                          test_setup_code=[r["test_setup_code"] for r in rows])
    assert rewards == [0.0] * len(rows), program.stem
    left = [p for pattern in LEFTOVER_GLOBS for p in glob.glob(pattern)]
    assert not left, f"{program.stem} left {left} on the host"
    assert not (_sandbox_dirs() - before), f"{program.stem} left a sandbox dir behind"


def test_reference_solutions_still_score_one(task):
    """A sample of 30 rows from every split; `python -m harness.tools.bench_sandbox --references`
    checks all of them."""
    rows = [r for s in ("train", "validation", "test") for r in task.load(s) if r["task_id"] != 123]
    sample = random.Random(0).sample(rows, 30)  # 123's reference needs ~5 s: too slow here
    completions = [task.gold_completion(code=r["code"]) for r in sample]
    rewards = task.reward(completions, test_list=[r["test_list"] for r in sample],
                          test_setup_code=[r["test_setup_code"] for r in sample])
    assert rewards == [1.0] * 30, [r["task_id"] for r, x in zip(sample, rewards) if x != 1.0]


def test_sandbox_layers_are_reported():
    active = layers()
    assert active["rlimits"]
    if os.geteuid() == 0 and active["mount_ns"]:
        assert active["hidden_fs"] and active["private_tmp"] and active["no_new_privs"]
    if os.geteuid() == 0 and isinstance(cgroup.backend(), cgroup.Backend):
        assert active["cgroup"]
    if os.geteuid() == 0 and seccomp.supported() and active["no_new_privs"]:
        assert active["seccomp"]
    assert "cgroup" in tasks.judge.sandbox.REQUIRED
    assert ("seccomp" in tasks.judge.sandbox.REQUIRED) == seccomp.supported()


def _need(layer: str) -> None:
    if not layers()[layer]:
        why = cgroup.backend() if layer == "cgroup" else "no filter for this architecture " \
            "or prctl refused"
        pytest.skip(f"no {layer} layer on this host ({why})")


def _within_ceiling(call, ceiling_mb: int):
    """call()'s result, asserting the run's own cgroup peaked at most at the ceiling. The cgroup is
    charged for every process of the run and every tmpfs page it writes, so its peak is what the
    run took from the host; the host's free memory is not read (other work on a shared host moves
    it, which made this test flaky)."""
    result = call()
    assert result.peak_memory_mb is not None, "the run had no cgroup to measure"
    assert result.peak_memory_mb <= ceiling_mb, f"the run's cgroup peaked at {result.peak_memory_mb} MiB"
    return result


def _attack(name: str, **params) -> str:
    return "".join(f"{k} = {v!r}\n" for k, v in params.items()) + (HERE / f"{name}.py").read_text()


def _no_sandbox_cgroups_left() -> bool:
    where = cgroup.backend()
    return not any(glob.glob(f"{d}/esbench-{os.getpid()}-*") for d in where.parents)


def test_forked_children_share_one_memory_ceiling():
    """8 children x 96 MiB each stay under RLIMIT_AS; together they pass the 128 MiB ceiling."""
    _need("cgroup")
    code = _attack("fork_children_300mib", ESBENCH_CHILDREN=8, ESBENCH_MIB=96)
    result = _within_ceiling(lambda: run_python(code, timeout_s=20, memory_mb=CEILING_MB),
                             CEILING_MB)
    assert not result.ok and result.out_of_memory, result
    assert "8 of 8" not in result.stdout_tail
    assert result.peak_memory_mb <= CEILING_MB
    assert _no_sandbox_cgroups_left()


def test_memory_attack_fails_a_correct_solution():
    """A right answer that also forks past the ceiling scores 0: the run was killed."""
    _need("cgroup")
    task = MBPP(n_eval=None, timeout_s=20, memory_mb=CEILING_MB)
    row = next(r for r in task.load("test") if r["task_id"] == 11)
    attack = _attack("fork_children_300mib", ESBENCH_CHILDREN=4, ESBENCH_MIB=64)
    code = f"{row['code']}\ntry:\n    exec({attack!r})\nexcept SystemExit:\n    pass\n"
    assert task.reward([task.gold_completion(code=row["code"])], test_list=[row["test_list"]]) \
        == [1.0]
    assert task.reward([task.gold_completion(code=code)], test_list=[row["test_list"]]) == [0.0]


def test_nested_user_namespace_is_refused():
    _need("seccomp")
    result = run_python(_attack("tmpfs_nested_ns", ESBENCH_TMPFS_MIB=512), timeout_s=20)
    assert not result.ok
    assert "unshare refused: Operation not permitted" in result.stdout_tail, result


def test_tmpfs_pages_count_against_the_ceiling(monkeypatch):
    """Without seccomp (as on an architecture it does not cover) the nested namespace opens, and
    the cgroup alone must still stop an uncapped tmpfs at the ceiling."""
    _need("cgroup")
    without = dataclasses.replace(tasks.judge.sandbox._mode(), seccomp=False)
    monkeypatch.setattr(tasks.judge.sandbox, "_mode", lambda: without)
    code = _attack("tmpfs_nested_ns", ESBENCH_TMPFS_MIB=768)
    result = _within_ceiling(lambda: run_python(code, timeout_s=20, memory_mb=CEILING_MB),
                             CEILING_MB)
    if "unshare refused" in result.stdout_tail or "mount refused" in result.stdout_tail:
        pytest.skip(f"this host refuses the nested namespace by itself: {result.stdout_tail}")
    assert not result.ok and result.out_of_memory, result
    assert "wrote 768 MiB" not in result.stdout_tail
    assert result.peak_memory_mb <= CEILING_MB
    assert _no_sandbox_cgroups_left()


def test_kernel_surface_is_closed():
    _need("seccomp")
    result = run_python((HERE / "kernel_surface.py").read_text())
    assert result.ok, result.stderr_tail
    got = dict(line.split("=") for line in result.stdout_tail.splitlines())
    closed = ("unshare_user", "unshare_mount", "clone_newuser", "setns", "mount", "af_packet",
              "af_netlink", "raw_inet", "io_uring_setup", "ptrace", "keyctl", "bpf", "tcp")
    assert {k: got[k] for k in closed} == dict.fromkeys(closed, "EPERM")
    assert got["unix"] == "ok"  # the one socket family allowed (tests/test_sandbox_sockets.py)


def test_proc_names_no_host_path():
    """What the program can read of itself names neither the checkout nor the judge (whose pid
    is in every scratch folder and cgroup name): mountinfo, cmdline, environ where readable,
    cgroup, fd links, argv, and the file names of every frame up the stack."""
    _need("hidden_fs")
    code = ("import os, sys\nseen = [sys.argv, getattr(sys.modules['__main__'], '__file__', '')]\n"
            "for path in ('/proc/self/mountinfo', '/proc/1/cmdline', '/proc/self/cgroup',\n"
            "             '/proc/self/environ'):\n"
            "    try:\n        seen.append(open(path, 'rb').read())\n"
            "    except OSError as e:\n        seen.append(e.strerror)\n"
            "seen += [os.readlink(f'/proc/self/fd/{fd}') for fd in os.listdir('/proc/self/fd')\n"
            "         if os.path.exists(f'/proc/self/fd/{fd}')]\n"
            "frame = sys._getframe()\nwhile frame:\n"
            "    seen.append(frame.f_code.co_filename)\n    frame = frame.f_back\n"
            "text = repr(seen)\nprint(len(text))\n"
            f"print([w for w in ({str(Path(tasks.judge.sandbox.__file__).parents[2])!r}, 'esbench')\n"
            "       if w in text])\n")
    result = run_python(code)
    assert result.ok, result.stderr_tail
    size, found = result.stdout_tail.splitlines()
    assert int(size) > 1000 and found == "[]", result.stdout_tail  # it read them, found neither


@pytest.fixture
def planted_copy():
    """A copy of the data where a system install would put it, if this user may write there."""
    data = Path(tasks.judge.sandbox.__file__).parents[1] / "data" / "mbpp" / "mbpp.jsonl"
    target = Path(f"/usr/local/share/esbench-canary-{os.getpid()}")
    try:
        (target / "tasks" / "data" / "mbpp").mkdir(parents=True)
        shutil.copy(data, target / "tasks" / "data" / "mbpp" / "mbpp.jsonl")
    except OSError:
        yield None
    else:
        yield target
    finally:
        shutil.rmtree(target, ignore_errors=True)


def test_visible_tree_holds_no_data(planted_copy):
    """os.walk from / inside the sandbox: the interpreter's files, and no dataset, site-packages or
    dist-packages anywhere (the planted copy sits below /usr, which older sandboxes showed)."""
    _need("hidden_fs")
    result = run_python((HERE / "copy_answer.py").read_text(), timeout_s=30)
    assert result.ok, result.stderr_tail
    *found, summary = result.stdout_tail.splitlines()
    assert found == [] and summary.endswith("executed 0 reference solutions"), found[:5]
    assert int(summary.split()[1]) > 100  # the walk saw the stdlib: it really ran


@pytest.mark.slow
@pytest.mark.parametrize("name", MEMORY_ATTACKS)
def test_memory_attacks_at_full_size_score_zero(task, name, monkeypatch):
    """The attacks as found (8 x 300 MiB; 1.5 GiB of tmpfs) against MBPP's own 512 MiB ceiling:
    the completion scores 0 and every sandboxed run's cgroup peaks at most at the ceiling."""
    _need("cgroup")
    row = next(r for r in task.load("test") if r["task_id"] == 11)
    completion = f"```python\n{(HERE / f'{name}.py').read_text()}\n```"
    runs, real = [], tasks.judge.sandbox.run_runner

    def recorded(*args, **kwargs):
        runs.append(real(*args, **kwargs))
        return runs[-1]
    monkeypatch.setattr(tasks.judge.sandbox, "run_runner", recorded)
    assert task.reward([completion], test_list=[row["test_list"]]) == [0.0]
    assert runs and all(r.peak_memory_mb is not None and r.peak_memory_mb <= task.memory_mb for r in runs), \
        [r.peak_memory_mb for r in runs]
    assert _no_sandbox_cgroups_left()
