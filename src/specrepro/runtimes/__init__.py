"""Container runtimes: how a process is run on the node, one module per `platform.container_runtime`.

A runtime owns everything that differs between docker, podman, apptainer, pyxis and a bare process: the argv that
wraps a program (`Runtime.wrap`), the image's build, load and inspect on the build host and on a node, the cleanup
of a killed job's containers, how secrets reach the server, how granted GPUs are mapped into it, whether its engine
answers (endpoint and version), and the platform settings it refuses (`config_problems`).  It takes plain values
(the platform's dict, mounts, environments, paths) and gives plain values back; it imports only leaf utilities
(errors, fileio, procs, patching) and never Campaign, ArmPlan, the launch or the config, which sit above it.

A new runtime is one new module here that defines a `Runtime` subclass with a `name` and decorates it with
`@register`: the registry imports every module of this package (pkgutil), so nothing else changes.
"""

from __future__ import annotations

import importlib
import pkgutil
from typing import Any, Dict, List, Type

from specrepro.runtimes.base import (ImageError, Invocation, LaunchError, Mount, Runtime, RuntimeUnreachable,
                                     UnknownRuntime, secret_specs, secrets_root)

__all__ = ["ImageError", "Invocation", "LaunchError", "Mount", "Runtime", "RuntimeUnreachable", "UnknownRuntime",
           "get", "names", "register", "runtime_for", "secret_specs", "secrets_root"]

_REGISTRY: Dict[str, Type[Runtime]] = {}
_discovered = False


def register(cls: Type[Runtime]) -> Type[Runtime]:
    """Class decorator: `cls.name` becomes a value of `platform.container_runtime`."""
    if not getattr(cls, "name", ""):
        raise TypeError(f"{cls.__module__}.{cls.__qualname__}: a registered runtime needs a `name`")
    other = _REGISTRY.get(cls.name)
    if other is not None and other is not cls:
        raise TypeError(f"runtime {cls.name!r} is registered twice: {other.__module__} and {cls.__module__}")
    _REGISTRY[cls.name] = cls
    return cls


def _discover() -> None:
    # Imported on first use, not at package import: each runtime module imports this package for `register`.
    global _discovered
    if _discovered:
        return
    _discovered = True
    for module in pkgutil.iter_modules(__path__):
        importlib.import_module(f"{__name__}.{module.name}")


def names() -> List[str]:
    """Every registered runtime name, sorted."""
    _discover()
    return sorted(_REGISTRY)


def get(name: str) -> Type[Runtime]:
    """The runtime class registered as `name`, or UnknownRuntime naming the key, the value and the registered names."""
    _discover()
    try:
        return _REGISTRY[name]
    except (KeyError, TypeError):
        raise UnknownRuntime(f"platform.container_runtime: {name!r} is not a container runtime specrepro knows "
                             f"(registered: {', '.join(names())})") from None


def runtime_for(plat: Dict[str, Any]) -> Runtime:
    """The runtime of a platform (`platform.container_runtime`), bound to that platform's settings."""
    return get(plat["container_runtime"])(plat)
