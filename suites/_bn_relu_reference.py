"""float64 references of the bn_relu suite (private to the suites: discovery skips files starting
with "_")."""

from __future__ import annotations

import torch

__all__ = ["backward_reference", "forward_reference"]

def _per_channel(v: torch.Tensor) -> torch.Tensor:
    return v.reshape(1, -1, 1, 1)


def forward_reference(x: torch.Tensor, gamma: torch.Tensor, beta: torch.Tensor, eps: float,
                      z: torch.Tensor | None = None):
    """float64 (y, pre, mean, invstd): pre = (x - mean) * invstd * gamma + beta [+ z], y = relu(pre);
    batch mean and biased variance over (N, H, W). pre is what the mask is judged against."""
    xd = x.double()
    mean = xd.mean(dim=(0, 2, 3))
    var = (xd - _per_channel(mean)).square().mean(dim=(0, 2, 3))
    invstd = 1.0 / torch.sqrt(var + eps)
    pre = (xd - _per_channel(mean)) * _per_channel(invstd * gamma.double()) + _per_channel(beta.double())
    if z is not None:
        pre = pre + z.double()
    return pre.clamp_min(0.0), pre, mean, invstd


def backward_reference(dy: torch.Tensor, keep: torch.Tensor, x: torch.Tensor, mean: torch.Tensor,
                       invstd: torch.Tensor, gamma: torch.Tensor, residual: bool = False):
    """float64 (dx, [dz,] dgamma, dbeta) with g = dy * keep (keep: bool, x's shape):
    dgamma = sum(g * xhat), dbeta = sum(g), dx = gamma * invstd * (g - dbeta / M - xhat * dgamma / M),
    M = N * H * W, using the given (saved) mean and invstd."""
    g = torch.where(keep, dy.double(), torch.zeros((), dtype=torch.float64, device=dy.device))
    m = x.numel() // x.shape[1]
    xhat = (x.double() - _per_channel(mean.double())) * _per_channel(invstd.double())
    dbeta = g.sum(dim=(0, 2, 3))
    dgamma = (g * xhat).sum(dim=(0, 2, 3))
    dx = _per_channel(gamma.double() * invstd.double()) * (g - _per_channel(dbeta / m) - xhat * _per_channel(dgamma / m))
    return (dx, g, dgamma, dbeta) if residual else (dx, dgamma, dbeta)
