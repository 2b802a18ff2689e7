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
   request per line. A call that takes longer than LIMIT_S is killed with its worker, scores 0
   and is counted (`stats()`, which the tasks put in their run record); the next call starts a
   new worker (about 1-2 s). Workers start on first use, one per concurrent caller up to
   MAX_WORKERS, keep math-verify's parse cache between calls, are capped at MEMORY_MB of address
   space, and exit with the parent: when idle, stdin closes; mid-call, their own CPU limit
   (RLIMIT_CPU, 2 x LIMIT_S per call) ends them even if the parent was SIGKILLed.
3. A reward call grades its completions through `grade_all`: in parallel on the pool, under one
   time budget for the call (tasks/judge/budget.py: 2 s + 0.25 s per completion). Past it, the rest
   score 0, counted as `over_budget`. Sixteen answers that each ran to LIMIT_S took 16 x 5 s.

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
MAX_WORKERS = 4
MEMORY_MB = 1024  # address space of a worker; sympy with math-verify needs about 70 MB
MAX_CHARS = 1000  # the longest MATH-500 gold answer has 53
MAX_DEPTH = 8  # bracket nesting: 8 levels parse in under 1 s, 450 took 12 s; gold reaches 2
MAX_EXPONENT_DIGITS = 4  # 2^{2005} is fine, 9^{99999} and 10^{9999\cdot 9999} are not
MAX_FACTORIAL_DIGITS = 4  # 9999! has 35,660 digits: fine; 99999! is not

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
class _StartCut(Exception):
    """A replacement worker's start ran past its reward call's budget (layer 3): score 0."""


class _Worker:
    def __init__(self, start_s: float = START_S):
        self.proc = subprocess.Popen(
            [sys.executable, "-P", "-u", os.path.abspath(__file__), str(os.getpid())],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
            close_fds=True)
        ready = self._read(start_s)
        if ready != {"ready": True}:
            self.kill()
            if ready is None and start_s < START_S:
                raise _StartCut()
            why = ready.get("error") if isinstance(ready, dict) else "no answer in time"
            raise GraderUnavailable(f"the math-verify worker did not start ({why}); install the "
                                    "project's dependencies (pip install -e .) and retry")

    def _read(self, timeout: float):
        """One JSON line from the worker, or None on timeout or when it died."""
        fd, deadline, buf = self.proc.stdout.fileno(), time.monotonic() + timeout, b""
        while not buf.endswith(b"\n"):
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                return None
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                return None
            buf += chunk
        try:
            return json.loads(buf)
        except ValueError:  # not our protocol: treat the worker as broken
            return None

    def call(self, op: str, args: list, limit: float):
        """{"ok": value} or {"error": why}; None when it ran past `limit` or the worker died."""
        try:
            self.proc.stdin.write(json.dumps({"op": op, "args": args}).encode() + b"\n")
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError):
            return None
        return self._read(limit)

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

    def call(self, op: str, args: list):
        spend = budget.current() if budget else None  # set by grade_all for one reward call
        with self.cond:
            while not self.idle and self.count >= MAX_WORKERS:
                if spend is not None and spend.left() <= 0:
                    self.stats["over_budget"] += 1
                    return None
                self.cond.wait(None if spend is None else max(spend.left(), 0.01))
            worker = self.idle.pop() if self.idle else None
            if worker is None:
                self.count += 1
        try:
            if worker is not None and worker.proc.poll() is not None:  # it died while idle
                worker.kill()
                worker = None
            limit = LIMIT_S
            if worker is None:
                # A start is free, unless it replaces a worker this reward call had killed: then
                # it is charged, and cut off, at the call's deadline.
                start_s = START_S if spend is None or not spend.kills else min(START_S, spend.left())
                if start_s <= 0:
                    raise _StartCut()
                with self.cond:
                    self.stats["worker_starts"] += 1
                started = time.monotonic()
                worker = _Worker(start_s)
                if spend is not None:
                    spend.started_worker(time.monotonic() - started)
            if spend is not None:
                limit = min(LIMIT_S, spend.left())
            if limit <= 0:
                reply = "over budget"
            else:
                with self.cond:
                    self.stats["calls"] += 1
                reply = worker.call(op, args, limit)
        except BaseException as e:
            with self.cond:
                self.count -= 1
                self.stats["over_budget"] += isinstance(e, _StartCut)
                self.cond.notify()
            if worker is not None:
                worker.kill()
            if isinstance(e, _StartCut):
                return None
            raise
        if reply is None:  # too slow, or it died: a fresh worker serves the next call
            worker.kill()
            if spend is not None:
                spend.killed_worker()
        with self.cond:
            if reply is None:
                self.count -= 1
                self.stats["over_budget" if limit < LIMIT_S else "timeouts"] += 1
            else:
                self.idle.append(worker)
                if reply == "over budget":
                    self.stats["over_budget"] += 1
            self.cond.notify()
        return reply.get("ok") if isinstance(reply, dict) else None

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
    """Calls to the workers, answers refused by the guards, calls killed at LIMIT_S (or whose worker
    died: they score 0 too), workers started, and calls a reward call's time budget skipped or cut
    short (`over_budget`: they score 0); counted in this process, or after `since` (an earlier
    `stats()`), so that a task reports its own run."""
    with _POOL.cond:
        now = dict(_POOL.stats)
    return {k: v - (since or {}).get(k, 0) for k, v in now.items()}


def verify(gold: str, pred: str, rounding: int = 6) -> bool:
    """math-verify's `verify(parse(gold), parse(pred), float_rounding=rounding)` under the limits;
    False on a timeout or past the budget."""
    return bool(_POOL.call("verify", [gold, pred, rounding]))


def number(text: str) -> Fraction | float | None:
    """The real number math-verify reads first in `text`, or None (also on a timeout): exact (a
    Fraction) when it is rational or a decimal, else a float."""
    value = _POOL.call("number", [text])
    if isinstance(value, str):
        try:
            return Fraction(value)
        except (ValueError, ZeroDivisionError):  # more digits than int() reads: no answer
            return None
    return value if isinstance(value, float) and math.isfinite(value) else None


def grade_all(score, items: list) -> list:
    """[score(item) for item in items] for one reward call: in parallel on the pool's MAX_WORKERS,
    under one time budget (layer 3, tasks/judge/budget.py)."""
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
    out.write(b'{"ready": true}\n')
    out.flush()

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
            return f"{value.p}/{value.q}"
        if value.is_Float:
            return str(value)
        return float(value)

    for line in sys.stdin.buffer:
        # The kernel ends a call that outlives its parent (SIGKILLed mid-call, so nobody kills
        # this worker at LIMIT_S): SIGXCPU at 2 x LIMIT_S of CPU time for this call.
        use = resource.getrusage(resource.RUSAGE_SELF)
        cpu = math.ceil(use.ru_utime + use.ru_stime + 2 * LIMIT_S)
        resource.setrlimit(resource.RLIMIT_CPU, (cpu, resource.RLIM_INFINITY))
        try:
            request = json.loads(line)
            reply = {"ok": run(request["op"], request["args"])}
        except Exception as e:  # noqa: BLE001 - a malformed answer is a wrong answer
            reply = {"error": type(e).__name__}
        out.write(json.dumps(reply).encode() + b"\n")
        out.flush()


if __name__ == "__main__":
    _serve(int(sys.argv[1]))
