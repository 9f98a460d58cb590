"""comm/buckets.py (issue 36: a module the mutation run covers): DDP's bucket caps and the buckets
the what-if model and the diagnosis print, checked against figures worked out by hand (DDP's
documented default: 25 MiB buckets, the first capped at 1 MiB; an explicit cap caps the first too)
and against buckets packed by hand from parameter sizes in ready order."""

from __future__ import annotations

import pytest

from comm import buckets as bk

MIB = 1 << 20


def test_the_default_words():
    for word in (None, "default", " Default ", "none", "NULL", ""):
        assert bk.is_default(word)
    for other in (0, 25, 25.0, "25", "defaults"):
        assert not bk.is_default(other)
    assert bk.label(None) == "default" and bk.label("null") == "default"
    assert bk.label(25) == "25" and bk.label("2.5") == "2.5" and bk.label(100.0) == "100"


def test_caps_of_ddps_default_and_of_an_explicit_cap():
    assert bk.limits(None) == [MIB, 25 * MIB]
    assert bk.limits("default") == [MIB, 25 * MIB]
    assert bk.bucket_caps(None) == (MIB, 25 * MIB)
    assert bk.limits(100) == [100 * MIB, 100 * MIB]
    assert bk.bucket_caps("4") == (4 * MIB, 4 * MIB)
    assert bk.limits(0.5) == [MIB // 2, MIB // 2]
    assert bk.bucket_cap_mb(None) is None and bk.bucket_cap_mb("25") == 25.0
    assert bk.MIB == MIB and bk.DEFAULT_CAP_MB == 25.0


def test_the_bucket_rule_in_words():
    assert bk.bucket_rule(None) == (
        "DDP's default (bucket_cap_mb=None): 25 MiB buckets, the first capped at 1 MiB"
    )
    assert bk.bucket_rule(100) == "bucket_cap_mb=100: every bucket capped at 100 MiB, the first too"
    assert bk.bucket_rule(2.5) == "bucket_cap_mb=2.5: every bucket capped at 2.5 MiB, the first too"


def test_buckets_packed_in_ready_order_with_the_first_cap():
    # float32 parameters of 0.5, 0.75, 3, 2 and 1 MiB (numel = bytes / 4); ready in reverse order
    mb = [0.5, 0.75, 3, 2, 1]
    numel = [int(m * MIB) // 4 for m in mb]
    order = [4, 3, 2, 1, 0]
    got = bk.assign(numel, [4] * 5, order, cap_mb=None)
    # by hand: a bucket closes once it reaches its cap; the first's is 1 MiB (param 4: 1 MiB, full),
    # then 25 MiB: 2 + 3 + 0.75 + 0.5 MiB together
    assert [b.params for b in got] == [(4,), (3, 2, 1, 0)]
    assert [b.nbytes for b in got] == [MIB, int(6.25 * MIB)]
    # a 2 MiB cap on every bucket: 4 (1) + 3 (2) reach 3 >= 2; then 2 (3) alone; then 1, 0
    two = bk.assign(numel, [4] * 5, order, cap_mb=2)
    assert [b.params for b in two] == [(4, 3), (2,), (1, 0)]
    assert [b.nbytes for b in two] == [3 * MIB, 3 * MIB, int(1.25 * MIB)]


def test_bytes_count_each_parameters_element_size():
    # one dtype given: one bucket, its bytes each parameter's numel x its own element size
    got = bk.assign([1000, 3000], [2, 8], [0, 1], cap_mb=100, dtypes=["float32", "float32"])
    assert [(b.params, b.nbytes) for b in got] == [((0, 1), 1000 * 2 + 3000 * 8)]
    # dtypes from the element sizes: DDP keeps float16 and float64 gradients apart
    got = bk.assign([1000, 3000], [2, 8], [0, 1], cap_mb=100)
    assert sorted((b.params, b.nbytes) for b in got) == [((0,), 2000), ((1,), 24000)]


def test_element_sizes_name_their_dtypes():
    assert bk._dtype_for(2) == "float16"
    assert bk._dtype_for(4) == "float32"
    assert bk._dtype_for(8) == "float64"
    assert bk._dtype_for(1) == "float32"


def test_a_ready_order_must_be_a_permutation():
    with pytest.raises(ValueError, match="permutation of the 2 parameter indices"):
        bk.assign([10, 10], [4, 4], [0, 0], cap_mb=None)
    with pytest.raises(ValueError):
        bk.assign([10, 10], [4, 4], [0], cap_mb=None)


def test_no_memory_is_spent_on_the_parameters():
    # a 16 TiB parameter: the meta device holds only its size (a real tensor could not be made)
    got = bk.assign([2**42, 10], [4, 4], [1, 0], cap_mb=None)
    assert [(b.params, b.nbytes) for b in got] == [((1, 0), 4 * 2**42 + 40)]


def test_caps_on_an_older_torch_without_its_bucket_config(monkeypatch):
    import torch.nn.parallel.distributed as ddp

    # older torch: no _BucketCapacityConfig; the first bucket was always 1 MiB (at most the cap)
    monkeypatch.delattr(ddp, "_BucketCapacityConfig", raising=False)
    assert bk.limits(None) == [MIB, 25 * MIB]
    assert bk.limits("default") == [MIB, 25 * MIB]
    assert bk.limits(100) == [MIB, 100 * MIB]
    assert bk.limits(0.5) == [MIB // 2, MIB // 2]
