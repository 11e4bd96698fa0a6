"""Run sglang's real `sample_draft_proposal` on CPU tensors and record what it does.

Runs inside the CPU check environment (torch + the sglang tree under test on
sys.path), with no specrepro import: the same file probes the patched tree,
the unpatched one and the upstream reference, and judge_cpu.py compares the
three records (the check protocol: patches/README.md).  Every case is seeded, so two trees given the same
case see the same logits and the same random stream.

    python probe_draft_proposal.py --out record.json
"""

from __future__ import annotations

import argparse
import inspect
import json
import os
import sys
import warnings

warnings.filterwarnings("ignore")

import torch  # noqa: E402

from sglang.srt.sampling.sampling_params import TOP_K_ALL  # noqa: E402
from sglang.srt.speculative import spec_utils  # noqa: E402

# How many greedy rows the argmax check draws, and how many samples the
# distribution check draws for one sampled row.
GREEDY_BATCHES = 40
GREEDY_BATCH_ROWS = 64
GREEDY_VOCAB = 512
SAMPLED_DRAWS = 20000
SAMPLED_VOCAB = 8


def accepts_top_ks() -> bool:
    return "top_ks" in inspect.signature(spec_utils.sample_draft_proposal).parameters


def propose(logits, temperatures, top_ks, seed):
    torch.manual_seed(seed)
    if top_ks is not None and accepts_top_ks():
        return spec_utils.sample_draft_proposal(logits, temperatures, top_ks)
    # The unpatched function has no top_ks: it is called as its callers call it.
    return spec_utils.sample_draft_proposal(logits, temperatures)


def sharp_logits(generator, rows, vocab):
    # Sharp but not degenerate, like a confident draft head: with vocab 512 the
    # boosted token holds about 85% of the mass, so a draw misses it ~15% of the time.
    logits = torch.randn(rows, vocab, generator=generator) * 2.0
    top = torch.randint(0, vocab, (rows,), generator=generator)
    logits[torch.arange(rows), top] += 10.0
    return logits


def greedy_case(seed_base):
    """top_k = 1 rows (what SamplingParams makes of temperature 0)."""
    mismatches = rows = 0
    p_mismatches = 0
    for b in range(GREEDY_BATCHES):
        g = torch.Generator().manual_seed(seed_base + b)
        logits = sharp_logits(g, GREEDY_BATCH_ROWS, GREEDY_VOCAB)
        temps = torch.ones(GREEDY_BATCH_ROWS, 1)
        top_ks = torch.ones(GREEDY_BATCH_ROWS, dtype=torch.int32)
        probs, topk_p, topk_index = propose(logits, temps, top_ks, seed_base + 1000 + b)
        argmax = probs.argmax(dim=-1, keepdim=True)
        mismatches += int((topk_index != argmax).sum())
        p_mismatches += int((~torch.isclose(topk_p, probs.gather(1, topk_index))).sum())
        rows += GREEDY_BATCH_ROWS
    return {"rows": rows, "non_argmax": mismatches, "p_not_from_probs": p_mismatches}


def sampled_histogram(top_k_value, seed):
    """Many draws from one sampled row: the empirical distribution of X vs q."""
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(1, SAMPLED_VOCAB, generator=g)
    logits = logits.expand(SAMPLED_DRAWS, SAMPLED_VOCAB).contiguous()
    temps = torch.ones(SAMPLED_DRAWS, 1)
    top_ks = None if top_k_value is None else torch.full((SAMPLED_DRAWS,), top_k_value, dtype=torch.int32)
    probs, topk_p, topk_index = propose(logits, temps, top_ks, seed + 1)
    counts = torch.bincount(topk_index.view(-1), minlength=SAMPLED_VOCAB)
    return {"q": probs[0].tolist(), "counts": counts.tolist(), "draws": SAMPLED_DRAWS}


def mixed_case(seed, rows, top_ks_list, temperature=1.0, vocab=64):
    """A batch mixing greedy and sampled rows; record every output exactly.

    `top_ks_list` None makes the old call (no top_ks) on the same inputs.
    """
    g = torch.Generator().manual_seed(seed)
    logits = sharp_logits(g, rows, vocab)
    temps = torch.full((rows, 1), temperature)
    top_ks = None if top_ks_list is None else torch.tensor(top_ks_list, dtype=torch.int32)
    if top_ks is None:
        torch.manual_seed(seed + 1)
        probs, topk_p, topk_index = spec_utils.sample_draft_proposal(logits, temps)
    else:
        probs, topk_p, topk_index = propose(logits, temps, top_ks, seed + 1)
    return {
        "top_ks": top_ks_list,
        "index": topk_index.view(-1).tolist(),
        "p": [round(float(x), 7) for x in topk_p.view(-1)],
        "argmax": probs.argmax(dim=-1).tolist(),
    }


def device_mismatch_case():
    """top_ks on another device than the probabilities must be an assertion."""
    logits = torch.randn(2, 16)
    temps = torch.ones(2, 1)
    top_ks = torch.ones(2, dtype=torch.int32, device="meta")
    if not accepts_top_ks():
        return {"raised": None, "note": "function takes no top_ks"}
    try:
        spec_utils.sample_draft_proposal(logits, temps, top_ks)
    except AssertionError as exc:
        return {"raised": "AssertionError", "message": str(exc)[:300]}
    except Exception as exc:  # a crash of another kind is a failed check, recorded as such
        return {"raised": type(exc).__name__, "message": str(exc)[:300]}
    return {"raised": None}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    torch.set_num_threads(1)
    mixed = [1, TOP_K_ALL, 1, TOP_K_ALL, TOP_K_ALL, 1, 1, TOP_K_ALL]
    record = {
        "sglang_file": spec_utils.__file__,
        "tree": os.environ.get("SPECREPRO_TREE"),
        "sglang_version": os.environ.get("SPECREPRO_SGLANG_VERSION"),
        "torch": torch.__version__,
        "accepts_top_ks": accepts_top_ks(),
        "top_k_all": TOP_K_ALL,
        "greedy": greedy_case(10_000),
        "sampled_top_k_all": sampled_histogram(TOP_K_ALL, 20_000),
        "sampled_top_ks_none": sampled_histogram(None, 20_000),
        # Pairs on the same seeds: X with top_ks, X_none without (the old call).
        "cases": {
            "mixed": mixed_case(30_000, len(mixed), mixed),
            "mixed_none": mixed_case(30_000, len(mixed), None),
            "all_sampled": mixed_case(31_000, 8, [TOP_K_ALL] * 8),
            "all_sampled_none": mixed_case(31_000, 8, None),
            "all_greedy": mixed_case(32_000, 8, [1] * 8),
            "greedy_low_temperature": mixed_case(33_000, 8, [1] * 8, temperature=0.7),
        },
        "device_mismatch": device_mismatch_case(),
    }
    with open(args.out, "w") as fh:
        json.dump(record, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
