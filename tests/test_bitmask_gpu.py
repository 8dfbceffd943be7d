"""GPU checks of the bitmask kernels (kernels/bitmask.cu): exact ReLU outputs and masks, dropout
masks bit for bit against the Python Philox4x32-10, at odd sizes, on poisoned memory, aligned and
misaligned. Run with `pytest -m gpu`; skips without a GPU."""

from __future__ import annotations

import pytest
import torch

from bwbench.philox import dropout_keep_numpy, dropout_keep_torch

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (torch.cuda.is_available() is False)"),
]

DTYPES = [torch.float16, torch.bfloat16, torch.float32]
# 1024 and 3 * 1024 + 999: whole 1024-element mask lines (the aligned backward's warp step), alone
# and with a tail; 4097 and 2^20 + 3 also have both.
SIZES = [1, 31, 33, 1000, 1024, 4097, 3 * 1024 + 999, (1 << 20) + 3]
IDS = lambda d: str(d).removeprefix("torch.")  # noqa: E731


def _poison(n_bytes: int) -> None:
    """Hand the caching allocator blocks full of 0xFF (NaN in every float format; set bits in a
    mask) so outputs the kernels allocate start poisoned, as the harness's check does."""
    blocks = [torch.empty(n_bytes + 4096, dtype=torch.uint8, device="cuda") for _ in range(4)]
    for b in blocks:
        b.fill_(0xFF)
    del blocks


def _randn(n: int, dtype: torch.dtype, seed: int, misaligned: bool = False) -> torch.Tensor:
    gen = torch.Generator(device="cuda").manual_seed(seed)
    base = torch.randn(n + 1, generator=gen, device="cuda", dtype=torch.float32).to(dtype)
    return base[1:] if misaligned else base[:n]  # [1:] starts 2 or 4 bytes past a 16-byte boundary


@pytest.mark.parametrize("misaligned", [False, True], ids=["aligned", "misaligned"])
@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("dtype", DTYPES, ids=IDS)
def test_relu_forward_and_backward_exact(dtype, n, misaligned):
    from bwbench.cuda.bitmask import (pack_bits, packed_bytes, relu_backward, relu_backward_bytemask,
                                      relu_forward, relu_forward_bytemask)

    x = _randn(n, dtype, seed=n, misaligned=misaligned)
    want_y = torch.clamp_min(x, 0)
    want_mask = pack_bits(x > 0)
    for forward in (relu_forward, relu_forward_bytemask):
        _poison(n * 4)
        y, mask = forward(x)
        torch.cuda.synchronize()
        assert torch.equal(y, want_y), f"{forward.__name__} y differs ({dtype}, n={n})"
        assert mask.dtype == torch.uint8 and mask.numel() == packed_bytes(n)
        assert torch.equal(mask, want_mask), f"{forward.__name__} mask differs ({dtype}, n={n})"
        if n % 8:
            assert int(mask[-1]) >> (n % 8) == 0, "padding bits must be zero"
    y, mask = relu_forward(x)
    words = torch.empty(0, dtype=torch.uint8, device="cuda").set_(mask.untyped_storage(), 0, (4 * ((n + 31) // 32),))
    assert not bool(words[packed_bytes(n):].any()), "bytes past ceil(n/8) in the last word must be zero"

    dy = _randn(n, dtype, seed=n + 7, misaligned=misaligned)
    want_dx = torch.where(x > 0, dy, torch.zeros_like(dy))
    for backward, m in ((relu_backward, want_mask), (relu_backward_bytemask, want_mask),
                        (relu_backward, mask)):
        _poison(n * 4)
        dx = backward(dy, m)
        torch.cuda.synchronize()
        assert torch.equal(dx, want_dx), f"{backward.__name__} dx differs ({dtype}, n={n})"


@pytest.mark.parametrize("p", [0.1, 0.5])
@pytest.mark.parametrize("misaligned", [False, True], ids=["aligned", "misaligned"])
@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("dtype", DTYPES, ids=IDS)
def test_dropout_masks_are_the_python_philox(dtype, n, misaligned, p):
    from bwbench.cuda.bitmask import (dropout_backward, dropout_backward_bytes, dropout_forward,
                                      dropout_forward_bytes, pack_bits, unpack_bits)

    seed, offset = 0x0123_4567_89AB_CDEF + n, (3 << 32) + 17
    keep = dropout_keep_torch(n, p, seed, offset, device="cuda")
    if n <= 4097:  # the NumPy path too, independently of torch's integer ops on the GPU
        assert keep.cpu().numpy().tolist() == dropout_keep_numpy(n, p, seed, offset).tolist()
    x = _randn(n, dtype, seed=n + 1, misaligned=misaligned)
    scale = 1.0 / (1.0 - p)
    want_y = (x.float() * keep.float() * torch.tensor(scale, dtype=torch.float32)).to(dtype)

    _poison(n * 4)
    y, bits = dropout_forward(x, p, seed, offset)
    torch.cuda.synchronize()
    assert torch.equal(bits, pack_bits(keep)), f"bitmask differs from Philox ({dtype}, n={n}, p={p})"
    assert torch.equal(y, want_y), f"y differs ({dtype}, n={n}, p={p})"

    _poison(n * 4)
    y2, bytes_ = dropout_forward_bytes(x, p, seed, offset)
    torch.cuda.synchronize()
    assert bytes_.dtype == torch.uint8 and torch.equal(bytes_.bool(), keep) and int(bytes_.max()) <= 1
    assert torch.equal(y2, want_y)

    # Same (seed, offset) -> same mask; another offset or seed -> another one.
    assert torch.equal(dropout_forward(x, p, seed, offset)[1], bits)
    if n >= 1000:
        assert not torch.equal(dropout_forward(x, p, seed, offset + 1)[1], bits)
        assert not torch.equal(dropout_forward(x, p, seed + 1, offset)[1], bits)
        kept = int(keep.sum())
        sigma = (n * p * (1 - p)) ** 0.5
        assert abs(kept - n * (1 - p)) <= 4 * sigma

    dy = _randn(n, dtype, seed=n + 2, misaligned=misaligned)
    want_dx = (dy.float() * keep.float() * torch.tensor(scale, dtype=torch.float32)).to(dtype)
    for dx in (dropout_backward(dy, bits, p), dropout_backward(dy, pack_bits(keep), p),
               dropout_backward_bytes(dy, bytes_, p), dropout_backward_bytes(dy, keep, p)):
        torch.cuda.synchronize()
        assert torch.equal(dx, want_dx), f"dropout backward differs ({dtype}, n={n}, p={p})"
    assert torch.equal(unpack_bits(bits, n), keep)


@pytest.mark.parametrize("dtype", DTYPES, ids=IDS)
def test_dropout_wide_counter_draws_the_same_mask(dtype, monkeypatch):
    """Tensors of 2^33 elements or more take the general Philox draw (the counter's second word
    from the group index); forced onto a small tensor it must give what the narrow draw gives."""
    import bwbench.cuda.bitmask.launch as bm
    import bwbench.cuda.bitmask.plan as bm_plan

    n, p, seed, offset = 3 * 4096 + 5, 0.3, 0xDEAD_BEEF_0000_0001, (7 << 32) + 5
    x = _randn(n, dtype, seed=3)
    narrow = bm.dropout_forward(x, p, seed, offset)
    narrow_bytes = bm.dropout_forward_bytes(x, p, seed, offset)
    monkeypatch.setattr(bm_plan, "NARROW_COUNTER_LIMIT", 0)
    assert bm._wide_counter(n) == "true"
    _poison(n * 4)
    wide = bm.dropout_forward(x, p, seed, offset)
    wide_bytes = bm.dropout_forward_bytes(x, p, seed, offset)
    torch.cuda.synchronize()
    keep = dropout_keep_torch(n, p, seed, offset, device="cuda")
    assert torch.equal(wide[1], bm.pack_bits(keep)) and torch.equal(narrow[1], wide[1])
    assert torch.equal(wide[0], narrow[0])
    assert torch.equal(wide_bytes[1], narrow_bytes[1]) and torch.equal(wide_bytes[0], narrow_bytes[0])


def test_masked_backward_reads_a_mask_at_an_offset():
    """The aligned backward reads the mask a line (128 bytes) at a time; a mask that starts 4 bytes
    into its buffer (allowed: only 4-byte alignment is required) must give the same dx."""
    from bwbench.cuda.bitmask import masked_backward, pack_bits

    n = 5 * 1024 + 77
    dy = _randn(n, torch.float16, seed=11)
    keep = _randn(n, torch.float32, seed=12) > 0
    bits = pack_bits(keep)
    shifted = torch.zeros(bits.numel() + 8, dtype=torch.uint8, device="cuda")[4:4 + bits.numel()]
    shifted.copy_(bits)
    want = torch.where(keep, dy * 2, torch.zeros_like(dy))
    _poison(n * 4)
    assert torch.equal(masked_backward(dy, shifted, 2.0), want)


def test_dropout_mask_at_2_28_elements_float16():
    """The suite's headline size: the kernel's mask equals the chunked Python Philox everywhere."""
    from bwbench.cuda.bitmask import dropout_forward, pack_bits

    n, p, seed = 1 << 28, 0.5, 0x5EED_0123_4567_89AB
    x = torch.ones(n, dtype=torch.float16, device="cuda")
    y, bits = dropout_forward(x, p, seed, 0)
    keep = dropout_keep_torch(n, p, seed, 0, device="cuda")
    assert torch.equal(bits, pack_bits(keep))
    assert torch.equal(y, keep.to(torch.float16) * 2)


@pytest.mark.parametrize("name", ["relu", "dropout"])
def test_suites_pass_the_harness_check(name, tmp_path):
    """Every implementation of the suite passes the runner's check on a small case."""
    from bwbench.device import query_device
    from bwbench.discovery import get_suite
    from bwbench.results import ResultsWriter, RunDocument
    from bwbench.runner import Runner, RunSettings
    from bwbench.stats import SamplingPolicy
    from bwbench.timing import Timer

    suite = get_suite(name)
    axis = {"relu": {"size": [(1 << 20,), (16, 32, 112, 112)]}, "dropout": {"n": [(1 << 20) + 3]}}[name]
    cases = suite.cases(["float16", "float32"], axis)
    device = torch.device("cuda", torch.cuda.current_device())
    facts = query_device(device)
    timer = Timer(device, facts.l2_bytes, facts.sm_clock_max_mhz, SamplingPolicy(min_samples=3, max_seconds=0.05))
    doc = RunDocument(environment=facts.to_dict(), options={}, suites={suite.name: suite.describe()})
    writer = ResultsWriter(tmp_path / "r.json", doc)
    runner = Runner(device, timer, writer, RunSettings(), facts.peak_gbps)
    records = [r for case in cases for r in runner.run_case(suite, case, list(suite.implementations.values()))]
    failed = [(r.case, r.dtype, r.impl, r.reason) for r in records if r.status == "failed"]
    assert not failed, failed
    ok = {r.impl for r in records if r.status == "ok"}
    assert "optimized" in ok
    # The mask memory is recorded next to torch's: a bit an element against a byte (dropout) or y (relu).
    for r in records:
        if r.impl == "optimized":
            torch_rec = next(t for t in records if t.impl == "torch" and (t.case, t.dtype) == (r.case, r.dtype))
            assert r.mask_bytes and torch_rec.mask_bytes >= 8 * r.mask_bytes - 7
