"""One process per stamp and per run: a second process is refused in one line naming
the holder's pid, a crash frees the lock, and a run's child process dies with its experiment.

    python -m pytest tests/test_locks.py -q
"""
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from harness.core.lifeline import PARENT_ENV
from harness.core.locks import LOCK_NAME, FolderBusy, folder_lock

ROOT = Path(__file__).resolve().parent.parent


def holder(folder: Path, shared: bool = False) -> subprocess.Popen:
    """Another process holding `folder`'s lock until killed (it prints 'held' once it has it)."""
    code = (f"from harness.core.locks import folder_lock\nimport time\n"
            f"with folder_lock({str(folder)!r}, 'x', shared={shared}):\n    print('held', flush=True); time.sleep(600)\n")
    proc = subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, stdout=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.stdout.readline().strip() == "held"
    return proc


def test_a_second_process_is_refused_naming_the_holder_and_a_crash_frees_it(tmp_path):
    proc = holder(tmp_path)
    try:
        with pytest.raises(FolderBusy) as e:
            with folder_lock(tmp_path, "the experiment folder"):
                pass
        msg = str(e.value)
        assert f"the experiment folder {tmp_path} is in use by process {proc.pid} on " in msg
        assert f"kill {proc.pid}" in msg and "\n" not in msg
    finally:
        proc.send_signal(signal.SIGKILL)  # a crash: no cleanup runs, the kernel drops the lock
        proc.wait()
    with folder_lock(tmp_path, "the experiment folder"):
        assert (tmp_path / LOCK_NAME).read_text().startswith(f"process {os.getpid()} ")


def test_shared_holders_coexist_and_keep_out_an_exclusive_one(tmp_path):
    """The jobs of one fan-out (+run_index) share the stamp folder; a whole-experiment process may not join."""
    proc = holder(tmp_path, shared=True)
    try:
        with folder_lock(tmp_path, "x", shared=True):
            pass
        with pytest.raises(FolderBusy):
            with folder_lock(tmp_path, "x"):
                pass
    finally:
        proc.kill()
        proc.wait()


def test_a_process_reenters_its_own_lock(tmp_path):
    """An experiment running its one run in process holds the run folder's lock there already."""
    with folder_lock(tmp_path, "x"):
        with folder_lock(tmp_path, "x"):
            pass
        proc = subprocess.run([sys.executable, "-c", f"from harness.core.locks import folder_lock\n"
                               f"with folder_lock({str(tmp_path)!r}, 'x'): pass"], cwd=ROOT, capture_output=True,
                              text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
        assert proc.returncode != 0 and "FolderBusy" in proc.stderr  # the outer block still holds it


CHILD = textwrap.dedent("""
    import sys, time
    from harness.core.lifeline import die_with_parent
    armed = die_with_parent()
    print("armed" if armed else "unarmed", flush=True)
    time.sleep(600)
""")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_a_child_dies_with_its_parent_even_after_kill_9(tmp_path):
    """Before: after kill -9 of the experiment, its running child lived on as an orphan beside a rerun."""
    pidfile = tmp_path / "child.pid"
    parent_code = textwrap.dedent(f"""
        import subprocess, sys
        from harness.core.lifeline import child_env
        child = subprocess.Popen([sys.executable, "-c", {CHILD!r}], env=child_env(), stdout=subprocess.PIPE, text=True)
        print(child.stdout.readline().strip(), flush=True)
        open({str(pidfile)!r}, "w").write(str(child.pid))
        print("ready", flush=True)
        child.wait()
    """)
    parent = subprocess.Popen([sys.executable, "-c", parent_code], cwd=ROOT, stdout=subprocess.PIPE, text=True,
                              env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert parent.stdout.readline().strip() == "armed"
    assert parent.stdout.readline().strip() == "ready"
    child = int(pidfile.read_text())
    parent.send_signal(signal.SIGKILL)
    parent.wait()
    for _ in range(100):  # SIGTERM arrives at once; allow a busy machine 10 s
        try:
            os.kill(child, 0)
        except ProcessLookupError:
            break
        with open(f"/proc/{child}/stat") as f:  # a zombie of init's counts as gone
            if f.read().split(") ")[1].startswith("Z"):
                break
        time.sleep(0.1)
    else:
        os.kill(child, signal.SIGKILL)
        pytest.fail("the child outlived its parent")


def test_a_child_whose_parent_is_already_gone_does_not_start():
    """The race: the parent dies between starting the child and the child arming the signal."""
    r = subprocess.run([sys.executable, "-c", "from harness.core.lifeline import die_with_parent; die_with_parent(); "
                        "print('started')"], cwd=ROOT, capture_output=True, text=True,
                       env={**os.environ, "PYTHONPATH": str(ROOT), PARENT_ENV: "1"})  # its parent is not pid 1
    assert r.returncode == 143 and "started" not in r.stdout and "is gone; not starting it" in r.stderr


def test_a_lock_file_that_is_a_link_is_refused_and_its_target_untouched(tmp_path):
    from harness.core.locks import LOCK_NAME, LockIsLink, folder_lock
    target = tmp_path / "precious.txt"
    target.write_text("keep me")
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / LOCK_NAME).symlink_to(target)
    with pytest.raises(LockIsLink, match="symbolic link"):
        with folder_lock(tmp_path / "run", "the run folder"):
            pass
    assert target.read_text() == "keep me"
