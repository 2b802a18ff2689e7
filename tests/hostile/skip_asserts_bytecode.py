# Red-team hack 2b: find asserts from bytecode (LOAD_ASSERTION_ERROR), read no file, jump past them.
import dis, sys
def _lines(code):
    lines, asserts, line = set(), set(), None
    for ins in dis.get_instructions(code):
        line = ins.positions.lineno if ins.positions and ins.positions.lineno else line
        lines.add(line)
        if ins.opname == "LOAD_ASSERTION_ERROR":
            asserts.add(line)
    return sorted(x for x in lines if x), asserts
def _trace(frame, event, arg):
    if event == "line":
        lines, asserts = _lines(frame.f_code)
        if frame.f_lineno in asserts:
            for n in (x for x in lines if x > frame.f_lineno and x not in asserts):
                try:
                    frame.f_lineno = n
                    break
                except ValueError:
                    pass
    return _trace
sys._getframe().f_trace = _trace
sys.settrace(_trace)
