"""Pure-torch stand-ins for the sgl_kernel CPU operations sglang 0.5.20's EAGLE path calls.

sglang's CPU engine (`SGLANG_USE_CPU_ENGINE=1`) imports these names from
`sgl_kernel` and `torch.ops.sgl_kernel`.  The real operations live in the
sgl-kernel CPU build, which is source-only and needs AMX; no package ships
them.  This package is specrepro's `cpu` platform only (conf/platform/cpu.yaml
puts its folder on the server's PYTHONPATH): importing it anywhere else is an
ImportError, so it can never stand in for the real kernels on a GPU node.

Each function names the sgl-kernel operation it replaces and follows that
operation's contract (sgl-kernel's csrc/cpu sources: shapes, dtypes, in-place
outputs).  tests/test_cpu_kernels.py checks each one against sglang 0.5.20's own
Triton kernel for the same step (run by Triton's interpreter on CPU tensors)
or, where sglang has none, against cases computed by hand.  Features the
EAGLE topk-1 chain path never uses (trees with topk > 1 in attention, cross
attention, sliding windows, attention sinks, FP8 KV scales) raise
NotImplementedError instead of computing something unverified.
"""

from __future__ import annotations

import ctypes
import os
from typing import Optional

import numpy as np
import torch

if os.environ.get("SPECREPRO_PLATFORM") != "cpu" or os.environ.get("SGLANG_USE_CPU_ENGINE") != "1":
    raise ImportError(
        "specrepro's pure-torch sgl_kernel stand-in serves only specrepro's `cpu` platform "
        "(SPECREPRO_PLATFORM=cpu and SGLANG_USE_CPU_ENGINE=1); install the real sgl-kernel elsewhere")

__version__ = "0.0.0+specrepro.cpu"
# sglang checks this attribute of the AMX build (`convert_weight_packed`) to pick AMX layer paths;
# it is deliberately absent, so every layer runs its pure-torch `forward_native`.


def _loc_prefix(start_offset: torch.Tensor, end_offset: torch.Tensor) -> torch.Tensor:
    """Exclusive prefix sum of (end - start): where each request's slots start in the flat list."""
    lengths = (end_offset.to(torch.int64) - start_offset.to(torch.int64))
    return torch.cumsum(lengths, 0) - lengths


def assign_req_to_token_pool_cpu(req_pool_indices: torch.Tensor, req_to_token: torch.Tensor,
                                 start_offset: torch.Tensor, end_offset: torch.Tensor,
                                 out_cache_loc: torch.Tensor, pool_len: int) -> None:
    """sgl_kernel.assign_req_to_token_pool_cpu: req_to_token[r, start:end] = the request's slice of out_cache_loc."""
    prefix = _loc_prefix(start_offset, end_offset)
    for pid in range(req_pool_indices.numel()):
        s, e, o = int(start_offset[pid]), int(end_offset[pid]), int(prefix[pid])
        req_to_token[int(req_pool_indices[pid]), s:e] = out_cache_loc[o:o + e - s].to(req_to_token.dtype)


def assign_extend_cache_locs_cpu(req_pool_indices: torch.Tensor, req_to_token: torch.Tensor,
                                 start_offset: torch.Tensor, end_offset: torch.Tensor,
                                 out_cache_loc: torch.Tensor, pool_len: int) -> None:
    """sgl_kernel.assign_extend_cache_locs_cpu: the reverse copy, req_to_token[r, start:end] into out_cache_loc."""
    prefix = _loc_prefix(start_offset, end_offset)
    for pid in range(req_pool_indices.numel()):
        s, e, o = int(start_offset[pid]), int(end_offset[pid]), int(prefix[pid])
        out_cache_loc[o:o + e - s] = req_to_token[int(req_pool_indices[pid]), s:e].to(out_cache_loc.dtype)


def assign_draft_cache_locs_contiguous_cpu(req_pool_indices: torch.Tensor, req_to_token: torch.Tensor,
                                           seq_lens: torch.Tensor, out_cache_loc: torch.Tensor, pool_len: int,
                                           topk: int, num_steps: int) -> None:
    """sgl_kernel.assign_draft_cache_locs_contiguous_cpu: the topk*num_steps draft slots after each request's prefix."""
    width = topk * num_steps
    for pid in range(req_pool_indices.numel()):
        sl = int(seq_lens[pid])
        out_cache_loc[pid * width:(pid + 1) * width] = \
            req_to_token[int(req_pool_indices[pid]), sl:sl + width].to(out_cache_loc.dtype)


def build_draft_decode_metadata_cpu(req_to_token: torch.Tensor, req_pool_indices: torch.Tensor,
                                    seq_lens: torch.Tensor, topk: int, num_steps: int,
                                    pool_len: int) -> torch.Tensor:
    """sgl_kernel.build_draft_decode_metadata_cpu: req_to_token expanded for multi-step draft decode.

    Row b*topk + k holds request b's committed prefix, then candidate k's draft
    slots (laid out at seq_len + k*num_steps).  Entries past seq_len + num_steps
    are undefined in the kernel's contract; here they are 0.
    """
    num_seqs = req_pool_indices.numel()
    out = torch.zeros((num_seqs * topk, pool_len), dtype=req_to_token.dtype)
    for b in range(num_seqs):
        row = req_to_token[int(req_pool_indices[b])]
        sl = int(seq_lens[b])
        for k in range(topk):
            out[b * topk + k, :sl] = row[:sl]
            start = sl + k * num_steps
            out[b * topk + k, sl:sl + num_steps] = row[start:start + num_steps]
    return out


def fill_bonus_tokens_cpu(accept_tokens: torch.Tensor, accept_lens: torch.Tensor, bonus_tokens: torch.Tensor,
                          accept_stride: int) -> None:
    """sgl_kernel.fill_bonus_tokens_cpu: each request's last committed token (accept_lens counts the bonus)."""
    flat = accept_tokens.reshape(-1)
    idx = torch.arange(accept_lens.numel(), dtype=torch.int64) * accept_stride + accept_lens.to(torch.int64) - 1
    bonus_tokens.copy_(flat[idx].to(bonus_tokens.dtype))


def fill_accept_out_cache_loc_cpu(accept_index: torch.Tensor, out_cache_loc: torch.Tensor,
                                  accept_out_cache_loc: torch.Tensor) -> None:
    """sgl_kernel.fill_accept_out_cache_loc_cpu: the cache slots of accepted tokens, packed in order (-1 = rejected)."""
    flat = accept_index.reshape(-1).to(torch.int64)
    kept = flat[flat != -1]
    accept_out_cache_loc[:kept.numel()] = out_cache_loc[kept].to(accept_out_cache_loc.dtype)


def copy_all_layer_kv_cache_cpu(data_ptrs: torch.Tensor, strides: torch.Tensor, tgt_loc: torch.Tensor,
                                src_loc: torch.Tensor) -> None:
    """sgl_kernel.copy_all_layer_kv_cache_cpu: in every buffer (by address), row src_loc[i] -> row tgt_loc[i].

    The kernel takes raw buffer addresses and row sizes in bytes; rows are read
    before any is written, so overlapping copies are safe (as in the kernel).
    """
    src = src_loc.to(torch.int64).numpy()
    tgt = tgt_loc.to(torch.int64).numpy()
    if src.size == 0:
        return
    rows = int(max(src.max(), tgt.max())) + 1
    for address, stride in zip(data_ptrs.tolist(), strides.tolist()):
        raw = (ctypes.c_uint8 * (rows * int(stride))).from_address(int(address))
        view = np.frombuffer(raw, dtype=np.uint8).reshape(rows, int(stride))
        view[tgt] = view[src]


def verify_tree_greedy_cpu(predicts: torch.Tensor, accept_index: torch.Tensor, accept_token_num: torch.Tensor,
                           candidates: torch.Tensor, retrive_index: torch.Tensor,
                           retrive_next_token: torch.Tensor, retrive_next_sibling: torch.Tensor,
                           target_predict: torch.Tensor) -> None:
    """sgl_kernel.verify_tree_greedy_cpu: accept the longest root path whose drafts equal the target's argmax."""
    bs, num_draft = candidates.shape
    num_spec_step = accept_index.shape[1]
    cand = candidates.reshape(-1).tolist()
    r_index = retrive_index.reshape(-1).tolist()
    r_next = retrive_next_token.reshape(-1).tolist()
    r_sib = retrive_next_sibling.reshape(-1).tolist()
    target = target_predict.reshape(-1).tolist()
    for bx in range(bs):
        off = bx * num_draft
        last = r_index[off]
        accept_index[bx, 0] = last
        correct, cur = 0, 0
        for _ in range(1, num_spec_step):
            cur = r_next[off + cur]
            while cur != -1:
                if cand[off + cur] == target[last]:
                    predicts[last] = target[last]
                    correct += 1
                    last = r_index[off + cur]
                    accept_index[bx, correct] = last
                    break
                cur = r_sib[off + cur]
            if cur == -1:
                break
        accept_token_num[bx] = correct
        predicts[last] = target[last]


def _parent_node(selected: list, token_idx: int) -> int:
    try:
        return selected.index(token_idx)
    except ValueError:
        return -1


def build_tree_kernel_efficient_cpu(parent_list: torch.Tensor, selected_index: torch.Tensor,
                                    verified_seq_len: torch.Tensor, tree_mask: torch.Tensor,
                                    positions: torch.Tensor, retrive_index: torch.Tensor,
                                    retrive_next_token: torch.Tensor, retrive_next_sibling: torch.Tensor,
                                    topk: int, depth: int, draft_token_num: int, tree_mask_mode: int) -> None:
    """sgl_kernel.build_tree_kernel_efficient_cpu: tree mask, positions and retrieval links of the draft tree.

    tree_mask_mode 0 (FULL_MASK: each row spans the prefix and the tree; the
    caller pre-fills the prefix columns) or 1 (QLEN_ONLY: rows span the tree).
    """
    if tree_mask_mode not in (0, 1):
        raise NotImplementedError(f"build_tree_kernel_efficient_cpu: tree_mask_mode {tree_mask_mode} (0 or 1 only)")
    bs = verified_seq_len.numel()
    parent_stride = topk * (depth - 1) + 1
    parents = parent_list.reshape(-1).tolist()
    seq = [int(x) for x in verified_seq_len.tolist()]
    mask_offset, acc = [], 0
    for i in range(bs):
        mask_offset.append(i * draft_token_num * draft_token_num + acc)
        acc += seq[i] * draft_token_num
    pos = positions.reshape(-1)
    r_index, r_next, r_sib = (t.reshape(-1) for t in (retrive_index, retrive_next_token, retrive_next_sibling))
    for bid in range(bs):
        off = bid * draft_token_num
        selected = selected_index[bid].tolist()
        seq_len = seq[bid]
        pos[off] = seq_len
        r_index[off] = off
        for i in range(draft_token_num - 1, 0, -1):
            r_index[off + i] = off + i
            parent_tb = selected[i - 1] // topk
            parent_position = 0
            if parent_tb > 0:
                found = _parent_node(selected, parents[bid * parent_stride + parent_tb])
                if found < 0:
                    continue  # a malformed tree: the kernel warns and skips the node
                parent_position = found + 1
            origin = int(r_next[off + parent_position])
            r_next[off + parent_position] = i
            if origin != -1:
                r_sib[off + i] = origin
        for tid in range(draft_token_num):
            if tree_mask_mode == 1:
                row_start = (off + tid) * draft_token_num
            else:
                row_start = mask_offset[bid] + (seq_len + draft_token_num) * tid + seq_len
            tree_mask[row_start] = True
            tree_mask[row_start + 1:row_start + draft_token_num] = False
            if tid == 0:
                continue
            position, cur = 0, tid - 1
            while position < depth:
                position += 1
                tree_mask[row_start + cur + 1] = True
                ptb = selected[cur] // topk
                if ptb == 0:
                    break
                cur = _parent_node(selected, parents[bid * parent_stride + ptb])
                if cur < 0:
                    break
            pos[off + tid] = position + seq_len


def _unsupported(name: str, **features) -> None:
    used = [k for k, v in features.items() if v]
    if used:
        raise NotImplementedError(f"specrepro's pure-torch {name} does not implement {', '.join(used)}")


def _attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, sm_scale: float, logit_cap: float,
            causal_from: Optional[int]) -> torch.Tensor:
    """q [n, Hq, D] against k, v [m, Hkv, D]; query row i sees keys < causal_from + i + 1 (None: all)."""
    group = q.shape[1] // k.shape[1]
    k = k.repeat_interleave(group, dim=1).float()
    v = v.repeat_interleave(group, dim=1).float()
    scores = torch.einsum("qhd,khd->hqk", q.float(), k) * sm_scale
    if logit_cap > 0:
        scores = logit_cap * torch.tanh(scores / logit_cap)
    if causal_from is not None:
        n, m = q.shape[0], k.shape[0]
        visible = torch.arange(m)[None, :] <= (causal_from + torch.arange(n))[:, None]
        scores = scores.masked_fill(~visible[None], float("-inf"))
    return torch.einsum("hqk,khd->qhd", torch.softmax(scores, dim=-1), v)


@torch.library.custom_op("sgl_kernel::decode_attention_cpu", mutates_args=("k_buffer", "v_buffer", "output",
                                                                            "attn_logits"))
def decode_attention_cpu(query: torch.Tensor, k_buffer: torch.Tensor, v_buffer: torch.Tensor, k_scale: float,
                         v_scale: float, output: torch.Tensor, key: Optional[torch.Tensor],
                         value: Optional[torch.Tensor], loc: torch.Tensor, attn_logits: torch.Tensor,
                         req_to_token: torch.Tensor, req_pool_indices: torch.Tensor, seq_lens: torch.Tensor,
                         sm_scale: float, logit_cap: float, is_cross_attn: bool, sliding_window_size: int,
                         encoder_lens: Optional[torch.Tensor], sinks: Optional[torch.Tensor]) -> None:
    """torch.ops.sgl_kernel.decode_attention_cpu: write this step's K/V at `loc`, then attend over each request's slots.

    query/output [bs, Hq, D]; k_buffer/v_buffer [slots, Hkv, D]; the request's
    keys are req_to_token[req_pool_indices[i], :seq_lens[i]].  attn_logits is
    the kernel's split-K scratch space, unused here.
    """
    _unsupported("decode_attention_cpu", cross_attention=is_cross_attn, sliding_window=sliding_window_size > 0,
                 sinks=sinks is not None, kv_scale=(k_scale != 1.0 or v_scale != 1.0))
    if key is not None and value is not None:
        k_buffer[loc.to(torch.int64)] = key.to(k_buffer.dtype)
        v_buffer[loc.to(torch.int64)] = value.to(v_buffer.dtype)
    for i in range(seq_lens.numel()):
        slots = req_to_token[int(req_pool_indices[i]), :int(seq_lens[i])].to(torch.int64)
        out = _attend(query[i:i + 1], k_buffer[slots], v_buffer[slots], sm_scale, logit_cap, None)
        output[i] = out[0].to(output.dtype)


@torch.library.custom_op("sgl_kernel::extend_attention_cpu", mutates_args=("o_extend",))
def extend_attention_cpu(q_extend: torch.Tensor, k_extend: Optional[torch.Tensor], v_extend: Optional[torch.Tensor],
                         o_extend: torch.Tensor, k_buffer: torch.Tensor, v_buffer: torch.Tensor, k_scale: float,
                         v_scale: float, req_to_token: torch.Tensor, req_pool_indices: torch.Tensor,
                         seq_lens: torch.Tensor, extend_seq_lens: torch.Tensor, extend_start_loc: torch.Tensor,
                         max_len_extend: int, sm_scale: float, logit_cap: float, is_cross_attn: bool,
                         sliding_window_size: int, encoder_lens: Optional[torch.Tensor],
                         sinks: Optional[torch.Tensor], tree_mask: Optional[torch.Tensor], is_causal: bool) -> None:
    """torch.ops.sgl_kernel.extend_attention_cpu: each request's new tokens attend to its cached prefix and,
    causally, to each other.

    The prefix (seq_lens - extend_seq_lens slots of req_to_token) is read from
    the KV buffers; the new tokens' keys and values from k_extend/v_extend
    (from the buffers when those are None: the caller has written them there).
    """
    _unsupported("extend_attention_cpu", cross_attention=is_cross_attn, sliding_window=sliding_window_size > 0,
                 sinks=sinks is not None, tree_mask=tree_mask is not None, non_causal=not is_causal,
                 kv_scale=(k_scale != 1.0 or v_scale != 1.0))
    for i in range(seq_lens.numel()):
        total, new = int(seq_lens[i]), int(extend_seq_lens[i])
        start = int(extend_start_loc[i])
        slots = req_to_token[int(req_pool_indices[i]), :total].to(torch.int64)
        prefix = total - new
        if k_extend is not None and v_extend is not None:
            k = torch.cat([k_buffer[slots[:prefix]].to(k_extend.dtype), k_extend[start:start + new]])
            v = torch.cat([v_buffer[slots[:prefix]].to(v_extend.dtype), v_extend[start:start + new]])
        else:
            k, v = k_buffer[slots], v_buffer[slots]
        out = _attend(q_extend[start:start + new], k, v, sm_scale, logit_cap, prefix)
        o_extend[start:start + new] = out.to(o_extend.dtype)
