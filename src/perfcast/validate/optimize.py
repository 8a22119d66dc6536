"""A small Levenberg-Marquardt least-squares solver (numpy only, deterministic).

Parameters are fitted in a transformed space: ``log`` for positive quantities,
``logit`` for fractions, so every step stays inside the valid range.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

__all__ = ["fit_least_squares"]

_EDGE = 1e-9


def _to_free(x: np.ndarray, kinds: Sequence[str]) -> np.ndarray:
    out = np.empty_like(x)
    for i, (v, k) in enumerate(zip(x, kinds, strict=True)):
        if k == "log":
            out[i] = np.log(v)
        elif k == "logit":
            v = min(max(v, _EDGE), 1.0 - _EDGE)  # a fraction fitted onto its bound (1.0) starts just inside it
            out[i] = np.log(v / (1.0 - v))
        else:
            out[i] = v
    return out


def _from_free(z: np.ndarray, kinds: Sequence[str]) -> np.ndarray:
    out = np.empty_like(z)
    for i, (v, k) in enumerate(zip(z, kinds, strict=True)):
        if k == "log":
            out[i] = np.exp(v)
        elif k == "logit":
            out[i] = 0.5 * (1.0 + np.tanh(0.5 * v))  # the logistic function, without overflow
        else:
            out[i] = v
    return out


def fit_least_squares(residuals: Callable[[np.ndarray], np.ndarray], x0: Sequence[float], kinds: Sequence[str],
                      *, iterations: int = 60, tol: float = 1e-6) -> tuple[np.ndarray, float]:
    """Minimize ``sum(residuals(x)**2)``; returns (x, mean squared residual)."""
    z = _to_free(np.asarray(x0, dtype=float), kinds)

    def f(zz: np.ndarray) -> np.ndarray:
        return residuals(_from_free(zz, kinds))

    r = f(z)
    cost = float(r @ r)
    lam = 1e-3
    stalls = 0
    for _ in range(iterations):
        jac = np.empty((r.size, z.size))
        for j in range(z.size):
            h = 1e-5 * max(1.0, abs(z[j]))
            zp = z.copy()
            zp[j] += h
            jac[:, j] = (f(zp) - r) / h
        a = jac.T @ jac
        g = jac.T @ r
        improved = False
        while lam < 1e10:
            step = np.linalg.solve(a + lam * np.diag(np.diag(a) + 1e-12), -g)
            zn = z + step
            rn = f(zn)
            cn = float(rn @ rn)
            if np.isfinite(cn) and cn < cost:
                rel = (cost - cn) / max(cost, 1e-300)
                z, r, cost = zn, rn, cn
                lam = max(lam / 3.0, 1e-9)
                improved = True
                break
            lam *= 10.0
        if not improved:
            break
        if rel < tol:
            stalls += 1
            if stalls >= 3:
                break
        else:
            stalls = 0
    return _from_free(z, kinds), cost / max(r.size, 1)
