"""What docker and podman share: long-lived named containers, an image store per node, secrets as files.

docker and podman name images two ways: the image ID (the sha256 of the image's config: content-addressed, kept by
`save`/`load` and by a pull) and the repository digest (the registry manifest's sha256, known only for an image
pulled from or pushed to a registry).  A base with a repository digest is pinned by it and pulled by it on the
nodes; one without (`docker import`, `load`, a local build: no registry here) is pinned by its image ID and reaches
the nodes as an archive, since no registry can serve it.  Either way every build names the base by a node-local tag
made from its ID (`localhost/specrepro/base:<id>`), so a build never asks a registry (BuildKit would look
`FROM sha256:<id>` up on Docker Hub), and the result is held to the base's layers (its RootFS layers are the built
image's first ones).  Builds run with `--network=none`: the patch step needs no network, and a daemon without a
bridge network (`dockerd --bridge=none`) has nothing else to give a BuildKit build.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path
from typing import IO, Any, Callable, Dict, List, Optional, Sequence, Tuple

from specrepro.util.fileio import locked
from specrepro.util.procs import run_logged
from specrepro.runtimes.base import (LABEL_PREFIX, SECRETS_INSIDE, GpuIndex, ImageError, Invocation, LaunchError, Mount,
                                     PatchedBuild, Runtime, RuntimeUnreachable, env_flags, safe_name, secret_specs,
                                     secrets_root)

# What docker (20.10, 28) and podman (4) say for an image this store lacks; any other failure is an error.
NO_SUCH_IMAGE = re.compile(r"no such (image|object)|image not known|failed to find image", re.I)


class OciRuntime(Runtime):
    """docker and podman: a named container per launch, run by an engine with its own image store on each node."""

    # what the runtime does with a mount source missing on the node, for the error that refuses it
    missing_mount_source: str = ""

    # --- what differs between docker and podman ------------------------------------
    def version_argv(self, rt: List[str]) -> List[str]:
        raise NotImplementedError

    def endpoint(self) -> str:
        """Where the CLI looks for its engine, in the words a user sets it with, when runtime_command does not say."""
        raise NotImplementedError

    def unreachable_hint(self) -> str:
        raise NotImplementedError

    def nvidia_gpu_args(self, gpus: Sequence[GpuIndex]) -> List[str]:
        raise NotImplementedError

    def remove_argv(self, rt: List[str], name: str) -> List[str]:
        return [*rt, "rm", "-f", name]

    # --- config -------------------------------------------------------------------
    def config_problems(self) -> List[str]:
        problems = super().config_problems()
        for name, var in secret_specs(self.plat):
            if not var:
                problems.append(f"platform.passthrough_env: {name}: `{self.name} inspect` shows every "
                                f"-e value of a container to whoever may use the runtime, so specrepro hands secrets to "
                                f"the server as read-only files; write it as {name}:VARIABLE, VARIABLE being the one "
                                f"through which the server reads it from a file (HF_TOKEN needs none: HF_TOKEN_PATH)")
        return problems

    # --- launch -------------------------------------------------------------------
    def wrap(self, inv: Invocation) -> List[str]:
        rt = self.command()
        if not inv.own_container:
            return [*rt, "exec", *env_flags("-e", inv.env), inv.name, *inv.inner]
        mounts, env = list(inv.mounts), dict(inv.env)
        if inv.with_secrets:
            secret_mounts, secret_env = self.secret_mounts(inv.secrets_dir)
            mounts += secret_mounts
            env.update(secret_env)
        argv = [*rt, "run", "--rm", "--name", inv.name, "--network", "host", "--user", inv.user]
        for k, v in inv.labels.items():
            argv += ["--label", f"{k}={v}"]
        argv += self.gpu_args(inv)
        for m in mounts:
            argv += ["-v", m.spec()]
        argv += list(self.plat.get("runtime_run_args") or [])
        # Secrets are files (secret_mounts): `inspect` shows every -e value, even one passed by name.
        argv += env_flags("-e", env)
        return argv + [inv.image] + inv.inner

    def gpu_args(self, inv: Invocation) -> List[str]:
        if not inv.gpus or self.plat["accelerator"] == "none":
            return []
        if self.plat.get("gpu_device_pattern"):
            # the device files' own group (numeric: the image has no such name), so a non-root server opens them
            group = ["--group-add", str(inv.device_gid)] if inv.device_gid not in (None, "") else []
            return [f"--device={d}" for d in inv.device_files] + group
        return self.nvidia_gpu_args(inv.gpus)

    def stop_argv(self, name: str, grace_s: float) -> List[List[str]]:
        rt = self.command()
        return [[*rt, "stop", "-t", str(int(grace_s)), name], self.remove_argv(rt, name)]

    def refuse_missing_mounts(self, missing: Callable[[], List[str]]) -> None:
        hosts = missing()
        if hosts:
            raise LaunchError(f"mount sources not on this node: {hosts} (model.server_args paths, "
                              f"benchmarks.*.serving.dataset_path, platform.mounts); {self.name} "
                              + self.missing_mount_source)

    # --- secrets: read-only files, since `inspect` shows every -e value ---------------
    def secret_mounts(self, secrets_dir: str) -> Tuple[List[Mount], Dict[str, str]]:
        mounts, env = [], {}
        for name, var in secret_specs(self.plat):
            if not var:
                raise LaunchError(f"platform.passthrough_env: {name} has no file variable; `{self.name} inspect` "
                                  f"shows every -e value, so write it as {name}:VARIABLE (the variable through which "
                                  f"the server reads it from a file)")
            inside = f"{SECRETS_INSIDE}/{name}"
            mounts.append(Mount(f"{secrets_dir}/{name}", inside, True))
            env[var] = inside
        return mounts, env

    def write_secrets(self, secrets_dir: str, user: str, environ: Dict[str, str]) -> None:
        """A fresh folder only the caller reads, each file its value (empty when unset here: huggingface_hub reads
        an empty token file as no token), readable by the server's user only."""
        if not secret_specs(self.plat):
            return
        folder = Path(secrets_dir)
        folder.parent.mkdir(mode=0o700, exist_ok=True)
        st = folder.parent.stat()
        if st.st_uid != os.getuid() or st.st_mode & 0o077:
            raise LaunchError(f"{folder.parent} is not a folder only you can read (owner {st.st_uid}, mode "
                              f"{oct(st.st_mode & 0o777)}): refusing to put secrets there")
        folder.mkdir(mode=0o700)
        uid, _, gid = user.partition(":")
        for name, _var in secret_specs(self.plat):
            fd = os.open(folder / name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o400)
            try:
                os.write(fd, environ.get(name, "").encode())
                if os.getuid() == 0 and uid.isdigit() and int(uid) != 0:
                    os.fchown(fd, int(uid), int(gid) if gid.isdigit() else -1)
            finally:
                os.close(fd)

    # --- engine and node ------------------------------------------------------------
    def check_reachable(self) -> str:
        """The engine answers on this host (docker: its daemon at DOCKER_HOST or the default socket), or
        RuntimeUnreachable naming where it looked; returns the engine's version.  Called before an image is built,
        pulled, loaded or run, so a dead daemon is an error in seconds, before any GPU time."""
        rt = self.command()
        argv = self.version_argv(rt)
        where = command_endpoint(rt) or self.endpoint()
        try:
            proc = subprocess.run(argv, capture_output=True, text=True, timeout=60)
        except FileNotFoundError:
            raise RuntimeUnreachable(f"platform.container_runtime={self.name}: `{rt[0]}` is not installed on this "
                                     f"host (PATH, or platform.runtime_command)") from None
        except subprocess.TimeoutExpired:
            raise RuntimeUnreachable(f"{self.name} did not answer within 60 s at {where}: `{' '.join(argv)}` "
                                     f"hung") from None
        if proc.returncode != 0 or not proc.stdout.strip():
            said = (proc.stderr or proc.stdout).strip().splitlines()
            raise RuntimeUnreachable(f"{self.name} is not reachable at {where}: {' / '.join(said[-3:])[:500]}; "
                                     f"{self.unreachable_hint()}. Nothing was built or started.")
        return proc.stdout.strip()

    def labelled_containers(self, scope: str) -> Dict[str, Dict[str, str]]:
        """Containers carrying a label `scope` selects, each with its labels."""
        rt = self.command()
        found = subprocess.run([*rt, "ps", "--all", "--filter", scope, "--format", "{{.Names}}"],
                               capture_output=True, text=True)
        if found.returncode != 0:
            raise LaunchError(f"`{' '.join(rt)} ps` failed: {found.stderr.strip()[:300]}")
        names = found.stdout.split()
        if not names:
            return {}
        # one container's labels a line; a container gone meanwhile only prints an error for itself
        shown = subprocess.run([*rt, "inspect", "--format", "{{.Name}} {{json .Config.Labels}}", *names],
                               capture_output=True, text=True)
        out = {}
        for line in shown.stdout.splitlines():
            name, _, labels = line.strip().partition(" ")
            try:
                out[name.lstrip("/")] = json.loads(labels) or {}
            except ValueError:
                continue
        return out

    def remove_stale_containers(self, scope: str, owner: str, log: IO) -> Tuple[bool, str]:
        """A docker daemon (or rootful podman) is shared by every user of the node: containers whose owner label is
        another uid, or that carry none, are reported and left alone."""
        try:
            self.check_reachable()
            found = self.labelled_containers(scope)
        except LaunchError as exc:
            return False, str(exc)
        mine = {n: lab for n, lab in found.items() if lab.get(f"{LABEL_PREFIX}.user") == owner}
        others = {n: lab.get(f"{LABEL_PREFIX}.user", "no owner label") for n, lab in found.items() if n not in mine}
        for name, labels in mine.items():
            print(f"preflight: removing stale container {name}", file=log, flush=True)
            subprocess.run([*self.command(), "rm", "--force", name], capture_output=True)
            launch_id = labels.get(f"{LABEL_PREFIX}.launch")
            if launch_id and "/" not in launch_id and launch_id not in (".", ".."):
                self.remove_secrets(str(secrets_root() / launch_id))
        for name, who in others.items():
            print(f"preflight: leaving container {name} alone: it is not yours (owner {who}, you are uid {owner})",
                  file=log, flush=True)
        left = [n for n in self.labelled_containers(scope) if n in mine]
        detail = (f"still present after removal: {left}" if left
                  else f"removed {len(mine)} stale specrepro container(s) of yours {sorted(mine)}" if mine
                  else "none of yours on this node")
        if others:
            detail += f"; left alone, not yours: {others}"
        return not left, detail

    # --- images -------------------------------------------------------------------
    def resolve_base(self, ref: str, cache: Path, log: IO) -> Dict[str, Any]:
        rt = self.command()
        print(f"{self.name} {self.check_reachable()} answers on this host", file=log, flush=True)
        info = inspect_image(rt, ref)
        if info is None:
            print(f"base image {ref}: not on this host, pulling", file=log, flush=True)
            if run_logged([*rt, "pull", ref], log) != 0:
                raise ImageError(f"platform.base_image: {ref} is not on this host and `{self.name} pull` failed "
                                 f"(registry unreachable? load it first or point platform.base_image at a local image)")
            info = inspect_image(rt, ref)
        if info is None or not info["id"]:
            raise ImageError(f"platform.base_image: {ref}: `{self.name} image inspect` returned no image ID")
        repo = ref.rsplit(":", 1)[0] if ":" in ref.split("/")[-1] else ref
        repo_digest = next((d for d in info["repo_digests"] if d.split("@")[0].endswith(repo.split("/", 1)[-1])), None)
        record = dict(ref=ref, kind="container", image_id=info["id"], repo_digest=repo_digest,
                      # What a node pulls: the digest, never the re-pushable tag.
                      pinned=repo_digest or info["id"], image=info["id"], bytes=info.get("size"),
                      layers=info["layers"], build_from=base_tag(info["id"]),
                      pinned_by="repository digest" if repo_digest else
                      "image ID (no repository digest: imported, loaded or built on this host; nodes get it as an "
                      "archive)")
        tag_base(rt, info["id"], log)
        if self.plat.get("base_distribution", "pull") == "archive" or not repo_digest:
            archive = cache / f"base-{safe_name(info['id'].split(':')[-1][:24])}.tar"
            with locked(cache / f".{archive.name}.lock"):
                save_archive(rt, ref, archive, log)
            record["archive"] = str(archive)
        print(f"base image {ref} -> {record['pinned']} (id {info['id']}; pinned by {record['pinned_by']})",
              file=log, flush=True)
        return record

    def build_from(self, base: Dict[str, Any]) -> str:
        # FROM the base's node-local ID tag (base_tag), which every node gives the base it pulled by digest or loaded
        # from its archive; a load restores no registry digest, and BuildKit would look an ID up on Docker Hub.
        return base_tag(base["image_id"])

    def build_patched(self, job: PatchedBuild, log: IO) -> Dict[str, Any]:
        rt, base = self.command(), job.base
        self.check_reachable()
        tag = f"localhost/specrepro/{job.name.replace('sglang-', 'sglang:', 1)}"
        built = False
        with locked(job.cache / f".build-{job.content_hash}.lock"):
            if inspect_image(rt, tag) is None:
                tag_base(rt, base["image_id"], log)
                print(f"arm {job.arm}: building {tag} FROM {job.base_from}", file=log, flush=True)
                if run_logged(build_argv(rt, tag, job.context), log) != 0:
                    raise ImageError(f"arm {job.arm}: building {tag} failed (the patch must apply inside the image); "
                                     f"see the log")
                built = True
        info = check_built_on_base(rt, tag, base["image_id"])
        # Run by ID: a tag can be moved, an ID cannot.
        record = dict(kind="container", image=info["id"], tag=tag, image_id=info["id"], built=built,
                      content_hash=job.content_hash)
        record["applied"] = applied_record(rt, tag, log)
        if self.plat["image_distribution"] == "layer":
            # what a GPU node receives for this image: the context; the base it has (or pulls by digest) already
            record.update(distribution="layer", context=str(job.context), context_bytes=tree_bytes(job.context),
                          base_bytes=base.get("bytes"))
            print(f"arm {job.arm}: image travels as its build context {job.context} ({record['context_bytes']} "
                  f"bytes; the base image is {base.get('bytes')} bytes and reaches each node once, by digest)",
                  file=log, flush=True)
        elif self.plat["image_distribution"] == "archive":
            # Named by the build's ID: a rebuild of the same recipe (new ID) never reuses an old archive.
            archive = job.cache / f"{job.name}-{safe_name(info['id'].split(':')[-1][:12])}.tar"
            with locked(job.cache / f".{archive.name}.lock"):
                save_archive(rt, tag, archive, log)
            record["archive"] = str(archive)
        return record

    def ensure_image(self, record: Dict[str, Any], log: IO) -> Dict[str, Any]:
        """Loaded from its archive (or pulled by digest) under a node-local lock when missing; refuses an image whose
        ID differs from the one the image stage recorded.  `layer`: built here from the build context."""
        print(f"{self.name} {self.check_reachable()} answers on this node", file=log, flush=True)
        if record.get("distribution") == "layer":
            return self.layer_on_node(record, log)
        rt, want = self.command(), record["image_id"]
        info = inspect_image(rt, want)
        if info is None:
            lock_dir = Path(self.plat.get("node_lock_dir") or "/tmp")
            with locked(lock_dir / f"specrepro-image-{safe_name(want.split(':')[-1][:24])}.lock"):
                info = inspect_image(rt, want)
                if info is None:
                    self.bring_image(record, log)
                    info = inspect_image(rt, want)
        if info is None or info["id"] != want:
            got = info["id"] if info else None
            raise ImageError(f"image {record['image']} on this node has ID {got}, the image stage recorded {want}: "
                             f"refusing to run a different build")
        return record

    def bring_image(self, record: Dict[str, Any], log: IO) -> None:
        """An image this node lacks: loaded from its archive, else pulled by digest."""
        rt = self.command()
        if record.get("archive"):
            archive = Path(record["archive"])
            if not archive.is_file():
                raise ImageError(f"image {record['image']} is not on this node and its archive {archive} is "
                                 f"missing (cache_dir must be on a filesystem every node reads)")
            print(f"image {record['image']}: not on this node; loading {archive}", file=log, flush=True)
            if run_logged([*rt, "load", "-i", str(archive)], log) != 0:
                raise ImageError(f"`{self.name} load -i {archive}` failed; see the log")
        else:
            print(f"image {record['image']}: not on this node; pulling it by digest", file=log, flush=True)
            if run_logged([*rt, "pull", record["pinned"]], log) != 0:
                raise ImageError(f"image {record['pinned']} is not on this node and cannot be pulled")

    def layer_on_node(self, record: Dict[str, Any], log: IO) -> Dict[str, Any]:
        """`image_distribution: layer`: the patched image built on this node from the shared build context, on the
        base the build host resolved, and held to the build host's applied record.  Returns the record to run."""
        rt = self.command()
        tag, content_hash, base = record["tag"], record["content_hash"], record["base"]

        def matches(info):
            labels = (info or {}).get("labels") or {}
            return labels.get("org.specrepro.content-hash") == content_hash and \
                labels.get("org.specrepro.base-id") == base["image_id"]

        info = inspect_image(rt, tag)
        built = False
        if not matches(info):
            lock_dir = Path(self.plat.get("node_lock_dir") or "/tmp")
            with locked(lock_dir / f"specrepro-layer-{content_hash}.lock"):
                info = inspect_image(rt, tag)
                if not matches(info):
                    context = Path(record["context"])
                    if not (context / "Dockerfile").is_file():
                        raise ImageError(f"image {tag} is not on this node and its build context {context} is "
                                         f"missing (results_dir must be on a filesystem every node reads)")
                    ensure_base(rt, base, self.name, log)
                    print(f"image {tag}: not on this node; building the patch layer from {context} "
                          f"({record.get('context_bytes')} bytes) on base {base['image_id']}", file=log, flush=True)
                    if run_logged(build_argv(rt, tag, context), log) != 0:
                        raise ImageError(f"building {tag} on this node failed; see the log")
                    built = True
                    info = inspect_image(rt, tag)
        if not matches(info):
            raise ImageError(f"image {tag} on this node does not carry content hash {content_hash} on base "
                             f"{base['image_id']}: refusing to run another build")
        ensure_base(rt, base, self.name, log)
        info = check_built_on_base(rt, tag, base["image_id"])
        applied = applied_record(rt, tag, log)
        if applied != record.get("applied"):
            raise ImageError(f"image {tag} built on this node applied {applied}, the build host's applied "
                             f"{record.get('applied')}: refusing to run a different patch")
        return {**record, "image": info["id"], "node_image_id": info["id"], "node_built": built}


def command_endpoint(rt: Sequence[str]) -> str:
    """The engine a runtime command names itself (`-H`, `--host`, `--url`), or ""."""
    for flag in ("-H", "--host", "--url"):
        if flag in rt[:-1]:
            return f"{flag} {rt[list(rt).index(flag) + 1]} (platform.runtime_command)"
    return ""


def inspect_image(rt: List[str], ref: str) -> Optional[Dict[str, Any]]:
    """Id, RepoDigests and layers of a local image, or None when this node's store lacks it.  Any other failure (a
    daemon that does not answer) raises: it must never read as "not here, pull it"."""
    proc = subprocess.run([*rt, "image", "inspect", ref], capture_output=True, text=True)
    if proc.returncode != 0:
        if NO_SUCH_IMAGE.search(proc.stderr):
            return None
        raise ImageError(f"`{' '.join(rt)} image inspect {ref}` failed: {proc.stderr.strip()[-500:]}")
    try:
        data = json.loads(proc.stdout)
    except ValueError:
        return None
    info = data[0] if isinstance(data, list) and data else data
    raw = info.get("Id") or info.get("ID") or ""
    # docker says sha256:<hex>, podman <hex>: one form, which both accept as a reference.
    return {"id": raw if raw.startswith("sha256:") or not raw else f"sha256:{raw}",
            "repo_digests": info.get("RepoDigests") or [], "size": info.get("Size"),
            "layers": (info.get("RootFS") or {}).get("Layers") or [],
            "labels": (info.get("Config") or {}).get("Labels") or info.get("Labels") or {}}


def base_tag(image_id: str) -> str:
    """The node-local name every build uses for the base: its ID as a tag, so no builder asks a registry."""
    return f"localhost/specrepro/base:{image_id.split(':')[-1]}"


def tag_base(rt: List[str], image_id: str, log: IO) -> Dict[str, Any]:
    """Give the base on this node its ID tag (idempotent); its inspect record."""
    tag = base_tag(image_id)
    info = inspect_image(rt, tag)
    if info is None or info["id"] != image_id:
        if run_logged([*rt, "tag", image_id, tag], log) != 0:
            raise ImageError(f"tagging base {image_id} as {tag} failed; see the log")
        info = inspect_image(rt, tag)
    if info is None or info["id"] != image_id:
        raise ImageError(f"{tag} names {info and info['id']}, not the base {image_id}")
    return info


def check_built_on_base(rt: List[str], tag: str, base_id: str) -> Dict[str, Any]:
    """The built image carries the base's layers first (its own label alone proves nothing)."""
    built, base = inspect_image(rt, tag), inspect_image(rt, base_id)
    if built is None or base is None:
        raise ImageError(f"{tag} or its base {base_id} is not on this node after the build")
    if not base["layers"] or built["layers"][:len(base["layers"])] != base["layers"]:
        raise ImageError(f"{tag} does not carry the layers of base {base_id} ({len(base['layers'])} layers): it was "
                         f"not built on that base")
    return built


def build_argv(rt: List[str], tag: str, context: Path) -> List[str]:
    # --network=none: the patch step needs no network, and a daemon without a bridge has none to give a build
    return [*rt, "build", "--network=none", "-t", tag, str(context)]


def tree_bytes(folder: Path) -> int:
    return sum(f.stat().st_size for f in Path(folder).rglob("*") if f.is_file())


def save_archive(rt: List[str], ref: str, archive: Path, log: IO) -> None:
    """`save` to the shared filesystem, once: a partial file never stands for an image."""
    if archive.is_file():
        return
    archive.parent.mkdir(parents=True, exist_ok=True)
    partial = archive.with_name(archive.name + ".partial")
    partial.unlink(missing_ok=True)
    if run_logged([*rt, "save", "-o", str(partial), ref], log) != 0:
        raise ImageError(f"saving {ref} to {partial} failed; see the log")
    partial.replace(archive)


def applied_record(rt: List[str], tag: str, log: IO) -> Dict[str, Any]:
    """What the patch step recorded inside the image (patch and patched-file sha256s)."""
    proc = subprocess.run([*rt, "run", "--rm", "--network=none", "--entrypoint", "cat", tag, "/specrepro/applied.json"],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        raise ImageError(f"{tag}: no /specrepro/applied.json in the image ({proc.stderr.strip()[:300]})")
    print(f"patch record inside {tag}: {proc.stdout.strip()[:2000]}", file=log, flush=True)
    return json.loads(proc.stdout)


def ensure_base(rt: List[str], base: Dict[str, Any], runtime: str, log: IO) -> None:
    """The base image on this node (already there, loaded from its archive, or pulled by its digest), with its ID tag."""
    if inspect_image(rt, base["image_id"]) is not None:
        tag_base(rt, base["image_id"], log)
        return
    if base.get("archive"):
        print(f"base image: not on this node; loading {base['archive']}", file=log, flush=True)
        if run_logged([*rt, "load", "-i", base["archive"]], log) != 0:
            raise ImageError(f"`{runtime} load -i {base['archive']}` failed; see the log")
    else:
        print(f"base image: not on this node; pulling {base['pinned']} by digest", file=log, flush=True)
        if run_logged([*rt, "pull", base["pinned"]], log) != 0:
            raise ImageError(f"base image {base['pinned']} is not on this node and cannot be pulled")
    if inspect_image(rt, base["image_id"]) is None:
        raise ImageError(f"base image {base['pinned']} on this node is not {base['image_id']}, the one the build host "
                         f"resolved: refusing to build on another base")
    tag_base(rt, base["image_id"], log)
