"""The patch executed on a GPU, inside the image an arm runs: the draft proposal and its graph.

Runs with the image's own python, torch and sglang, and no specrepro import
(the same file probes the patched and the unpatched image); specrepro's
`gpu_check.judge` reads the record it writes.  torch's `cuda` API drives HIP
graphs on ROCm the same way, so nothing here is CUDA-only.

1. eager, on the device: greedy rows (temperature rewritten to 1.0, top_k 1)
   must propose the argmax; sampled rows (TOP_K_ALL) must draw from q and
   equal the old call's draws under the same seed; a host-side top_ks next to
   device probabilities must raise.
2. graph: the proposal captured once over static buffers (logits,
   temperatures, top_ks), buffers refilled and replayed: with the real top_ks
   copied into the buffer greedy rows never miss the argmax; with the buffer
   left at TOP_K_ALL (the producer half missing) they sample - the silent loss.
3. sglang's own EAGLEDraftCudaGraphRunner and EagleDraftWorker.draft_forward
   (probe_graph_runner.py): the top_ks buffer after init, the view of it each
   captured batch size holds, and greedy rows across replays, padded ones too.
   Without a GPU the runner is driven through an eager stand-in for the graph
   backend; the graph itself is then not executed.
4. the graph runner's source in this image: the top_ks device buffer, its
   capture and its replay copy (read from the file the image will import).

    python probe_gpu.py --out record.json [--greedy-rows N] [--replays N] [--runner-replays N]
"""

from __future__ import annotations

import argparse
import inspect
import json
import re
import sys
import time
import traceback
import warnings

warnings.filterwarnings("ignore")

import torch  # noqa: E402

VOCAB = 512
SAMPLED_VOCAB = 8
SAMPLED_DRAWS = 200_000


def device_of() -> str:
    return "cuda" if torch.cuda.is_available() else "cpu"


def sharp_logits(rows: int, vocab: int, device: str, generator=None) -> torch.Tensor:
    # Confident but not degenerate, like a draft head: a draw misses the argmax ~15-30% of the time.
    logits = torch.randn(rows, vocab, device=device, generator=generator) * 2.0
    top = torch.randint(0, vocab, (rows,), device=device, generator=generator)
    logits[torch.arange(rows, device=device), top] += 10.0
    return logits


def accepts_top_ks(fn) -> bool:
    return "top_ks" in inspect.signature(fn).parameters


def eager_checks(fn, top_k_all: int, device: str, greedy_rows: int) -> dict:
    patched = accepts_top_ks(fn)
    out: dict = {"accepts_top_ks": patched}
    torch.manual_seed(1)
    misses = rows = 0
    for _ in range(max(1, greedy_rows // 256)):
        logits = sharp_logits(256, VOCAB, device)
        temps = torch.ones(256, 1, device=device)
        ones = torch.ones(256, dtype=torch.int32, device=device)
        probs, _, index = fn(logits, temps, ones) if patched else fn(logits, temps)
        misses += int((index.view(-1) != probs.argmax(-1)).sum())
        rows += 256
    out["greedy"] = {"rows": rows, "non_argmax": misses}
    # One sampled row drawn many times: counts against q; and the old call on the same seed.
    g = torch.Generator(device="cpu").manual_seed(7)
    row = torch.randn(1, SAMPLED_VOCAB, generator=g).to(device)
    logits = row.expand(SAMPLED_DRAWS, SAMPLED_VOCAB).contiguous()
    temps = torch.ones(SAMPLED_DRAWS, 1, device=device)
    torch.manual_seed(11)
    if patched:
        all_k = torch.full((SAMPLED_DRAWS,), top_k_all, dtype=torch.int32, device=device)
        probs, _, index = fn(logits, temps, all_k)
    else:
        probs, _, index = fn(logits, temps)
    torch.manual_seed(11)
    _, _, index_old = fn(logits, temps)
    out["sampled"] = {"q": probs[0].tolist(), "counts": torch.bincount(index.view(-1), minlength=SAMPLED_VOCAB).tolist(),
                      "draws": SAMPLED_DRAWS, "same_as_old_call": bool(torch.equal(index, index_old))}
    if patched and device != "cpu":
        try:
            fn(sharp_logits(2, 16, device), torch.ones(2, 1, device=device), torch.ones(2, dtype=torch.int32))
            out["host_top_ks"] = {"raised": None}
        except AssertionError:
            out["host_top_ks"] = {"raised": "AssertionError"}
        except Exception as exc:  # another failure is recorded as such; the judge fails it
            out["host_top_ks"] = {"raised": type(exc).__name__, "message": str(exc)[:300]}
    return out


def graph_case(fn, top_k_all: int, device: str, bs: int, replays: int, fill_real: bool) -> dict:
    """Capture the proposal once, then refill the static buffers and replay."""
    patched = accepts_top_ks(fn)
    static_logits = torch.zeros(bs, VOCAB, device=device)
    static_temps = torch.ones(bs, 1, device=device)
    static_top_ks = torch.full((bs,), top_k_all, dtype=torch.int32, device=device)
    greedy = torch.ones(bs, dtype=torch.int32, device=device)

    def call():
        return fn(static_logits, static_temps, static_top_ks) if patched else fn(static_logits, static_temps)

    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(3):
            call()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        probs, _, index = call()
    misses = 0
    start = time.perf_counter()
    for _ in range(replays):
        static_logits.copy_(sharp_logits(bs, VOCAB, device))
        if fill_real:
            static_top_ks.copy_(greedy)  # what the runner's replay copies in: these requests are greedy
        graph.replay()
        misses += int((index.view(-1) != probs.argmax(-1)).sum())
    torch.cuda.synchronize()
    return {"rows": bs * replays, "non_argmax": misses, "batch_size": bs, "replays": replays,
            "top_ks_buffer": "refilled with the real top_ks (1)" if fill_real else "left at TOP_K_ALL",
            "seconds": round(time.perf_counter() - start, 3)}


def runner_source_checks(runner_file: str) -> dict:
    src = open(runner_file).read()
    return {
        "file": runner_file,
        "buffer_top_k_all": bool(re.search(r"self\.top_ks\s*=\s*torch\.full\(\s*\(self\.max_bs,\)\s*,\s*TOP_K_ALL", src)),
        "capture_uses_buffer": bool(re.search(r"top_ks\s*=\s*self\.top_ks\[:\s*num_seqs\s*\]", src)),
        "placeholder_left": bool(re.search(r"top_ks\s*=\s*torch\.full\(\(num_seqs,\),\s*-1", src)),
        "replay_copies": bool(re.search(r"self\.top_ks\[:\s*raw_bs\s*\]\.copy_\(", src)),
    }


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--greedy-rows", type=int, default=4096)
    parser.add_argument("--replays", type=int, default=2000)
    parser.add_argument("--runner-replays", type=int, default=1000)
    args = parser.parse_args()
    from sglang.srt.sampling.sampling_params import TOP_K_ALL
    from sglang.srt.speculative import spec_utils

    device = device_of()
    fn = spec_utils.sample_draft_proposal
    record = {"device": device, "torch": torch.__version__, "hip": getattr(torch.version, "hip", None),
              "cuda": torch.version.cuda, "sglang_file": spec_utils.__file__, "top_k_all": TOP_K_ALL,
              "gpu_name": torch.cuda.get_device_name(0) if device == "cuda" else None}
    record["eager"] = eager_checks(fn, TOP_K_ALL, device, args.greedy_rows)
    if device == "cuda":
        record["graph"] = {
            "refilled": graph_case(fn, TOP_K_ALL, device, 8, args.replays, fill_real=True),
            "producer_missing": graph_case(fn, TOP_K_ALL, device, 8, args.replays, fill_real=False),
        }
    else:
        record["graph"] = None  # needs a GPU
    runner = spec_utils.__file__.replace("spec_utils.py", "eagle_draft_cuda_graph_runner.py")
    record["runner_source"] = runner_source_checks(runner)
    # Last: it publishes a process-wide sglang config.  A failure is recorded, not raised:
    # an unpatched runner under a patched worker fails here at capture, as its server would.
    try:
        from probe_graph_runner import graph_runner_checks

        record["graph_runner"] = graph_runner_checks(device, args.runner_replays)
    except Exception as exc:
        record["graph_runner"] = {"error": f"{type(exc).__name__}: {exc}"[:2000],
                                  "traceback": traceback.format_exc()[-4000:]}
    with open(args.out, "w") as fh:
        json.dump(record, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
