"""Container runtimes as objects (issue #40): a new runtime is one module of specrepro/runtimes and nothing else,
no code outside that package compares a runtime's name, and every runtime's command lines are the ones the launcher
built before runtimes were objects."""

from __future__ import annotations

import filecmp
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from specrepro import runtimes
from specrepro.core.campaign import Campaign
from specrepro.core.config import PROJECT_ROOT, ConfigError, compose
from specrepro.serving.launch import LaunchContext, Launcher, Mount, planned_context

PACKAGE = PROJECT_ROOT / "src" / "specrepro"

# --- 1. a new runtime is one new module ----------------------------------------------------------------------------

FAKE_RUNTIME = '''\
"""A runtime that exists only in a test: its argv says which runtime made it."""

from pathlib import Path

from specrepro.runtimes import register
from specrepro.runtimes.base import Runtime


@register
class Fake(Runtime):
    name = "fake"

    def wrap(self, inv):
        mounts = [f"--mount={m.spec()}" for m in inv.mounts]
        return ["fakerun", "--name", inv.name, "--image", inv.image, *mounts, "--", *inv.inner]

    def resolve_base(self, ref, cache, log):
        return {"ref": ref, "kind": "container", "image": f"fake://{ref}", "image_id": "sha256:fakebase",
                "pinned": f"fake://{ref}"}

    def build_patched(self, job, log):
        return {"kind": "container", "image": f"fake://{job.name}", "image_id": "sha256:" + job.content_hash,
                "built": True, "content_hash": job.content_hash, "built_from": job.base_from}

    def ensure_image(self, record, log):
        return {**record, "on_node": True}
'''

# Runs with the copy of the package first on sys.path: a campaign on platform.container_runtime=fake, its plan, the
# launcher's server argv and the image stage's base and patched image.
USE_FAKE = '''\
import io, json, sys
from pathlib import Path

import specrepro
from specrepro.core.campaign import Campaign
from specrepro.core.config import PROJECT_ROOT, compose
from specrepro.stages.image import ensure_image, image_stage, resolve_base
from specrepro.serving.launch import Launcher, planned_context
from specrepro.serving.plan_text import describe_plan
from specrepro.core.series import load_series

work = Path(sys.argv[1])
cfg = compose([f"results_dir={work / 'results'}", "platform.container_runtime=fake", "platform.runtime_run_args=[]"])
campaign = Campaign(cfg)
plan = campaign.plan("pr_rs_on")
log = io.StringIO()
resolve_base(plan.platform, "example/base:1", work / "cache", work / "base.json", log)
(work / "m" / "tree").mkdir(parents=True)
(work / "m" / "manifest.json").write_text(json.dumps({"patches": [{"patch": "0001", "sha256": "ab" * 32}],
                                                      "source": {"package_dir": "sglang"}}))
(work / "verdict.json").write_text(json.dumps({"series": "eagle_topk", "passed": True, "generic": [], "results": []}))
image = image_stage(plan, load_series(PROJECT_ROOT / "patches" / "eagle_topk"), work / "m" / "manifest.json",
                    [work / "verdict.json"], work / "image.json", log, base_record=work / "base.json")
print(json.dumps({"package": specrepro.__file__, "runtime": repr(Launcher(plan).runtime),
                  "server": Launcher(plan).server_argv(planned_context(plan)), "plan": describe_plan(campaign),
                  "image": image, "on_node": ensure_image(plan, image, log)}))
'''


def changed_files(original: Path, copy: Path) -> set:
    """Files (relative to the package) that differ, or exist on one side only; compiled files left aside."""
    out = set()
    for side, other in ((original, copy), (copy, original)):
        for path in side.rglob("*"):
            if path.is_dir() or "__pycache__" in path.parts:
                continue
            rel = path.relative_to(side)
            twin = other / rel
            if not twin.is_file() or not filecmp.cmp(path, twin, shallow=False):
                out.add(rel.as_posix())
    return out


def test_a_new_runtime_is_one_new_module_that_the_launch_plan_and_image_stage_use(tmp_path):
    copy = tmp_path / "src" / "specrepro"
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    (copy / "runtimes" / "fake.py").write_text(FAKE_RUNTIME)
    assert changed_files(PACKAGE, copy) == {"runtimes/fake.py"}
    # the copy's package first; the project's conf/ and patches/ as they are (SPECREPRO_ROOT)
    env = {**os.environ, "PYTHONPATH": str(tmp_path / "src"), "SPECREPRO_ROOT": str(PROJECT_ROOT)}
    proc = subprocess.run([sys.executable, "-c", USE_FAKE, str(tmp_path / "work")], capture_output=True, text=True,
                          env=env, cwd=tmp_path, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.splitlines()[-1])
    assert out["package"] == str(copy / "__init__.py") and out["runtime"] == "<runtime fake>"
    server = out["server"]
    assert server[:5] == ["fakerun", "--name", "specrepro-eagle_topk_greedy-pr_rs_on-$LAUNCH", "--image", "$IMAGE"]
    assert server[server.index("--") + 1:][:3] == ["python3", "-m", "sglang.launch_server"]
    # what `plan` prints is the launch's argv
    assert f"server: {shlex.join(server)}" in out["plan"]
    # the image stage asked the fake runtime for the base and the patched build, and the node for the image
    assert out["image"]["runtime"] == "fake" and out["image"]["base"]["image"] == "fake://example/base:1"
    assert out["image"]["built_from"] == "fake://example/base:1" and out["image"]["image"].startswith("fake://sglang-")
    assert out["on_node"]["on_node"] is True


def test_an_unknown_runtime_names_the_key_the_value_and_the_registered_ones():
    with pytest.raises(ConfigError) as info:
        compose(["platform.container_runtime=lxc"])
    said = str(info.value)
    assert "platform.container_runtime: 'lxc' is not a container runtime" in said
    assert "registered: apptainer, docker, none, podman, pyxis" in said
    with pytest.raises(runtimes.UnknownRuntime, match="platform.container_runtime: 'lxc'"):
        runtimes.get("lxc")
    assert runtimes.names() == ["apptainer", "docker", "none", "podman", "pyxis"]


# --- 2. no code outside specrepro/runtimes compares a runtime's name ---------------------------------------------

NAMES = "docker|podman|apptainer|pyxis"
# A runtime's name compared: a name literal on either side of ==/!=, a name inside a literal collection after `in`,
# or anything called *runtime* (a variable, attribute, dict key, its .name) compared with ==, != or `in (...)`:
# the last catches `"none"`, which other settings (accelerator) share.
RUNTIME_COMPARISON = re.compile(
    rf"""(==|!=)\s*["']({NAMES})["']"""
    rf"""|["']({NAMES})["']\s*(==|!=)"""
    rf"""|\bin\s*[(\[{{][^)\]}}]*["']({NAMES})["']"""
    r"""|runtime\w*(\.name)?["'\])]*\s*(==|!=|(not\s+)?in\s*[(\[{])""")

PLANTED = [
    'if self.runtime == "docker":',
    'if runtime in ("docker", "podman"):',
    'if launcher.runtime not in ("docker", "podman"):',
    'if plat["container_runtime"] != "none" and not plat.get("base_image"):',
    'python = x if launcher.runtime == "none" else "python3"',
    'if "pyxis" == plat.get("container_runtime"):',
    'elif self.runtime.name != "apptainer":',
    'ok = name in {"podman"}',
    "if runtime_name == 'none':",
]
INNOCENT = [
    'for key in ("base_id", "ref", "runtime"):',
    '"platform": {k: v for k, v in cfg["platform"].items() if k not in ("mounts", "runtime_command")},',
    'if plat["accelerator"] != "none" and model["gpus"] > 1:',
    'kept = [i for i in x if r[i] not in ("-", "none", "None")]',
    'if self.runtime.is_bare and gpus:',
    'runtime=CAMPAIGN.cfg["platform"]["container_runtime"],',
]


@pytest.mark.parametrize("line", PLANTED)
def test_the_comparison_pattern_catches_a_planted_comparison(line):
    assert RUNTIME_COMPARISON.search(line), line


@pytest.mark.parametrize("line", INNOCENT)
def test_the_comparison_pattern_leaves_other_code_alone(line):
    assert not RUNTIME_COMPARISON.search(line), line


def sources_outside_runtimes():
    roots = [PROJECT_ROOT / "src", PROJECT_ROOT / "analysis", PROJECT_ROOT / "workflow"]
    for root in roots:
        for path in sorted(root.rglob("*")):
            if path.is_file() and (path.suffix in (".py", ".smk") or path.name == "Snakefile") \
                    and PACKAGE / "runtimes" not in path.parents and "__pycache__" not in path.parts:
                yield path


def test_no_runtime_name_is_compared_outside_the_runtimes_package():
    found = [f"{path.relative_to(PROJECT_ROOT)}:{n}: {line.strip()}"
             for path in sources_outside_runtimes()
             for n, line in enumerate(path.read_text().splitlines(), 1) if RUNTIME_COMPARISON.search(line)]
    assert found == [], "ask the runtime object (a capability or a method), not its name:\n" + "\n".join(found)


# --- 3. every runtime's command lines are today's ------------------------------------------------------------------

CASES = {
    "docker-rocm": ["platform.container_runtime=docker"],
    "podman-rocm": ["platform.container_runtime=podman"],
    "apptainer-rocm": ["platform.container_runtime=apptainer", "platform.runtime_run_args=[]"],
    "pyxis-rocm": ["platform.container_runtime=pyxis"],
    "none-rocm": ["platform.container_runtime=none"],
    "docker-cuda": ["platform=h200", "model=glm52_fp8", "platform.container_runtime=docker"],
    "podman-cuda": ["platform=h200", "model=glm52_fp8", "platform.container_runtime=podman"],
    "apptainer-cuda": ["platform=h200", "model=glm52_fp8", "platform.container_runtime=apptainer",
                       "platform.runtime_run_args=[]", "platform.passthrough_env=[HF_TOKEN,OPENAI_API_KEY]"],
    "pyxis-cuda": ["platform=h200", "model=glm52_fp8", "platform.container_runtime=pyxis",
                   "platform.runtime_command=[srun,'--mpi=none']"],
    "none-cuda": ["platform=h200", "model=glm52_fp8", "platform.container_runtime=none"],
}


def runtime_argvs(overrides):
    """Every command line and environment a Launcher builds for arm pr_rs_on, the project root as <root>."""
    plan = Campaign(compose(overrides)).plan("pr_rs_on")
    launcher = Launcher(plan)
    sym = planned_context(plan)
    real = LaunchContext(port=30000, launch_id="abc123", image="sha256:feed", image_id="sha256:feed", gpus=[2, 3],
                         gpu_source="serve.gpus", user="1000:1000", renders=[130, 131], device_gid=992,
                         owner="1000", secrets_dir="/run/user/1000/specrepro-secrets-1000/abc123")
    run = next(r for r in plan.runs if r.benchmark == "bench_serving")
    base_env = {"HF_TOKEN": "hf_x", "OPENAI_API_KEY": "sk_x", "PYTHONDONTWRITEBYTECODE": "1", "PATH": "/bin"}
    out = {
        "server": launcher.server_argv(sym),
        "server_real": launcher.server_argv(real),
        "client": launcher.client_argv(sym, run, "/out/r1"),
        "probe": launcher.wrap(real, ["python3", "/opt/specrepro/facts/probe.py", "x"], server=True,
                               extra_mounts=[Mount("/probe", "/opt/specrepro/facts", True)], name_suffix="-facts",
                               extra_env={"HIP_VISIBLE_DEVICES": ""}),
        "stop": [shlex.join(a) for a in launcher.stop_argv(real, 30)],
        "process_env": sorted(f"{k}={v}" for k, v in launcher.process_env(real, base_env).items()),
        "client_env": sorted(f"{k}={v}" for k, v in launcher.env(real, client=True).items()),
    }
    text = {k: (v if k in ("stop", "process_env", "client_env") else shlex.join(v)) for k, v in out.items()}
    root = str(PROJECT_ROOT)
    return {k: v.replace(root, "<root>") if isinstance(v, str) else [x.replace(root, "<root>") for x in v]
            for k, v in text.items()}


# Recorded from commit 09217be's launcher (before runtimes were objects) with runtime_argvs above; <root> stands for
# the checkout.  A difference here is a changed command line: the refactor must not make one.
GOLDEN = {'docker-rocm': {'server': "docker run --rm --name 'specrepro-eagle_topk_greedy-pr_rs_on-$LAUNCH' --network host "
                           "--user '$USER' --label org.specrepro.campaign=eagle_topk_greedy --label "
                           "org.specrepro.arm=pr_rs_on --label 'org.specrepro.launch=$LAUNCH' --label "
                           "'org.specrepro.user=$OWNER' --device=/dev/kfd '--device=/dev/dri/renderD$RENDER0' "
                           "'--device=/dev/dri/renderD$RENDER1' '--device=/dev/dri/renderD$RENDER2' "
                           "'--device=/dev/dri/renderD$RENDER3' --group-add '$DEVICE_GID' -v "
                           '<root>/results/eagle_topk_greedy/arms/pr_rs_on:<root>/results/eagle_topk_greedy/arms/pr_rs_on '
                           '-v /models/GLM-5.2-MXFP4:/models/GLM-5.2-MXFP4:ro -v '
                           '<root>/.cache/datasets/ShareGPT_V3_unfiltered_cleaned_split.json:<root>/.cache/datasets/ShareGPT_V3_unfiltered_cleaned_split.json:ro '
                           "-v '<root>/.cache/compile/$IMAGE_ID:<root>/.cache/compile/$IMAGE_ID' -v "
                           "'$SECRETS/HF_TOKEN:/run/specrepro/secrets/HF_TOKEN:ro' --ipc=host "
                           '--security-opt=seccomp=unconfined --cap-add=SYS_PTRACE -e '
                           'HF_TOKEN_PATH=/run/specrepro/secrets/HF_TOKEN -e '
                           "'HOME=<root>/.cache/compile/$IMAGE_ID/home' -e PYTHONUNBUFFERED=1 -e SGLANG_LOG_MS=1 -e "
                           "'TORCHINDUCTOR_CACHE_DIR=<root>/.cache/compile/$IMAGE_ID/inductor' -e "
                           "'TRITON_CACHE_DIR=<root>/.cache/compile/$IMAGE_ID/triton' -e TZ=UTC -e "
                           "'XDG_CACHE_HOME=<root>/.cache/compile/$IMAGE_ID/xdg' '$IMAGE' python3 -m "
                           'sglang.launch_server --model-path /models/GLM-5.2-MXFP4 --trust-remote-code --tp-size 4 '
                           '--ep-size 4 --kv-cache-dtype fp8_e4m3 --dsa-prefill-backend tilelang '
                           '--dsa-decode-backend tilelang --max-running-requests 8 --cuda-graph-max-bs-decode 8 '
                           '--speculative-algorithm EAGLE --speculative-num-steps 5 --speculative-eagle-topk 1 '
                           '--speculative-num-draft-tokens 6 --speculative-use-rejection-sampling --host 127.0.0.1 '
                           "--port '$PORT' --enable-metrics",
                 'server_real': 'docker run --rm --name specrepro-eagle_topk_greedy-pr_rs_on-abc123 --network host '
                                '--user 1000:1000 --label org.specrepro.campaign=eagle_topk_greedy --label '
                                'org.specrepro.arm=pr_rs_on --label org.specrepro.launch=abc123 --label '
                                'org.specrepro.user=1000 --device=/dev/kfd --device=/dev/dri/renderD130 '
                                '--device=/dev/dri/renderD131 --group-add 992 -v '
                                '<root>/results/eagle_topk_greedy/arms/pr_rs_on:<root>/results/eagle_topk_greedy/arms/pr_rs_on '
                                '-v /models/GLM-5.2-MXFP4:/models/GLM-5.2-MXFP4:ro -v '
                                '<root>/.cache/datasets/ShareGPT_V3_unfiltered_cleaned_split.json:<root>/.cache/datasets/ShareGPT_V3_unfiltered_cleaned_split.json:ro '
                                '-v <root>/.cache/compile/feed:<root>/.cache/compile/feed -v '
                                '/run/user/1000/specrepro-secrets-1000/abc123/HF_TOKEN:/run/specrepro/secrets/HF_TOKEN:ro '
                                '--ipc=host --security-opt=seccomp=unconfined --cap-add=SYS_PTRACE -e '
                                'HF_TOKEN_PATH=/run/specrepro/secrets/HF_TOKEN -e '
                                'HOME=<root>/.cache/compile/feed/home -e PYTHONUNBUFFERED=1 -e SGLANG_LOG_MS=1 -e '
                                'TORCHINDUCTOR_CACHE_DIR=<root>/.cache/compile/feed/inductor -e '
                                'TRITON_CACHE_DIR=<root>/.cache/compile/feed/triton -e TZ=UTC -e '
                                'XDG_CACHE_HOME=<root>/.cache/compile/feed/xdg sha256:feed python3 -m '
                                'sglang.launch_server --model-path /models/GLM-5.2-MXFP4 --trust-remote-code '
                                '--tp-size 4 --ep-size 4 --kv-cache-dtype fp8_e4m3 --dsa-prefill-backend tilelang '
                                '--dsa-decode-backend tilelang --max-running-requests 8 --cuda-graph-max-bs-decode 8 '
                                '--speculative-algorithm EAGLE --speculative-num-steps 5 --speculative-eagle-topk 1 '
                                '--speculative-num-draft-tokens 6 --speculative-use-rejection-sampling --host '
                                '127.0.0.1 --port 30000 --enable-metrics',
                 'client': "docker exec -e 'HOME=<root>/.cache/compile/$IMAGE_ID/home' -e PYTHONUNBUFFERED=1 -e "
                           "SGLANG_LOG_MS=1 -e 'TORCHINDUCTOR_CACHE_DIR=<root>/.cache/compile/$IMAGE_ID/inductor' -e "
                           "'TRITON_CACHE_DIR=<root>/.cache/compile/$IMAGE_ID/triton' -e TZ=UTC -e "
                           "'XDG_CACHE_HOME=<root>/.cache/compile/$IMAGE_ID/xdg' "
                           "'specrepro-eagle_topk_greedy-pr_rs_on-$LAUNCH' python3 -m sglang.benchmark.serving "
                           "--backend sglang --base-url 'http://127.0.0.1:$PORT' --dataset-name random "
                           '--random-input-len 1024 --random-output-len 512 --random-range-ratio 1.0 --num-prompts '
                           '12 --max-concurrency 1 --seed 1 --output-file /out/r1/bench_serving.jsonl --disable-tqdm '
                           '--dataset-path <root>/.cache/datasets/ShareGPT_V3_unfiltered_cleaned_split.json '
                           '--output-details',
                 'probe': 'docker run --rm --name specrepro-eagle_topk_greedy-pr_rs_on-abc123-facts --network host '
                          '--user 1000:1000 --label org.specrepro.campaign=eagle_topk_greedy --label '
                          'org.specrepro.arm=pr_rs_on --label org.specrepro.launch=abc123 --label '
                          'org.specrepro.user=1000 --device=/dev/kfd --device=/dev/dri/renderD130 '
                          '--device=/dev/dri/renderD131 --group-add 992 -v '
                          '<root>/results/eagle_topk_greedy/arms/pr_rs_on:<root>/results/eagle_topk_greedy/arms/pr_rs_on '
                          '-v /models/GLM-5.2-MXFP4:/models/GLM-5.2-MXFP4:ro -v '
                          '<root>/.cache/datasets/ShareGPT_V3_unfiltered_cleaned_split.json:<root>/.cache/datasets/ShareGPT_V3_unfiltered_cleaned_split.json:ro '
                          '-v <root>/.cache/compile/feed:<root>/.cache/compile/feed -v '
                          '/probe:/opt/specrepro/facts:ro --ipc=host --security-opt=seccomp=unconfined '
                          '--cap-add=SYS_PTRACE -e HIP_VISIBLE_DEVICES= -e HOME=<root>/.cache/compile/feed/home -e '
                          'PYTHONUNBUFFERED=1 -e SGLANG_LOG_MS=1 -e '
                          'TORCHINDUCTOR_CACHE_DIR=<root>/.cache/compile/feed/inductor -e '
                          'TRITON_CACHE_DIR=<root>/.cache/compile/feed/triton -e TZ=UTC -e '
                          'XDG_CACHE_HOME=<root>/.cache/compile/feed/xdg sha256:feed python3 '
                          '/opt/specrepro/facts/probe.py x',
                 'stop': ['docker stop -t 30 specrepro-eagle_topk_greedy-pr_rs_on-abc123',
                          'docker rm -f specrepro-eagle_topk_greedy-pr_rs_on-abc123'],
                 'process_env': ['HF_TOKEN=hf_x', 'OPENAI_API_KEY=sk_x', 'PATH=/bin', 'PYTHONDONTWRITEBYTECODE=1'],
                 'client_env': ['HOME=<root>/.cache/compile/feed/home',
                                'PYTHONUNBUFFERED=1',
                                'SGLANG_LOG_MS=1',
                                'TORCHINDUCTOR_CACHE_DIR=<root>/.cache/compile/feed/inductor',
                                'TRITON_CACHE_DIR=<root>/.cache/compile/feed/triton',
                                'TZ=UTC',
                                'XDG_CACHE_HOME=<root>/.cache/compile/feed/xdg']},
 'podman-rocm': {'server': "podman run --rm --name 'specrepro-eagle_topk_greedy-pr_rs_on-$LAUNCH' --network host "
                           "--user '$USER' --label org.specrepro.campaign=eagle_topk_greedy --label "
                           "org.specrepro.arm=pr_rs_on --label 'org.specrepro.launch=$LAUNCH' --label "
                           "'org.specrepro.user=$OWNER' --device=/dev/kfd '--device=/dev/dri/renderD$RENDER0' "
                           "'--device=/dev/dri/renderD$RENDER1' '--device=/dev/dri/renderD$RENDER2' "
                           "'--device=/dev/dri/renderD$RENDER3' --group-add '$DEVICE_GID' -v "
                           '<root>/results/eagle_topk_greedy/arms/pr_rs_on:<root>/results/eagle_topk_greedy/arms/pr_rs_on '
                           '-v /models/GLM-5.2-MXFP4:/models/GLM-5.2-MXFP4:ro -v '
                           '<root>/.cache/datasets/ShareGPT_V3_unfiltered_cleaned_split.json:<root>/.cache/datasets/ShareGPT_V3_unfiltered_cleaned_split.json:ro '
                           "-v '<root>/.cache/compile/$IMAGE_ID:<root>/.cache/compile/$IMAGE_ID' -v "
                           "'$SECRETS/HF_TOKEN:/run/specrepro/secrets/HF_TOKEN:ro' --ipc=host "
                           '--security-opt=seccomp=unconfined --cap-add=SYS_PTRACE -e '
                           'HF_TOKEN_PATH=/run/specrepro/secrets/HF_TOKEN -e '
                           "'HOME=<root>/.cache/compile/$IMAGE_ID/home' -e PYTHONUNBUFFERED=1 -e SGLANG_LOG_MS=1 -e "
                           "'TORCHINDUCTOR_CACHE_DIR=<root>/.cache/compile/$IMAGE_ID/inductor' -e "
                           "'TRITON_CACHE_DIR=<root>/.cache/compile/$IMAGE_ID/triton' -e TZ=UTC -e "
                           "'XDG_CACHE_HOME=<root>/.cache/compile/$IMAGE_ID/xdg' '$IMAGE' python3 -m "
                           'sglang.launch_server --model-path /models/GLM-5.2-MXFP4 --trust-remote-code --tp-size 4 '
                           '--ep-size 4 --kv-cache-dtype fp8_e4m3 --dsa-prefill-backend tilelang '
                           '--dsa-decode-backend tilelang --max-running-requests 8 --cuda-graph-max-bs-decode 8 '
                           '--speculative-algorithm EAGLE --speculative-num-steps 5 --speculative-eagle-topk 1 '
                           '--speculative-num-draft-tokens 6 --speculative-use-rejection-sampling --host 127.0.0.1 '
                           "--port '$PORT' --enable-metrics",
                 'server_real': 'podman run --rm --name specrepro-eagle_topk_greedy-pr_rs_on-abc123 --network host '
                                '--user 1000:1000 --label org.specrepro.campaign=eagle_topk_greedy --label '
                                'org.specrepro.arm=pr_rs_on --label org.specrepro.launch=abc123 --label '
                                'org.specrepro.user=1000 --device=/dev/kfd --device=/dev/dri/renderD130 '
                                '--device=/dev/dri/renderD131 --group-add 992 -v '
                                '<root>/results/eagle_topk_greedy/arms/pr_rs_on:<root>/results/eagle_topk_greedy/arms/pr_rs_on '
                                '-v /models/GLM-5.2-MXFP4:/models/GLM-5.2-MXFP4:ro -v '
                                '<root>/.cache/datasets/ShareGPT_V3_unfiltered_cleaned_split.json:<root>/.cache/datasets/ShareGPT_V3_unfiltered_cleaned_split.json:ro '
                                '-v <root>/.cache/compile/feed:<root>/.cache/compile/feed -v '
                                '/run/user/1000/specrepro-secrets-1000/abc123/HF_TOKEN:/run/specrepro/secrets/HF_TOKEN:ro '
                                '--ipc=host --security-opt=seccomp=unconfined --cap-add=SYS_PTRACE -e '
                                'HF_TOKEN_PATH=/run/specrepro/secrets/HF_TOKEN -e '
                                'HOME=<root>/.cache/compile/feed/home -e PYTHONUNBUFFERED=1 -e SGLANG_LOG_MS=1 -e '
                                'TORCHINDUCTOR_CACHE_DIR=<root>/.cache/compile/feed/inductor -e '
                                'TRITON_CACHE_DIR=<root>/.cache/compile/feed/triton -e TZ=UTC -e '
                                'XDG_CACHE_HOME=<root>/.cache/compile/feed/xdg sha256:feed python3 -m '
                                'sglang.launch_server --model-path /models/GLM-5.2-MXFP4 --trust-remote-code '
                                '--tp-size 4 --ep-size 4 --kv-cache-dtype fp8_e4m3 --dsa-prefill-backend tilelang '
                                '--dsa-decode-backend tilelang --max-running-requests 8 --cuda-graph-max-bs-decode 8 '
                                '--speculative-algorithm EAGLE --speculative-num-steps 5 --speculative-eagle-topk 1 '
                                '--speculative-num-draft-tokens 6 --speculative-use-rejection-sampling --host '
                                '127.0.0.1 --port 30000 --enable-metrics',
                 'client': "podman exec -e 'HOME=<root>/.cache/compile/$IMAGE_ID/home' -e PYTHONUNBUFFERED=1 -e "
                           "SGLANG_LOG_MS=1 -e 'TORCHINDUCTOR_CACHE_DIR=<root>/.cache/compile/$IMAGE_ID/inductor' -e "
                           "'TRITON_CACHE_DIR=<root>/.cache/compile/$IMAGE_ID/triton' -e TZ=UTC -e "
                           "'XDG_CACHE_HOME=<root>/.cache/compile/$IMAGE_ID/xdg' "
                           "'specrepro-eagle_topk_greedy-pr_rs_on-$LAUNCH' python3 -m sglang.benchmark.serving "
                           "--backend sglang --base-url 'http://127.0.0.1:$PORT' --dataset-name random "
                           '--random-input-len 1024 --random-output-len 512 --random-range-ratio 1.0 --num-prompts '
                           '12 --max-concurrency 1 --seed 1 --output-file /out/r1/bench_serving.jsonl --disable-tqdm '
                           '--dataset-path <root>/.cache/datasets/ShareGPT_V3_unfiltered_cleaned_split.json '
                           '--output-details',
                 'probe': 'podman run --rm --name specrepro-eagle_topk_greedy-pr_rs_on-abc123-facts --network host '
                          '--user 1000:1000 --label org.specrepro.campaign=eagle_topk_greedy --label '
                          'org.specrepro.arm=pr_rs_on --label org.specrepro.launch=abc123 --label '
                          'org.specrepro.user=1000 --device=/dev/kfd --device=/dev/dri/renderD130 '
                          '--device=/dev/dri/renderD131 --group-add 992 -v '
                          '<root>/results/eagle_topk_greedy/arms/pr_rs_on:<root>/results/eagle_topk_greedy/arms/pr_rs_on '
                          '-v /models/GLM-5.2-MXFP4:/models/GLM-5.2-MXFP4:ro -v '
                          '<root>/.cache/datasets/ShareGPT_V3_unfiltered_cleaned_split.json:<root>/.cache/datasets/ShareGPT_V3_unfiltered_cleaned_split.json:ro '
                          '-v <root>/.cache/compile/feed:<root>/.cache/compile/feed -v '
                          '/probe:/opt/specrepro/facts:ro --ipc=host --security-opt=seccomp=unconfined '
                          '--cap-add=SYS_PTRACE -e HIP_VISIBLE_DEVICES= -e HOME=<root>/.cache/compile/feed/home -e '
                          'PYTHONUNBUFFERED=1 -e SGLANG_LOG_MS=1 -e '
                          'TORCHINDUCTOR_CACHE_DIR=<root>/.cache/compile/feed/inductor -e '
                          'TRITON_CACHE_DIR=<root>/.cache/compile/feed/triton -e TZ=UTC -e '
                          'XDG_CACHE_HOME=<root>/.cache/compile/feed/xdg sha256:feed python3 '
                          '/opt/specrepro/facts/probe.py x',
                 'stop': ['podman stop -t 30 specrepro-eagle_topk_greedy-pr_rs_on-abc123',
                          'podman rm -f --ignore specrepro-eagle_topk_greedy-pr_rs_on-abc123'],
                 'process_env': ['HF_TOKEN=hf_x', 'OPENAI_API_KEY=sk_x', 'PATH=/bin', 'PYTHONDONTWRITEBYTECODE=1'],
                 'client_env': ['HOME=<root>/.cache/compile/feed/home',
                                'PYTHONUNBUFFERED=1',
                                'SGLANG_LOG_MS=1',
                                'TORCHINDUCTOR_CACHE_DIR=<root>/.cache/compile/feed/inductor',
                                'TRITON_CACHE_DIR=<root>/.cache/compile/feed/triton',
                                'TZ=UTC',
                                'XDG_CACHE_HOME=<root>/.cache/compile/feed/xdg']},
 'apptainer-rocm': {'server': 'apptainer exec --cleanenv --rocm --bind '
                              "'<root>/results/eagle_topk_greedy/arms/pr_rs_on:<root>/results/eagle_topk_greedy/arms/pr_rs_on,/models/GLM-5.2-MXFP4:/models/GLM-5.2-MXFP4:ro,<root>/.cache/datasets/ShareGPT_V3_unfiltered_cleaned_split.json:<root>/.cache/datasets/ShareGPT_V3_unfiltered_cleaned_split.json:ro,<root>/.cache/compile/$IMAGE_ID:<root>/.cache/compile/$IMAGE_ID' "
                              "--env 'HOME=<root>/.cache/compile/$IMAGE_ID/home' --env PYTHONUNBUFFERED=1 --env "
                              "'ROCR_VISIBLE_DEVICES=$GPU0,$GPU1,$GPU2,$GPU3' --env SGLANG_LOG_MS=1 --env "
                              "'TORCHINDUCTOR_CACHE_DIR=<root>/.cache/compile/$IMAGE_ID/inductor' --env "
                              "'TRITON_CACHE_DIR=<root>/.cache/compile/$IMAGE_ID/triton' --env TZ=UTC --env "
                              "'XDG_CACHE_HOME=<root>/.cache/compile/$IMAGE_ID/xdg' '$IMAGE' python3 -m "
                              'sglang.launch_server --model-path /models/GLM-5.2-MXFP4 --trust-remote-code --tp-size '
                              '4 --ep-size 4 --kv-cache-dtype fp8_e4m3 --dsa-prefill-backend tilelang '
                              '--dsa-decode-backend tilelang --max-running-requests 8 --cuda-graph-max-bs-decode 8 '
                              '--speculative-algorithm EAGLE --speculative-num-steps 5 --speculative-eagle-topk 1 '
                              '--speculative-num-draft-tokens 6 --speculative-use-rejection-sampling --host '
                              "127.0.0.1 --port '$PORT' --enable-metrics",
                    'server_real': 'apptainer exec --cleanenv --rocm --bind '
                                   '<root>/results/eagle_topk_greedy/arms/pr_rs_on:<root>/results/eagle_topk_greedy/arms/pr_rs_on,/models/GLM-5.2-MXFP4:/models/GLM-5.2-MXFP4:ro,<root>/.cache/datasets/ShareGPT_V3_unfiltered_cleaned_split.json:<root>/.cache/datasets/ShareGPT_V3_unfiltered_cleaned_split.json:ro,<root>/.cache/compile/feed:<root>/.cache/compile/feed '
                                   '--env HOME=<root>/.cache/compile/feed/home --env PYTHONUNBUFFERED=1 --env '
                                   'ROCR_VISIBLE_DEVICES=2,3 --env SGLANG_LOG_MS=1 --env '
                                   'TORCHINDUCTOR_CACHE_DIR=<root>/.cache/compile/feed/inductor --env '
                                   'TRITON_CACHE_DIR=<root>/.cache/compile/feed/triton --env TZ=UTC --env '
                                   'XDG_CACHE_HOME=<root>/.cache/compile/feed/xdg sha256:feed python3 -m '
                                   'sglang.launch_server --model-path /models/GLM-5.2-MXFP4 --trust-remote-code '
                                   '--tp-size 4 --ep-size 4 --kv-cache-dtype fp8_e4m3 --dsa-prefill-backend tilelang '
                                   '--dsa-decode-backend tilelang --max-running-requests 8 '
                                   '--cuda-graph-max-bs-decode 8 --speculative-algorithm EAGLE '
                                   '--speculative-num-steps 5 --speculative-eagle-topk 1 '
                                   '--speculative-num-draft-tokens 6 --speculative-use-rejection-sampling --host '
                                   '127.0.0.1 --port 30000 --enable-metrics',
                    'client': 'apptainer exec --cleanenv --bind '
                              "'<root>/results/eagle_topk_greedy/arms/pr_rs_on:<root>/results/eagle_topk_greedy/arms/pr_rs_on,/models/GLM-5.2-MXFP4:/models/GLM-5.2-MXFP4:ro,<root>/.cache/datasets/ShareGPT_V3_unfiltered_cleaned_split.json:<root>/.cache/datasets/ShareGPT_V3_unfiltered_cleaned_split.json:ro,<root>/.cache/compile/$IMAGE_ID:<root>/.cache/compile/$IMAGE_ID' "
                              "--env 'HOME=<root>/.cache/compile/$IMAGE_ID/home' --env PYTHONUNBUFFERED=1 --env "
                              'SGLANG_LOG_MS=1 --env '
                              "'TORCHINDUCTOR_CACHE_DIR=<root>/.cache/compile/$IMAGE_ID/inductor' --env "
                              "'TRITON_CACHE_DIR=<root>/.cache/compile/$IMAGE_ID/triton' --env TZ=UTC --env "
                              "'XDG_CACHE_HOME=<root>/.cache/compile/$IMAGE_ID/xdg' '$IMAGE' python3 -m "
                              "sglang.benchmark.serving --backend sglang --base-url 'http://127.0.0.1:$PORT' "
                              '--dataset-name random --random-input-len 1024 --random-output-len 512 '
                              '--random-range-ratio 1.0 --num-prompts 12 --max-concurrency 1 --seed 1 --output-file '
                              '/out/r1/bench_serving.jsonl --disable-tqdm --dataset-path '
                              '<root>/.cache/datasets/ShareGPT_V3_unfiltered_cleaned_split.json --output-details',
                    'probe': 'apptainer exec --cleanenv --rocm --bind '
                             '<root>/results/eagle_topk_greedy/arms/pr_rs_on:<root>/results/eagle_topk_greedy/arms/pr_rs_on,/models/GLM-5.2-MXFP4:/models/GLM-5.2-MXFP4:ro,<root>/.cache/datasets/ShareGPT_V3_unfiltered_cleaned_split.json:<root>/.cache/datasets/ShareGPT_V3_unfiltered_cleaned_split.json:ro,<root>/.cache/compile/feed:<root>/.cache/compile/feed,/probe:/opt/specrepro/facts:ro '
                             '--env HIP_VISIBLE_DEVICES= --env HOME=<root>/.cache/compile/feed/home --env '
                             'PYTHONUNBUFFERED=1 --env ROCR_VISIBLE_DEVICES=2,3 --env SGLANG_LOG_MS=1 --env '
                             'TORCHINDUCTOR_CACHE_DIR=<root>/.cache/compile/feed/inductor --env '
                             'TRITON_CACHE_DIR=<root>/.cache/compile/feed/triton --env TZ=UTC --env '
                             'XDG_CACHE_HOME=<root>/.cache/compile/feed/xdg sha256:feed python3 '
                             '/opt/specrepro/facts/probe.py x',
                    'stop': [],
                    'process_env': ['APPTAINERENV_HF_TOKEN=hf_x',
                                    'HF_TOKEN=hf_x',
                                    'OPENAI_API_KEY=sk_x',
                                    'PATH=/bin',
                                    'PYTHONDONTWRITEBYTECODE=1'],
                    'client_env': ['HOME=<root>/.cache/compile/feed/home',
                                   'PYTHONUNBUFFERED=1',
                                   'SGLANG_LOG_MS=1',
                                   'TORCHINDUCTOR_CACHE_DIR=<root>/.cache/compile/feed/inductor',
                                   'TRITON_CACHE_DIR=<root>/.cache/compile/feed/triton',
                                   'TZ=UTC',
                                   'XDG_CACHE_HOME=<root>/.cache/compile/feed/xdg']},
 'pyxis-rocm': {'server': "env 'HOME=<root>/.cache/compile/$IMAGE_ID/home' PYTHONUNBUFFERED=1 SGLANG_LOG_MS=1 "
                          "'TORCHINDUCTOR_CACHE_DIR=<root>/.cache/compile/$IMAGE_ID/inductor' "
                          "'TRITON_CACHE_DIR=<root>/.cache/compile/$IMAGE_ID/triton' TZ=UTC "
                          "'XDG_CACHE_HOME=<root>/.cache/compile/$IMAGE_ID/xdg' srun --ntasks=1 --overlap "
                          "'--container-image=$IMAGE' "
                          "'--container-name=specrepro-eagle_topk_greedy-pr_rs_on-$LAUNCH' "
                          "'--container-mounts=<root>/results/eagle_topk_greedy/arms/pr_rs_on:<root>/results/eagle_topk_greedy/arms/pr_rs_on,/models/GLM-5.2-MXFP4:/models/GLM-5.2-MXFP4:ro,<root>/.cache/datasets/ShareGPT_V3_unfiltered_cleaned_split.json:<root>/.cache/datasets/ShareGPT_V3_unfiltered_cleaned_split.json:ro,<root>/.cache/compile/$IMAGE_ID:<root>/.cache/compile/$IMAGE_ID' "
                          '--no-container-entrypoint --container-workdir=/ --export=ALL --gres=gpu:4 python3 -m '
                          'sglang.launch_server --model-path /models/GLM-5.2-MXFP4 --trust-remote-code --tp-size 4 '
                          '--ep-size 4 --kv-cache-dtype fp8_e4m3 --dsa-prefill-backend tilelang --dsa-decode-backend '
                          'tilelang --max-running-requests 8 --cuda-graph-max-bs-decode 8 --speculative-algorithm '
                          'EAGLE --speculative-num-steps 5 --speculative-eagle-topk 1 --speculative-num-draft-tokens '
                          "6 --speculative-use-rejection-sampling --host 127.0.0.1 --port '$PORT' --enable-metrics",
                'server_real': 'env HOME=<root>/.cache/compile/feed/home PYTHONUNBUFFERED=1 SGLANG_LOG_MS=1 '
                               'TORCHINDUCTOR_CACHE_DIR=<root>/.cache/compile/feed/inductor '
                               'TRITON_CACHE_DIR=<root>/.cache/compile/feed/triton TZ=UTC '
                               'XDG_CACHE_HOME=<root>/.cache/compile/feed/xdg srun --ntasks=1 --overlap '
                               '--container-image=sha256:feed '
                               '--container-name=specrepro-eagle_topk_greedy-pr_rs_on-abc123 '
                               '--container-mounts=<root>/results/eagle_topk_greedy/arms/pr_rs_on:<root>/results/eagle_topk_greedy/arms/pr_rs_on,/models/GLM-5.2-MXFP4:/models/GLM-5.2-MXFP4:ro,<root>/.cache/datasets/ShareGPT_V3_unfiltered_cleaned_split.json:<root>/.cache/datasets/ShareGPT_V3_unfiltered_cleaned_split.json:ro,<root>/.cache/compile/feed:<root>/.cache/compile/feed '
                               '--no-container-entrypoint --container-workdir=/ --export=ALL --gres=gpu:2 python3 -m '
                               'sglang.launch_server --model-path /models/GLM-5.2-MXFP4 --trust-remote-code '
                               '--tp-size 4 --ep-size 4 --kv-cache-dtype fp8_e4m3 --dsa-prefill-backend tilelang '
                               '--dsa-decode-backend tilelang --max-running-requests 8 --cuda-graph-max-bs-decode 8 '
                               '--speculative-algorithm EAGLE --speculative-num-steps 5 --speculative-eagle-topk 1 '
                               '--speculative-num-draft-tokens 6 --speculative-use-rejection-sampling --host '
                               '127.0.0.1 --port 30000 --enable-metrics',
                'client': "env 'HOME=<root>/.cache/compile/$IMAGE_ID/home' PYTHONUNBUFFERED=1 SGLANG_LOG_MS=1 "
                          "'TORCHINDUCTOR_CACHE_DIR=<root>/.cache/compile/$IMAGE_ID/inductor' "
                          "'TRITON_CACHE_DIR=<root>/.cache/compile/$IMAGE_ID/triton' TZ=UTC "
                          "'XDG_CACHE_HOME=<root>/.cache/compile/$IMAGE_ID/xdg' srun --ntasks=1 --overlap "
                          "'--container-image=$IMAGE' "
                          "'--container-name=specrepro-eagle_topk_greedy-pr_rs_on-$LAUNCH' "
                          "'--container-mounts=<root>/results/eagle_topk_greedy/arms/pr_rs_on:<root>/results/eagle_topk_greedy/arms/pr_rs_on,/models/GLM-5.2-MXFP4:/models/GLM-5.2-MXFP4:ro,<root>/.cache/datasets/ShareGPT_V3_unfiltered_cleaned_split.json:<root>/.cache/datasets/ShareGPT_V3_unfiltered_cleaned_split.json:ro,<root>/.cache/compile/$IMAGE_ID:<root>/.cache/compile/$IMAGE_ID' "
                          '--no-container-entrypoint --container-workdir=/ --export=ALL python3 -m '
                          "sglang.benchmark.serving --backend sglang --base-url 'http://127.0.0.1:$PORT' "
                          '--dataset-name random --random-input-len 1024 --random-output-len 512 '
                          '--random-range-ratio 1.0 --num-prompts 12 --max-concurrency 1 --seed 1 --output-file '
                          '/out/r1/bench_serving.jsonl --disable-tqdm --dataset-path '
                          '<root>/.cache/datasets/ShareGPT_V3_unfiltered_cleaned_split.json --output-details',
                'probe': 'env HIP_VISIBLE_DEVICES= HOME=<root>/.cache/compile/feed/home PYTHONUNBUFFERED=1 '
                         'SGLANG_LOG_MS=1 TORCHINDUCTOR_CACHE_DIR=<root>/.cache/compile/feed/inductor '
                         'TRITON_CACHE_DIR=<root>/.cache/compile/feed/triton TZ=UTC '
                         'XDG_CACHE_HOME=<root>/.cache/compile/feed/xdg srun --ntasks=1 --overlap '
                         '--container-image=sha256:feed '
                         '--container-name=specrepro-eagle_topk_greedy-pr_rs_on-abc123-facts '
                         '--container-mounts=<root>/results/eagle_topk_greedy/arms/pr_rs_on:<root>/results/eagle_topk_greedy/arms/pr_rs_on,/models/GLM-5.2-MXFP4:/models/GLM-5.2-MXFP4:ro,<root>/.cache/datasets/ShareGPT_V3_unfiltered_cleaned_split.json:<root>/.cache/datasets/ShareGPT_V3_unfiltered_cleaned_split.json:ro,<root>/.cache/compile/feed:<root>/.cache/compile/feed,/probe:/opt/specrepro/facts:ro '
                         '--no-container-entrypoint --container-workdir=/ --export=ALL --gres=gpu:2 python3 '
                         '/opt/specrepro/facts/probe.py x',
                'stop': [],
                'process_env': ['HF_TOKEN=hf_x', 'OPENAI_API_KEY=sk_x', 'PATH=/bin', 'PYTHONDONTWRITEBYTECODE=1'],
                'client_env': ['HOME=<root>/.cache/compile/feed/home',
                               'PYTHONUNBUFFERED=1',
                               'SGLANG_LOG_MS=1',
                               'TORCHINDUCTOR_CACHE_DIR=<root>/.cache/compile/feed/inductor',
                               'TRITON_CACHE_DIR=<root>/.cache/compile/feed/triton',
                               'TZ=UTC',
                               'XDG_CACHE_HOME=<root>/.cache/compile/feed/xdg']},
 'none-rocm': {'server': 'python3 -m sglang.launch_server --model-path /models/GLM-5.2-MXFP4 --trust-remote-code '
                         '--tp-size 4 --ep-size 4 --kv-cache-dtype fp8_e4m3 --dsa-prefill-backend tilelang '
                         '--dsa-decode-backend tilelang --max-running-requests 8 --cuda-graph-max-bs-decode 8 '
                         '--speculative-algorithm EAGLE --speculative-num-steps 5 --speculative-eagle-topk 1 '
                         '--speculative-num-draft-tokens 6 --speculative-use-rejection-sampling --host 127.0.0.1 '
                         "--port '$PORT' --enable-metrics",
               'server_real': 'python3 -m sglang.launch_server --model-path /models/GLM-5.2-MXFP4 '
                              '--trust-remote-code --tp-size 4 --ep-size 4 --kv-cache-dtype fp8_e4m3 '
                              '--dsa-prefill-backend tilelang --dsa-decode-backend tilelang --max-running-requests 8 '
                              '--cuda-graph-max-bs-decode 8 --speculative-algorithm EAGLE --speculative-num-steps 5 '
                              '--speculative-eagle-topk 1 --speculative-num-draft-tokens 6 '
                              '--speculative-use-rejection-sampling --host 127.0.0.1 --port 30000 --enable-metrics',
               'client': "python3 -m sglang.benchmark.serving --backend sglang --base-url 'http://127.0.0.1:$PORT' "
                         '--dataset-name random --random-input-len 1024 --random-output-len 512 --random-range-ratio '
                         '1.0 --num-prompts 12 --max-concurrency 1 --seed 1 --output-file '
                         '/out/r1/bench_serving.jsonl --disable-tqdm --dataset-path '
                         '<root>/.cache/datasets/ShareGPT_V3_unfiltered_cleaned_split.json --output-details',
               'probe': 'python3 /opt/specrepro/facts/probe.py x',
               'stop': [],
               'process_env': ['HF_TOKEN=hf_x',
                               'OPENAI_API_KEY=sk_x',
                               'PATH=/bin',
                               'PYTHONUNBUFFERED=1',
                               'ROCR_VISIBLE_DEVICES=2,3',
                               'SGLANG_LOG_MS=1',
                               'TZ=UTC'],
               'client_env': ['PYTHONUNBUFFERED=1', 'SGLANG_LOG_MS=1', 'TZ=UTC']},
 'docker-cuda': {'server': "docker run --rm --name 'specrepro-eagle_topk_greedy-pr_rs_on-$LAUNCH' --network host "
                           "--user '$USER' --label org.specrepro.campaign=eagle_topk_greedy --label "
                           "org.specrepro.arm=pr_rs_on --label 'org.specrepro.launch=$LAUNCH' --label "
                           "'org.specrepro.user=$OWNER' --gpus "
                           '\'"device=$GPU0,$GPU1,$GPU2,$GPU3,$GPU4,$GPU5,$GPU6,$GPU7"\' -v '
                           '<root>/results/eagle_topk_greedy/arms/pr_rs_on:<root>/results/eagle_topk_greedy/arms/pr_rs_on '
                           '-v '
                           '<root>/.cache/datasets/ShareGPT_V3_unfiltered_cleaned_split.json:<root>/.cache/datasets/ShareGPT_V3_unfiltered_cleaned_split.json:ro '
                           "-v '<root>/.cache/compile/$IMAGE_ID:<root>/.cache/compile/$IMAGE_ID' -v "
                           "'$SECRETS/HF_TOKEN:/run/specrepro/secrets/HF_TOKEN:ro' --ipc=host -e "
                           "'FLASHINFER_WORKSPACE_BASE=<root>/.cache/compile/$IMAGE_ID/flashinfer' -e "
                           'HF_TOKEN_PATH=/run/specrepro/secrets/HF_TOKEN -e '
                           "'HOME=<root>/.cache/compile/$IMAGE_ID/home' -e PYTHONUNBUFFERED=1 -e SGLANG_LOG_MS=1 -e "
                           "'TORCHINDUCTOR_CACHE_DIR=<root>/.cache/compile/$IMAGE_ID/inductor' -e "
                           "'TRITON_CACHE_DIR=<root>/.cache/compile/$IMAGE_ID/triton' -e TZ=UTC -e "
                           "'XDG_CACHE_HOME=<root>/.cache/compile/$IMAGE_ID/xdg' '$IMAGE' python3 -m "
                           'sglang.launch_server --model-path zai-org/GLM-5.2-FP8 --trust-remote-code --tp-size 8 '
                           '--max-running-requests 8 --cuda-graph-max-bs-decode 8 --speculative-algorithm EAGLE '
                           '--speculative-num-steps 5 --speculative-eagle-topk 1 --speculative-num-draft-tokens 6 '
                           "--speculative-use-rejection-sampling --host 127.0.0.1 --port '$PORT' --enable-metrics",
                 'server_real': 'docker run --rm --name specrepro-eagle_topk_greedy-pr_rs_on-abc123 --network host '
                                '--user 1000:1000 --label org.specrepro.campaign=eagle_topk_greedy --label '
                                'org.specrepro.arm=pr_rs_on --label org.specrepro.launch=abc123 --label '
                                'org.specrepro.user=1000 --gpus \'"device=2,3"\' -v '
                                '<root>/results/eagle_topk_greedy/arms/pr_rs_on:<root>/results/eagle_topk_greedy/arms/pr_rs_on '
                                '-v '
                                '<root>/.cache/datasets/ShareGPT_V3_unfiltered_cleaned_split.json:<root>/.cache/datasets/ShareGPT_V3_unfiltered_cleaned_split.json:ro '
                                '-v <root>/.cache/compile/feed:<root>/.cache/compile/feed -v '
                                '/run/user/1000/specrepro-secrets-1000/abc123/HF_TOKEN:/run/specrepro/secrets/HF_TOKEN:ro '
                                '--ipc=host -e FLASHINFER_WORKSPACE_BASE=<root>/.cache/compile/feed/flashinfer -e '
                                'HF_TOKEN_PATH=/run/specrepro/secrets/HF_TOKEN -e '
                                'HOME=<root>/.cache/compile/feed/home -e PYTHONUNBUFFERED=1 -e SGLANG_LOG_MS=1 -e '
                                'TORCHINDUCTOR_CACHE_DIR=<root>/.cache/compile/feed/inductor -e '
                                'TRITON_CACHE_DIR=<root>/.cache/compile/feed/triton -e TZ=UTC -e '
                                'XDG_CACHE_HOME=<root>/.cache/compile/feed/xdg sha256:feed python3 -m '
                                'sglang.launch_server --model-path zai-org/GLM-5.2-FP8 --trust-remote-code --tp-size '
                                '8 --max-running-requests 8 --cuda-graph-max-bs-decode 8 --speculative-algorithm '
                                'EAGLE --speculative-num-steps 5 --speculative-eagle-topk 1 '
                                '--speculative-num-draft-tokens 6 --speculative-use-rejection-sampling --host '
                                '127.0.0.1 --port 30000 --enable-metrics',
                 'client': "docker exec -e 'FLASHINFER_WORKSPACE_BASE=<root>/.cache/compile/$IMAGE_ID/flashinfer' -e "
                           "'HOME=<root>/.cache/compile/$IMAGE_ID/home' -e PYTHONUNBUFFERED=1 -e SGLANG_LOG_MS=1 -e "
                           "'TORCHINDUCTOR_CACHE_DIR=<root>/.cache/compile/$IMAGE_ID/inductor' -e "
                           "'TRITON_CACHE_DIR=<root>/.cache/compile/$IMAGE_ID/triton' -e TZ=UTC -e "
                           "'XDG_CACHE_HOME=<root>/.cache/compile/$IMAGE_ID/xdg' "
                           "'specrepro-eagle_topk_greedy-pr_rs_on-$LAUNCH' python3 -m sglang.benchmark.serving "
                           "--backend sglang --base-url 'http://127.0.0.1:$PORT' --dataset-name random "
                           '--random-input-len 1024 --random-output-len 512 --random-range-ratio 1.0 --num-prompts '
                           '12 --max-concurrency 1 --seed 1 --output-file /out/r1/bench_serving.jsonl --disable-tqdm '
                           '--dataset-path <root>/.cache/datasets/ShareGPT_V3_unfiltered_cleaned_split.json '
                           '--output-details',
                 'probe': 'docker run --rm --name specrepro-eagle_topk_greedy-pr_rs_on-abc123-facts --network host '
                          '--user 1000:1000 --label org.specrepro.campaign=eagle_topk_greedy --label '
                          'org.specrepro.arm=pr_rs_on --label org.specrepro.launch=abc123 --label '
                          'org.specrepro.user=1000 --gpus \'"device=2,3"\' -v '
                          '<root>/results/eagle_topk_greedy/arms/pr_rs_on:<root>/results/eagle_topk_greedy/arms/pr_rs_on '
                          '-v '
                          '<root>/.cache/datasets/ShareGPT_V3_unfiltered_cleaned_split.json:<root>/.cache/datasets/ShareGPT_V3_unfiltered_cleaned_split.json:ro '
                          '-v <root>/.cache/compile/feed:<root>/.cache/compile/feed -v '
                          '/probe:/opt/specrepro/facts:ro --ipc=host -e '
                          'FLASHINFER_WORKSPACE_BASE=<root>/.cache/compile/feed/flashinfer -e HIP_VISIBLE_DEVICES= '
                          '-e HOME=<root>/.cache/compile/feed/home -e PYTHONUNBUFFERED=1 -e SGLANG_LOG_MS=1 -e '
                          'TORCHINDUCTOR_CACHE_DIR=<root>/.cache/compile/feed/inductor -e '
                          'TRITON_CACHE_DIR=<root>/.cache/compile/feed/triton -e TZ=UTC -e '
                          'XDG_CACHE_HOME=<root>/.cache/compile/feed/xdg sha256:feed python3 '
                          '/opt/specrepro/facts/probe.py x',
                 'stop': ['docker stop -t 30 specrepro-eagle_topk_greedy-pr_rs_on-abc123',
                          'docker rm -f specrepro-eagle_topk_greedy-pr_rs_on-abc123'],
                 'process_env': ['HF_TOKEN=hf_x', 'OPENAI_API_KEY=sk_x', 'PATH=/bin', 'PYTHONDONTWRITEBYTECODE=1'],
                 'client_env': ['FLASHINFER_WORKSPACE_BASE=<root>/.cache/compile/feed/flashinfer',
                                'HOME=<root>/.cache/compile/feed/home',
                                'PYTHONUNBUFFERED=1',
                                'SGLANG_LOG_MS=1',
                                'TORCHINDUCTOR_CACHE_DIR=<root>/.cache/compile/feed/inductor',
                                'TRITON_CACHE_DIR=<root>/.cache/compile/feed/triton',
                                'TZ=UTC',
                                'XDG_CACHE_HOME=<root>/.cache/compile/feed/xdg']},
 'podman-cuda': {'server': "podman run --rm --name 'specrepro-eagle_topk_greedy-pr_rs_on-$LAUNCH' --network host "
                           "--user '$USER' --label org.specrepro.campaign=eagle_topk_greedy --label "
                           "org.specrepro.arm=pr_rs_on --label 'org.specrepro.launch=$LAUNCH' --label "
                           "'org.specrepro.user=$OWNER' '--device=nvidia.com/gpu=$GPU0' "
                           "'--device=nvidia.com/gpu=$GPU1' '--device=nvidia.com/gpu=$GPU2' "
                           "'--device=nvidia.com/gpu=$GPU3' '--device=nvidia.com/gpu=$GPU4' "
                           "'--device=nvidia.com/gpu=$GPU5' '--device=nvidia.com/gpu=$GPU6' "
                           "'--device=nvidia.com/gpu=$GPU7' -v "
                           '<root>/results/eagle_topk_greedy/arms/pr_rs_on:<root>/results/eagle_topk_greedy/arms/pr_rs_on '
                           '-v '
                           '<root>/.cache/datasets/ShareGPT_V3_unfiltered_cleaned_split.json:<root>/.cache/datasets/ShareGPT_V3_unfiltered_cleaned_split.json:ro '
                           "-v '<root>/.cache/compile/$IMAGE_ID:<root>/.cache/compile/$IMAGE_ID' -v "
                           "'$SECRETS/HF_TOKEN:/run/specrepro/secrets/HF_TOKEN:ro' --ipc=host -e "
                           "'FLASHINFER_WORKSPACE_BASE=<root>/.cache/compile/$IMAGE_ID/flashinfer' -e "
                           'HF_TOKEN_PATH=/run/specrepro/secrets/HF_TOKEN -e '
                           "'HOME=<root>/.cache/compile/$IMAGE_ID/home' -e PYTHONUNBUFFERED=1 -e SGLANG_LOG_MS=1 -e "
                           "'TORCHINDUCTOR_CACHE_DIR=<root>/.cache/compile/$IMAGE_ID/inductor' -e "
                           "'TRITON_CACHE_DIR=<root>/.cache/compile/$IMAGE_ID/triton' -e TZ=UTC -e "
                           "'XDG_CACHE_HOME=<root>/.cache/compile/$IMAGE_ID/xdg' '$IMAGE' python3 -m "
                           'sglang.launch_server --model-path zai-org/GLM-5.2-FP8 --trust-remote-code --tp-size 8 '
                           '--max-running-requests 8 --cuda-graph-max-bs-decode 8 --speculative-algorithm EAGLE '
                           '--speculative-num-steps 5 --speculative-eagle-topk 1 --speculative-num-draft-tokens 6 '
                           "--speculative-use-rejection-sampling --host 127.0.0.1 --port '$PORT' --enable-metrics",
                 'server_real': 'podman run --rm --name specrepro-eagle_topk_greedy-pr_rs_on-abc123 --network host '
                                '--user 1000:1000 --label org.specrepro.campaign=eagle_topk_greedy --label '
                                'org.specrepro.arm=pr_rs_on --label org.specrepro.launch=abc123 --label '
                                'org.specrepro.user=1000 --device=nvidia.com/gpu=2 --device=nvidia.com/gpu=3 -v '
                                '<root>/results/eagle_topk_greedy/arms/pr_rs_on:<root>/results/eagle_topk_greedy/arms/pr_rs_on '
                                '-v '
                                '<root>/.cache/datasets/ShareGPT_V3_unfiltered_cleaned_split.json:<root>/.cache/datasets/ShareGPT_V3_unfiltered_cleaned_split.json:ro '
                                '-v <root>/.cache/compile/feed:<root>/.cache/compile/feed -v '
                                '/run/user/1000/specrepro-secrets-1000/abc123/HF_TOKEN:/run/specrepro/secrets/HF_TOKEN:ro '
                                '--ipc=host -e FLASHINFER_WORKSPACE_BASE=<root>/.cache/compile/feed/flashinfer -e '
                                'HF_TOKEN_PATH=/run/specrepro/secrets/HF_TOKEN -e '
                                'HOME=<root>/.cache/compile/feed/home -e PYTHONUNBUFFERED=1 -e SGLANG_LOG_MS=1 -e '
                                'TORCHINDUCTOR_CACHE_DIR=<root>/.cache/compile/feed/inductor -e '
                                'TRITON_CACHE_DIR=<root>/.cache/compile/feed/triton -e TZ=UTC -e '
                                'XDG_CACHE_HOME=<root>/.cache/compile/feed/xdg sha256:feed python3 -m '
                                'sglang.launch_server --model-path zai-org/GLM-5.2-FP8 --trust-remote-code --tp-size '
                                '8 --max-running-requests 8 --cuda-graph-max-bs-decode 8 --speculative-algorithm '
                                'EAGLE --speculative-num-steps 5 --speculative-eagle-topk 1 '
                                '--speculative-num-draft-tokens 6 --speculative-use-rejection-sampling --host '
                                '127.0.0.1 --port 30000 --enable-metrics',
                 'client': "podman exec -e 'FLASHINFER_WORKSPACE_BASE=<root>/.cache/compile/$IMAGE_ID/flashinfer' -e "
                           "'HOME=<root>/.cache/compile/$IMAGE_ID/home' -e PYTHONUNBUFFERED=1 -e SGLANG_LOG_MS=1 -e "
                           "'TORCHINDUCTOR_CACHE_DIR=<root>/.cache/compile/$IMAGE_ID/inductor' -e "
                           "'TRITON_CACHE_DIR=<root>/.cache/compile/$IMAGE_ID/triton' -e TZ=UTC -e "
                           "'XDG_CACHE_HOME=<root>/.cache/compile/$IMAGE_ID/xdg' "
                           "'specrepro-eagle_topk_greedy-pr_rs_on-$LAUNCH' python3 -m sglang.benchmark.serving "
                           "--backend sglang --base-url 'http://127.0.0.1:$PORT' --dataset-name random "
                           '--random-input-len 1024 --random-output-len 512 --random-range-ratio 1.0 --num-prompts '
                           '12 --max-concurrency 1 --seed 1 --output-file /out/r1/bench_serving.jsonl --disable-tqdm '
                           '--dataset-path <root>/.cache/datasets/ShareGPT_V3_unfiltered_cleaned_split.json '
                           '--output-details',
                 'probe': 'podman run --rm --name specrepro-eagle_topk_greedy-pr_rs_on-abc123-facts --network host '
                          '--user 1000:1000 --label org.specrepro.campaign=eagle_topk_greedy --label '
                          'org.specrepro.arm=pr_rs_on --label org.specrepro.launch=abc123 --label '
                          'org.specrepro.user=1000 --device=nvidia.com/gpu=2 --device=nvidia.com/gpu=3 -v '
                          '<root>/results/eagle_topk_greedy/arms/pr_rs_on:<root>/results/eagle_topk_greedy/arms/pr_rs_on '
                          '-v '
                          '<root>/.cache/datasets/ShareGPT_V3_unfiltered_cleaned_split.json:<root>/.cache/datasets/ShareGPT_V3_unfiltered_cleaned_split.json:ro '
                          '-v <root>/.cache/compile/feed:<root>/.cache/compile/feed -v '
                          '/probe:/opt/specrepro/facts:ro --ipc=host -e '
                          'FLASHINFER_WORKSPACE_BASE=<root>/.cache/compile/feed/flashinfer -e HIP_VISIBLE_DEVICES= '
                          '-e HOME=<root>/.cache/compile/feed/home -e PYTHONUNBUFFERED=1 -e SGLANG_LOG_MS=1 -e '
                          'TORCHINDUCTOR_CACHE_DIR=<root>/.cache/compile/feed/inductor -e '
                          'TRITON_CACHE_DIR=<root>/.cache/compile/feed/triton -e TZ=UTC -e '
                          'XDG_CACHE_HOME=<root>/.cache/compile/feed/xdg sha256:feed python3 '
                          '/opt/specrepro/facts/probe.py x',
                 'stop': ['podman stop -t 30 specrepro-eagle_topk_greedy-pr_rs_on-abc123',
                          'podman rm -f --ignore specrepro-eagle_topk_greedy-pr_rs_on-abc123'],
                 'process_env': ['HF_TOKEN=hf_x', 'OPENAI_API_KEY=sk_x', 'PATH=/bin', 'PYTHONDONTWRITEBYTECODE=1'],
                 'client_env': ['FLASHINFER_WORKSPACE_BASE=<root>/.cache/compile/feed/flashinfer',
                                'HOME=<root>/.cache/compile/feed/home',
                                'PYTHONUNBUFFERED=1',
                                'SGLANG_LOG_MS=1',
                                'TORCHINDUCTOR_CACHE_DIR=<root>/.cache/compile/feed/inductor',
                                'TRITON_CACHE_DIR=<root>/.cache/compile/feed/triton',
                                'TZ=UTC',
                                'XDG_CACHE_HOME=<root>/.cache/compile/feed/xdg']},
 'apptainer-cuda': {'server': 'apptainer exec --cleanenv --nv --bind '
                              "'<root>/results/eagle_topk_greedy/arms/pr_rs_on:<root>/results/eagle_topk_greedy/arms/pr_rs_on,<root>/.cache/datasets/ShareGPT_V3_unfiltered_cleaned_split.json:<root>/.cache/datasets/ShareGPT_V3_unfiltered_cleaned_split.json:ro,<root>/.cache/compile/$IMAGE_ID:<root>/.cache/compile/$IMAGE_ID' "
                              "--env 'CUDA_VISIBLE_DEVICES=$GPU0,$GPU1,$GPU2,$GPU3,$GPU4,$GPU5,$GPU6,$GPU7' --env "
                              "'FLASHINFER_WORKSPACE_BASE=<root>/.cache/compile/$IMAGE_ID/flashinfer' --env "
                              "'HOME=<root>/.cache/compile/$IMAGE_ID/home' --env PYTHONUNBUFFERED=1 --env "
                              'SGLANG_LOG_MS=1 --env '
                              "'TORCHINDUCTOR_CACHE_DIR=<root>/.cache/compile/$IMAGE_ID/inductor' --env "
                              "'TRITON_CACHE_DIR=<root>/.cache/compile/$IMAGE_ID/triton' --env TZ=UTC --env "
                              "'XDG_CACHE_HOME=<root>/.cache/compile/$IMAGE_ID/xdg' '$IMAGE' python3 -m "
                              'sglang.launch_server --model-path zai-org/GLM-5.2-FP8 --trust-remote-code --tp-size 8 '
                              '--max-running-requests 8 --cuda-graph-max-bs-decode 8 --speculative-algorithm EAGLE '
                              '--speculative-num-steps 5 --speculative-eagle-topk 1 --speculative-num-draft-tokens 6 '
                              "--speculative-use-rejection-sampling --host 127.0.0.1 --port '$PORT' --enable-metrics",
                    'server_real': 'apptainer exec --cleanenv --nv --bind '
                                   '<root>/results/eagle_topk_greedy/arms/pr_rs_on:<root>/results/eagle_topk_greedy/arms/pr_rs_on,<root>/.cache/datasets/ShareGPT_V3_unfiltered_cleaned_split.json:<root>/.cache/datasets/ShareGPT_V3_unfiltered_cleaned_split.json:ro,<root>/.cache/compile/feed:<root>/.cache/compile/feed '
                                   '--env CUDA_VISIBLE_DEVICES=2,3 --env '
                                   'FLASHINFER_WORKSPACE_BASE=<root>/.cache/compile/feed/flashinfer --env '
                                   'HOME=<root>/.cache/compile/feed/home --env PYTHONUNBUFFERED=1 --env '
                                   'SGLANG_LOG_MS=1 --env '
                                   'TORCHINDUCTOR_CACHE_DIR=<root>/.cache/compile/feed/inductor --env '
                                   'TRITON_CACHE_DIR=<root>/.cache/compile/feed/triton --env TZ=UTC --env '
                                   'XDG_CACHE_HOME=<root>/.cache/compile/feed/xdg sha256:feed python3 -m '
                                   'sglang.launch_server --model-path zai-org/GLM-5.2-FP8 --trust-remote-code '
                                   '--tp-size 8 --max-running-requests 8 --cuda-graph-max-bs-decode 8 '
                                   '--speculative-algorithm EAGLE --speculative-num-steps 5 --speculative-eagle-topk '
                                   '1 --speculative-num-draft-tokens 6 --speculative-use-rejection-sampling --host '
                                   '127.0.0.1 --port 30000 --enable-metrics',
                    'client': 'apptainer exec --cleanenv --bind '
                              "'<root>/results/eagle_topk_greedy/arms/pr_rs_on:<root>/results/eagle_topk_greedy/arms/pr_rs_on,<root>/.cache/datasets/ShareGPT_V3_unfiltered_cleaned_split.json:<root>/.cache/datasets/ShareGPT_V3_unfiltered_cleaned_split.json:ro,<root>/.cache/compile/$IMAGE_ID:<root>/.cache/compile/$IMAGE_ID' "
                              "--env 'FLASHINFER_WORKSPACE_BASE=<root>/.cache/compile/$IMAGE_ID/flashinfer' --env "
                              "'HOME=<root>/.cache/compile/$IMAGE_ID/home' --env PYTHONUNBUFFERED=1 --env "
                              'SGLANG_LOG_MS=1 --env '
                              "'TORCHINDUCTOR_CACHE_DIR=<root>/.cache/compile/$IMAGE_ID/inductor' --env "
                              "'TRITON_CACHE_DIR=<root>/.cache/compile/$IMAGE_ID/triton' --env TZ=UTC --env "
                              "'XDG_CACHE_HOME=<root>/.cache/compile/$IMAGE_ID/xdg' '$IMAGE' python3 -m "
                              "sglang.benchmark.serving --backend sglang --base-url 'http://127.0.0.1:$PORT' "
                              '--dataset-name random --random-input-len 1024 --random-output-len 512 '
                              '--random-range-ratio 1.0 --num-prompts 12 --max-concurrency 1 --seed 1 --output-file '
                              '/out/r1/bench_serving.jsonl --disable-tqdm --dataset-path '
                              '<root>/.cache/datasets/ShareGPT_V3_unfiltered_cleaned_split.json --output-details',
                    'probe': 'apptainer exec --cleanenv --nv --bind '
                             '<root>/results/eagle_topk_greedy/arms/pr_rs_on:<root>/results/eagle_topk_greedy/arms/pr_rs_on,<root>/.cache/datasets/ShareGPT_V3_unfiltered_cleaned_split.json:<root>/.cache/datasets/ShareGPT_V3_unfiltered_cleaned_split.json:ro,<root>/.cache/compile/feed:<root>/.cache/compile/feed,/probe:/opt/specrepro/facts:ro '
                             '--env CUDA_VISIBLE_DEVICES=2,3 --env '
                             'FLASHINFER_WORKSPACE_BASE=<root>/.cache/compile/feed/flashinfer --env '
                             'HIP_VISIBLE_DEVICES= --env HOME=<root>/.cache/compile/feed/home --env '
                             'PYTHONUNBUFFERED=1 --env SGLANG_LOG_MS=1 --env '
                             'TORCHINDUCTOR_CACHE_DIR=<root>/.cache/compile/feed/inductor --env '
                             'TRITON_CACHE_DIR=<root>/.cache/compile/feed/triton --env TZ=UTC --env '
                             'XDG_CACHE_HOME=<root>/.cache/compile/feed/xdg sha256:feed python3 '
                             '/opt/specrepro/facts/probe.py x',
                    'stop': [],
                    'process_env': ['APPTAINERENV_HF_TOKEN=hf_x',
                                    'APPTAINERENV_OPENAI_API_KEY=sk_x',
                                    'HF_TOKEN=hf_x',
                                    'OPENAI_API_KEY=sk_x',
                                    'PATH=/bin',
                                    'PYTHONDONTWRITEBYTECODE=1'],
                    'client_env': ['FLASHINFER_WORKSPACE_BASE=<root>/.cache/compile/feed/flashinfer',
                                   'HOME=<root>/.cache/compile/feed/home',
                                   'PYTHONUNBUFFERED=1',
                                   'SGLANG_LOG_MS=1',
                                   'TORCHINDUCTOR_CACHE_DIR=<root>/.cache/compile/feed/inductor',
                                   'TRITON_CACHE_DIR=<root>/.cache/compile/feed/triton',
                                   'TZ=UTC',
                                   'XDG_CACHE_HOME=<root>/.cache/compile/feed/xdg']},
 'pyxis-cuda': {'server': "env 'FLASHINFER_WORKSPACE_BASE=<root>/.cache/compile/$IMAGE_ID/flashinfer' "
                          "'HOME=<root>/.cache/compile/$IMAGE_ID/home' PYTHONUNBUFFERED=1 SGLANG_LOG_MS=1 "
                          "'TORCHINDUCTOR_CACHE_DIR=<root>/.cache/compile/$IMAGE_ID/inductor' "
                          "'TRITON_CACHE_DIR=<root>/.cache/compile/$IMAGE_ID/triton' TZ=UTC "
                          "'XDG_CACHE_HOME=<root>/.cache/compile/$IMAGE_ID/xdg' srun --mpi=none --ntasks=1 --overlap "
                          "'--container-image=$IMAGE' "
                          "'--container-name=specrepro-eagle_topk_greedy-pr_rs_on-$LAUNCH' "
                          "'--container-mounts=<root>/results/eagle_topk_greedy/arms/pr_rs_on:<root>/results/eagle_topk_greedy/arms/pr_rs_on,<root>/.cache/datasets/ShareGPT_V3_unfiltered_cleaned_split.json:<root>/.cache/datasets/ShareGPT_V3_unfiltered_cleaned_split.json:ro,<root>/.cache/compile/$IMAGE_ID:<root>/.cache/compile/$IMAGE_ID' "
                          '--no-container-entrypoint --container-workdir=/ --export=ALL --gres=gpu:8 python3 -m '
                          'sglang.launch_server --model-path zai-org/GLM-5.2-FP8 --trust-remote-code --tp-size 8 '
                          '--max-running-requests 8 --cuda-graph-max-bs-decode 8 --speculative-algorithm EAGLE '
                          '--speculative-num-steps 5 --speculative-eagle-topk 1 --speculative-num-draft-tokens 6 '
                          "--speculative-use-rejection-sampling --host 127.0.0.1 --port '$PORT' --enable-metrics",
                'server_real': 'env FLASHINFER_WORKSPACE_BASE=<root>/.cache/compile/feed/flashinfer '
                               'HOME=<root>/.cache/compile/feed/home PYTHONUNBUFFERED=1 SGLANG_LOG_MS=1 '
                               'TORCHINDUCTOR_CACHE_DIR=<root>/.cache/compile/feed/inductor '
                               'TRITON_CACHE_DIR=<root>/.cache/compile/feed/triton TZ=UTC '
                               'XDG_CACHE_HOME=<root>/.cache/compile/feed/xdg srun --mpi=none --ntasks=1 --overlap '
                               '--container-image=sha256:feed '
                               '--container-name=specrepro-eagle_topk_greedy-pr_rs_on-abc123 '
                               '--container-mounts=<root>/results/eagle_topk_greedy/arms/pr_rs_on:<root>/results/eagle_topk_greedy/arms/pr_rs_on,<root>/.cache/datasets/ShareGPT_V3_unfiltered_cleaned_split.json:<root>/.cache/datasets/ShareGPT_V3_unfiltered_cleaned_split.json:ro,<root>/.cache/compile/feed:<root>/.cache/compile/feed '
                               '--no-container-entrypoint --container-workdir=/ --export=ALL --gres=gpu:2 python3 -m '
                               'sglang.launch_server --model-path zai-org/GLM-5.2-FP8 --trust-remote-code --tp-size '
                               '8 --max-running-requests 8 --cuda-graph-max-bs-decode 8 --speculative-algorithm '
                               'EAGLE --speculative-num-steps 5 --speculative-eagle-topk 1 '
                               '--speculative-num-draft-tokens 6 --speculative-use-rejection-sampling --host '
                               '127.0.0.1 --port 30000 --enable-metrics',
                'client': "env 'FLASHINFER_WORKSPACE_BASE=<root>/.cache/compile/$IMAGE_ID/flashinfer' "
                          "'HOME=<root>/.cache/compile/$IMAGE_ID/home' PYTHONUNBUFFERED=1 SGLANG_LOG_MS=1 "
                          "'TORCHINDUCTOR_CACHE_DIR=<root>/.cache/compile/$IMAGE_ID/inductor' "
                          "'TRITON_CACHE_DIR=<root>/.cache/compile/$IMAGE_ID/triton' TZ=UTC "
                          "'XDG_CACHE_HOME=<root>/.cache/compile/$IMAGE_ID/xdg' srun --mpi=none --ntasks=1 --overlap "
                          "'--container-image=$IMAGE' "
                          "'--container-name=specrepro-eagle_topk_greedy-pr_rs_on-$LAUNCH' "
                          "'--container-mounts=<root>/results/eagle_topk_greedy/arms/pr_rs_on:<root>/results/eagle_topk_greedy/arms/pr_rs_on,<root>/.cache/datasets/ShareGPT_V3_unfiltered_cleaned_split.json:<root>/.cache/datasets/ShareGPT_V3_unfiltered_cleaned_split.json:ro,<root>/.cache/compile/$IMAGE_ID:<root>/.cache/compile/$IMAGE_ID' "
                          '--no-container-entrypoint --container-workdir=/ --export=ALL python3 -m '
                          "sglang.benchmark.serving --backend sglang --base-url 'http://127.0.0.1:$PORT' "
                          '--dataset-name random --random-input-len 1024 --random-output-len 512 '
                          '--random-range-ratio 1.0 --num-prompts 12 --max-concurrency 1 --seed 1 --output-file '
                          '/out/r1/bench_serving.jsonl --disable-tqdm --dataset-path '
                          '<root>/.cache/datasets/ShareGPT_V3_unfiltered_cleaned_split.json --output-details',
                'probe': 'env FLASHINFER_WORKSPACE_BASE=<root>/.cache/compile/feed/flashinfer HIP_VISIBLE_DEVICES= '
                         'HOME=<root>/.cache/compile/feed/home PYTHONUNBUFFERED=1 SGLANG_LOG_MS=1 '
                         'TORCHINDUCTOR_CACHE_DIR=<root>/.cache/compile/feed/inductor '
                         'TRITON_CACHE_DIR=<root>/.cache/compile/feed/triton TZ=UTC '
                         'XDG_CACHE_HOME=<root>/.cache/compile/feed/xdg srun --mpi=none --ntasks=1 --overlap '
                         '--container-image=sha256:feed '
                         '--container-name=specrepro-eagle_topk_greedy-pr_rs_on-abc123-facts '
                         '--container-mounts=<root>/results/eagle_topk_greedy/arms/pr_rs_on:<root>/results/eagle_topk_greedy/arms/pr_rs_on,<root>/.cache/datasets/ShareGPT_V3_unfiltered_cleaned_split.json:<root>/.cache/datasets/ShareGPT_V3_unfiltered_cleaned_split.json:ro,<root>/.cache/compile/feed:<root>/.cache/compile/feed,/probe:/opt/specrepro/facts:ro '
                         '--no-container-entrypoint --container-workdir=/ --export=ALL --gres=gpu:2 python3 '
                         '/opt/specrepro/facts/probe.py x',
                'stop': [],
                'process_env': ['HF_TOKEN=hf_x', 'OPENAI_API_KEY=sk_x', 'PATH=/bin', 'PYTHONDONTWRITEBYTECODE=1'],
                'client_env': ['FLASHINFER_WORKSPACE_BASE=<root>/.cache/compile/feed/flashinfer',
                               'HOME=<root>/.cache/compile/feed/home',
                               'PYTHONUNBUFFERED=1',
                               'SGLANG_LOG_MS=1',
                               'TORCHINDUCTOR_CACHE_DIR=<root>/.cache/compile/feed/inductor',
                               'TRITON_CACHE_DIR=<root>/.cache/compile/feed/triton',
                               'TZ=UTC',
                               'XDG_CACHE_HOME=<root>/.cache/compile/feed/xdg']},
 'none-cuda': {'server': 'python3 -m sglang.launch_server --model-path zai-org/GLM-5.2-FP8 --trust-remote-code '
                         '--tp-size 8 --max-running-requests 8 --cuda-graph-max-bs-decode 8 --speculative-algorithm '
                         'EAGLE --speculative-num-steps 5 --speculative-eagle-topk 1 --speculative-num-draft-tokens '
                         "6 --speculative-use-rejection-sampling --host 127.0.0.1 --port '$PORT' --enable-metrics",
               'server_real': 'python3 -m sglang.launch_server --model-path zai-org/GLM-5.2-FP8 --trust-remote-code '
                              '--tp-size 8 --max-running-requests 8 --cuda-graph-max-bs-decode 8 '
                              '--speculative-algorithm EAGLE --speculative-num-steps 5 --speculative-eagle-topk 1 '
                              '--speculative-num-draft-tokens 6 --speculative-use-rejection-sampling --host '
                              '127.0.0.1 --port 30000 --enable-metrics',
               'client': "python3 -m sglang.benchmark.serving --backend sglang --base-url 'http://127.0.0.1:$PORT' "
                         '--dataset-name random --random-input-len 1024 --random-output-len 512 --random-range-ratio '
                         '1.0 --num-prompts 12 --max-concurrency 1 --seed 1 --output-file '
                         '/out/r1/bench_serving.jsonl --disable-tqdm --dataset-path '
                         '<root>/.cache/datasets/ShareGPT_V3_unfiltered_cleaned_split.json --output-details',
               'probe': 'python3 /opt/specrepro/facts/probe.py x',
               'stop': [],
               'process_env': ['CUDA_DEVICE_ORDER=PCI_BUS_ID',
                               'CUDA_VISIBLE_DEVICES=2,3',
                               'HF_TOKEN=hf_x',
                               'OPENAI_API_KEY=sk_x',
                               'PATH=/bin',
                               'PYTHONUNBUFFERED=1',
                               'SGLANG_LOG_MS=1',
                               'TZ=UTC'],
               'client_env': ['PYTHONUNBUFFERED=1', 'SGLANG_LOG_MS=1', 'TZ=UTC']}}


@pytest.mark.parametrize("case", sorted(CASES))
def test_each_runtimes_command_lines_are_the_ones_the_launcher_built_before(case):
    assert runtime_argvs(CASES[case]) == GOLDEN[case]
