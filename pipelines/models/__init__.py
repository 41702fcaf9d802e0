"""Model backends (schemas/model_backend.md): the request/answer contract, the adapters (OpenAI-compatible
chat completions, a Python callable) and the weight-free grounded-instructions backend."""
