"""How a chat model is named (LangChain's init_chat_model "provider:model"): one rule for the
REFUNDS_MODEL setting and for eval_intake's --model."""

from __future__ import annotations

import re

_MODEL_SPEC = re.compile(r"^(?P<provider>[a-z][a-z0-9_-]*):(?P<model>[^\s:][^\s]*)$")


def model_spec_error(name: str, value: str) -> str:
    """Why `value` names no chat model, in words that name `name`; "" when well formed or empty."""
    if not value or _MODEL_SPEC.match(value):
        return ""
    return (
        f"{name} must be provider:model, e.g. openai:gpt-4.1-mini or ollama:llama3 "
        f"(empty: no model, the rules read every message); got {value!r}"
    )
