"""precision= against torch's own defaults (torch 2.14: torch.backends.cudnn.allow_tf32 is True,
matmuls run at "highest"): the default leaves them alone, so a default GPU run computes as the
user's training does (issue 19, item 2). The flags are process-wide: each test puts back what it
found."""

import pytest
import torch

from tasks.train.loop import set_precision


@pytest.fixture(autouse=True)
def torch_defaults():
    found = (torch.backends.cudnn.allow_tf32, torch.get_float32_matmul_precision())
    torch.backends.cudnn.allow_tf32, _ = (
        True,
        torch.set_float32_matmul_precision("highest"),
    )  # torch's defaults
    yield
    torch.backends.cudnn.allow_tf32 = found[0]
    torch.set_float32_matmul_precision(found[1])


@pytest.mark.parametrize(
    "precision,cudnn,matmul",
    [
        ("fp32", True, "highest"),
        ("bf16", True, "highest"),
        ("fp32_strict", False, "highest"),
        ("tf32", True, "high"),
    ],
)
def test_only_the_strict_and_tf32_choices_touch_torchs_tf32_defaults(precision, cudnn, matmul):
    assert set_precision(precision).to_dict() == {
        "cudnn_allow_tf32": cudnn,
        "float32_matmul_precision": matmul,
        "matmul_allow_tf32": matmul == "high",
    }
    assert (
        torch.backends.cudnn.allow_tf32 is cudnn and torch.get_float32_matmul_precision() == matmul
    )


@pytest.mark.subprocess
def test_torchs_own_defaults_are_what_the_default_keeps():
    """In a fresh interpreter of this torch: what set_precision("fp32") must leave as it is."""
    import subprocess
    import sys

    out = subprocess.run(
        [
            sys.executable,
            "-c",
            "import torch; print(torch.backends.cudnn.allow_tf32, "
            "torch.backends.cuda.matmul.allow_tf32, torch.get_float32_matmul_precision())",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    assert out.stdout.split() == ["True", "False", "highest"]


def test_fp32_strict_is_a_choice():
    from tests.bad_input import accepted

    assert accepted(["precision=fp32_strict"])["precision"] == "fp32_strict"
