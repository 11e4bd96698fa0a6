"""sglang's own server-argument resolution, for arms that have not started yet (no specrepro import).

    python resolve_server_args.py REQUEST_JSON

REQUEST_JSON: {"arms": {arm: [server flags...]}, "platform": {fact: value}}.
Runs where the server would (the arm's Python and sglang tree): for each arm
sglang's own `prepare_server_args(argv)` (its argument parser) and
`ServerArgs.resolve_once()` (the resolution pipeline every launch runs, which
reads the model's config.json where it is readable), under sglang's own
`override_platform` with the facts of the platform the arm will run on (a
ROCm or CUDA node, when this runs on a CPU host).  Prints one JSON object:
arm -> {"resolved": {field: value}} or {"error": "..."}.  Fields that depend
on the GPU's memory (memory fractions, graph batch sizes) can differ on the
node; the fields an arm asks for must not.
"""

import json
import logging
import os
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


def plain(value):
    try:
        json.dumps(value)
        return value
    except (TypeError, ValueError):
        return repr(value)


def main():
    request = json.loads(sys.argv[1])
    logging.disable(logging.WARNING)
    from sglang.srt.runtime_context import override_platform
    from sglang.srt.server_args import prepare_server_args

    out = {}
    for arm, argv in request["arms"].items():
        try:
            with override_platform(**request.get("platform", {})):
                args = prepare_server_args(list(argv))
                args.resolve_once()
                out[arm] = {"resolved": {k: plain(v) for k, v in args.resolved_dict().items()}}
        except BaseException as exc:  # a refusal by sglang is an answer, not a crash of the probe
            out[arm] = {"error": f"{type(exc).__name__}: {exc}"[:2000]}
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
