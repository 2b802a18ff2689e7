"""Grade an lm-eval completion with esbench's arithmetic grader (tasks/arithmetic.py is_correct)."""
from tasks.arithmetic import Arithmetic

GRADER = Arithmetic()


def process_results(doc, results):
    return {"acc": float(GRADER.is_correct(results[0], doc["answer"]))}
