"""float64 references of the layernorm and rmsnorm suites (private to the suites: discovery
skips files starting with "_")."""

from __future__ import annotations

import torch

__all__ = ["layer_norm_reference", "rms_norm_reference"]

REFERENCE_CHUNK_ELEMENTS = 1 << 26
"""Rows are converted to float64 this many elements at a time, so the temporaries stay small next
to the full-size float64 y."""


def layer_norm_reference(x: torch.Tensor, gamma: torch.Tensor, beta: torch.Tensor, eps: float):
    """(y, mean, rstd) in float64: two-pass mean and biased variance per row."""
    rows, cols = x.shape
    y = torch.empty(rows, cols, dtype=torch.float64, device=x.device)
    mean = torch.empty(rows, dtype=torch.float64, device=x.device)
    rstd = torch.empty(rows, dtype=torch.float64, device=x.device)
    g, b = gamma.double(), beta.double()
    step = max(1, REFERENCE_CHUNK_ELEMENTS // max(cols, 1))
    for r0 in range(0, rows, step):
        xc = x[r0:r0 + step].double()
        m = xc.mean(dim=1)
        xc -= m[:, None]
        r = 1.0 / torch.sqrt((xc * xc).mean(dim=1) + eps)
        mean[r0:r0 + step] = m
        rstd[r0:r0 + step] = r
        torch.mul(xc, r[:, None], out=y[r0:r0 + step])
        y[r0:r0 + step].mul_(g).add_(b)
    return y, mean, rstd


def rms_norm_reference(x: torch.Tensor, gamma: torch.Tensor, eps: float):
    """(y, rstd) in float64."""
    rows, cols = x.shape
    y = torch.empty(rows, cols, dtype=torch.float64, device=x.device)
    rstd = torch.empty(rows, dtype=torch.float64, device=x.device)
    g = gamma.double()
    step = max(1, REFERENCE_CHUNK_ELEMENTS // max(cols, 1))
    for r0 in range(0, rows, step):
        xc = x[r0:r0 + step].double()
        r = 1.0 / torch.sqrt((xc * xc).mean(dim=1) + eps)
        rstd[r0:r0 + step] = r
        torch.mul(xc, r[:, None], out=y[r0:r0 + step])
        y[r0:r0 + step].mul_(g)
    return y, rstd
