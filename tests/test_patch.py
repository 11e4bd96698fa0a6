"""The patch series against the real sglang 0.5.20 release, both layouts; failures leave no trace."""

from __future__ import annotations

import hashlib
import io
import shutil
from pathlib import Path

import pytest

from specrepro.core.config import PROJECT_ROOT
from specrepro.util.patching import PatchError, apply_series
from specrepro.core.series import load_series, resolve_patches
from specrepro.stages.sources import registry_archive, unpack_archive

SERIES = PROJECT_ROOT / "patches" / "eagle_topk"
CACHE = PROJECT_ROOT / ".cache"


def read_series(folder: Path):
    """The series' patch files in order (patches/<series>/series.yaml)."""
    return resolve_patches(load_series(folder), CACHE, io.StringIO())


def tree_digest(root: Path) -> str:
    digest = hashlib.sha256()
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        digest.update(str(path.relative_to(root)).encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()


@pytest.fixture(scope="module")
def release_tree(tmp_path_factory):
    """sglang 0.5.20 from the package registry, unpacked (installed layout)."""
    tree = tmp_path_factory.mktemp("sglang_0_5_20") / "tree"
    unpack_archive(registry_archive("0.5.20", CACHE, io.StringIO()), tree)
    return tree


@pytest.fixture
def installed_copy(release_tree, tmp_path):
    tree = tmp_path / "installed"
    shutil.copytree(release_tree, tree)
    return tree


def test_series_folder_lists_the_numbered_patch():
    patches = read_series(SERIES)
    assert [p.name for p in patches] == ["0001-eagle-carry-real-top-k-into-draft-proposal.patch"]
    header = patches[0].read_text().split("\n---\n")[0]
    for word in ("What:", "Why:", "Upstream status:", "0.5.21"):
        assert word in header


def test_series_applies_to_the_installed_layout(installed_copy):
    record = apply_series(installed_copy, read_series(SERIES))
    assert record["layout"] == "installed" and record["strip"] == 2
    files = record["patches"][0]["files"]
    assert set(files) == {"sglang/srt/speculative/spec_utils.py", "sglang/srt/speculative/eagle_worker_v2.py",
                          "sglang/srt/speculative/eagle_draft_cuda_graph_runner.py"}
    spec = (installed_copy / "sglang/srt/speculative/spec_utils.py").read_text()
    assert "top_ks: Optional[torch.Tensor] = None" in spec
    for rel, sha in files.items():
        assert hashlib.sha256((installed_copy / rel).read_bytes()).hexdigest() == sha


def test_series_applies_to_the_repository_layout(release_tree, tmp_path):
    repo = tmp_path / "repo"
    (repo / "python").mkdir(parents=True)
    shutil.copytree(release_tree / "sglang", repo / "python" / "sglang")
    record = apply_series(repo, read_series(SERIES))
    assert record["layout"] == "repository" and record["strip"] == 1
    assert "self.top_ks = torch.full" in (repo / "python/sglang/srt/speculative/eagle_draft_cuda_graph_runner.py").read_text()


def test_applying_twice_fails_cleanly(installed_copy):
    apply_series(installed_copy, read_series(SERIES))
    before = tree_digest(installed_copy)
    with pytest.raises(PatchError) as info:
        apply_series(installed_copy, read_series(SERIES))
    assert "0001-eagle-carry-real-top-k-into-draft-proposal.patch" in str(info.value)
    assert tree_digest(installed_copy) == before


def test_corrupted_patch_names_patch_file_and_hunk_and_leaves_tree_identical(installed_copy, tmp_path):
    good = read_series(SERIES)[0].read_text()
    # Break the context of one hunk of the CUDA graph runner (its 4th hunk, the replay copy).
    broken = good.replace(" forward_batch.sampling_info.temperatures[:raw_bs]\n", " forward_batch.sampling_info.temps[:raw_bs]\n", 1)
    assert broken != good
    bad = tmp_path / "0002-corrupted.patch"
    bad.write_text(broken)
    before = tree_digest(installed_copy)
    with pytest.raises(PatchError) as info:
        apply_series(installed_copy, [bad])
    message = str(info.value)
    assert "0002-corrupted.patch" in message
    assert "sglang/srt/speculative/eagle_draft_cuda_graph_runner.py" in message
    assert "hunk #4" in message and "@@" in message
    assert tree_digest(installed_copy) == before
    assert not list(installed_copy.parent.glob(".staging-*"))


def test_second_patch_failing_rolls_back_the_first(installed_copy, tmp_path):
    bad = tmp_path / "0002-missing-file.patch"
    bad.write_text("--- a/python/sglang/nope.py\n+++ b/python/sglang/nope.py\n@@ -1,1 +1,1 @@\n-a\n+b\n")
    before = tree_digest(installed_copy)
    with pytest.raises(PatchError) as info:
        apply_series(installed_copy, [read_series(SERIES)[0], bad])
    assert "0002-missing-file.patch" in str(info.value) and "sglang/nope.py" in str(info.value)
    assert tree_digest(installed_copy) == before


def test_url_patch_is_fetched_once_and_verified(tmp_path):
    import functools
    import http.server
    import threading

    from specrepro.util.patching import sha256_file
    from specrepro.core.series import SeriesError

    served = tmp_path / "served"
    served.mkdir()
    patch = read_series(SERIES)[0]
    shutil.copy(patch, served / "pr.diff")
    hits = []

    class Handler(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args):
            hits.append(self.path)

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Handler, directory=str(served)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/pr.diff"
    try:
        def series(sha):
            folder = tmp_path / f"series-{sha[:8]}"
            folder.mkdir(exist_ok=True)
            (folder / "series.yaml").write_text(f"title: a PR by URL\npatches:\n  - {{url: '{url}', sha256: '{sha}'}}\n")
            return load_series(folder)

        cache = tmp_path / "cache"
        first = resolve_patches(series(sha256_file(patch)), cache, io.StringIO())
        second = resolve_patches(series(sha256_file(patch)), cache, io.StringIO())
        assert first == second and first[0].read_bytes() == patch.read_bytes()
        assert len(hits) == 1  # fetched once
        with pytest.raises(SeriesError, match="does not match"):
            resolve_patches(series("0" * 64), cache, io.StringIO())
    finally:
        server.shutdown()
