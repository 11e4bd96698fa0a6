"""What theory predicts for a draft rule (specrepro.core.theory), held to known numbers, to an independent computation
(the toy model's own theory.json) and to simulated verify steps whose truth is known."""

from __future__ import annotations

import numpy as np
import pytest

from conftest import SHARED_GSM8K
from specrepro.core.theory import (Acceptance, TheoryError, acceptance_for, describe, predict, predictions, rule_problems,
                              step_lengths)
from specrepro.stages.toy_model import acceptance, build_toy_model, corpus_from_jsonl

TOY = {"name": "toy_lookup", "toy": {"dir": "x"}, "server_args": {"speculative_num_steps": 3}}


@pytest.fixture(scope="module")
def toy(tmp_path_factory):
    """The toy_lookup recipe (conf/model/toy_lookup.yaml): the prompt's "\nAnswer:" left open."""
    out = tmp_path_factory.mktemp("toy")
    return dict(build_toy_model(out, corpus_from_jsonl(SHARED_GSM8K / "test.jsonl"), prompt_end="\nAnswer:"), dir=out)


def test_known_numbers_with_a_constant_acceptance():
    p = Acceptance.constant(0.8)
    one = Acceptance.constant(1.0)
    argmax = predict({"draft_temperature": 0}, 3, one, one)
    assert argmax["expected"] == 4.0 and argmax["low"] == pytest.approx(3.92) and argmax["high"] == pytest.approx(4.08)
    sampled = predict({"draft_temperature": 1, "acceptance": 0.8}, 3, p, p)
    assert sampled["expected"] == pytest.approx(1 + 0.8 + 0.8 ** 2 + 0.8 ** 3)
    # a request's first draft sampled, every other one the argmax: 4 - 3 (1 - p) / n, the seed's closed form
    first = predict({"draft_temperature": 0, "first_draft_temperature": 1}, 3, p, one, steps_per_request=16)
    assert first["expected"] == pytest.approx(4 - 3 * (1 - 0.8) / 16)
    # without the request table the weight of that first step is unknown: no number, and why
    assert predict({"draft_temperature": 0, "first_draft_temperature": 1}, 3, p, one)["why"].startswith("needs verify")


def test_the_toy_models_sampled_prediction_equals_its_own_theory_json(toy):
    """Two computations of the same thing: theory.json's (toy_model.theory) and specrepro.core.theory's from the weights."""
    at_t = acceptance(toy["dir"], 1.0)
    assert float(at_t.per_token[at_t.tokens].mean()) == pytest.approx(toy["p_argmax"]["mean"], abs=1e-6)
    lengths = step_lengths(at_t, at_t, 3)
    assert float(lengths.mean()) == pytest.approx(toy["sampled_accept_length"]["mean"], abs=1e-6)
    assert float(lengths.min()) == pytest.approx(toy["sampled_accept_length"]["min"], abs=1e-6)
    # colder draws accept more; the argmax always
    assert float(acceptance(toy["dir"], 0.8).per_token[at_t.tokens].mean()) == pytest.approx(0.9637, abs=1e-3)
    # the open token (the prompt's last) is off the chain: theory averages over the chain's tokens only
    assert toy["open_ids"] and not set(toy["open_ids"]) & set(at_t.tokens)
    assert set(acceptance(toy["dir"], 0).per_token) == {1.0}


def test_prediction_matches_simulated_verify_steps(toy):
    """Verify steps simulated draft by draft on the toy model's chain (the truth known): the prediction and its band."""
    rng = np.random.default_rng(7)
    first, rest = acceptance(toy["dir"], 1.0), acceptance(toy["dir"], 0.8)
    rule = {"draft_temperature": 0.8, "first_draft_temperature": 1.0}
    committed, steps_total, requests = 0, 0, 300
    tokens = list(first.tokens)
    for _ in range(requests):
        t = int(rng.choice(tokens))
        for step in range(16):  # 16 verify steps a request
            table = first if step == 0 else rest
            accepted, cur = 0, t
            for k in range(3):
                a = (table if k == 0 else rest).per_token[cur]
                if rng.random() >= a:
                    break
                accepted += 1
                cur = int(rest.next[cur])
            committed += 1 + accepted
            steps_total += 1
            # the step's committed tokens move the chain on by 1 + accepted
            for _ in range(1 + accepted):
                t = int(rest.next[t])
    measured = committed / steps_total
    row = predict(rule, 3, first, rest, verify_steps=steps_total, steps_per_request=16)
    assert row["low"] <= measured <= row["high"], (measured, row)
    assert measured == pytest.approx(row["expected"], abs=0.03)


def test_predictions_read_each_temperature_once_and_rules_say_what_they_are():
    seen = []

    def at(t):
        seen.append(t)
        return Acceptance.constant(0.5 if t else 1.0)

    entries = {"a": {"g": {"draft_temperature": 0}}, "b": {"g": {"draft_temperature": 0.8, "first_draft_temperature": 1},
                                                           "s": {"draft_temperature": 0.8}}}
    out = predictions(entries, TOY, at)
    assert sorted(seen) == [0.0, 0.8, 1.0] and out[("b", "g")]["steps"] == 3
    assert describe(entries["a"]["g"]) == "proposes the argmax"
    assert describe(entries["b"]["g"]) == "proposes a draw from q at T first (after prefill), then a draw from q at 0.8 T"
    with pytest.raises(TheoryError, match="no acceptance table at draft temperature 0.3"):
        acceptance_for({"draft_temperature": 0.3}, False, {})


@pytest.mark.parametrize("rule,model,expected", [
    ({"draft_temperature": 1, "verify": "rejection"}, TOY, "verify: theory knows greedy verification only"),
    ({"draft_temperature": -1, "verify": "greedy"}, TOY, "draft_temperature: a multiple of the request's temperature"),
    ({"draft_temperature": 1, "verify": "greedy"}, {"name": "m", "server_args": {}}, "steps: not given"),
    ({"draft_temperature": 1, "verify": "greedy"}, {"name": "m", "server_args": {"speculative_num_steps": 3}},
     "acceptance: model m is not built by the pipeline"),
    ({"draft_temperature": 1, "verify": "greedy", "acceptance": 1.5}, TOY, "acceptance: a probability"),
])
def test_a_regime_theory_cannot_compute_names_the_missing_piece(rule, model, expected):
    assert any(expected in p for p in rule_problems(rule, model)), rule_problems(rule, model)


def test_a_declared_acceptance_needs_no_model_of_ours():
    rule = {"draft_temperature": 1, "verify": "greedy", "acceptance": 0.7, "steps": 4}
    assert rule_problems(rule, {"name": "llama", "server_args": {}}) == []
    row = predict(rule, 4, Acceptance.constant(0.7), Acceptance.constant(0.7))
    assert row["expected"] == pytest.approx(sum(0.7 ** k for k in range(5)))


def test_the_prompt_decides_where_the_toy_models_chain_starts(toy):
    """The first output token after "...\nAnswer:" comes from the words before it.  Read from the weights with a
    plain numpy Llama forward (RMSNorm, NeoX RoPE at rope_theta, causal softmax attention; the layout
    sglang's and transformers' LlamaForCausalLM load): at least 90% distinct first tokens over the seed CPU campaign's
    16 GSM8K prompts (1-shot, the first 16 questions), every one on the chain, and no chain token's argmax moved by the
    context.  The first token is one of ~358: over many prompts distinct starts follow the birthday bound (64 prompts:
    about 59 expected, 54 here), so this is a property of small campaigns.  A real server's outputs are checked by the
    real-server campaign (questions.jsonl)."""
    import json

    from safetensors.numpy import load_file
    from tokenizers import Tokenizer

    from specrepro.benchmarks.gsm8k import few_shot_prefix, one_example

    w = load_file(str(toy["dir"] / "target" / "model.safetensors"))
    cfg = json.loads((toy["dir"] / "target" / "config.json").read_text())
    tok = Tokenizer.from_file(str(toy["dir"] / "target" / "tokenizer.json"))
    heads, hd = cfg["num_attention_heads"], cfg["head_dim"]
    items = [json.loads(line) for line in (SHARED_GSM8K / "test.jsonl").read_text().splitlines()[:16]]
    prefix = few_shot_prefix(items, 1)
    emb, lm = w["model.embed_tokens.weight"].astype(np.float64), w["lm_head.weight"].astype(np.float64)
    attn = {n: w[f"model.layers.0.self_attn.{n}_proj.weight"].astype(np.float64) for n in "qkvo"}
    inv = cfg["rope_theta"] ** (-np.arange(0, hd, 2) / hd)

    def rms(x):
        return x / np.sqrt((x ** 2).mean(-1, keepdims=True) + cfg["rms_norm_eps"])

    def rope(x, pos):
        ang = np.outer(pos, inv)[:, None, :]
        a, b = x[..., :hd // 2], x[..., hd // 2:]
        return np.concatenate([a * np.cos(ang) - b * np.sin(ang), b * np.cos(ang) + a * np.sin(ang)], -1)

    def next_token(ids):
        x = emb[ids]
        h = rms(x)
        pos = np.arange(len(ids))
        q = rope((h @ attn["q"].T).reshape(-1, heads, hd), pos)[-1]
        k = rope((h @ attn["k"].T).reshape(-1, heads, hd), pos)
        v = (h @ attn["v"].T).reshape(-1, heads, hd)
        s = np.einsum("hd,nhd->hn", q, k) / np.sqrt(hd)
        a = np.exp(s - s.max(1, keepdims=True))
        a /= a.sum(1, keepdims=True)
        out = x[-1] + attn["o"] @ np.einsum("hn,nhd->hd", a, v).reshape(-1)  # layer 1 adds nothing
        return int((lm @ rms(out)).argmax())

    firsts = [next_token(tok.encode(prefix + one_example(item, False)).ids) for item in items]
    chain = set(range(len(toy["next_token"]))) - set(toy["special_ids"]) - set(toy["open_ids"])
    assert len(set(firsts)) >= 0.9 * len(firsts), len(set(firsts))
    assert set(firsts) <= chain
    # after a chain token the context does not move the argmax: the next token is f(t), theory's chain
    for t in list(chain)[:40]:
        assert next_token(tok.encode(prefix).ids + [t]) == toy["next_token"][t]
