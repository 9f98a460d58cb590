"""The attach cost's baseline (python -m tasks.script.cost): a script as plain torchrun runs it, with one global
optimizer-step post hook reading the host clock, so that its step times are read as task=script reads them (one
optimizer step's end to the next). Run as a file under torchrun (`torchrun --nproc_per_node=2 tasks/script/bare.py
SCRIPT ARGS...`), so no module of this project is imported beside the script: its own folder comes first on
sys.path, as under torchrun. Each rank writes its step ends to $DDP_COMM_BARE_OUT.rank<r>.json."""

import json
import os
import runpy
import sys
import time


def main() -> None:
    script, args = sys.argv[1], sys.argv[2:]
    from torch.optim.optimizer import register_optimizer_step_post_hook

    ends: list[float] = []
    register_optimizer_step_post_hook(lambda *_: ends.append(time.perf_counter()))
    sys.argv = [script, *args]
    sys.path[0] = os.path.dirname(os.path.abspath(script))
    try:
        runpy.run_path(script, run_name="__main__")
    except SystemExit as e:
        if e.code not in (None, 0):
            raise
    finally:
        with open(f"{os.environ['DDP_COMM_BARE_OUT']}.rank{os.environ['RANK']}.json", "w") as f:
            json.dump(ends, f)


if __name__ == "__main__":
    main()
