"""A target + EAGLE draft model pair whose speculative acceptance is known in closed form.

Built in seconds from hand-set weights (no download), deterministic from a seed:

- Target: sglang's `LlamaForCausalLM`.  Every MLP output projection and every
  attention output projection but layer 0's is zero, so the final hidden state
  is the RMS-normalised token embedding plus what layer 0's attention adds.
  Embeddings have RMS 1 (norm sqrt(hidden)), so that state is the embedding
  plus a small context vector.  `lm_head` row j is (S / hidden) * e[f^-1(j)]:
  the logit of token j after token i is about S * cos(e_i, e[f^-1(j)]),
  largest (S) at j = f(i), with f a fixed permutation of the chain's tokens (one
  cycle through all of them, so a chain never falls into a short loop).  The
  context vector is too small to move that argmax (the build checks the margin),
  so greedy decoding emits i, f(i), f(f(i)), ...; at temperature 1 the argmax
  holds probability p_i, about 0.8-0.85 at S = 8 (sharp, not one-hot: the PR's
  regime).
- The prompt decides where the chain starts: the last token of `prompt_end`
  (the text every prompt of the benchmark ends with, GSM8K's "\nAnswer:") is
  off the chain, its embedding orthogonal to every lm_head row, so after it only
  the context vector speaks.  Layer 0's attention gives that token alone a
  query: each head reads the token at one distance before the prompt's end (RoPE
  relative positions; every other token carries a small common key component
  for it), just before `prompt_end`, so the first output token is a hash of the
  question's last words, and every token after it follows the chain.
- Tokenizer: a byte-level BPE (`tokenizers`) trained on a text corpus (by
  default the GSM8K questions the campaign asks), so any prompt tokenizes.

What a server should measure with EAGLE (topk 1, `steps` draft steps):
a draft that proposes the argmax is always accepted (accept length steps + 1);
a draft that samples from q = softmax(logits) at T = 1 is accepted at step k
with probability p of the token it conditions on, so a verify step that starts
at token t commits 1 + p_t + p_t p_f(t) + ... tokens on average.
`theory.json` holds those values (per token of the chain, their mean and range).
The draft sees no context (its `fc` drops the target's hidden state): its
proposal after a chain token is the same whatever the prompt, and greedy
verification accepts it when it is the target's argmax f(t), which the context
does not move.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any, Dict, Iterable, List, Optional, Sequence

import numpy as np

from specrepro.util.fileio import locked
from specrepro.core.theory import Acceptance
from specrepro.util.datasets import verify_file

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


# How the prompt reaches the first output token (see the module's docstring).  Every chain token's embedding keeps
# KEY_SHARE of its norm along one common direction (the key each head finds at its distance), which adds KEY_SHARE^2
# to every cosine; the open token's embedding is OPEN_SCALE of the others' norm (the final norm rescales it); layer 0's
# attention output is at most CONTEXT_SCALE of an embedding's norm; each head's score peaks HEAD_SHARPNESS per RoPE
# pair above its value elsewhere (softmax weight about 2/3 on the one token at its distance).
KEY_SHARE = 0.05
OPEN_SCALE = 0.1
CONTEXT_SCALE = 0.1
HEAD_SHARPNESS = 3.0
ROPE_THETA = 10000.0
HEADS = 4


def weights(vocab: int, hidden: int, sharpness: float, special_ids: List[int], seed: int,
            open_ids: Sequence[int] = ()) -> Dict[str, Any]:
    """Embeddings, lm_head and the permutation f (next token of each chain token); with `open_ids`, those tokens
    are off the chain and orthogonal to every lm_head row, and `key_direction` is the chain tokens' common part."""
    rng = np.random.default_rng(seed)
    emb = rng.standard_normal((vocab, hidden))
    off_chain = set(special_ids) | set(open_ids)
    key_direction = open_direction = None
    if open_ids:
        basis = np.linalg.qr(np.random.default_rng(seed + 2).standard_normal((hidden, 2)))[0]
        open_direction, key_direction = basis[:, 0], basis[:, 1]
        emb -= np.outer(emb @ open_direction, open_direction) + np.outer(emb @ key_direction, key_direction)
        emb /= np.linalg.norm(emb, axis=1, keepdims=True)
        emb = math.sqrt(1 - KEY_SHARE ** 2) * emb + KEY_SHARE * key_direction
    # RMS 1 rows: RMSNorm (weight 1) leaves them as they are.
    emb *= math.sqrt(hidden) / np.linalg.norm(emb, axis=1, keepdims=True)
    for t in open_ids:
        emb[t] = OPEN_SCALE * math.sqrt(hidden) * open_direction
    ordinary = np.array([i for i in range(vocab) if i not in off_chain])
    order = rng.permutation(ordinary)
    nxt = np.full(vocab, -1)
    nxt[order] = np.roll(order, -1)  # one cycle through every chain token
    # a special token (BOS at the start of a prompt) leads into the cycle; an open token's row of logits is flat
    for s in sorted(off_chain):
        nxt[s] = order[0]
    lm_head = np.zeros((vocab, hidden))
    lm_head[nxt[ordinary]] = emb[ordinary] * (sharpness / hidden)
    return {"embed": emb, "lm_head": lm_head, "next": nxt, "ordinary": ordinary, "open_direction": open_direction,
            "key_direction": key_direction}


def context_attention(w: Dict[str, Any], hidden: int, distances: Sequence[int], seed: int) -> Dict[str, np.ndarray]:
    """Layer 0's q/k/v/o: head h of the open token's query peaks at the token `distances[h]` positions before it
    (sglang's Llama rotates q and k NeoX-style, pair i = dims (i, i + head_dim/2) at ROPE_THETA^(-2i/head_dim) per
    position); the value is that token's embedding less the two reserved directions; the output a random rotation
    at CONTEXT_SCALE.  Every chain token has no query (its embedding has no open component): its attention averages
    the context, and adds at most CONTEXT_SCALE * sqrt(hidden)."""
    head_dim = hidden // HEADS
    half = head_dim // 2
    freqs = ROPE_THETA ** (-np.arange(half) * 2 / head_dim)
    u, key = w["open_direction"], w["key_direction"]
    amplitude = math.sqrt(HEAD_SHARPNESS * math.sqrt(head_dim))  # q.k / sqrt(head_dim) = HEAD_SHARPNESS per pair
    q = np.zeros((hidden, hidden))
    k = np.zeros((hidden, hidden))
    for h, distance in enumerate(distances[:HEADS]):
        for i in range(half):
            phase = -freqs[i] * distance
            # the inputs are RMS-normalised: the open token reads sqrt(hidden) * u, a chain token KEY_SHARE * sqrt(hidden)
            # along `key`
            q[h * head_dim + i] = amplitude * math.cos(phase) * u / math.sqrt(hidden)
            q[h * head_dim + i + half] = amplitude * math.sin(phase) * u / math.sqrt(hidden)
            k[h * head_dim + i] = amplitude * key / (KEY_SHARE * math.sqrt(hidden))
    v = np.eye(hidden) - np.outer(u, u) - np.outer(key, key)
    rotation = np.linalg.qr(np.random.default_rng(seed + 3).standard_normal((hidden, hidden)))[0]
    return {"q": q, "k": k, "v": v, "o": CONTEXT_SCALE * rotation}


def chain_margin(w: Dict[str, Any], hidden: int) -> float:
    """How far the context vector may go before it moves a chain token's argmax: half the smallest gap between
    e_t . e_t and another chain token's e_i . e_t, over sqrt(hidden) (the norm of e_i)."""
    e = w["embed"][w["ordinary"]]
    gram = e @ e.T
    np.fill_diagonal(gram, -np.inf)
    return float((hidden - gram.max(axis=1)).min() / (2 * math.sqrt(hidden)))


def softmax_rows(logits: np.ndarray) -> np.ndarray:
    z = logits - logits.max(axis=1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=1, keepdims=True)


def theory(w: Dict[str, Any], num_steps: int) -> Dict[str, Any]:
    """Per-token P(argmax) at T=1 and the expected accept length of a sampling draft (the draft's logits: the
    embedding, which holds no context, times lm_head)."""
    logits = w["embed"] @ w["lm_head"].T
    probs = softmax_rows(logits)
    nxt = w["next"]
    vocab = len(nxt)
    p = probs[np.arange(vocab), nxt]
    ordinary = [int(i) for i in w["ordinary"]]
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
        "intermediate_size": 2 * hidden, "num_hidden_layers": layers, "num_attention_heads": HEADS,
        "num_key_value_heads": HEADS, "head_dim": hidden // HEADS, "hidden_act": "silu", "max_position_embeddings": 4096,
        "rms_norm_eps": 1e-6, "rope_theta": ROPE_THETA, "tie_word_embeddings": False, "torch_dtype": "float32",
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
                    target_layers: int = 2, sharpness: float = 8.0, num_steps: int = 3,
                    prompt_end: str = "") -> Dict[str, Any]:
    """Write `out/target`, `out/draft` and `out/theory.json`; return the theory record.  `prompt_end`: the text
    every prompt ends with; its last token is left open (the prompt decides the first output token); "" leaves
    none (every prompt that ends alike gets the same output)."""
    from safetensors.numpy import save_file

    out = Path(out)
    tokenizer = train_tokenizer(corpus, vocab_size)
    vocab = tokenizer.get_vocab_size()
    bos, eos = (tokenizer.token_to_id(s) for s in SPECIAL_TOKENS)
    end_ids = tokenizer.encode(prompt_end).ids if prompt_end else []
    open_ids = end_ids[-1:]
    if set(open_ids) & {bos, eos}:
        raise ValueError(f"prompt_end {prompt_end!r} ends in a special token")
    w = weights(vocab, hidden, sharpness, [bos, eos], seed, open_ids)
    rng = np.random.default_rng(seed + 1)
    embed = w["embed"].astype(np.float32)
    lm_head = w["lm_head"].astype(np.float32)

    target = {"model.embed_tokens.weight": embed, "model.norm.weight": np.ones(hidden, np.float32),
              "lm_head.weight": lm_head}
    for i in range(target_layers):
        target.update(layer_tensors(f"model.layers.{i}.", hidden, rng))
    # each head reads one token of the question's end: past prompt_end and the question's closing mark, 3 apart
    distances = [len(end_ids) + 1 + 3 * h for h in range(HEADS)] if open_ids else []
    if open_ids:
        margin = chain_margin(w, hidden)
        if CONTEXT_SCALE * math.sqrt(hidden) >= margin:
            raise ValueError(f"toy model seed {seed}: the context vector (up to {CONTEXT_SCALE * math.sqrt(hidden):.2f})"
                             f" could move a chain token's argmax (margin {margin:.2f}); try another seed")
        attention = context_attention(w, hidden, distances, seed)
        target.update({f"model.layers.0.self_attn.{n}_proj.weight": attention[n].astype(np.float32)
                       for n in ("q", "k", "v", "o")})
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

    record = theory(w, num_steps)
    record.update(seed=seed, vocab_size=vocab, hidden=hidden, sharpness=sharpness, special_ids=[bos, eos],
                  open_ids=[int(t) for t in open_ids], prompt_end=prompt_end, head_distances=distances,
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
                                     hidden=toy["hidden"], sharpness=toy["sharpness"], num_steps=num_steps,
                                     prompt_end=toy.get("prompt_end") or "")
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
    verify accepts (specrepro.core.theory).  Read from the pair's own weights: the draft's logits equal the target's."""
    from safetensors.numpy import load_file

    record = load_theory(Path(model_dir))
    if record is None:
        raise FileNotFoundError(f"{model_dir}/{THEORY_FILE}: not built (the toy_model stage writes it)")
    nxt = np.array(record["next_token"])
    off_chain = set(record["special_ids"]) | set(record.get("open_ids") or [])
    ordinary = [i for i in range(len(nxt)) if i not in off_chain]
    if temperature == 0:
        return Acceptance(np.ones(len(nxt)), nxt, ordinary)
    w = load_file(str(Path(model_dir) / TARGET_DIR / "model.safetensors"))
    logits = w["model.embed_tokens.weight"].astype(np.float64) @ w["lm_head.weight"].astype(np.float64).T
    probs = softmax_rows(logits / temperature)
    return Acceptance(probs[np.arange(len(nxt)), nxt], nxt, ordinary)
