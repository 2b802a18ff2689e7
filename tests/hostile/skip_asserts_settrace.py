# Red-team hack 2: a trace hook that jumps from every `assert` line to the next line of other code.
import linecache, sys
def _trace(frame, event, arg):
    if event == "line":
        get = lambda n: linecache.getline(frame.f_code.co_filename, n).strip()
        if get(frame.f_lineno).startswith("assert"):
            for n in range(frame.f_lineno + 1, frame.f_lineno + 50):
                if get(n) and not get(n).startswith("assert"):
                    try:
                        frame.f_lineno = n
                        break
                    except ValueError:
                        pass
    return _trace
sys._getframe().f_trace = _trace
sys.settrace(_trace)
