"""The DDP comm hooks `optim=` chooses. Each conf/optim/<name>.yaml names its factory in `_target_`
(one of these, or a user's own): called with the option's keys it takes, it returns (state, hook)
for DDP.register_comm_hook."""

from __future__ import annotations

from torch.distributed.algorithms.ddp_comm_hooks import default_hooks, powerSGD_hook


def fp16():
    """DDP's fp16_compress_hook: each bucket cast to float16, all-reduced, cast back."""
    return None, default_hooks.fp16_compress_hook


def bf16():
    """DDP's bf16_compress_hook: each bucket cast to bfloat16, all-reduced, cast back."""
    return None, default_hooks.bf16_compress_hook


def powersgd(
    rank: int,
    start_iter: int,
    min_compression_rate: float,
    use_error_feedback: bool,
    warm_start: bool,
    orthogonalization_epsilon: float,
    random_seed: int,
    batch_tensors_with_same_shape: bool,
    batched: bool,
):
    """DDP's PowerSGD hook with every PowerSGDState option (batched: one matrix per bucket)."""
    state = powerSGD_hook.PowerSGDState(
        process_group=None,
        matrix_approximation_rank=int(rank),
        start_powerSGD_iter=int(start_iter),
        min_compression_rate=float(min_compression_rate),
        use_error_feedback=bool(use_error_feedback),
        warm_start=bool(warm_start),
        orthogonalization_epsilon=float(orthogonalization_epsilon),
        random_seed=int(random_seed),
        batch_tensors_with_same_shape=bool(batch_tensors_with_same_shape),
    )
    return state, (powerSGD_hook.batched_powerSGD_hook if batched else powerSGD_hook.powerSGD_hook)
