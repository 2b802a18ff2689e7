"""What training did to the model, from the update each run stores (theta_final - theta_0), with no retraining.

    update.py        store / load a run's update and the content hash of its base weights
    groups.py        parameter groups (embedding, attention q/k/v/o, biases, MLP, norms, LM head)
    drift.py         relative drift ||delta|| / ||theta0||, whole model and per group
    localisation.py  which groups hold the largest |delta| coordinates
    sparsity.py      zero the small coordinates, re-evaluate: how much of the update matters
    entropy.py       mean per-token entropy of the policy's samples (a training-time listener)
    report.py        analysis.md and the figures of an experiment

    python -m harness.analysis results/quickstart       # or runs/<group>/<stamp>, or one run folder
"""
