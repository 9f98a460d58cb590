"""The what-if model: a DDP step predicted from one measured run's record (DESIGN.md, "The what-if
model").

A reader: it reads records (and nccl-tests files) and never measures. The pieces:
  quantity   inputs with 95% intervals; Monte Carlo propagation
  buckets    DDP's bucket assignment for any cap (torch's own _compute_bucket_assignment_by_size)
  links      alpha-beta all-reduce cost: fits to measurements, presets with their public sources
  profile    what the model needs from a record (compute phases, ready times, costs, contention)
  step       the simulated step: compute, bucket all-reduces on one queue, their overlap
  api        predict(record, change) -> Prediction, and sweeps
Command line: python -m whatif <run dir> [--world-size N] [--link NAME | --nccl-tests FILE] [--sweep
k=v,v ...]"""

from whatif.api import Prediction, predict, predict_sweep  # noqa: F401 - the package's API
