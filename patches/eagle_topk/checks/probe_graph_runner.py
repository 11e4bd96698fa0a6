"""sglang's own EAGLE draft graph runner, driven with minimal fakes (part of probe_gpu.py).

What runs is the image's code: `EAGLEDraftCudaGraphRunner.__init__` (static
buffers, the `top_ks` buffer where patched, per-batch-size capture through
sglang's FULL CUDA-graph backend), `execute` (replay copies, padding to the
captured size) and `EagleDraftWorker.draft_forward` (the worker's
`sample_draft_proposal` call, bound to a small worker object the way sglang's
own runner tests bind it).  Faked, because they need weights or other ranks:
  - the draft model: a lookup table of sharp logits (`LookupDraftModel`);
  - the attention backend: the lookup model attends to nothing, so its
    metadata calls do nothing (`NoAttention`);
  - the distributed graph-capture context (one rank: a fresh stream) and the
    free-memory query, patched exactly where sglang's own runner tests patch them.
Without a GPU the FULL backend is swapped for `EagerBackend`, which runs the
captured function again at "replay": init, capture_one_shape and the replay
copies still run, the CUDA graph itself does not (reported as not executed).

Like probe_gpu.py this imports nothing of specrepro: the same file probes the
patched and the unpatched image.
"""

from __future__ import annotations

import contextlib
import time
from types import MethodType, SimpleNamespace
from typing import Any, Dict, List
from unittest.mock import patch

import torch

VOCAB = 256
HIDDEN = 16
NUM_STEPS = 3  # draft steps per verify; steps 2..NUM_STEPS are proposals of sample_draft_proposal
CAPTURE_BS = [1, 2, 4, 8]
# (rows in the batch, captured size it pads to): full, then padded batches.
REPLAY_SHAPES = [(8, 8), (5, 8), (3, 4)]


class LookupDraftModel:
    """The fake draft model: next-token logits are a row of a fixed table, confident but not one-hot,
    so a draw at T=1 misses the argmax about a quarter of the time (0.26 on the H200).  It records what each capture saw."""

    def __init__(self, device: str):
        g = torch.Generator(device="cpu").manual_seed(5)
        table = torch.randn(VOCAB, VOCAB, generator=g) * 2.0
        table[torch.arange(VOCAB), torch.randint(0, VOCAB, (VOCAB,), generator=g)] += 9.0
        self.table = table.to(device)
        self.capturing = True
        self.captured: Dict[int, Dict[str, Any]] = {}

    def forward(self, forward_batch):
        from sglang.srt.layers.logits_processor import LogitsProcessorOutput

        if self.capturing:
            top_ks = forward_batch.sampling_info.top_ks
            self.captured[int(forward_batch.batch_size)] = {
                "device": str(top_ks.device), "dtype": str(top_ks.dtype).replace("torch.", ""),
                "data_ptr": top_ks.data_ptr(), "values": sorted(set(top_ks.tolist()))
                if top_ks.device.type == "cpu" else None}
        logits = self.table[forward_batch.input_ids]
        return SimpleNamespace(logits_output=LogitsProcessorOutput(
            next_token_logits=logits, hidden_states=forward_batch.spec_info.hidden_states))


class NoAttention:
    """The fake attention backend: one per draft step, with no metadata to plan."""

    def __init__(self, steps: int):
        self.attn_backends = [self] * steps

    def get_cuda_graph_seq_len_fill_value(self) -> int:
        return 1

    def init_cuda_graph_state(self, max_bs: int, max_num_tokens: int) -> None:
        pass

    def init_forward_metadata(self, forward_batch) -> None:
        pass

    def init_forward_metadata_in_graph(self, forward_batch) -> None:
        pass

    def init_forward_metadata_out_graph(self, forward_batch, in_capture: bool = False) -> None:
        pass


class OneRankGroup:
    ca_comm = None

    def barrier(self) -> None:
        pass


class EagerBackend:
    """CPU only: stands where the CUDA-graph backend stands and re-runs the captured function."""

    def __init__(self, runner):
        self._fns: Dict[Any, Any] = {}

    @contextlib.contextmanager
    def capture_session(self, stream):
        yield

    def capture_one(self, shape_key, forward_fn, capture_inputs=None, post_warmup_hook=None):
        forward_fn()
        self._fns[shape_key] = forward_fn

    def can_run(self, forward_batch, shape_key) -> bool:
        return shape_key in self._fns

    def replay(self, shape_key, static_forward_batch, **kwargs):
        return self._fns[shape_key]()


@contextlib.contextmanager
def one_rank_graph_capture(stream=None):
    # As sglang's graph_capture(stream=...), for a single rank with no communicators.
    yield SimpleNamespace(stream=stream if stream is not None else
                          (torch.cuda.Stream() if torch.cuda.is_available() else None))


def publish_server_args():
    """A published config for an EAGLE draft with rejection sampling, topk 1, graphs at CAPTURE_BS."""
    from sglang.srt.model_executor.cuda_graph_config import Backend, CudaGraphConfig, PhaseConfig
    from sglang.srt.runtime_context import get_context

    override = get_context().override_server_args(
        speculative_algorithm="EAGLE", speculative_eagle_topk=1, speculative_num_steps=NUM_STEPS,
        speculative_num_draft_tokens=NUM_STEPS + 1, speculative_use_rejection_sampling=True,
        cuda_graph_config=CudaGraphConfig(decode=PhaseConfig(backend=Backend.FULL, bs=list(CAPTURE_BS),
                                                             max_bs=max(CAPTURE_BS))),
        disable_cuda_graph_padding=False, enable_torch_compile=False, enable_profile_cuda_graph=False,
        disable_flashinfer_autotune=True, max_running_requests=max(CAPTURE_BS))
    return override.install()


def build_worker(device: str, model: LookupDraftModel, attention: NoAttention):
    """A draft worker object carrying what the runner and draft_forward read; draft_forward is sglang's."""
    from sglang.srt.distributed.parallel_state_wrapper import ParallelState
    from sglang.srt.runtime_context import get_server_args
    from sglang.srt.speculative.eagle_worker_v2 import EagleDraftWorker
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

    hf_config = SimpleNamespace(architectures=["SpecreproLookupDraft"])
    runner = SimpleNamespace(
        device=device, gpu_id=0, ps=ParallelState.trivial(), spec_algorithm=SpeculativeAlgorithm.EAGLE,
        is_draft_worker=True, model=torch.nn.Module(), tp_group=OneRankGroup(), device_timer=None,
        canary_manager=None, _kernel_warmed_up=True, forward=model.forward, draft_attn_backend=attention,
        req_to_token_pool=SimpleNamespace(size=max(CAPTURE_BS)),
        model_config=SimpleNamespace(vocab_size=VOCAB, spec_hidden_size=HIDDEN, dtype=torch.float32,
                                     hf_config=hf_config))
    worker = SimpleNamespace(
        draft_runner=runner, draft_attn_backend=attention, topk=1, speculative_num_steps=NUM_STEPS,
        speculative_num_draft_tokens=NUM_STEPS + 1, hot_token_id=None, device=device,
        speculative_algorithm=SpeculativeAlgorithm.EAGLE, server_args=get_server_args(),
        _topk1_parents_prealloc=None, _topk1_score_indices_prealloc=None)
    EagleDraftWorker._rebuild_topk1_chain_buffers(worker)
    EagleDraftWorker._init_dsa_index_share_state(worker)
    worker.draft_forward = MethodType(EagleDraftWorker.draft_forward, worker)
    return worker


def replay_batch(rows: int, top_ks: torch.Tensor, device: str, generator: torch.Generator):
    """A decode batch as the scheduler hands it to the draft runner: one verified token per request."""
    from sglang.srt.model_executor.forward_batch_info import CaptureHiddenMode, ForwardBatch, ForwardMode
    from sglang.srt.sampling.sampling_batch_info import SamplingBatchInfo
    from sglang.srt.speculative.eagle_info import EagleDraftInput
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

    first = torch.randint(0, VOCAB, (rows, 1), generator=generator).to(device)
    spec_info = EagleDraftInput(
        topk_p=torch.ones(rows, 1, device=device), topk_index=first,
        draft_probs=torch.nn.functional.one_hot(first.view(-1), VOCAB).float(),
        hidden_states=torch.zeros(rows, HIDDEN, device=device), capture_hidden_mode=CaptureHiddenMode.LAST,
        num_tokens_per_req=1, num_tokens_for_logprob_per_req=1)
    sampling_info = SamplingBatchInfo(
        temperatures=torch.ones(rows, 1, device=device), top_ps=torch.ones(rows, device=device),
        top_ks=top_ks, min_ps=torch.zeros(rows, device=device), is_all_greedy=False, is_any_greedy=False,
        need_top_p_sampling=False, need_top_k_sampling=False, need_min_p_sampling=False, vocab_size=VOCAB)
    seq_lens = torch.full((rows,), 16, dtype=torch.int64, device=device)
    return ForwardBatch(
        forward_mode=ForwardMode.DECODE, batch_size=rows, input_ids=None,
        req_pool_indices=torch.arange(rows, dtype=torch.int64, device=device), seq_lens=seq_lens,
        seq_lens_cpu=seq_lens.cpu(), seq_lens_sum=16 * rows,
        out_cache_loc=torch.arange(rows * NUM_STEPS, dtype=torch.int64, device=device),
        positions=seq_lens.clone(), spec_algorithm=SpeculativeAlgorithm.EAGLE, spec_info=spec_info,
        capture_hidden_mode=CaptureHiddenMode.LAST, sampling_info=sampling_info)


def proposal_misses(out, greedy: torch.Tensor) -> Dict[str, int]:
    """Proposals of steps 2..NUM_STEPS that are not the argmax of their own q, greedy and sampled rows apart."""
    _, _, tokens, draft_probs = out
    proposed = tokens[:, 1:]
    argmax = draft_probs[:, 1:, :].argmax(-1)
    missed = proposed != argmax
    return {"greedy_rows": int(greedy.sum()) * (NUM_STEPS - 1), "greedy_missed": int(missed[greedy].sum()),
            "sampled_rows": int((~greedy).sum()) * (NUM_STEPS - 1), "sampled_missed": int(missed[~greedy].sum())}


def graph_runner_checks(device: str, replays: int) -> Dict[str, Any]:
    from sglang.srt.runtime_context import get_parallel
    from sglang.srt.sampling.sampling_params import TOP_K_ALL
    from sglang.srt.speculative import eagle_draft_cuda_graph_runner as runner_module

    on_gpu = device != "cpu"
    record: Dict[str, Any] = {"runner_file": runner_module.__file__, "capture_bs": CAPTURE_BS,
                              "num_steps": NUM_STEPS, "vocab": VOCAB,
                              "graph_backend": "sglang FULL (torch.cuda.CUDAGraph)" if on_gpu
                              else "EagerBackend (CPU: no graph)"}
    publish_server_args()
    model = LookupDraftModel(device)
    attention = NoAttention(NUM_STEPS)
    worker = build_worker(device, model, attention)
    patches: List[Any] = [
        patch("sglang.srt.model_executor.runner.decode_cuda_graph_runner.graph_capture", one_rank_graph_capture),
        patch("sglang.srt.model_executor.runner.decode_cuda_graph_runner.get_available_gpu_memory",
              lambda *a, **k: 0.0),
        get_parallel().override(attn_cp_size=1, tp_rank=0),
    ]
    if not on_gpu:
        patches += [patch.object(runner_module, "resolve_decode_backend", EagerBackend),
                    patch("sglang.srt.model_executor.runner.decode_cuda_graph_runner."
                          "get_or_create_global_graph_capture_stream", lambda: None)]
    started = time.perf_counter()
    with contextlib.ExitStack() as stack:
        for p in patches:
            stack.enter_context(p)
        runner = runner_module.EAGLEDraftCudaGraphRunner(worker, draft_attn_backend=attention,
                                                         speculative_num_steps=NUM_STEPS)
        record["init_and_capture_seconds"] = round(time.perf_counter() - started, 2)
        model.capturing = False
        buf = getattr(runner, "top_ks", None)
        record["buffer"] = None if buf is None else {
            "device": str(buf.device), "dtype": str(buf.dtype).replace("torch.", ""), "size": buf.numel(),
            "all_top_k_all": bool((buf == TOP_K_ALL).all()), "data_ptr": buf.data_ptr()}
        record["captured"] = {str(bs): dict(seen, is_buffer_view=buf is not None and seen["data_ptr"] == buf.data_ptr())
                              for bs, seen in sorted(model.captured.items())}
        record["captured_sizes"] = sorted(model.captured)
        generator = torch.Generator(device="cpu").manual_seed(3)
        torch.manual_seed(3)
        cases = []
        for rows, padded_to in REPLAY_SHAPES:
            # Even rows greedy (top_k 1, as SamplingParams makes temperature 0), odd rows TOP_K_ALL.
            greedy = (torch.arange(rows) % 2 == 0).to(device)
            top_ks = torch.where(greedy, 1, TOP_K_ALL).to(torch.int32)
            totals = {"greedy_rows": 0, "greedy_missed": 0, "sampled_rows": 0, "sampled_missed": 0}
            t0 = time.perf_counter()
            for _ in range(replays):
                batch = replay_batch(rows, top_ks, device, generator)
                assert runner.can_run_graph(batch)
                for key, value in proposal_misses(runner.execute(batch), greedy).items():
                    totals[key] += value
            if on_gpu:
                torch.cuda.synchronize()
            case = {"rows": rows, "padded_to": runner.bs, "expected_padded_to": padded_to, "replays": replays,
                    "seconds": round(time.perf_counter() - t0, 2), **totals}
            if buf is not None:
                case["buffer_after"] = buf.tolist()
            cases.append(case)
        record["replays"] = cases
    return record
