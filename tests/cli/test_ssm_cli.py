"""Serving a state-space model: it runs with its Mamba state in the memory table; prefix caching, which vLLM
disables for Mamba models, is refused in one line."""

from __future__ import annotations

from cli_helpers import invoke_main, parse_json, user_error

_ARGS = ["serve", "-m", "mamba-2.8b", "-H", "h100-sxm", "--prompt-tokens", "200", "--output-tokens", "20",
         "--num-requests", "10", "--qps", "5", "--max-model-len", "4096"]


def test_serving_a_mamba_model_reports_its_state() -> None:
    data = parse_json(invoke_main([*_ARGS, "--json"]))
    assert data["memory_state_bytes_per_seq"] > 0 and data["requests_completed"] == 10


def test_prefix_caching_a_mamba_model_is_refused() -> None:
    assert "prefix caching with state-space (Mamba) layers is refused" in user_error(
        invoke_main([*_ARGS, "--enable-prefix-caching"]))
