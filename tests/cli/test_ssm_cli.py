"""Serving a state-space model is refused in one line (no per-sequence state term in the KV cache model)."""

from __future__ import annotations

from cli_helpers import invoke_main, user_error


def test_serving_a_mamba_model_is_refused() -> None:
    assert "state-space (Mamba) layers is not modelled" in user_error(
        invoke_main(["serve", "-m", "mamba-2.8b", "-H", "h100-sxm"]))
