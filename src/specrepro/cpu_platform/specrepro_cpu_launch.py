"""`python -m specrepro_cpu_launch ARGS`: sglang's own `launch_server` on specrepro's `cpu` platform.

sglang resolves `--attention-backend intel_amx` to `torch_native` when the
platform fact `has_amx` is false (AMX tiles plus the AMX build of sgl-kernel),
and `torch_native` refuses EAGLE.  The intel_amx backend's two attention
operations come from the pure-torch `sgl_kernel` beside this file, so this
launcher states, through sglang's own `override_platform`, that the backend
is available.  Only this process (where the server arguments are resolved) is
told; the model's layers still take their pure-torch `forward_native` paths,
because they test the AMX build directly.
"""

import runpy
import sys

from sglang.srt.runtime_context import override_platform

if __name__ == "__main__":
    sys.argv[0] = "sglang.launch_server"
    with override_platform(has_amx=True):
        runpy.run_module("sglang.launch_server", run_name="__main__", alter_sys=True)
