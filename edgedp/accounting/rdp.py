"""Rényi DP of μ-GDP and the RDP → (ε, δ) conversion.

μ-GDP has RDP curve ρ(α) = αμ²/2 for every order α > 1 (it is (μ²/2)-zCDP; Bun & Steinke
2016). The conversion to (ε, δ) is the improved bound of Canonne, Kamath & Steinke
(arXiv:2004.00010, Prop. 12; also Asoodeh et al. arXiv:2001.05990, Eq. 20),

    ε = ρ(α) + log(1 − 1/α) − log(δ·α)/(α − 1),

taken together with the total-variation bound δ <= sqrt(1 − exp(−ρ)) (which gives ε = 0),
minimised over the orders. This is the same conversion as dp_accounting's
``rdp.compute_epsilon`` / ``compute_delta`` (orders <= 1.01 only use the TV bound), so the
numbers agree. One deliberate difference: a negative or NaN RDP value raises ValueError here
instead of being read as "no privacy loss".
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from edgedp._validate import finite_array, non_negative

__all__ = [
    "DEFAULT_ORDERS",
    "delta",
    "epsilon",
    "rdp_of_gdp",
]

DEFAULT_ORDERS: tuple[float, ...] = (
    tuple(1.0 + x / 20.0 for x in range(1, 200))  # 1.05, 1.10, …, 10.95
    + tuple(float(a) for a in range(11, 64))
    + (64.0, 96.0, 128.0, 192.0, 256.0, 384.0, 512.0, 768.0, 1024.0, 2048.0, 4096.0)
)
"""Orders (α) used when none are given: dense near 1, where large μ attains its optimum."""

_MIN_ORDER_FOR_BOUND = 1.01  # below this the Prop. 12 bound is numerically unstable


def _check(orders: Sequence[float] | np.ndarray, rdp: Sequence[float] | np.ndarray):
    a = finite_array("orders", orders).astype(float, copy=False)
    if a.ndim != 1 or a.size == 0:
        raise ValueError(f"Expected orders to be a non-empty 1-D sequence, got shape {a.shape}.")
    if np.any(a < 1.0):
        raise ValueError(f"Expected every order >= 1, got min(orders)={a.min()!r}.")
    r = np.asarray(rdp, dtype=float)
    if r.shape != a.shape:
        raise ValueError(f"Expected rdp to have the shape of orders {a.shape}, got {r.shape}.")
    if np.any(np.isnan(r)) or np.any(r < 0.0):
        raise ValueError(
            "Expected every RDP value to be >= 0 (inf allowed); got a negative or NaN value, "
            "which usually means an upstream numerical failure."
        )
    return a, r


def rdp_of_gdp(mu: float, orders: Sequence[float] | np.ndarray = DEFAULT_ORDERS) -> np.ndarray:
    """RDP curve ρ(α) = αμ²/2 of a μ-GDP mechanism (Bun & Steinke 2016, Prop. 1.6).

    Args:
        mu: GDP parameter μ >= 0 (inf allowed).
        orders: Orders α >= 1.

    Returns:
        Array of ρ(α), one per order (inf everywhere when μ = inf).

    Raises:
        ValueError: If mu is negative or an order is below 1.

    >>> print(rdp_of_gdp(2.0, [1.5, 3.0]))
    [3. 6.]
    """
    non_negative(mu=mu)
    a, _ = _check(orders, np.zeros(np.shape(orders)))
    half_mu_sq = 0.5 * float(mu) * float(mu)  # float product overflows to inf, never raises
    return np.full(a.shape, math.inf) if math.isinf(half_mu_sq) else a * half_mu_sq


def epsilon(
    orders: Sequence[float] | np.ndarray, rdp: Sequence[float] | np.ndarray, *, delta: float
) -> tuple[float, float]:
    """Smallest ε over the orders such that the RDP curve implies (ε, δ)-DP.

    Canonne, Kamath & Steinke (2020, Prop. 12) with the TV bound, as in dp_accounting.

    Args:
        orders: Orders α >= 1.
        rdp: RDP values ρ(α) >= 0 (inf allowed), same length as orders.
        delta: Target δ >= 0 (δ >= 1 gives ε = 0).

    Returns:
        (ε, best order). ε = inf when no order gives a finite bound (e.g. δ = 0).

    Raises:
        ValueError: On malformed input or negative/NaN RDP values.

    >>> eps, order = epsilon([2.0, 4.0, 8.0], [1.0, 2.0, 4.0], delta=1e-5)
    >>> print(f"{eps:.6f} at alpha={order}")
    5.087862 at alpha=4.0
    """
    a, r = _check(orders, rdp)
    non_negative(delta=delta)
    if delta >= 1:
        return 0.0, float(a[0])
    if delta == 0:
        return (0.0 if np.all(r == 0.0) else math.inf), float(a[0])
    eps = np.full(a.shape, math.inf)
    tv = delta * delta + np.expm1(-r) > 0.0  # sqrt(1 − e^{−ρ}) < δ: (0, δ)-DP
    use = ~tv & (a > _MIN_ORDER_FOR_BOUND) & np.isfinite(r)
    au, ru = a[use], r[use]
    eps[use] = ru + np.log1p(-1.0 / au) - np.log(delta * au) / (au - 1.0)
    eps[tv] = 0.0
    best = int(np.argmin(eps))
    return max(0.0, float(eps[best])), float(a[best])


def delta(
    orders: Sequence[float] | np.ndarray, rdp: Sequence[float] | np.ndarray, *, epsilon: float
) -> tuple[float, float]:
    """Smallest δ over the orders such that the RDP curve implies (ε, δ)-DP.

    Canonne, Kamath & Steinke (2020, Prop. 12) with the TV bound, as in dp_accounting.

    Args:
        orders: Orders α >= 1.
        rdp: RDP values ρ(α) >= 0 (inf allowed), same length as orders.
        epsilon: Target ε >= 0 (inf allowed).

    Returns:
        (δ, best order), δ in [0, 1].

    Raises:
        ValueError: On malformed input or negative/NaN RDP values.

    >>> d, order = delta([2.0, 4.0, 8.0], [1.0, 2.0, 4.0], epsilon=3.0)
    >>> print(f"{d:.6e} at alpha={order}")
    5.250980e-03 at alpha=4.0
    """
    a, r = _check(orders, rdp)
    non_negative(epsilon=epsilon)
    if epsilon == math.inf:
        return 0.0, float(a[0])
    log_d = np.zeros(a.shape)  # TV bound: log δ <= ½ log(1 − e^{−ρ}); 0 when ρ = inf
    log_d[r == 0.0] = -math.inf
    pos = (r > 0.0) & np.isfinite(r)
    with np.errstate(divide="ignore"):  # ρ below ~1e-308 rounds e^{−ρ} to 1: log 0 = −inf
        log_d[pos] = 0.5 * np.log1p(-np.exp(-r[pos]))
    use = (a > _MIN_ORDER_FOR_BOUND) & np.isfinite(r)
    au, ru = a[use], r[use]
    bound = (au - 1.0) * (ru - epsilon + np.log1p(-1.0 / au)) - np.log(au)
    log_d[use] = np.minimum(log_d[use], bound)
    best = int(np.argmin(log_d))
    return min(math.exp(float(log_d[best])), 1.0), float(a[best])
