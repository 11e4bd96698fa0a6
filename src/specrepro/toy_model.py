"""A target + EAGLE draft model pair whose speculative acceptance is known in closed form.

Built in seconds from hand-set weights (no download), deterministic from a seed:

- Target: sglang's `LlamaForCausalLM`.  Every attention and MLP output
  projection is zero, so the final hidden state is the RMS-normalised token
  embedding.  Embeddings have RMS 1 (norm sqrt(hidden)), so that state *is*
  the embedding.  `lm_head` row j is (S / hidden) * e[f^-1(j)]: the logit of
  token j after token i is S * cos(e_i, e[f^-1(j)]), largest (S) at j = f(i),
  with f a fixed permutation of the ordinary tokens (one cycle through all of
  them, so a chain never falls into a short loop).  Greedy decoding therefore
  emits i, f(i), f(f(i)), ...; at temperature 1 the argmax holds probability
  p_i, about 0.8-0.85 at S = 8 (sharp, not one-hot: the PR's regime).
- Draft: sglang's `LlamaForCausalLMEagle`, one zeroed layer; `fc` keeps the
  token-embedding half of its input and drops the target hidden state, and
  it has no final norm, so its logits after token i equal the target's.
- Tokenizer: a byte-level BPE (`tokenizers`) trained on a text corpus (by
  default the GSM8K questions the campaign asks), so any prompt tokenizes.

What a server should measure with EAGLE (topk 1, `steps` draft steps):
a draft that proposes the argmax is always accepted (accept length steps + 1);
a draft that samples from q = softmax(logits) at T = 1 is accepted at step k
with probability p of the token it conditions on, so a verify step that starts
at token t commits 1 + p_t + p_t p_f(t) + ... tokens on average.
`theory.json` holds those values (per token, their mean and range).
"""

from __future__ import annotations

import json
import math
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any, Dict, Iterable, List, Optional

import numpy as np

from specrepro.fileio import locked

SPECIAL_TOKENS = ["<|begin_of_text|>", "<|end_of_text|>"]
THEORY_FILE = "theory.json"
TARGET_DIR = "target"
DRAFT_DIR = "draft"


def train_tokenizer(texts: Iterable[str], vocab_size: int):
    """A byte-level BPE over `texts` (deterministic for the same texts and size)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=SPECIAL_TOKENS, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tokenizer.train_from_iterator(texts, trainer=trainer)
    return tokenizer


def weights(vocab: int, hidden: int, sharpness: float, special_ids: List[int], seed: int) -> Dict[str, Any]:
    """Embeddings, lm_head and the permutation f (next token of each ordinary token)."""
    rng = np.random.default_rng(seed)
    emb = rng.standard_normal((vocab, hidden))
    # RMS 1 rows: RMSNorm (weight 1) leaves them as they are.
    emb *= math.sqrt(hidden) / np.linalg.norm(emb, axis=1, keepdims=True)
    ordinary = np.array([i for i in range(vocab) if i not in set(special_ids)])
    order = rng.permutation(ordinary)
    nxt = np.full(vocab, -1)
    nxt[order] = np.roll(order, -1)  # one cycle through every ordinary token
    # a special token (BOS at the start of a prompt) leads into the cycle
    for s in special_ids:
        nxt[s] = order[0]
    lm_head = np.zeros((vocab, hidden))
    lm_head[nxt[ordinary]] = emb[ordinary] * (sharpness / hidden)
    return {"embed": emb, "lm_head": lm_head, "next": nxt}


def softmax_rows(logits: np.ndarray) -> np.ndarray:
    z = logits - logits.max(axis=1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=1, keepdims=True)


def theory(w: Dict[str, Any], num_steps: int, special_ids: List[int]) -> Dict[str, Any]:
    """Per-token P(argmax) at T=1 and the expected accept length of a sampling draft."""
    logits = w["embed"] @ w["lm_head"].T  # the final hidden state is the embedding
    probs = softmax_rows(logits)
    nxt = w["next"]
    vocab = len(nxt)
    p = probs[np.arange(vocab), nxt]
    ordinary = [i for i in range(vocab) if i not in set(special_ids)]
    expected = {}
    for t in ordinary:
        acc, run, cur = 1.0, 1.0, t
        for _ in range(num_steps):
            run *= p[cur]
            acc += run
            cur = nxt[cur]
        expected[t] = acc
    values = np.array(list(expected.values()))
    p_ord = p[ordinary]
    return {
        "num_steps": num_steps,
        "argmax_accept_length": float(num_steps + 1),
        "p_argmax": {"mean": float(p_ord.mean()), "min": float(p_ord.min()), "max": float(p_ord.max())},
        # 1 + p + p^2 + ... with p the mean P(argmax): the closed form the note quotes
        "sampled_accept_length_closed_form": float(sum(p_ord.mean() ** k for k in range(num_steps + 1))),
        "sampled_accept_length": {"mean": float(values.mean()), "min": float(values.min()),
                                  "max": float(values.max()),
                                  "p05": float(np.percentile(values, 5)), "p95": float(np.percentile(values, 95))},
        "p_per_token": [float(x) for x in p],
        "next_token": [int(x) for x in nxt],
    }


def llama_config(vocab: int, hidden: int, layers: int, bos: int, eos: int, architecture: str) -> Dict[str, Any]:
    return {
        "architectures": [architecture], "model_type": "llama", "vocab_size": vocab, "hidden_size": hidden,
        "intermediate_size": 2 * hidden, "num_hidden_layers": layers, "num_attention_heads": 4,
        "num_key_value_heads": 4, "head_dim": hidden // 4, "hidden_act": "silu", "max_position_embeddings": 4096,
        "rms_norm_eps": 1e-6, "rope_theta": 10000.0, "tie_word_embeddings": False, "torch_dtype": "float32",
        "bos_token_id": bos, "eos_token_id": eos, "attention_bias": False, "mlp_bias": False,
    }


def layer_tensors(prefix: str, hidden: int, rng: np.random.Generator, input_norm: bool = True) -> Dict[str, np.ndarray]:
    """One decoder layer whose attention and MLP add nothing (their output projections are zero).

    q/k/v and gate/up are small random matrices, so the attention kernels do run
    on real numbers; what they compute is multiplied by zero.
    """
    def small(*shape):
        return (rng.standard_normal(shape) * 0.02).astype(np.float32)

    t = {f"{prefix}self_attn.{n}_proj.weight": small(hidden, hidden) for n in ("q", "k", "v")}
    t[f"{prefix}self_attn.o_proj.weight"] = np.zeros((hidden, hidden), np.float32)
    t[f"{prefix}mlp.gate_proj.weight"] = small(2 * hidden, hidden)
    t[f"{prefix}mlp.up_proj.weight"] = small(2 * hidden, hidden)
    t[f"{prefix}mlp.down_proj.weight"] = np.zeros((hidden, 2 * hidden), np.float32)
    t[f"{prefix}post_attention_layernorm.weight"] = np.ones(hidden, np.float32)
    if input_norm:
        t[f"{prefix}input_layernorm.weight"] = np.ones(hidden, np.float32)
    return t


def build_toy_model(out: Path, corpus: Iterable[str], seed: int = 0, vocab_size: int = 361, hidden: int = 64,
                    target_layers: int = 2, sharpness: float = 8.0, num_steps: int = 3) -> Dict[str, Any]:
    """Write `out/target`, `out/draft` and `out/theory.json`; return the theory record."""
    from safetensors.numpy import save_file

    out = Path(out)
    tokenizer = train_tokenizer(corpus, vocab_size)
    vocab = tokenizer.get_vocab_size()
    bos, eos = (tokenizer.token_to_id(s) for s in SPECIAL_TOKENS)
    w = weights(vocab, hidden, sharpness, [bos, eos], seed)
    rng = np.random.default_rng(seed + 1)
    embed = w["embed"].astype(np.float32)
    lm_head = w["lm_head"].astype(np.float32)

    target = {"model.embed_tokens.weight": embed, "model.norm.weight": np.ones(hidden, np.float32),
              "lm_head.weight": lm_head}
    for i in range(target_layers):
        target.update(layer_tensors(f"model.layers.{i}.", hidden, rng))
    fc = np.zeros((hidden, 2 * hidden), np.float32)
    fc[:, :hidden] = np.eye(hidden, dtype=np.float32)  # keep embed(token), drop the target hidden state
    # sglang's EAGLE draft checkpoint layout: names without the `model.` prefix; layer 0 has no input norm
    draft = {"embed_tokens.weight": embed, "fc.weight": fc, "fc.bias": np.zeros(hidden, np.float32),
             "lm_head.weight": lm_head, **layer_tensors("layers.0.", hidden, rng, input_norm=False)}

    for name, tensors, layers, arch in ((TARGET_DIR, target, target_layers, "LlamaForCausalLM"),
                                        (DRAFT_DIR, draft, 1, "LlamaForCausalLMEagle")):
        d = out / name
        d.mkdir(parents=True, exist_ok=True)
        save_file({k: np.ascontiguousarray(v) for k, v in tensors.items()}, str(d / "model.safetensors"),
                  metadata={"format": "pt"})
        (d / "config.json").write_text(json.dumps(llama_config(vocab, hidden, layers, bos, eos, arch), indent=1))
        tokenizer.save(str(d / "tokenizer.json"))
        (d / "tokenizer_config.json").write_text(json.dumps({
            "tokenizer_class": "PreTrainedTokenizerFast", "bos_token": SPECIAL_TOKENS[0],
            "eos_token": SPECIAL_TOKENS[1], "model_max_length": 4096, "clean_up_tokenization_spaces": False}, indent=1))
        (d / "generation_config.json").write_text(json.dumps({"bos_token_id": bos, "eos_token_id": eos}))

    record = theory(w, num_steps, [bos, eos])
    record.update(seed=seed, vocab_size=vocab, hidden=hidden, sharpness=sharpness, special_ids=[bos, eos],
                  target=str(out / TARGET_DIR), draft=str(out / DRAFT_DIR))
    (out / THEORY_FILE).write_text(json.dumps(record, indent=1))
    return record


def corpus_from_jsonl(path: Path) -> List[str]:
    """The questions and answers of a GSM8K-style JSONL file."""
    texts = []
    with open(path) as fh:
        for line in fh:
            if line.strip():
                item = json.loads(line)
                texts += [item.get("question", ""), item.get("answer", "")]
    return texts


def expected_chain(theory_record: Dict[str, Any], start: int, length: int) -> List[int]:
    """The greedy output after token `start`: f(start), f(f(start)), ..."""
    nxt = theory_record["next_token"]
    out, cur = [], start
    for _ in range(length):
        cur = nxt[cur]
        out.append(cur)
    return out


def load_theory(model_dir: Path) -> Optional[Dict[str, Any]]:
    path = Path(model_dir) / THEORY_FILE
    return json.loads(path.read_text()) if path.is_file() else None


def toy_model_stage(toy: Dict[str, Any], num_steps: int, corpus: Dict[str, Any], log) -> Dict[str, Any]:
    """The DAG's toy_model job: the corpus the datasets stage resolved (verified again here), then the pair built."""
    from specrepro.datasets import verify_file

    path = verify_file(corpus, f"data.{toy['corpus']}")
    with open(path) as fh:
        items = [json.loads(line) for line in fh if line.strip()]
    texts = [t for item in items for t in (item.get("question", ""), item.get("answer", ""))]
    print(f"toy model: tokenizer corpus {path} ({len(items)} items, sha256 verified)", file=log)
    out = Path(toy["dir"])
    # Another campaign's server may be loading the pair from this folder: build it beside the folder, then move it
    # in file by file (each move atomic, the bytes the same for the same settings), one builder at a time.
    out.parent.mkdir(parents=True, exist_ok=True)
    with locked(out.parent / f".{out.name}.lock"):
        staging = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
        try:
            record = build_toy_model(staging, texts, seed=toy["seed"], vocab_size=toy["vocab_size"],
                                     hidden=toy["hidden"], sharpness=toy["sharpness"], num_steps=num_steps)
            record.update(target=str(out / TARGET_DIR), draft=str(out / DRAFT_DIR))
            (staging / THEORY_FILE).write_text(json.dumps(record, indent=1))
            for f in sorted(p for p in staging.rglob("*") if p.is_file()):
                dest = out / f.relative_to(staging)
                dest.parent.mkdir(parents=True, exist_ok=True)
                os.replace(f, dest)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    s = record["sampled_accept_length"]
    print(f"toy model in {toy['dir']}: vocab {record['vocab_size']}, P(argmax) at T=1 "
          f"{record['p_argmax']['mean']:.3f} ({record['p_argmax']['min']:.3f}-{record['p_argmax']['max']:.3f}); "
          f"expected accept length: argmax draft {record['argmax_accept_length']:.2f}, sampling draft "
          f"{s['mean']:.3f} ({s['min']:.3f}-{s['max']:.3f})", file=log, flush=True)
    return record


def acceptance(model_dir: Path, temperature: float):
    """P(the draft's proposal at `temperature` x T is the target's argmax), per token it follows: what a greedy
    verify accepts (specrepro.theory).  Read from the pair's own weights: the draft's logits equal the target's."""
    from safetensors.numpy import load_file

    from specrepro.theory import Acceptance

    record = load_theory(Path(model_dir))
    if record is None:
        raise FileNotFoundError(f"{model_dir}/{THEORY_FILE}: not built (the toy_model stage writes it)")
    nxt = np.array(record["next_token"])
    ordinary = [i for i in range(len(nxt)) if i not in set(record["special_ids"])]
    if temperature == 0:
        return Acceptance(np.ones(len(nxt)), nxt, ordinary)
    w = load_file(str(Path(model_dir) / TARGET_DIR / "model.safetensors"))
    logits = w["model.embed_tokens.weight"].astype(np.float64) @ w["lm_head.weight"].astype(np.float64).T
    probs = softmax_rows(logits / temperature)
    return Acceptance(probs[np.arange(len(nxt)), nxt], nxt, ordinary)
