"""The judging room of tasks/: code that decides whether an answer is right, kept apart from the tasks.

tasks/ holds one module per task (a Task class named by a conf/task/*.yaml `_target_`); this package
holds what those tasks call to judge a completion without trusting it:

- running model-written programs: sandbox.py (the isolated run; sandbox_child.py is its child,
  read as source and started inside fresh namespaces), sandbox_root.py (the minimal root),
  sandbox_results.py (capped result reading), sandbox_reaper.py (the watchdog and start-up sweep),
  cgroup.py, seccomp.py;
- judging their values in the harness: mbpp_judge.py (split tests, limits, verdicts),
  mbpp_runner.py (the trusted script run in the sandbox), mbpp_trivial.py (degenerate rows),
  humaneval_plan.py (which of a HumanEval `check` body's tests are judged by value),
  code_runs.py (one program run and judged, with counts);
- grading math answers under time limits: bounded.py (math-verify in worker processes; it runs
  itself as a script), expansion.py (the cost guard), budget.py (one time slice per completion);
- equation.py: the safe evaluator for model-written arithmetic equations (Countdown).

Why `judge` and not `sandbox`: the sandbox is only one of the things here; bounded.py and
equation.py judge answers that never go near it, and a package named `sandbox` holding a module
sandbox.py would read as the same thing twice (tasks.sandbox.sandbox). Nothing here imports a task
module or tasks.base: the tasks depend on the judge, never the other way round
(tests/test_imports.py). So what raises the tasks' TaskDataError (the clean runs a code task needs
before it can judge) lives with the tasks, in tasks/code_task.py.
"""
