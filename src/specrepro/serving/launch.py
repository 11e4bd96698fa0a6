"""The one command builder: what `plan` prints, what Snakemake shows, and what runs.

A server launch is the arm's sglang command wrapped for the platform's
container runtime, with everything the container needs and nothing more:

- mounts: the arm's results folder (read-write), every local model path in the
  server arguments and every benchmark data file the client reads inside the
  container (read-only, same path inside), the model hub cache (`platform.hf_home`),
  a compile cache per image under `cache_dir/compile/` (Triton, inductor, aiter
  JIT caches survive relaunches), and `platform.mounts`;
- GPUs: exactly the ones the job was granted (Slurm's `SLURM_JOB_GPUS`,
  `ROCR_VISIBLE_DEVICES`, ... or `serve.gpus` on one host): ROCm containers get
  `/dev/kfd` and those GPUs' render nodes, CUDA docker `--gpus "device=..."`,
  podman CDI devices, apptainer and pyxis the visible-devices variable;
- the caller's uid:gid (`serve.container_user`), a label per campaign, arm,
  launch and owner (the caller's uid: preflight removes the caller's own stale
  containers by label, never another user's), host networking;
- secrets (`platform.passthrough_env`): never a value on a command line or in a
  log.  docker and podman show every `-e` value to whoever may `inspect` the
  container, so there each secret is a read-only file mounted from a private
  per-launch folder on the node, and the variable its reader takes a path from
  is set (HF_TOKEN -> HF_TOKEN_PATH, which huggingface_hub reads).

What differs per runtime (its argv, GPU flags or variables, secrets, stop commands) is the runtime object's
(`Launcher.runtime`, specrepro/runtimes/): this module assembles the launch's values and hands them over.

`plan` calls the same functions with symbolic values ($PORT, $GPU0, $IMAGE, ...);
every launch records the values it used, so the printed argv with those values
substituted is the argv that ran (tests hold them equal).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

from specrepro.core.arm_plan import ArmPlan, BenchRun
# LaunchError, Mount, RuntimeUnreachable, secrets_root: callers and tests import them from here too
from specrepro.runtimes import Invocation, LaunchError, Mount, RuntimeUnreachable, runtime_for, secrets_root
from specrepro.runtimes.base import LABEL_PREFIX
from specrepro.measure import node_facts

# Server arguments whose value may be a local path the server reads.
PATH_ARGS = ("model_path", "tokenizer_path", "speculative_draft_model_path")
GpuIndex = Union[int, str]


def check_runtime(plat: Dict[str, Any]) -> str:
    """The platform's runtime answers on this host (its engine's version; "" where there is no engine to ask), or
    RuntimeUnreachable naming where it looked."""
    return runtime_for(plat).check_reachable()


@dataclass
class LaunchContext:
    """The values one launch runs with; symbolic ($NAME) in a plan."""

    port: Union[int, str]
    launch_id: str
    image: str = ""
    image_id: str = ""
    gpus: List[GpuIndex] = field(default_factory=list)
    gpu_source: str = ""
    user: str = ""
    # each granted GPU's DRI render minor, read from the node's KFD topology (node_facts); $RENDER<i> in a plan
    renders: List[GpuIndex] = field(default_factory=list)
    # the group that owns the node's GPU device files (root:render 0660 on current ROCm hosts); $DEVICE_GID in a plan
    device_gid: Union[int, str, None] = None
    # the caller's uid, the container's owner label (preflight removes only its owner's stale containers); $OWNER
    owner: str = field(default_factory=lambda: str(os.getuid()))
    # this launch's private folder of secret files on the node; $SECRETS in a plan
    secrets_dir: str = ""

    def __post_init__(self):
        if not self.secrets_dir and not str(self.launch_id).startswith("$"):
            self.secrets_dir = str(secrets_root() / str(self.launch_id))

    def substitutions(self, plan: ArmPlan) -> Dict[str, str]:
        """Symbol -> value, to turn the arm's planned argv into this launch's."""
        sym = planned_context(plan)
        subs = {str(sym.port): str(self.port), sym.launch_id: self.launch_id, sym.image: self.image,
                sym.user: self.user, sym.image_id: _cache_key(self.image_id), sym.owner: self.owner,
                sym.secrets_dir: self.secrets_dir}
        for s, real in zip(sym.gpus, self.gpus):
            subs[str(s)] = str(real)
        for s, real in zip(sym.renders, self.renders):
            subs[str(s)] = str(real)
        if sym.device_gid:
            subs[str(sym.device_gid)] = str(self.device_gid)
        return subs


def planned_context(plan: ArmPlan) -> LaunchContext:
    """The arm's launch with a symbol for every value known only at launch."""
    n = plan.gpus_needed
    return LaunchContext(port=plan.serve["port"] or "$PORT", launch_id="$LAUNCH", image="$IMAGE",
                         image_id="$IMAGE_ID", gpus=[f"$GPU{i}" for i in range(n)], gpu_source="plan", user="$USER",
                         renders=[f"$RENDER{i}" for i in range(n)], owner="$OWNER", secrets_dir="$SECRETS",
                         device_gid="$DEVICE_GID" if plan.platform.get("gpu_device_pattern") and n else None)


def substitute(argv: Sequence[str], subs: Dict[str, str]) -> List[str]:
    """Replace symbols in a planned argv; longest first so $GPU1 never eats $GPU10."""
    keys = sorted((k for k in subs if k), key=len, reverse=True)
    out = []
    for token in argv:
        for k in keys:
            token = token.replace(k, subs[k])
        out.append(token)
    return out


def parse_gpu_list(text: str, source: str, plat: Optional[Dict[str, Any]] = None) -> List[int]:
    """Indices (and Slurm ranges); on a ROCm node also device files and UUIDs, mapped through its KFD topology."""
    items = [x.strip() for x in text.split(",") if x.strip()]
    out: List[int] = []
    for item in items:
        m = re.fullmatch(r"(\d+)-(\d+)", item)
        if item.isdigit() or m:
            out += [int(item)] if item.isdigit() else list(range(int(m.group(1)), int(m.group(2)) + 1))
            continue
        if plat is not None and plat["accelerator"] == "rocm":

            try:
                (gpu,) = node_facts.grant(node_facts.rocm_gpus(Path(plat.get("node_root") or "/")),
                                          {source: item})["gpus"]
            except node_facts.NodeFactsError as exc:
                raise LaunchError(str(exc)) from None
            out.append(gpu.index)
            continue
        raise LaunchError(f"{source}={text!r}: GPU indices expected (set serve.gpus, or configure Slurm to give "
                          f"indices)")
    return out


def job_context(plan: ArmPlan, image: Dict[str, Any], gpus: List[int], gpu_source: str = "",
                port: Union[int, str] = 0, launch_id: Optional[str] = None) -> LaunchContext:
    """One launch's context on this node, made once for every container a measuring job starts (server, preflight,
    GPU facts, GPU check): its image, the caller, the granted GPUs and what their device files need."""
    import uuid

    return LaunchContext(port=port, launch_id=launch_id or uuid.uuid4().hex[:12], image=image.get("image", ""),
                         image_id=image.get("image_id", ""), gpus=list(gpus), gpu_source=gpu_source,
                         user=caller_user(plan.serve), **device_context(plan.platform, list(gpus)))


def device_context(plat: Dict[str, Any], gpus: List[int]) -> Dict[str, Any]:
    """What a launch's device flags need from the node: the granted GPUs' render minors (KFD topology) and the
    group owning the device files (every one of them must share it, else a non-root server cannot open them all)."""
    pattern = plat.get("gpu_device_pattern") or ""
    if not gpus or not pattern:
        return {"renders": [], "device_gid": None}
    renders = render_minors(plat, gpus) if "{render}" in pattern else []
    hosts = [d.split(":")[0] for d in (plat.get("gpu_shared_devices") or [])]
    hosts += [pattern.format(index=g, render=r).split(":")[0] for g, r in zip(gpus, renders or [None] * len(gpus))]
    groups = {}
    for path in hosts:
        try:
            groups[path] = os.stat(path).st_gid
        except OSError as exc:
            raise LaunchError(f"GPU device file {path} is not on this node ({exc.strerror}); `specrepro node-facts` "
                              f"shows the node's GPUs") from None
    if len(set(groups.values())) > 1:
        raise LaunchError(f"the GPU device files belong to different groups ({groups}): a container can be given one; "
                          f"make them share the render group, or run the server as root (serve.container_user=0:0)")
    return {"renders": renders, "device_gid": next(iter(groups.values()))}


def render_minors(plat: Dict[str, Any], gpus: List[int]) -> List[int]:
    """The DRI render minor of each granted GPU, as the node's own KFD topology says (not 128 + index: the driver
    leaves gaps for partitions, and in CPX mode one physical GPU is several agents)."""

    try:
        table = node_facts.rocm_gpus(Path(plat.get("node_root") or "/"))
    except node_facts.NodeFactsError as exc:
        raise LaunchError(f"platform.node_root: {exc}") from None
    missing = [g for g in gpus if g >= len(table)]
    if missing:
        raise LaunchError(f"GPUs {missing} are not on this node: its KFD topology lists {len(table)} GPU agents "
                          f"(`specrepro node-facts` shows them)")
    return [table[g].render_minor for g in gpus]


def granted_gpus(plan: ArmPlan, environ: Optional[Dict[str, str]] = None,
                 needed: Optional[int] = None) -> Tuple[List[int], str]:
    """The node GPUs this job may use (`needed`, default model.gpus), and where that came from."""
    environ = os.environ if environ is None else environ
    plat = plan.platform
    needed = plan.model_gpus if needed is None else needed
    if plat["accelerator"] == "none":
        return [], "no accelerator"
    gpus, source = None, ""
    for name in plat["gpu_grant_env"]:
        if environ.get(name, "").strip():
            gpus, source = parse_gpu_list(environ[name], name, plat), name
            break
    if gpus is None and plan.serve.get("gpus") is not None:
        gpus, source = list(plan.serve["gpus"]), "serve.gpus"
    if gpus is None and plat.get("gpus_from_node"):

        try:
            gpus, source = [g.index for g in node_facts.node_gpus(plat["accelerator"],
                                                                  Path(plat.get("node_root") or "/"))], "node"
        except node_facts.NodeFactsError as exc:
            raise LaunchError(f"platform.gpus_from_node: this host's GPUs cannot be read: {exc}") from None
    if gpus is None:
        raise LaunchError(f"no GPUs granted to this job: none of {plat['gpu_grant_env']} is set (Slurm sets them "
                          f"with --gres=gpu:N); on one host without a scheduler set serve.gpus=[0,1,...]")
    if len(gpus) < needed:
        raise LaunchError(f"{source}={','.join(map(str, gpus))}: {len(gpus)} GPUs granted, this job needs {needed} "
                          f"(model.gpus={plan.model_gpus})")
    return gpus[:needed], source


def caller_user(serve: Dict[str, Any]) -> str:
    user = serve.get("container_user") or "caller"
    return f"{os.getuid()}:{os.getgid()}" if user == "caller" else user


def _cache_key(image_id: str) -> str:
    if image_id.startswith("$"):
        return image_id  # a plan's symbol
    return re.sub(r"[^A-Za-z0-9_.-]", "_", image_id.split(":")[-1])[:24] or "none"


class Launcher:
    """Command lines of one arm's server and clients on its platform; the runtime (`self.runtime`, a
    specrepro.runtimes.Runtime) wraps them."""

    def __init__(self, plan: ArmPlan):
        self.plan = plan
        self.plat = plan.platform
        self.runtime = runtime_for(self.plat)
        self.arm = plan.name

    # --- pieces ---------------------------------------------------------------
    def runtime_command(self) -> List[str]:
        return self.runtime.command()

    def container_name(self, ctx: LaunchContext) -> str:
        return f"specrepro-{self.plan.campaign}-{self.arm}-{ctx.launch_id}"

    def labels(self, ctx: LaunchContext) -> Dict[str, str]:
        return {f"{LABEL_PREFIX}.campaign": self.plan.campaign, f"{LABEL_PREFIX}.arm": self.arm,
                f"{LABEL_PREFIX}.launch": ctx.launch_id, f"{LABEL_PREFIX}.user": ctx.owner}

    def compile_cache(self, ctx: LaunchContext) -> Path:
        return Path(self.plan.cache_dir) / "compile" / _cache_key(ctx.image_id)

    def mounts(self, ctx: LaunchContext) -> List[Mount]:
        out = [Mount(str(self.plan.arm_dir), str(self.plan.arm_dir), False)]
        for key in PATH_ARGS:
            value = self.plan.server_args.get(key)
            if isinstance(value, str) and value.startswith("/"):
                out.append(Mount(value, value, True))
        for files in self.plan.client_data.values():
            for path in files:
                out.append(Mount(path, path, True))
        if self.plat.get("hf_home"):
            out.append(Mount(self.plat["hf_home"], self.plat["hf_home"], False))
        if self.plat.get("compile_cache_env"):
            cache = str(self.compile_cache(ctx))
            out.append(Mount(cache, cache, False))
        for spec in self.plat.get("mounts") or []:
            parts = spec.split(":")
            if not parts[0].startswith("/") or len(parts) > 3 or (len(parts) == 3 and parts[2] not in ("ro", "rw")):
                raise LaunchError(f"platform.mounts: {spec!r} is not `/host/path[:/container/path][:ro|rw]`")
            container = parts[1] if len(parts) > 1 and parts[1] not in ("ro", "rw") else parts[0]
            out.append(Mount(parts[0], container, spec.endswith(":ro")))
        unique: Dict[str, Mount] = {}
        for m in out:
            unique.setdefault(m.container, m)
        return list(unique.values())

    def prepare(self, ctx: LaunchContext) -> None:
        """Create the read-write mount sources a container needs; refuse a missing read-only one where the runtime
        would mishandle it (podman refuses it, docker silently creates an empty root-owned folder: the server would
        then see no model)."""
        if not self.runtime.is_bare and self.plat.get("compile_cache_env"):
            (self.compile_cache(ctx) / "home").mkdir(parents=True, exist_ok=True)
        self.plan.arm_dir.mkdir(parents=True, exist_ok=True)
        self.runtime.refuse_missing_mounts(lambda: [m.host for m in self.mounts(ctx) if not os.path.exists(m.host)])

    # --- secrets: the runtime's way (docker, podman: read-only files) ----------------
    def secret_mounts(self, ctx: LaunchContext) -> Tuple[List[Mount], Dict[str, str]]:
        """Each secret as a read-only file, and the variables that name those files inside the container."""
        return self.runtime.secret_mounts(ctx.secrets_dir)

    def write_secrets(self, ctx: LaunchContext, environ: Optional[Dict[str, str]] = None) -> None:
        """This launch's secrets where its server reads them (docker, podman: a private folder of files)."""
        self.runtime.write_secrets(ctx.secrets_dir, ctx.user, os.environ if environ is None else environ)

    def remove_secrets(self, ctx: LaunchContext) -> None:
        self.runtime.remove_secrets(ctx.secrets_dir)

    def env(self, ctx: LaunchContext, client: bool = False) -> Dict[str, str]:
        """Environment inside the server (or client) process: values, never secrets."""
        env = {k: str(v) for k, v in (self.plat.get("server_env") or {}).items()}
        # Millisecond timestamps in the log; UTC so windows compare across hosts.
        env.update(SGLANG_LOG_MS="1", TZ="UTC", PYTHONUNBUFFERED="1")
        if self.plan.offline:
            env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
        if self.plat.get("hf_home"):
            env["HF_HOME"] = self.plat["hf_home"]
        if self.plat.get("compile_cache_env") and not self.runtime.is_bare:
            cache = self.compile_cache(ctx)
            env.update({name: str(cache / sub) for name, sub in self.plat["compile_cache_env"].items()})
            # A non-root user in an image built for root needs a writable HOME.
            env["HOME"] = str(cache / "home")
        if not client:
            env.update(self.runtime.gpu_env(ctx.gpus, ctx.gpu_source))
        return env

    def device_files(self, ctx: LaunchContext) -> List[str]:
        """The device files a container of this launch gets, `host[:container]` (ROCm: /dev/kfd and the granted
        GPUs' render nodes, by the minors the node's KFD topology gives)."""
        if not ctx.gpus or self.plat["accelerator"] == "none" or not self.plat.get("gpu_device_pattern"):
            return []
        devices = list(self.plat.get("gpu_shared_devices") or [])
        renders = ctx.renders or [None] * len(ctx.gpus)
        for g, render in zip(ctx.gpus, renders):
            devices.append(self.plat["gpu_device_pattern"].format(index=g, render=render))
        return devices

    def server_command(self, ctx: LaunchContext, python: str) -> List[str]:
        head = [part.replace("{python}", python) for part in self.plat["server_command"]]
        return head + self.plan.server_flags(ctx.port)

    # --- whole command lines --------------------------------------------------------
    def server_argv(self, ctx: LaunchContext, python: Optional[str] = None) -> List[str]:
        python = python or self.plan.python
        inner = self.server_command(ctx, python)
        return self.wrap(ctx, inner, server=True)

    def wrap(self, ctx: LaunchContext, inner: List[str], server: bool,
             extra_mounts: Sequence[Mount] = (), name_suffix: str = "",
             extra_env: Optional[Dict[str, str]] = None) -> List[str]:
        """`inner` run by the platform: as the server's container, or next to it (a client).  The server's own
        container (no name suffix) gets the secrets; probes next to it (preflight, GPU facts) do not."""
        if self.runtime.is_bare:
            return inner
        return self.runtime.wrap(Invocation(
            inner=inner, image=ctx.image, name=self.container_name(ctx) + name_suffix, user=ctx.user,
            env={**self.env(ctx, client=not server), **(extra_env or {})},
            mounts=self.mounts(ctx) + list(extra_mounts), labels=self.labels(ctx), gpus=list(ctx.gpus),
            device_files=self.device_files(ctx), device_gid=ctx.device_gid, own_container=server,
            secrets_dir=ctx.secrets_dir, with_secrets=server and not name_suffix))

    def client_argv(self, ctx: LaunchContext, run: BenchRun, out_dir: str, python: Optional[str] = None) -> List[str]:
        """A benchmark repeat's client, as its kind gives it: on the host (plain HTTP) or beside the server (wrapped
        by the runtime, the client data mounted)."""
        base_url = f"http://{self.plan.serve['host']}:{ctx.port}"
        step = self.plan.client_step(run, base_url, out_dir, python=python)
        return self.wrap(ctx, step.argv, server=False) if step.beside_server else step.argv

    def stop_argv(self, ctx: LaunchContext, grace_s: float) -> List[List[str]]:
        return self.runtime.stop_argv(self.container_name(ctx), grace_s)

    def process_env(self, ctx: LaunchContext, base: Optional[Dict[str, str]] = None) -> Dict[str, str]:
        """Environment of the process specrepro starts (the runtime, or a bare server)."""
        env = dict(os.environ if base is None else base)
        return self.runtime.process_env(env, self.env(ctx))
