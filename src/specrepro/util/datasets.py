"""Data files a campaign reads, resolved on the submit host before any job that reads them: fetched once, checksummed,
cached, recorded.

Every file a campaign reads is a `DataSource` (path, url, sha256): GSM8K's test set (`data.gsm8k`, which the gsm8k
benchmarks and the toy model's tokenizer corpus point at) and the ShareGPT file sglang 0.5.20's bench_serving
`random` and `sharegpt` datasets read.  Given no file, that client downloads
anon8231489123/ShareGPT_Vicuna_unfiltered/ShareGPT_V3_unfiltered_cleaned_split.json from the model hub
(sglang/benchmark/datasets/random.py, `download_and_cache_hf_file`) -- inside the GPU job, after the model has
loaded, on a compute node that often has no internet.  Here every file is fetched once where Snakemake runs (the
`datasets` rule, a local rule), verified, and read by the jobs from its path (mounted read-only into containers).

Online, a missing file is fetched from its url into its path (by default under cache_dir/datasets/).  Offline, or
where the fetch fails, the error names the config key to set and the file to put there.  With `sha256: null` (no
checksum published) the first fetch records the file's hash next to it (`<file>.sha256`) and every later use is held
to it; the record names which it was.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import IO, Any, Dict, Optional

import requests

from specrepro.util.errors import SpecreproError
from specrepro.util.fileio import locked, write_json
from specrepro.util.patching import sha256_file


class DatasetError(SpecreproError, RuntimeError):
    """A client dataset is missing, cannot be fetched, or is not the file it should be."""


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
                    print(f"datasets: {dest.name}: {done / 2**20:.0f} MiB{of}", file=log, flush=True)
    partial.replace(dest)


def expected_sha256(source: Dict[str, Any]) -> tuple:
    """(the hash a file must have, how it is known); (None, ...) before a first fetch of an unpinned file."""
    path = Path(source["path"])
    recorded = path.with_name(path.name + ".sha256")
    if source.get("sha256"):
        return source["sha256"], "the configured sha256"
    if recorded.is_file():
        return recorded.read_text().split()[0], f"the hash recorded at its first fetch ({recorded})"
    return None, "none published"


def verify_file(source: Dict[str, Any], key: str) -> Path:
    """A data file a job reads, held to its hash; never fetched here (the datasets stage fetches, on the submit host)."""
    path = Path(source["path"])
    if not path.is_file():
        raise DatasetError(f"{key}.path: {path} is not there: the datasets stage fetches it before any job reads it "
                           f"(run the campaign, or put the file there)")
    pinned, how = expected_sha256(source)
    got = sha256_file(path)
    if pinned and got != pinned:
        raise DatasetError(f"{key}: {path} has sha256 {got}, expected {pinned} ({how}); remove it to fetch again")
    return path


def resolve_dataset(source: Dict[str, Any], record: Path, offline: bool, log: IO, key: str) -> Dict[str, Any]:
    """The dataset file at source['path'], fetched from source['url'] when absent and allowed, verified; its record
    (path, sha256, bytes, how it was verified) written to `record`.  `key` names the config entry in errors."""

    path = Path(source["path"])
    fetched = False
    path.parent.mkdir(parents=True, exist_ok=True)
    # two records of one file (two benchmarks, the toy corpus) fetch it once
    with locked(path.with_name(f".{path.name}.lock")):
        if not path.is_file():
            hint = (f"put the file at {path}" + (f" (sha256 {source['sha256']})" if source.get("sha256") else "")
                    + f", or set {key}.path=FILE")
            if offline or not source.get("url"):
                raise DatasetError(f"{key}.path: {path} is not there" + (" (offline=true)" if offline else "")
                                   + f" and no download is allowed: {hint}")
            print(f"datasets: fetching {source['url']} -> {path}", file=log, flush=True)
            try:
                _download(source["url"], path, log)
            except (requests.RequestException, OSError) as exc:
                raise DatasetError(f"{key}.url: {source['url']} could not be fetched ({type(exc).__name__}: "
                                   f"{str(exc)[:200]}): {hint}") from exc
            fetched = True
        got = sha256_file(path)
        pinned, how = expected_sha256(source)
        if pinned is None:
            path.with_name(path.name + ".sha256").write_text(f"{got}  {path.name}\n")
            pinned, how = got, "none published: this hash is now recorded and every later use is held to it"
    if got != pinned:
        raise DatasetError(f"{key}: {path} has sha256 {got}, expected {pinned} ({how}); remove it to fetch again")
    result = {"path": str(path), "sha256": got, "bytes": path.stat().st_size, "verified_by": how,
              "fetched_now": fetched, "url": source.get("url"), "key": key}
    write_json(record, result)
    print(f"datasets: {path} ({result['bytes']} bytes, sha256 {got[:16]}...; {how})", file=log, flush=True)
    return result
