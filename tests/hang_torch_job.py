"""A user's DDP-style job in plain PyTorch (no code of this project): rank 1 skips the loss all_reduce of step 3, so
rank 0 waits for ever. After DUMP_AFTER_S every rank writes torch's own Flight Recorder dump (the bytes of
`torch._C._distributed_c10d._dump_fr_trace()`, the pickle NCCL's watchdog writes to TORCH_FR_DUMP_TEMP_FILE<rank>) to
<dir>/rank_<r>, and exits.

    python tests/hang_torch_job.py DIR [PORT]
"""
import datetime
import os
import sys
import threading
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

DUMP_AFTER_S = 6


def dump_and_exit(directory: str, rank: int) -> None:
    with open(os.path.join(directory, f"rank_{rank}"), "wb") as f:
        f.write(torch._C._distributed_c10d._dump_fr_trace())
    os._exit(0)


def train(rank: int, directory: str, port: int) -> None:
    os.environ["TORCH_FR_BUFFER_SIZE"] = "100"
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2,
                            timeout=datetime.timedelta(seconds=60))
    threading.Timer(DUMP_AFTER_S, dump_and_exit, (directory, rank)).start()
    grad, loss = torch.ones(4), torch.ones(4)
    for step in range(6):
        dist.all_reduce(grad)                  # the gradients
        if not (rank == 1 and step == 3):
            dist.all_reduce(loss)              # the loss, for logging: rank 1 skips it once
    time.sleep(3600)


if __name__ == "__main__":
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    mp.spawn(train, args=(out, int(sys.argv[2]) if len(sys.argv) > 2 else 29551), nprocs=2)
