"""Every suite's byte model against a count by hand, on small odd shapes.

The byte model is the numerator of every GB/s, % of copy and % of peak: a model that counts an
input twice doubles every figure and no timing test would notice. Counts below are written from
what each operation must read and write, not from the suite's code.
"""

from __future__ import annotations

import pytest

from bwbench.discovery import get_suite
from bwbench.suite import Case

ROWS, COLS = 3, 1000  # odd on purpose: 3000 elements


def bytes_of(suite_name, params, dtype, impl=None):
    suite = get_suite(suite_name)
    case = Case(suite_name, params, dtype)
    traffic = suite.traffic_of(suite.implementations[impl], case) if impl else suite.compute_traffic(case)
    return traffic.read, traffic.write


@pytest.mark.parametrize("suite_name", ["softmax", "log_softmax"])
@pytest.mark.parametrize("dtype,size", [("float16", 2), ("float32", 4), ("bfloat16", 2)])
def test_row_softmaxes_read_x_once_and_write_y_once(suite_name, dtype, size):
    assert bytes_of(suite_name, {"rows": ROWS, "cols": COLS}, dtype) == (3000 * size, 3000 * size)


def test_softmax_backward_reads_y_and_dy_and_writes_dx():
    assert bytes_of("softmax_backward", {"rows": ROWS, "cols": COLS}, "float16") == (2 * 6000, 6000)


def test_layernorm_reads_x_gamma_beta_and_writes_y_mean_rstd():
    # x: 3000 halves; gamma, beta: 1000 halves each; y: 3000 halves; mean, rstd: 3 floats each
    assert bytes_of("layernorm", {"rows": ROWS, "cols": COLS, "eps": 1e-5}, "float16") == (6000 + 4000, 6000 + 24)


def test_rmsnorm_reads_x_gamma_and_writes_y_rstd():
    assert bytes_of("rmsnorm", {"rows": ROWS, "cols": COLS, "eps": 1e-5}, "float32") == (12000 + 4000, 12000 + 12)


@pytest.mark.parametrize("shape,perm,dtype,size", [((3, 1000, 7), (0, 2, 1), "float16", 2),
                                                   ((33, 5), (1, 0), "int64", 8),
                                                   ((2, 3, 4, 5, 6), (4, 3, 2, 1, 0), "int8", 1)])
def test_permute_reads_and_writes_every_element_once(shape, perm, dtype, size):
    n = 1
    for d in shape:
        n *= d
    assert bytes_of("permute", {"shape": shape, "perm": perm}, dtype) == (n * size, n * size)


def test_relu_forward_and_backward_with_a_bitmask_and_with_torch():
    n = 3001  # a mask of ceil(3001 / 8) = 376 bytes
    fwd, bwd = {"direction": "forward", "size": (n,)}, {"direction": "backward", "size": (n,)}
    assert bytes_of("relu", fwd, "float16") == (2 * n, 2 * n + 376)
    assert bytes_of("relu", bwd, "float16") == (2 * n + 376, 2 * n)
    assert bytes_of("relu", fwd, "float32", impl="torch") == (4 * n, 4 * n)
    assert bytes_of("relu", bwd, "float32", impl="torch") == (2 * 4 * n, 4 * n), "torch's backward reads y and dy"


def test_dropout_bit_and_byte_masks():
    n = 1001  # bitmask: 126 bytes; byte mask: 1001 bytes
    fwd, bwd = {"direction": "forward", "p": 0.1, "n": n}, {"direction": "backward", "p": 0.1, "n": n}
    assert bytes_of("dropout", fwd, "float16") == (2 * n, 2 * n + 126)
    assert bytes_of("dropout", bwd, "float16") == (2 * n + 126, 2 * n)
    assert bytes_of("dropout", fwd, "float32", impl="torch") == (4 * n, 4 * n + n)
    assert bytes_of("dropout", bwd, "bfloat16", impl="boolmask") == (2 * n + n, 2 * n)


def test_bn_relu_forward_and_backward_model():
    shape = (2, 3, 5, 7)  # 210 elements, 3 channels; float16 x is 420 bytes, the bitmask 27 bytes
    fwd = {"direction": "forward", "variant": "bn_relu", "shape": shape, "layout": "NCHW"}
    # read x twice (statistics, then normalize) and gamma, beta as floats; write y, mask, mean, invstd
    assert bytes_of("bn_relu", fwd, "float16") == (2 * 420 + 3 * 8, 420 + 27 + 3 * 8)
    add = dict(fwd, variant="bn_add_relu")  # and the residual z read once
    assert bytes_of("bn_relu", add, "float16") == (3 * 420 + 3 * 8, 420 + 27 + 3 * 8)
    bwd = dict(fwd, direction="backward")
    # two passes over x, dy and the mask; gamma, mean, invstd; write dx and dgamma, dbeta
    assert bytes_of("bn_relu", bwd, "float16") == (2 * (2 * 420 + 27) + 3 * 12, 420 + 3 * 8)
