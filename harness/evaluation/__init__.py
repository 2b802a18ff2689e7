"""Evaluation: greedy accuracy, pass@k, maj@k, rewards and KL to base, with confidence intervals."""
