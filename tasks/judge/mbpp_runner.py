"""Inside the sandbox: run a candidate program, then each MBPP test call, and emit the results.

Trusted code, but it runs in the same interpreter as the untrusted candidate, so it is never the
judge: for a test the harness could split (tasks/judge/mbpp_judge.py) it only evaluates the call
expression and emits the value, encoded as plain tagged JSON; the harness compares that value to
an expected value that never enters the sandbox. Only a test of another shape runs here as a
statement ("passed" or "error"). The encoder reads values through the base types' own methods
(dict.items, int.__index__, ...), so an object whose __eq__, __repr__ or __iter__ lies is sent as
the plain data it holds, and any other type is "unserialisable" (the test fails).

The same runner, with no candidate code and `setup_may_fail`, computes a row's non-literal
expected values (`sys.getsizeof(...)`) in a clean run of their own (tasks/mbpp.py).

Started by tasks/judge/sandbox_child.py, which passes `esbench_args` ({"code", "setup", "items",
optionally "setup_may_fail"}) and `esbench_emit` as globals; both are removed before the candidate
runs. Stdlib only.
"""
import builtins

# The judge's own limits (tasks/judge/mbpp_judge.Limits) start from these; sending more would only be
# refused there. Before that, the harness reads all records of a run within RESULT_ITEMS JSON
# items (tasks/judge/sandbox_results.py, ~3 per plain node): a value past ~43k nodes fails there, on the
# same "items" limit, without being parsed.
MAX_DEPTH = 100
MAX_NODES = 100_000
MAX_INT_HEX_DIGITS = 10_000


class Unserialisable(Exception):
    """The value is not made of plain literals (or is too deep or too large) to send."""


def encode(value, depth: int = 0, budget: list | None = None):
    """Plain value -> tagged JSON ([tag, payload]); raises Unserialisable for anything else."""
    budget = [MAX_NODES] if budget is None else budget
    budget[0] -= 1
    if depth > MAX_DEPTH or budget[0] < 0:
        raise Unserialisable("value too deep or too large")
    if value is None or value is True or value is False:
        return ["k", value]
    for kind, tag, convert in _SCALARS:
        if isinstance(value, kind):
            return [tag, convert(value)]
    for kind, tag, items in _CONTAINERS:
        if isinstance(value, kind):
            return [tag, [encode(v, depth + 1, budget) for v in items(value)]]
    if isinstance(value, dict):
        return ["d", [[encode(k, depth + 1, budget), encode(v, depth + 1, budget)]
                      for k, v in dict.items(value)]]
    raise Unserialisable(f"unserialisable {type(value).__name__}")


def _hex(value) -> str:
    """An int in hex (no 4300-digit str limit), if it is within MAX_INT_HEX_DIGITS."""
    plain = int.__index__(value)
    if int.bit_length(plain) > 4 * MAX_INT_HEX_DIGITS:
        raise Unserialisable("int too large")
    return format(plain, "x")


_SCALARS = (
    (int, "i", _hex),
    (float, "f", float.__repr__),
    (complex, "c", lambda v: [float.__repr__(complex.real.__get__(v)),
                              float.__repr__(complex.imag.__get__(v))]),
    (str, "s", str.__str__),
    (bytes, "y", bytes.hex),
    (bytearray, "Y", bytearray.hex),
)
_CONTAINERS = (
    (list, "l", list.__iter__),
    (tuple, "t", tuple.__iter__),
    (set, "S", set.__iter__),
    (frozenset, "F", frozenset.__iter__),
)


def _describe(error: BaseException) -> str:
    try:
        return f"{type(error).__name__}: {error}"[:300]
    except BaseException:  # noqa: BLE001 - a hostile __str__
        return "error"


def run(args: dict, emit) -> None:
    """Run code and setup, then every item in order; one record per item, none after an error
    that stopped the program (a missing record is a failed test). With `setup_may_fail` (the
    clean run that computes expected values, where setup code may need the candidate's names) a
    failing setup is recorded and the items still run."""
    namespace = {"__name__": "__main__", "__builtins__": builtins}
    try:
        exec(compile(args["code"], "solution.py", "exec"), namespace)
    except BaseException as e:  # noqa: BLE001 - SystemExit too: exiting early is a failure
        emit({"load_error": _describe(e)})
        return
    try:
        exec(compile(args["setup"] or "", "setup.py", "exec"), namespace)
    except BaseException as e:  # noqa: BLE001
        emit({"setup_error": _describe(e)})
        if not args.get("setup_may_fail"):
            return
    for i, item in enumerate(args["items"]):
        try:
            if item["kind"] == "value":
                value = eval(compile(item["src"], f"test{i}", "eval"), namespace)
                emit({"i": i, "value": encode(value)})
            else:
                exec(compile(item["src"], f"test{i}", "exec"), namespace)
                emit({"i": i, "passed": True})
        except BaseException as e:  # noqa: BLE001
            emit({"i": i, "error": _describe(e)})


def _main(scope: dict) -> None:
    args, emit = scope.pop("esbench_args"), scope.pop("esbench_emit")
    run(args, emit)


if __name__ == "__main__":
    _main(globals())
