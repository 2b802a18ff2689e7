"""math-verify under wall-clock limits that hold on any thread (MATH-500 scoring, GSM8K's rule 3).

Why: math-verify hands a short answer to sympy, and sympy can run for ever on one
(`\\boxed{(10^{9999})^{9999}}` builds a 100-million-digit integer; 450 nested parentheses kept
its LaTeX parser busy for 12 s). math-verify's own timeouts use SIGALRM, which exists
only on the main thread, and rewards are computed on worker threads (TRL, the ES engines), so
there an answer could hang a run for good. Three layers stop that, the same on every thread:

1. Two linear guards refuse, before sympy sees them, answers whose cost is too big to start
   (`refuse(text)`, counted as `refused`). `risky(text)` refuses the shapes known to explode:
   more than MAX_CHARS characters; brackets nested deeper than MAX_DEPTH; a power inside an
   exponent or a power of a power (`2^{2^{100}}`, `9^9^9`, `9^{9}^{9}`, `(10^{999})^{999}` when the
   base holds no variable); an exponent with five or more digits (`9^{99999}`, `10^{9999\\cdot
   9999}`); a factorial of a five-digit number, of a power, of a factorial or of a bracket holding
   any of those (`100!!`, `99999!`, `(10^{9})!`, `10^{9}!`). tasks/judge/expansion.py's `costly(text)`
   refuses what would expand too far: over 100 terms (`(x+1)^{999}`, `(x+y+z)^{99}`), numbers over
   100,000 digits, functions nested over 3 deep, \\sum/\\prod over more than 100 values or to a
   symbolic limit, integrals, root indices over 100. A refused answer scores 0 at once.
2. Everything else is parsed and verified in a worker process: a fresh interpreter running this
   file (never a fork of the torch process; `-P` keeps the project off its path), fed one JSON
   request per line. A call that takes longer than LIMIT_S of CPU is killed with its worker, scores 0
   and is counted (`stats()`, which the tasks put in their run record); the next call starts a
   new worker (about 1-2 s). Workers start on first use, one per concurrent caller up to
   MAX_WORKERS, keep math-verify's parse cache between calls, are capped at MEMORY_MB of address
   space, and exit with the parent: when idle, stdin closes; mid-call, their own CPU limit
   (RLIMIT_CPU, 2 x LIMIT_S per call) ends them even if the parent was SIGKILLed.
3. Each completion has its own time slice (tasks/judge/budget.py): budget.SLICE_S of the worker's
   CPU time, timed inside the worker (SIGPROF: no kill, no restart) and watched by the parent in
   /proc (a worker CPU_GRACE_S past it, busy in C code, is killed), and budget.WALL_S of wall
   clock as the last backstop. Graders enter through `judged(fn, default)`, which opens the slice; a completion
   that spends it scores 0 alone (`over_budget`), and its neighbours in a reward call, graded in
   parallel by `grade_all`, are untouched. Waiting for a worker and starting one are not charged.

    python -m pytest tests/test_task_math500.py -q
"""
from __future__ import annotations

import atexit
import json
import math
import os
import select
import subprocess
import sys
import threading
import time
from fractions import Fraction

try:  # the worker runs this file as a script, with the project off its path: it needs neither
    from tasks.judge import budget
    from tasks.judge.expansion import costly
except ImportError:
    budget = costly = None

LIMIT_S = 5.0  # per call, wall clock; math-verify's own default timeout
START_S = 60.0  # importing sympy takes 1-2 s on an idle machine, far longer on a loaded one
MAX_WORKERS = min(8, max(4, (os.cpu_count() or 2) // 2))  # slices run in parallel: 4 to 8
CPU_GRACE_S = 1.0  # past a call's CPU slice, the parent kills a worker its own timer did not stop
# (the timer's exception waits for the running C call to return: 0.1 s was seen)
_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
MEMORY_MB = 1024  # address space of a worker; sympy with math-verify needs about 70 MB
MAX_CHARS = 1000  # the longest MATH-500 gold answer has 53
MAX_DEPTH = 8  # bracket nesting: 8 levels parse in under 1 s, 450 took 12 s; gold reaches 2
MAX_EXPONENT_DIGITS = 4  # 2^{2005} is fine, 9^{99999} and 10^{9999\cdot 9999} are not
MAX_FACTORIAL_DIGITS = 4  # 9999! has 35,660 digits: fine; 99999! is not
OVERFLOW = 2 ** 1024  # past every float: a value this large is no answer
MAX_NUMBER_CHARS = 400  # a rational's numerator or denominator sent back: 2^1024 has 309 digits

_OPEN, _CLOSE = "([{", ")]}"


class GraderUnavailable(RuntimeError):
    """The worker could not start (math-verify missing or broken in this environment)."""


# ---- layer 1: refuse the shapes that explode ----
def risky(text: str) -> bool:
    """True when `text` has a shape that can make sympy run for ever (module docstring, layer 1).

    >>> [risky(s) for s in (r"\\frac{1}{2}", "x^5 - x^4", r"(10^{9})!", r"(10^{999})^{999}")]
    [False, False, True, True]
    """
    if len(text) > MAX_CHARS:
        return True
    # One frame per open bracket: [holds a power, holds a factorial, holds a variable, digits,
    # is an exponent]; `last` is the frame just closed (or a number just read) when it is the
    # token right before the current character, which is what a following ^ or ! applies to.
    stack = [[False, False, False, 0, False]]
    last, exponent_next, i, n = None, False, 0, len(text)
    while i < n:
        c = text[i]
        if c == "\\":  # a command (\frac, \cdot, \left) or an escaped symbol (\!, \{): no letters
            j = i + 1
            while j < n and text[j].isalpha():
                j += 1
            name = text[i + 1:j] if j > i + 1 else text[i + 1:i + 2]
            i = max(j, i + 2)
            if name in ("left", "right", "big", "Big", "bigl", "bigr", "Bigl", "Bigr"):
                continue  # \left( is a bracket: the next character opens or closes it
            if name in ("{", "}"):  # \{ \} are set braces: brackets like any other
                i -= 1
                c = text[i]
            else:
                last = None if name not in ("!", ",", ";", " ") else last  # thin spaces
                exponent_next = False
                continue
        if c.isspace():
            i += 1
            continue
        if c in _OPEN:
            stack.append([False, False, False, 0, exponent_next])
            if len(stack) > MAX_DEPTH + 1:
                return True
            last, exponent_next = None, False
        elif c in _CLOSE:
            if len(stack) == 1:  # unbalanced: nothing to close
                last = None
            else:
                frame = stack.pop()
                if frame[4] and (frame[0] or frame[1] or frame[3] > MAX_EXPONENT_DIGITS):
                    return True  # 2^{2^{100}}, 2^{5!}, 10^{9999\cdot 9999}
                outer = stack[-1]
                outer[0], outer[1], outer[2] = outer[0] or frame[0], outer[1] or frame[1], \
                    outer[2] or frame[2]
                outer[3] += frame[3]
                last = frame
        elif c == "^":
            if last is not None and (last[4] or last[1] or (last[0] and not last[2])):
                return True  # 9^{9}^{9}, (5!)^{9}, (10^{999})^{999}
            stack[-1][0] = True
            exponent_next, last = True, None
            i += 1
            continue
        elif c == "!":
            if last is None:  # after a word or a sign: punctuation ("Wow!!"), not a factorial
                i += 1
                continue
            if last[0] or last[1] or last[4] or last[3] > MAX_FACTORIAL_DIGITS:
                return True  # (10^{9})!, 100!!, 10^{9}!, 99999!
            stack[-1][1] = True
            last = [False, True, False, 0, False]
        elif c.isdigit():
            j = i
            while j < n and text[j].isdigit():
                j += 1
            digits = j - i
            stack[-1][3] += digits
            if exponent_next and digits > MAX_EXPONENT_DIGITS:
                return True  # 9^99999 (LaTeX reads 9^9 then 9999; a parser may not)
            # A bare exponent: the number is the exponent, so a ^ or ! right after it chains.
            last = [False, False, False, digits, exponent_next]
            exponent_next = False
            i = j
            continue
        else:
            if c.isalpha():
                stack[-1][2] = True
            last = None
        exponent_next = False
        i += 1
    return False


# ---- layer 2: the worker pool ----
class _Worker:
    def __init__(self, start_s: float = START_S):
        self.proc = subprocess.Popen(
            [sys.executable, "-P", "-u", os.path.abspath(__file__), str(os.getpid())],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
            close_fds=True)
        ready = self._read(start_s)
        if ready != {"ready": True}:
            self.kill()
            why = ready.get("error") if isinstance(ready, dict) else "no answer in time"
            raise GraderUnavailable(f"the math-verify worker did not start ({why}); install the "
                                    "project's dependencies (pip install -e .) and retry")

    def cpu(self) -> float | None:
        """The worker's CPU seconds so far (Linux /proc), or None where that cannot be read."""
        try:
            with open(f"/proc/{self.proc.pid}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
            return (int(fields[11]) + int(fields[12])) / _TICKS
        except (OSError, ValueError, IndexError):
            return None

    def _read(self, timeout: float, cpu: float | None = None):
        """One JSON line from the worker, or None on timeout, when it died, or when it ran `cpu`
        seconds (plus CPU_GRACE_S) past its own timer: work in C that SIGPROF cannot stop."""
        fd, deadline, buf = self.proc.stdout.fileno(), time.monotonic() + timeout, b""
        start = self.cpu() if cpu is not None else None
        while not buf.endswith(b"\n"):
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            if not select.select([fd], [], [], min(left, 0.05) if start is not None else left)[0]:
                used = self.cpu() if start is not None else None
                if used is not None and used - start > cpu + CPU_GRACE_S:
                    return None
                continue
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                return None
            buf += chunk
        try:
            return json.loads(buf)
        except ValueError:  # not our protocol: treat the worker as broken
            return None

    def call(self, op: str, args: list, cpu: float, wall: float):
        """{"ok": value, "cpu": s}, {"error": why, "cpu": s} or {"out_of_time": true, "cpu": s} when
        the worker's own timer stopped it after `cpu` seconds of its CPU; None when it ran past
        `wall` seconds or the worker died."""
        try:
            request = {"op": op, "args": args, "cpu": max(cpu, 0.01)}
            self.proc.stdin.write(json.dumps(request).encode() + b"\n")
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError):
            return None
        reply = self._read(wall, cpu)
        return reply if isinstance(reply, dict) else None

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        for stream in (self.proc.stdin, self.proc.stdout):
            try:
                stream.close()
            except OSError:
                pass


class _Pool:
    def __init__(self):
        self.idle: list[_Worker] = []
        self.count = 0
        self.cond = threading.Condition()
        self.stats = {"calls": 0, "refused": 0, "timeouts": 0, "worker_starts": 0,
                      "over_budget": 0}
        self.cpu_s = 0.0  # worker CPU seconds the replies reported (kept out of run records)

    def _take(self) -> _Worker | None:
        """An idle worker, or None with a place reserved for a new one; waits for a free one
        (never charged to a completion's slice)."""
        with self.cond:
            while not self.idle and self.count >= MAX_WORKERS:
                self.cond.wait()
            if self.idle:
                return self.idle.pop()
            self.count += 1
            self.stats["worker_starts"] += 1
            return None

    def _give_back(self, worker: _Worker | None, alive: bool) -> None:
        if worker is not None and not alive:
            worker.kill()
        with self.cond:
            if alive and worker is not None:
                self.idle.append(worker)
            else:
                self.count -= 1
            self.cond.notify()

    def call(self, op: str, args: list):
        """The worker's value for one request, under the calling completion's slice (budget.py):
        OutOfTime when the slice is spent. Outside any slice: LIMIT_S, and None past it."""
        piece = budget.current() if budget else None
        if piece is not None and piece.spent():
            raise budget.OutOfTime()
        cpu = LIMIT_S if piece is None else min(LIMIT_S, piece.cpu_left)
        wall = budget.WALL_S if piece is None else min(budget.WALL_S, piece.wall_left)
        worker = self._take()
        try:
            if worker is not None and worker.proc.poll() is not None:  # it died while idle
                worker.kill()
                worker = None
                with self.cond:
                    self.stats["worker_starts"] += 1
            if worker is None:
                worker = _Worker()  # a start is free: GraderUnavailable when it fails
            with self.cond:
                self.stats["calls"] += 1
            started = time.monotonic()
            reply = worker.call(op, args, cpu, wall)
            took = time.monotonic() - started
        except BaseException:
            self._give_back(worker, False)
            raise
        self._give_back(worker, reply is not None)
        with self.cond:
            self.cpu_s += cpu if reply is None else float(reply.get("cpu", 0.0))
        if reply is None or "out_of_time" in reply:  # killed at the wall backstop, or CPU spent
            with self.cond:
                self.stats["timeouts" if reply is None else "over_budget"] += 1
            if piece is not None:
                piece.spend(cpu if reply is None else reply.get("cpu", cpu), wall)
                raise budget.OutOfTime()
            return None
        if piece is not None:
            piece.spend(float(reply.get("cpu", 0.0)), took)
        return reply.get("ok")

    def close(self) -> None:
        with self.cond:
            workers, self.idle = self.idle, []
            self.count -= len(workers)
        for w in workers:
            w.kill()

    def forget(self) -> None:
        """In a forked child: the parent's workers and lock are the parent's, never shared."""
        self.idle, self.count, self.cond = [], 0, threading.Condition()


_POOL = _Pool()
atexit.register(_POOL.close)
os.register_at_fork(after_in_child=_POOL.forget)


def blocked(text: str) -> bool:
    """True when either guard refuses `text` (layer 1): `risky`, or tasks/judge/expansion.py's `costly`."""
    return risky(text) or costly(text) is not None


def refuse(text: str) -> bool:
    """`blocked(text)`, counted in `stats()` when it refuses: what a grader calls before verify/number."""
    if not blocked(text):
        return False
    with _POOL.cond:
        _POOL.stats["refused"] += 1
    return True


def stats(since: dict | None = None) -> dict:
    """Calls to the workers, answers refused by the guards, calls whose worker was killed (past its
    CPU slice in C code, past budget.WALL_S, or dead), workers started, and calls the worker itself
    stopped when their completion's CPU slice ran out (`over_budget`); each of those scores 0
    alone. Counted in this process, or after `since` (an earlier `stats()`), so that a task
    reports its own run."""
    with _POOL.cond:
        now = dict(_POOL.stats)
    return {k: v - (since or {}).get(k, 0) for k, v in now.items()}


def worker_cpu() -> float:
    """Worker CPU seconds spent on calls in this process so far (a killed call counts its limit)."""
    with _POOL.cond:
        return _POOL.cpu_s


def verify(gold: str, pred: str, rounding: int = 6) -> bool:
    """math-verify's `verify(parse(gold), parse(pred), float_rounding=rounding)` under the limits.
    Inside `judged`: OutOfTime when the completion's slice runs out; outside: False past LIMIT_S."""
    return bool(_POOL.call("verify", [gold, pred, rounding]))


def number(text: str) -> Fraction | float | None:
    """The real number math-verify reads first in `text`, or None: exact (a Fraction) when it is
    rational or a decimal, else a float. A value at or past 2^1024 (past every float: `2^{1024}`,
    `9999!`) is no answer. Inside `judged`: OutOfTime when the slice runs out."""
    value = _POOL.call("number", [text])
    if isinstance(value, str):
        if len(value) > 2 * MAX_NUMBER_CHARS:  # the worker sends at most this many digits
            return None
        try:
            value = Fraction(value)
        except (ValueError, ZeroDivisionError):
            return None
        return value if abs(value) < OVERFLOW else None
    return value if isinstance(value, float) and math.isfinite(value) else None


def judged(fn, default):
    """fn() as one completion under its own time slice (tasks/judge/budget.py): `default` when the
    slice runs out or the answer has no value. Every grader's entry point goes through this."""
    return budget.judged(fn, default, budget.WALL_S)


def grade_all(score, items: list) -> list:
    """[score(item) for item in items] for one reward call, in parallel on the pool's MAX_WORKERS;
    `score` opens each item's own slice (layer 3, tasks/judge/budget.py)."""
    return budget.grade_all(score, items, MAX_WORKERS)


# ---- the worker process: stdlib and math-verify only, never the project ----
def _serve(parent: int) -> None:
    import resource

    if os.getppid() != parent:
        return
    limit = MEMORY_MB << 20
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    out = os.fdopen(os.dup(1), "wb")  # the replies; a library's print goes to stderr (devnull)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    try:
        import logging

        logging.disable(logging.WARNING)  # "Timeout is disabled ..." on every call: we time it
        from math_verify import parse
        from math_verify import verify as mv_verify
    except Exception as e:  # noqa: BLE001 - reported to the parent as one line
        out.write(json.dumps({"error": f"{type(e).__name__}: {e}"}).encode() + b"\n")
        return
    import signal

    class OutOfCpu(BaseException):  # not an Exception: math-verify's `except Exception` lets it by
        pass

    armed = [False]

    def on_cpu_spent(*_):
        if armed[0]:
            raise OutOfCpu()

    signal.signal(signal.SIGPROF, on_cpu_spent)

    def run(op: str, args: list):
        if op == "verify":
            gold, pred = parse(args[0], parsing_timeout=None), parse(args[1], parsing_timeout=None)
            return bool(gold and pred and mv_verify(gold, pred, float_rounding=int(args[2]),
                                                    timeout_seconds=None))
        parsed = parse(args[0], parsing_timeout=None)
        value = parsed[0] if parsed else None
        if value is None or not getattr(value, "is_number", False) or not value.is_real:
            return None
        if value.is_Rational:  # exact: 17.9999999 is not 18
            p, q = abs(value.p), value.q  # bit lengths first: str() of 9999! would raise
            if p.bit_length() > 1100 or q.bit_length() > 1100:
                return None
            return f"{value.p}/{value.q}"
        number = float(value)  # a Float past the float range is inf: no answer
        if not math.isfinite(number):
            return None
        return str(value) if value.is_Float and len(str(value)) <= MAX_NUMBER_CHARS else number

    # Warm up what the first answer of each shape would otherwise pay for (lazy imports in sympy
    # and math-verify, up to 1.5 s): a start is never charged, a completion's slice is.
    for gold, pred in [(r"\left[ \frac{\pi^2}{8}, 2 \right]", r"[\frac{\pi^2}{8}, 2]"),
                       (r"\left( 3, \frac{\pi}{2} \right)", r"(3, \pi/2)"),
                       (r"\begin{pmatrix} 1 \\ 2 \end{pmatrix}", r"\begin{pmatrix} 1 \\ 2 \end{pmatrix}"),
                       (r"1 \pm \sqrt{19}", r"1 + \sqrt{19}, 1 - \sqrt{19}"),
                       (r"x^5 - x^4 + 1", r"x^{5} - x^4 + 1"), (r"5.4 \text{ cents}", "5.4"),
                       (r"\frac{36}{2}", "18"), (r"10,\!080", "10080")]:
        try:
            run("verify", [f"\\boxed{{{gold}}}", f"\\boxed{{{pred}}}", 6])
        except Exception:  # noqa: BLE001 - a warm-up answer math-verify refuses costs nothing
            pass
    out.write(b'{"ready": true}\n')
    out.flush()

    for line in sys.stdin.buffer:
        # The kernel ends a call that outlives its parent (SIGKILLed mid-call, so nobody kills
        # this worker at LIMIT_S): SIGXCPU at 2 x LIMIT_S of CPU time for this call.
        use = resource.getrusage(resource.RUSAGE_SELF)
        cpu = math.ceil(use.ru_utime + use.ru_stime + 2 * LIMIT_S)
        resource.setrlimit(resource.RLIMIT_CPU, (cpu, resource.RLIM_INFINITY))
        # The completion's slice: SIGPROF after `cpu` seconds of this process's CPU time, whatever
        # else the machine runs; a call stuck in C code is killed by the parent at LIMIT_S instead.
        start = time.process_time()
        try:
            request = json.loads(line)
            armed[0] = True
            signal.setitimer(signal.ITIMER_PROF, min(max(float(request["cpu"]), 0.01), LIMIT_S))
            value = run(request["op"], request["args"])
            armed[0] = False
            reply = {"ok": value}
        except OutOfCpu:
            reply = {"out_of_time": True}
        except Exception as e:  # noqa: BLE001 - a malformed answer is a wrong answer
            reply = {"error": type(e).__name__}
        finally:
            armed[0] = False
            signal.setitimer(signal.ITIMER_PROF, 0)
        reply["cpu"] = time.process_time() - start
        out.write(json.dumps(reply).encode() + b"\n")
        out.flush()


if __name__ == "__main__":
    _serve(int(sys.argv[1]))
