"""Build the offline assets sglang's bench_serving client needs, for tests only.

A small word-level tokenizer (tokenizer.json + tokenizer_config.json, loadable
by transformers' AutoTokenizer from a folder) and a ShareGPT-format JSON made
from GSM8K train questions and answers, so `--dataset-name random` needs no
model hub.  Run with a Python that has `tokenizers`.
"""

import json
import sys
from pathlib import Path

from tokenizers import Tokenizer, models, pre_tokenizers, trainers


def main(gsm8k_train: str, out_dir: str, limit: int = 400) -> None:
    out = Path(out_dir)
    (out / "tokenizer").mkdir(parents=True, exist_ok=True)
    items = [json.loads(line) for line in open(gsm8k_train)][:limit]
    texts = [i["question"] + " " + i["answer"] for i in items]
    tok = Tokenizer(models.WordLevel(unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.train_from_iterator(texts, trainers.WordLevelTrainer(special_tokens=["[UNK]", "<s>", "</s>"]))
    tok.save(str(out / "tokenizer" / "tokenizer.json"))
    (out / "tokenizer" / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "PreTrainedTokenizerFast", "unk_token": "[UNK]", "bos_token": "<s>",
        "eos_token": "</s>", "model_max_length": 100000}))
    sharegpt = [{"id": str(n), "conversations": [{"from": "human", "value": i["question"] * 8},
                                                   {"from": "gpt", "value": i["answer"] * 4}]}
                for n, i in enumerate(items)]
    (out / "sharegpt.json").write_text(json.dumps(sharegpt))


if __name__ == "__main__":
    main(*sys.argv[1:])
