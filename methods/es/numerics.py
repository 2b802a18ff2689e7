"""ES numerics as an experimental variable: `method.numerics=inplace`, and the records that compare it with `exact`.

`exact` (methods/es/weights.py HFWeights, the default) keeps an fp32 master: restore is a copy, the
update is summed in fp32. `inplace` (InplaceWeights, here) does ES's arithmetic the way the reference
code of Qiu et al. 2025 does (es_fine-tuning_countdown.py, read for this module), with no master:

    perturb   param.data.add_(SIGMA * noise)        noise = torch.randn(..., dtype=param.dtype)
    restore   param.data.add_(-SIGMA * noise)       the same noise regenerated from its seed
    update    update = zeros_like(param); for each member: noise.mul_(float(z_n)); update.add_(noise)
              update.div_(POPULATION_SIZE); param.data.add_(ALPHA * update)

so every product and sum rounds to the working dtype (model.dtype): `SIGMA * noise` is rounded before
it is added, restore is inexact in bf16/fp16 (the weights drift member by member), the update is
accumulated in the working dtype, and an update below half an ulp of its weight is rounded away.
In fp32 it is the reference run in fp32. Noise is drawn directly in the working dtype, as the
reference does (methods.es.core.noise(dtype=...)): not the same numbers as exact's fp32 draw.
The z-scores are the loop's (methods/es/core.normalize, fp64), not the reference's numpy fp32 ones.

Records (method.numerics_record; measured on engine=hf), kept small (no per-coordinate arrays):
- per iteration (StepStats extras `numerics`): the restore error of the iteration's first member on
  this worker (share of coordinates not restored bit for bit against a snapshot taken just before its
  perturbation, RMS and max abs of the difference; exact: 0 by construction, not measured), and
  the share of coordinates the update changed at all;
- at the end (the train summary's `numerics`): |final - initial| in units of each weight's ulp in the
  working dtype (the spacing above |initial|, torch.nextafter), as a histogram over BINS, the share
  changed at all, the max |delta| and how many coordinates tie at it.
Memory: a snapshot of the initial weights in the working dtype (one model copy), and under inplace a
transient snapshot of the first member's weights each iteration.
"""
from __future__ import annotations

import torch
from safetensors.torch import save_file

from methods.es.config import NUMERICS  # noqa: F401 - method.numerics' values, light (methods/es/config.py)
from methods.es.core import NoiseSpec, VariantError, load_named, master_checksum, noise

BINS = ("0", "1", "2", "3-4", "5-8", ">8")  # |delta| / ulp: 0, (0,1], (1,2], (2,4], (4,8], >8
_EDGES = (0.0, 1.0, 2.0, 4.0, 8.0)
_INT = {2: torch.int16, 4: torch.int32, 8: torch.int64}


def bits(t: torch.Tensor) -> torch.Tensor:
    """The tensor's bit patterns as integers of its width (bit-exact comparisons: -0.0 != 0.0)."""
    return t.detach().reshape(-1).view(_INT[t.element_size()])


def ulp(x: torch.Tensor) -> torch.Tensor:
    """Each element's ulp in x's dtype (the spacing above |x|), as float64."""
    a = x.detach().abs()
    return (torch.nextafter(a, torch.full_like(a, float("inf"))) - a).double()


@torch.no_grad()
def restore_error(before: list[torch.Tensor], after: list[torch.Tensor]) -> dict:
    """How far `after` is from `before`: share of coordinates not bit-identical, RMS and max abs difference."""
    n = bad = 0
    sq, mx = 0.0, 0.0
    for b, a in zip(before, after):
        n += b.numel()
        bad += int((bits(b) != bits(a)).sum())
        d = a.double() - b.double()
        sq += float(d.pow(2).sum())
        mx = max(mx, float(d.abs().max())) if d.numel() else mx
    return {"restore_not_exact_share": bad / max(n, 1), "restore_rms": (sq / max(n, 1)) ** 0.5,
            "restore_max_abs": mx, "restore_measured": "first member"}


EXACT_RESTORE = {"restore_not_exact_share": 0.0, "restore_rms": 0.0, "restore_max_abs": 0.0,
                 "restore_measured": "exact by construction (a copy of the fp32 master)"}


@torch.no_grad()
def delta_summary(initial: list[torch.Tensor], final: list[torch.Tensor]) -> dict:
    """|final - initial| in ulps of each initial weight (working dtype): histogram over BINS, share
    changed, max |delta| and its ties."""
    counts = [0] * len(BINS)
    n = changed = ties = 0
    mx = 0.0
    for a, b in zip(initial, final):
        d = (b.double() - a.double()).abs().reshape(-1)  # exact: two values of a <= 32-bit float
        u = d / ulp(a).reshape(-1)
        n += d.numel()
        changed += int((bits(a) != bits(b)).sum())
        counts[0] += int((u == 0).sum())
        for k in range(1, len(BINS) - 1):
            counts[k] += int(((u > _EDGES[k - 1]) & (u <= _EDGES[k])).sum())
        counts[-1] += int((u > _EDGES[-1]).sum())
        if d.numel():
            m = float(d.max())
            if m > mx:
                mx, ties = m, int((d == m).sum())
            elif m == mx and m > 0:
                ties += int((d == m).sum())
    return {"ulp_histogram": dict(zip(BINS, counts)), "changed_share": changed / max(n, 1),
            "max_abs_delta": mx, "max_abs_delta_ties": ties if mx > 0 else 0, "coordinates": n}


class Recorder:
    """The numerics record of one weight adapter: snapshots, this iteration's entry, the final summary."""

    def __init__(self, numerics: str, on: bool):
        self.numerics, self.on = numerics, on
        self.initial: list[torch.Tensor] | None = None
        self.entry: dict = {}
        self.measure_next = True  # measure the restore of the next member (the iteration's first)

    def start(self, params: list[torch.Tensor]) -> None:
        if self.on:
            self.initial = [p.detach().clone() for p in params]
            self.measure_next = True

    def changed(self, count: int, total: int) -> None:
        self.entry["changed_share"] = count / max(total, 1)

    def take(self, params: list[torch.Tensor], final: bool = False) -> dict:
        """This iteration's record (then the next member is measured), or with final=True the summary."""
        first = params[0]
        head = {"numerics": self.numerics, "dtype": str(first.dtype).removeprefix("torch."), "record": self.on}
        if final:
            return head | (delta_summary(self.initial, params) if self.on and self.initial else {})
        out = (EXACT_RESTORE if self.numerics == "exact" else {}) | {"changed_share": 0.0} | self.entry
        self.entry, self.measure_next = {}, True
        return out


class InplaceWeights:
    """numerics=inplace: the reference code's in-place bf16/fp16/fp32 arithmetic on (name, tensor)
    pairs, no master (see the module docstring). Same interface as methods.es.weights.HFWeights."""

    def __init__(self, named: list[tuple[str, torch.Tensor]], record: bool = True):
        self.names = [n for n, _ in named]
        self.params = [p for _, p in named]
        self.spec = NoiseSpec()
        self.rec = Recorder("inplace", record)
        self._in_place: tuple[int, float] | None = None  # (seed, sigma) of the perturbation now in the weights
        self._before: list[torch.Tensor] | None = None

    def set_noise(self, spec: NoiseSpec) -> None:
        if spec.rank is not None:
            raise VariantError("method.numerics=inplace draws full-rank noise in the weights' dtype, as the "
                               "reference does; drop method.noise_rank or use numerics=exact")
        self.spec = spec

    def _eps(self, member_seed: int, i: int) -> torch.Tensor:
        p = self.params[i]
        return noise(member_seed, i, p, seeding=self.spec.seeding, dtype=p.dtype)

    @torch.no_grad()
    def init_master(self, path=None) -> None:
        """Load a checkpoint into the weights (cast to their dtype); there is no separate master."""
        if path is not None:
            saved = load_named(path, self.names, self.params[0].device)
            for n, p in zip(self.names, self.params):
                p.copy_(saved[n])
        self._in_place = None
        self.rec.start(self.params)

    def save_master(self, path) -> None:
        save_file({n: p.detach().cpu().contiguous() for n, p in zip(self.names, self.params)}, str(path))

    @torch.no_grad()
    def perturb(self, member_seed: int, sigma: float) -> None:
        if self._in_place is not None:
            raise RuntimeError("numerics=inplace: perturb called twice without a restore in between")
        chosen = self.spec.selected(len(self.params))
        if self.rec.on and self.rec.measure_next:
            self._before = [self.params[i].detach().clone() for i in chosen]
        for i in chosen:
            # reference: param.data.add_(SIGMA * noise); the product is rounded to the dtype before the add
            self.params[i].add_(sigma * self._eps(member_seed, i))
        self._in_place = (member_seed, sigma)

    @torch.no_grad()
    def restore(self) -> None:
        if self._in_place is None:
            return  # nothing in the weights to take out
        member_seed, sigma = self._in_place
        chosen = self.spec.selected(len(self.params))
        for i in chosen:
            # reference: param.data.add_(-SIGMA * noise), i.e. (-SIGMA) * noise: exactly the negated product
            self.params[i].add_(-sigma * self._eps(member_seed, i))
        self._in_place = None
        if self._before is not None:
            self.rec.entry.update(restore_error(self._before, [self.params[i] for i in chosen]))
            self._before, self.rec.measure_next = None, False

    @torch.no_grad()
    def update(self, member_seeds, z, alpha, n=None) -> float:
        """Per tensor, in its dtype: update = sum_n z_n * eps_n (each product rounded, summed in the
        dtype), update /= n, param += alpha * update (rounded, then added). Returns the step's L2 norm."""
        n = len(member_seeds) if n is None else n
        sq, changed = 0.0, 0
        for i in self.spec.selected(len(self.params)):
            p = self.params[i]
            acc = torch.zeros_like(p)
            for s, zn in zip(member_seeds, z):
                eps = self._eps(s, i)
                eps.mul_(float(zn))
                acc.add_(eps)
            acc.div_(n)
            step = alpha * acc
            old = p.detach().clone() if self.rec.on else None
            p.add_(step)
            if old is not None:
                changed += int((bits(old) != bits(p)).sum())
            sq += float(step.double().pow(2).sum())
        if self.rec.on:
            self.rec.changed(changed, sum(p.numel() for p in self.params))
        return sq ** 0.5

    def checksum(self) -> str:
        """A fingerprint of the weights' exact bits (bf16/fp16 as int16, fp32 as int32)."""
        return master_checksum(self.params)

    def numerics(self, final: bool = False) -> dict:
        return self.rec.take(self.params, final)
