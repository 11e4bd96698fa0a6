"""Run the tree's real `sample_draft_proposal` on CPU tensors and record what it does.

Probe of the `draft_proposal` check of the sharpen_draft series (patches/README.md,
"The check protocol"): it runs once per tree with the CPU check environment's
python and `PYTHONPATH` holding exactly the folder that contains that tree's
`sglang` package.  No specrepro import.  The function is called exactly as its
callers in eagle_worker_v2.py call it: two positional arguments, logits (rows,
vocab) and temperatures (rows, 1).  Every case is seeded, so two trees given the
same case see the same logits and the same random stream.

What is recorded, per case:
  - the returned q next to softmax(logits / T) and softmax(logits / (T * 0.8))
    computed here (max absolute differences, so the judge decides);
  - q(X) as returned vs q.gather(X) from the returned q;
  - draw histograms: one small-vocab row repeated DRAWS times (T = 1.0, 0.7),
    the counts of X next to the returned q and both reference softmaxes;
  - the empirical P(X == argmax) on sharp draft rows (as a confident draft head
    looks), next to the mean of the returned q's top probability.

    python probe.py --out record.json
"""

from __future__ import annotations

import argparse
import inspect
import json
import os
import sys
import time
import warnings

warnings.filterwarnings("ignore")

import torch  # noqa: E402

from sglang.srt.speculative import spec_utils  # noqa: E402

# The factor the PR names; the judge compares the tree's q with both references.
PR_SCALE = 0.8

# Draw histograms: one row of a small vocab, repeated DRAWS times in one call.
HIST_VOCAB = 8
HIST_DRAWS = 20000
HIST_TEMPERATURES = (1.0, 0.7)

# Sharp rows: BATCHES calls of ROWS rows over VOCAB tokens each, per temperature.
SHARP_BATCHES = 20
SHARP_ROWS = 128
SHARP_VOCAB = 512
SHARP_TEMPERATURES = (1.0, 0.7)

# Mixed-temperature batches for the exactness checks (q, q(X)).
EXACT_TEMPERATURES = [1.0, 0.7, 1.3, 0.5, 1.0, 0.9, 2.0, 0.25]


def propose(logits: torch.Tensor, temperatures: torch.Tensor, seed: int):
    """The call its callers make: two positional args, (rows, vocab) and (rows, 1)."""
    torch.manual_seed(seed)
    return spec_utils.sample_draft_proposal(logits, temperatures)


def reference(logits: torch.Tensor, temperatures: torch.Tensor):
    at_t = torch.softmax(logits / temperatures, dim=-1)
    at_scaled = torch.softmax(logits / (temperatures * PR_SCALE), dim=-1)
    return at_t, at_scaled


def sharp_logits(generator: torch.Generator, rows: int, vocab: int) -> torch.Tensor:
    # Sharp but not degenerate, like a confident draft head (the eagle_topk
    # probe's rows): with vocab 512 the boosted token holds on average about
    # 75% of the mass at T = 1 (about 86% at 0.8 T), so a draw at T misses it
    # about a quarter of the time.
    logits = torch.randn(rows, vocab, generator=generator) * 2.0
    top = torch.randint(0, vocab, (rows,), generator=generator)
    logits[torch.arange(rows), top] += 10.0
    return logits


def max_abs(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.double() - b.double()).abs().max())


def exact_case(seed: int, vocab: int, logit_scale: float) -> dict:
    """q and q(X) against the references on a batch of mixed temperatures."""
    g = torch.Generator().manual_seed(seed)
    rows = len(EXACT_TEMPERATURES)
    logits = torch.randn(rows, vocab, generator=g) * logit_scale
    temps = torch.tensor(EXACT_TEMPERATURES, dtype=torch.float32).view(rows, 1)
    q, q_x, x = propose(logits, temps, seed + 1)
    at_t, at_scaled = reference(logits, temps)
    return {
        "rows": rows,
        "vocab": vocab,
        "temperatures": EXACT_TEMPERATURES,
        "shapes": {"q": list(q.shape), "q_x": list(q_x.shape), "x": list(x.shape)},
        "x_dtype": str(x.dtype),
        "q_minus_softmax_T": max_abs(q, at_t),
        "q_minus_softmax_scaled_T": max_abs(q, at_scaled),
        "q_row_sum_minus_1": float((q.double().sum(-1) - 1).abs().max()),
        "qx_minus_gather": max_abs(q_x.view(-1), q.gather(1, x.view(-1, 1)).view(-1)),
        "softmax_T_minus_scaled_T": max_abs(at_t, at_scaled),
        "x": x.view(-1).tolist(),
    }


def histogram(temperature: float, seed: int) -> dict:
    """DRAWS draws from one row: the empirical distribution of X against q."""
    g = torch.Generator().manual_seed(seed)
    row = torch.randn(1, HIST_VOCAB, generator=g) * 1.5
    logits = row.expand(HIST_DRAWS, HIST_VOCAB).contiguous()
    temps = torch.full((HIST_DRAWS, 1), temperature)
    q, q_x, x = propose(logits, temps, seed + 1)
    at_t, at_scaled = reference(row, temps[:1])
    counts = torch.bincount(x.view(-1), minlength=HIST_VOCAB)
    return {
        "temperature": temperature,
        "draws": HIST_DRAWS,
        "vocab": HIST_VOCAB,
        "counts": counts.tolist(),
        "q": q[0].double().tolist(),
        "q_rows_identical": bool((q == q[:1]).all()),
        "softmax_T": at_t[0].double().tolist(),
        "softmax_scaled_T": at_scaled[0].double().tolist(),
        "qx_minus_gather": max_abs(q_x.view(-1), q.gather(1, x.view(-1, 1)).view(-1)),
    }


def sharp_case(temperature: float, seed_base: int) -> dict:
    """P(X == argmax) on sharp rows, with the expectations to compare it to."""
    rows = hits = 0
    q_top = q_var = t_top = scaled_top = 0.0
    hit_per_batch = []
    for b in range(SHARP_BATCHES):
        g = torch.Generator().manual_seed(seed_base + b)
        logits = sharp_logits(g, SHARP_ROWS, SHARP_VOCAB)
        temps = torch.full((SHARP_ROWS, 1), temperature)
        q, q_x, x = propose(logits, temps, seed_base + 1000 + b)
        at_t, at_scaled = reference(logits, temps)
        argmax = logits.argmax(dim=-1, keepdim=True)
        batch_hits = int((x == argmax).sum())
        hits += batch_hits
        hit_per_batch.append(batch_hits)
        rows += SHARP_ROWS
        q_argmax = q.gather(1, argmax).double()
        q_top += float(q_argmax.sum())
        q_var += float((q_argmax * (1 - q_argmax)).sum())
        t_top += float(at_t.gather(1, argmax).double().sum())
        scaled_top += float(at_scaled.gather(1, argmax).double().sum())
    return {
        "temperature": temperature,
        "rows": rows,
        "vocab": SHARP_VOCAB,
        "argmax_proposals": hits,
        "p_argmax": hits / rows,
        "hits_per_batch": hit_per_batch,
        "mean_q_argmax": q_top / rows,
        # Variance of the hit count if X ~ q row by row (a Poisson binomial).
        "hits_variance_under_q": q_var,
        "mean_softmax_T_argmax": t_top / rows,
        "mean_softmax_scaled_T_argmax": scaled_top / rows,
    }


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    torch.set_num_threads(1)
    start = time.monotonic()
    fn = spec_utils.sample_draft_proposal
    record = {
        "tree": os.environ.get("SPECREPRO_TREE"),
        "sglang_version": os.environ.get("SPECREPRO_SGLANG_VERSION"),
        "sglang_file": spec_utils.__file__,
        "torch": torch.__version__,
        "pr_scale": PR_SCALE,
        "tree_scale": getattr(spec_utils, "DRAFT_PROPOSAL_TEMPERATURE_SCALE", None),
        "signature": str(inspect.signature(fn)),
        "parameters": [
            {"name": p.name, "kind": p.kind.name, "has_default": p.default is not inspect.Parameter.empty}
            for p in inspect.signature(fn).parameters.values()
        ],
        "exact": {
            "vocab64": exact_case(40_000, 64, 2.0),
            "vocab4096": exact_case(41_000, 4096, 3.0),
        },
        "histograms": {f"T{t:g}": histogram(t, 50_000 + i) for i, t in enumerate(HIST_TEMPERATURES)},
        "sharp": {f"T{t:g}": sharp_case(t, 60_000 + 10_000 * i) for i, t in enumerate(SHARP_TEMPERATURES)},
    }
    record["seconds"] = round(time.monotonic() - start, 2)
    with open(args.out, "w") as fh:
        json.dump(record, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
