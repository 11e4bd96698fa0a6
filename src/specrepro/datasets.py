"""Client datasets resolved on the submit host, before any GPU job: fetched once, checksummed, cached, recorded.

sglang 0.5.20's bench_serving `random` and `sharegpt` datasets read ShareGPT; given no file, its client downloads
anon8231489123/ShareGPT_Vicuna_unfiltered/ShareGPT_V3_unfiltered_cleaned_split.json from the model hub
(sglang/benchmark/datasets/random.py, `download_and_cache_hf_file`) -- inside the GPU job, after the model has
loaded, on a compute node that often has no internet.  Here the file is fetched once where Snakemake runs (the
`client_data` rule, a local rule), verified, and handed to the client with --dataset-path (mounted read-only).

No checksum of that file is published: with `sha256: null` the first fetch records the file's hash next to it
(`<file>.sha256`) and every later use is held to it; the record names which it was.  Offline, a missing file stops
the campaign at validation, naming the path to provide.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import IO, Any, Dict, Optional

import requests

from specrepro.fileio import write_json
from specrepro.patching import sha256_file


class DatasetError(RuntimeError):
    """A client dataset is missing, cannot be fetched, or is not the file it should be."""


def needs_sharegpt(serving: Dict[str, Any]) -> bool:
    """Whether sglang's client would fetch ShareGPT for these settings (random-ids draws token ids itself)."""
    return serving["dataset_name"] in ("random", "sharegpt") and not serving.get("dataset_path")


def _download(url: str, dest: Path, log: IO) -> None:
    partial = dest.with_name(dest.name + ".partial")
    dest.parent.mkdir(parents=True, exist_ok=True)
    with requests.get(url, stream=True, timeout=60) as resp:
        resp.raise_for_status()
        total = int(resp.headers.get("content-length") or 0)
        done, last = 0, 0.0
        with open(partial, "wb") as fh:
            for chunk in resp.iter_content(1 << 20):
                fh.write(chunk)
                done += len(chunk)
                if time.monotonic() - last > 5:
                    last = time.monotonic()
                    of = f" of {total / 2**20:.0f} MiB" if total else ""
                    print(f"client_data: {dest.name}: {done / 2**20:.0f} MiB{of}", file=log, flush=True)
    partial.replace(dest)


def resolve_dataset(source: Dict[str, Any], record: Path, offline: bool, log: IO, key: str) -> Dict[str, Any]:
    """The dataset file at source['path'], fetched from source['url'] when absent and allowed, verified; its record
    (path, sha256, bytes, how it was verified) written to `record`.  `key` names the config entry in errors."""
    path = Path(source["path"])
    fetched = False
    if not path.is_file():
        if offline or not source.get("url"):
            raise DatasetError(f"{key}.path: {path} is not there{' (offline=true)' if offline else ''} and no "
                               f"download is allowed: put the file there (sglang's client would fetch it inside the "
                               f"GPU job)")
        print(f"client_data: fetching {source['url']} -> {path}", file=log, flush=True)
        try:
            _download(source["url"], path, log)
        except (requests.RequestException, OSError) as exc:
            raise DatasetError(f"{key}.url: {source['url']} could not be fetched ({exc}); put the file at {path} "
                               f"instead") from exc
        fetched = True
    got = sha256_file(path)
    pinned = source.get("sha256")
    recorded_file = path.with_name(path.name + ".sha256")
    if pinned:
        how = "the configured sha256"
    elif recorded_file.is_file():
        pinned, how = recorded_file.read_text().split()[0], f"the hash recorded at its first fetch ({recorded_file})"
    else:
        recorded_file.write_text(f"{got}  {path.name}\n")
        pinned, how = got, "none published: this hash is now recorded and every later use is held to it"
    if got != pinned:
        raise DatasetError(f"{key}: {path} has sha256 {got}, expected {pinned} ({how}); remove it to fetch again")
    result = {"path": str(path), "sha256": got, "bytes": path.stat().st_size, "verified_by": how,
              "fetched_now": fetched, "url": source.get("url")}
    write_json(record, result)
    print(f"client_data: {path} ({result['bytes']} bytes, sha256 {got[:16]}...; {how})", file=log, flush=True)
    return result
