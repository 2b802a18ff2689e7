"""`base`'s facts (no training: the "Original" column), importable without torch: methods/base.py's Base
declares this object, and the planner reads it here (methods/config_common.py says why). Base takes no
hyperparameters, so there is no METHOD_CONFIGS entry."""
from __future__ import annotations

from harness.core.method_facts import REFERENCE, MethodFacts

BASE_FACTS = MethodFacts(family=REFERENCE, update_unit="none (it does not train)", summary_keys=((), ()))

METHOD_FACTS = {"Base": BASE_FACTS}  # methods/base.py's method classes -> their facts (harness/core/method_facts.py)
