"""specrepro's pure-torch sgl_kernel stand-ins against sglang 0.5.20's own kernels for the same step.

Run in the sglang env with sglang's tree and src/specrepro/cpu_platform on
PYTHONPATH, SPECREPRO_PLATFORM=cpu and SGLANG_USE_CPU_ENGINE=1 (tests do).
sglang's GPU path runs Triton kernels for each step; Triton's interpreter
(TRITON_INTERPRET=1) runs them on CPU tensors, so each stand-in is compared
with the kernel a GPU server runs, on seeded random cases.  Where sglang has
no kernel for the step (the KV-cache row copy, the draft-decode
req_to_token expansion) the reference is a case computed by hand from the
sgl-kernel contract.  Prints one JSON object: kernel -> {cases, mismatches,
reference}.
"""

import os

os.environ["TRITON_INTERPRET"] = "1"

import json  # noqa: E402
import sys  # noqa: E402

import torch  # noqa: E402

import sgl_kernel as ours  # noqa: E402
from sglang.kernels.ops.attention.decode_attention import decode_attention_fwd  # noqa: E402
from sglang.kernels.ops.attention.extend_attention import extend_attention_fwd  # noqa: E402
from sglang.kernels.ops.speculative.cache_locs import (  # noqa: E402
    assign_draft_cache_locs_contiguous,
    assign_extend_cache_locs,
)
from sglang.kernels.ops.speculative.eagle import fill_accept_out_cache_loc, fill_bonus_tokens  # noqa: E402
from sglang.srt.mem_cache.allocation import assign_req_to_token_pool  # noqa: E402
from sglang.srt.speculative.eagle_utils import (  # noqa: E402
    organize_draft_results,
    sgl_build_tree_kernel_triton,
    verify_tree_greedy_triton,
)
from sglang.srt.utils import next_power_of_2  # noqa: E402

CASES = int(os.environ.get("SPECREPRO_KERNEL_CASES", "12"))
# A stand-in to break on purpose (name of an attribute of sgl_kernel): proves a wrong kernel is caught.
SABOTAGE = os.environ.get("SPECREPRO_KERNEL_SABOTAGE")
results = {}

if SABOTAGE:
    def _broken(*args, **kwargs):
        return None  # writes nothing: an in-place kernel that does no work

    setattr(ours, SABOTAGE, _broken)


def record(name, reference, mismatches):
    entry = results.setdefault(name, {"cases": 0, "mismatches": 0, "reference": reference})
    entry["cases"] += 1
    entry["mismatches"] += int(bool(mismatches))


def pool(gen, reqs=6, pool_len=48):
    """A req_to_token pool of distinct slot numbers, so any misplaced copy shows."""
    return torch.randperm(reqs * pool_len, generator=gen).to(torch.int32).view(reqs, pool_len)


for case in range(CASES):
    g = torch.Generator().manual_seed(case)
    bs = 1 + case % 4
    rpi = torch.randperm(6, generator=g)[:bs].to(torch.int64)
    start = torch.randint(0, 20, (bs,), generator=g, dtype=torch.int64)
    end = start + torch.randint(0, 9, (bs,), generator=g, dtype=torch.int64)
    n = int((end - start).sum())

    # assign_req_to_token_pool: write the new slots into the pool
    locs = torch.randint(0, 10_000, (max(n, 1),), generator=g, dtype=torch.int64)
    a, b = pool(g), None
    b = a.clone()
    ours.assign_req_to_token_pool_cpu(rpi, a, start, end, locs, a.shape[1])
    assign_req_to_token_pool[(bs,)](rpi, b, start, end, locs, b.shape[1], next_power_of_2(bs))
    record("assign_req_to_token_pool_cpu", "sglang assign_req_to_token_pool (Triton)", not torch.equal(a, b))

    # assign_extend_cache_locs: read slots out of the pool
    rtt = pool(g)
    o1, o2 = torch.full((n + 3,), -7, dtype=torch.int64), torch.full((n + 3,), -7, dtype=torch.int64)
    ours.assign_extend_cache_locs_cpu(rpi, rtt, start, end, o1, rtt.shape[1])
    assign_extend_cache_locs[(bs,)](rpi, rtt, start, end, o2, rtt.shape[1], next_power_of_2(bs))
    record("assign_extend_cache_locs_cpu", "sglang assign_extend_cache_locs (Triton)", not torch.equal(o1, o2))

    # assign_draft_cache_locs_contiguous: the topk*steps slots after each prefix
    topk, steps = 1 + case % 2, 3
    seq = torch.randint(1, 30, (bs,), generator=g, dtype=torch.int64)
    o1 = torch.empty(bs * topk * steps, dtype=torch.int64)
    o2 = torch.empty(bs * topk * steps, dtype=torch.int64)
    ours.assign_draft_cache_locs_contiguous_cpu(rpi, rtt, seq, o1, rtt.shape[1], topk, steps)
    assign_draft_cache_locs_contiguous[(bs,)](rpi, rtt, seq, o2, rtt.shape[1], topk, steps)
    record("assign_draft_cache_locs_contiguous_cpu", "sglang assign_draft_cache_locs_contiguous (Triton)",
           not torch.equal(o1, o2))

    # build_draft_decode_metadata: by hand, from the sgl-kernel contract
    got = ours.build_draft_decode_metadata_cpu(rtt, rpi, seq, topk, steps, rtt.shape[1])
    bad = got.shape != (bs * topk, rtt.shape[1]) or got.dtype != rtt.dtype
    for i in range(bs):
        row, sl = rtt[int(rpi[i])], int(seq[i])
        for k in range(topk):
            want = torch.cat([row[:sl], row[sl + k * steps: sl + (k + 1) * steps]])
            bad = bad or not torch.equal(got[i * topk + k, :sl + steps], want)
    record("build_draft_decode_metadata_cpu", "by hand (sgl-kernel's contract: prefix, then candidate k's slots)", bad)

    # fill_bonus_tokens: last committed token per request
    width = 4
    toks = torch.randint(0, 500, (bs, width), generator=g, dtype=torch.int64)
    lens = torch.randint(1, width + 1, (bs,), generator=g, dtype=torch.int32)
    o1, o2 = torch.zeros(bs, dtype=torch.int64), torch.zeros(bs, dtype=torch.int64)
    ours.fill_bonus_tokens_cpu(toks, lens, o1, width)
    fill_bonus_tokens[(bs,)](toks, lens, o2, width)
    record("fill_bonus_tokens_cpu", "sglang fill_bonus_tokens (Triton)", not torch.equal(o1, o2))

    # fill_accept_out_cache_loc: accepted slots packed in order
    idx = torch.randint(0, bs * width, (bs * width,), generator=g, dtype=torch.int32)
    idx[torch.rand(bs * width, generator=g) < 0.4] = -1
    src = torch.randint(0, 9999, (bs * width,), generator=g, dtype=torch.int64)
    o1, o2 = torch.full((bs * width,), -3, dtype=torch.int64), torch.full((bs * width,), -3, dtype=torch.int64)
    ours.fill_accept_out_cache_loc_cpu(idx, src, o1)
    fill_accept_out_cache_loc[(bs * width,)](idx, src, o2, next_power_of_2(bs * width))
    record("fill_accept_out_cache_loc_cpu", "sglang fill_accept_out_cache_loc (Triton)", not torch.equal(o1, o2))

    # copy_all_layer_kv_cache: by hand (the kernel takes raw buffer addresses)
    layers = [torch.randn(40, 2, 8, generator=g) for _ in range(3)]
    before = [t.clone() for t in layers]
    src_loc = torch.randperm(40, generator=g)[:5]
    tgt_loc = torch.randperm(40, generator=g)[:5]
    ptrs = torch.tensor([t.data_ptr() for t in layers], dtype=torch.int64)
    strides = torch.tensor([t[0].numel() * t.element_size() for t in layers], dtype=torch.int64)
    ours.copy_all_layer_kv_cache_cpu(ptrs, strides, tgt_loc, src_loc)
    bad = False
    for t, old in zip(layers, before):
        want = old.clone()
        want[tgt_loc] = old[src_loc]
        bad = bad or not torch.equal(t, want)
    record("copy_all_layer_kv_cache_cpu", "by hand (row copies in every layer's buffer, reads before writes)", bad)

    # the draft tree: built by sglang's own organize_draft_results from random draft scores
    topk, depth = (1, 3) if case % 2 == 0 else (2, 3)
    draft_num = 4 if topk == 1 else 6
    scores = [torch.rand(bs, 1, topk, generator=g)] + [torch.rand(bs, topk, topk, generator=g)
                                                       for _ in range(depth - 1)]
    tokens = [torch.randint(0, 50, (bs, topk), generator=g)] + [torch.randint(0, 50, (bs, topk * topk), generator=g)
                                                               for _ in range(depth - 1)]
    # as EAGLE's draft loop makes them: step 0's parents are -1..topk-1; a later step keeps topk of the
    # topk*topk expansions of the step before (select_top_k_tokens), offset into the flattened scores
    parents = [torch.arange(-1, topk).expand(bs, -1).contiguous()] + [
        torch.stack([torch.randperm(topk * topk, generator=g)[:topk] for _ in range(bs)]) + topk ** 2 * s + topk
        for s in range(depth - 1)]
    parent_list, selected, draft_tokens = organize_draft_results(scores, tokens, parents, draft_num)
    seq = torch.randint(1, 12, (bs,), generator=g, dtype=torch.int64)
    for mode in (0, 1):
        size = (draft_num * bs * draft_num) if mode == 1 else int(seq.sum()) * draft_num + draft_num * draft_num * bs
        outs = []
        for fn in (ours.build_tree_kernel_efficient_cpu, sgl_build_tree_kernel_triton):
            mask = torch.full((size,), True)
            positions = torch.empty(bs * draft_num, dtype=torch.long)
            retrieve = torch.full((3, bs, draft_num), -1, dtype=torch.long)
            fn(parent_list, selected, seq, mask, positions, retrieve[0], retrieve[1], retrieve[2], topk, depth,
               draft_num, mode)
            outs.append((mask, positions, retrieve))
        same = all(torch.equal(x, y) for x, y in zip(outs[0], outs[1]))
        record(f"build_tree_kernel_efficient_cpu[mode {mode}]",
               "sglang sgl_build_tree_kernel_efficient_triton (Triton, the XPU path)", not same)

    # greedy verification of that tree against random target argmaxes (some matching)
    _, _, retrieve = outs[1]
    candidates = torch.cat([torch.randint(0, 50, (bs, 1), generator=g), draft_tokens], dim=1)
    target = candidates.clone()
    flip = torch.rand(target.shape, generator=g) < 0.3
    target[flip] = torch.randint(0, 50, (int(flip.sum()),), generator=g)
    target = torch.roll(target, -1, dims=1)  # the target at a node predicts its child
    res = []
    for fn in (ours.verify_tree_greedy_cpu, verify_tree_greedy_triton):
        predicts = torch.full((bs * draft_num,), -5, dtype=torch.int32)
        accept_index = torch.full((bs, depth + 1), -1, dtype=torch.int32)
        accept_num = torch.zeros(bs, dtype=torch.int32)
        fn(predicts, accept_index, accept_num, candidates, retrieve[0], retrieve[1], retrieve[2], target)
        res.append((predicts, accept_index, accept_num))
    same = all(torch.equal(x, y) for x, y in zip(res[0], res[1]))
    record("verify_tree_greedy_cpu", "sglang verify_tree_greedy_kernel_triton (Triton, the XPU path)", not same)

    # attention: decode (writes this step's K/V, then attends) and extend (prefix from the cache + causal)
    hq, hkv, d = (4, 4, 16) if case % 2 == 0 else (4, 2, 16)
    slots = 200
    kbuf, vbuf = torch.randn(slots, hkv, d, generator=g), torch.randn(slots, hkv, d, generator=g)
    rtt = torch.randperm(6 * 32, generator=g).to(torch.int32).view(6, 32)
    seq = torch.randint(2, 30, (bs,), generator=g, dtype=torch.int64)
    q = torch.randn(bs, hq, d, generator=g)
    knew, vnew = torch.randn(bs, hkv, d, generator=g), torch.randn(bs, hkv, d, generator=g)
    loc = torch.stack([rtt[int(rpi[i]), int(seq[i]) - 1] for i in range(bs)]).to(torch.int64)
    scale, cap = d ** -0.5, (0.0 if case % 3 else 30.0)
    k1, v1, o1 = kbuf.clone(), vbuf.clone(), torch.zeros(bs, hq, d)
    ours.decode_attention_cpu(q, k1, v1, 1.0, 1.0, o1, knew, vnew, loc, torch.zeros(bs, hq, 8, d + 1), rtt, rpi, seq,
                              scale, cap, False, 0, None, None)
    k2, v2, o2 = kbuf.clone(), vbuf.clone(), torch.zeros(bs, hq, d)
    k2[loc], v2[loc] = knew, vnew  # sglang's GPU backends write the step's KV before the kernel
    indptr = torch.zeros(bs + 1, dtype=torch.int32)
    indptr[1:] = torch.cumsum(seq, 0)
    indices = torch.cat([rtt[int(rpi[i]), :int(seq[i])] for i in range(bs)]).to(torch.int64)
    splits = 4
    decode_attention_fwd(q, k2, v2, o2, indptr, indices, torch.empty(bs, hq, splits, d),
                         torch.empty(bs, hq, splits), torch.full((bs,), splits, dtype=torch.int32), splits, scale,
                         1.0, 1.0, logit_cap=cap)
    record("decode_attention_cpu", "sglang decode_attention_fwd (Triton)",
           not (torch.allclose(o1, o2, atol=2e-5, rtol=1e-4) and torch.equal(k1, k2) and torch.equal(v1, v2)))

    ext = torch.randint(1, 6, (bs,), generator=g, dtype=torch.int64)
    total = seq + ext
    qe = torch.randn(int(ext.sum()), hq, d, generator=g)
    ke, ve = torch.randn(int(ext.sum()), hkv, d, generator=g), torch.randn(int(ext.sum()), hkv, d, generator=g)
    starts = torch.cumsum(ext, 0) - ext
    kb, vb = kbuf.clone(), vbuf.clone()
    for i in range(bs):  # the caller writes the new tokens' K/V into the cache first (set_kv_buffer)
        new_slots = rtt[int(rpi[i]), int(seq[i]):int(total[i])].to(torch.int64)
        kb[new_slots] = ke[int(starts[i]):int(starts[i] + ext[i])]
        vb[new_slots] = ve[int(starts[i]):int(starts[i] + ext[i])]
    o1, o2 = torch.zeros_like(qe), torch.zeros_like(qe)
    ours.extend_attention_cpu(qe, ke, ve, o1, kb, vb, 1.0, 1.0, rtt, rpi, total, ext.to(torch.int32),
                              starts.to(torch.int32), int(ext.max()), scale, cap, False, 0, None, None, None, True)
    qo_indptr = torch.zeros(bs + 1, dtype=torch.int32)
    qo_indptr[1:] = torch.cumsum(ext, 0)
    kv_indptr = torch.zeros(bs + 1, dtype=torch.int32)
    kv_indptr[1:] = torch.cumsum(seq, 0)
    prefix_idx = torch.cat([rtt[int(rpi[i]), :int(seq[i])] for i in range(bs)]).to(torch.int64)
    extend_attention_fwd(qe, ke, ve, o2, kb, vb, qo_indptr, kv_indptr, prefix_idx, None, True, None, int(ext.max()),
                         1.0, 1.0, sm_scale=scale, logit_cap=cap)
    record("extend_attention_cpu", "sglang extend_attention_fwd (Triton)",
           not torch.allclose(o1, o2, atol=2e-5, rtol=1e-4))

json.dump(results, sys.stdout, indent=1)
