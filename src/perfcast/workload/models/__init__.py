"""Model builders: one module per model family, each emitting IR ops in launch order.

``hf_*`` builders replicate the eager PyTorch graph of the Hugging Face
``transformers`` implementation (4.38, as NeuSight measured it); ``decoder``
builds any modern decoder-only LLM (Llama, Mistral, Qwen, MoE, MLA) in either
HF-eager or serving-engine style.
"""
