"""GPU-only behaviour: NCCL at world size 1, CUDA-event phases, the three H2D modes, CUDA graphs.
Skipped (with the reason) on machines without CUDA; run them on a GPU box with `pytest -m gpu`."""
import pytest

from tests.conftest import read, run_train

pytestmark = [pytest.mark.gpu, pytest.mark.slow]
SMALL = ["model=vgg11_tiny", "scale=smoke", "logger=none", "world_size=1"]


def ok(proc):
    assert proc.returncode == 0, proc.stderr[-3000:]
    return read(proc.out_dir)["result"]


def test_nccl_ddp_world_size_1(tmp_path):
    r = ok(run_train([*SMALL, "backend=nccl", "sync=ddp"], tmp_path))
    assert r["backend"] == "nccl" and r["device"] == "cuda"
    assert r["comm"]["time_s"] is not None


@pytest.mark.parametrize("mode", ["blocking", "non_blocking", "side_stream"])
def test_h2d_modes_copy(tmp_path, mode):
    r = ok(run_train([*SMALL, f"h2d={mode}"], tmp_path))
    assert r["h2d"]["copies"] and r["h2d"]["mode"] == mode and r["phases"]["h2d"]["median"] >= 0


def test_cuda_graphs_replay(tmp_path):
    r = ok(run_train([*SMALL, "backend=nccl", "cuda_graphs=true"], tmp_path))
    assert r["cuda_graphs"] and "graph_replay" in r["phases"] and r["ddp"]["static_graph"]


def test_bf16_hook_on_nccl(tmp_path):
    r = ok(run_train([*SMALL, "backend=nccl", "optim=bf16"], tmp_path))
    assert r["ddp"]["comm_hook"] == "bf16_compress_hook" and r["accuracy"]["grad_rel_error"] is not None
