"""harness.tools.silent_gaps: each line (and each progress-bar redraw) stamped with its arrival time, and the
longest silence found with the lines around it."""
import json
import sys

from harness.tools.silent_gaps import main, summary

SCRIPT = "import sys, time; print('a', flush=True); time.sleep(1.0); sys.stderr.write('x\\rb\\n'); sys.stderr.flush(); " \
         "time.sleep(0.2); print('c', flush=True)"


def test_the_longest_gap_is_the_longest_silence_and_a_redraw_is_a_line(tmp_path, capsys):
    log, out = tmp_path / "run.log", tmp_path / "gaps.json"
    assert main(["--log", str(log), "--json", str(out), "--", sys.executable, "-c", SCRIPT]) == 0
    s = json.loads(out.read_text())
    assert s == summary(log) and s["cmd"].endswith(SCRIPT)
    assert s["lines"] == 5  # a, x, b (the carriage return splits the redraw), c, and the exit line
    top = s["gaps"][0]
    assert (top["after"], top["before"]) == ("a", "x") and 0.9 <= top["s"] <= 5.0, top
    assert s["wall_s"] >= 1.2 and s["git_sha"] != "?"
    assert "longest silent gaps" in capsys.readouterr().out


def test_a_failing_command_keeps_its_exit_code(tmp_path):
    assert main(["--log", str(tmp_path / "l"), "--", sys.executable, "-c", "raise SystemExit(3)"]) == 3
