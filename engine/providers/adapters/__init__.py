"""Wire formats: building a provider request body and reading its reply into canonical fields.

One module per family (`openai_chat`, `anthropic_messages`, `gemini_generate`) over what they
share (`base`: the reply and the adapter protocol; `errors`: reading a body and classifying
a failure). The oracle route speaks the OpenAI-compatible format to its in-process transport.
"""

from __future__ import annotations

from engine.providers.adapters.anthropic_messages import AnthropicMessagesAdapter
from engine.providers.adapters.base import FINISH_REASONS, Adapter, Reply, normalise_usage
from engine.providers.adapters.errors import (
    NON_TRANSIENT_CODES,
    RETRYABLE_STATUSES,
    error_for_status,
    parse_retry_after,
    status_error_class,
)
from engine.providers.adapters.gemini_generate import GeminiGenerateAdapter
from engine.providers.adapters.openai_chat import OpenAIChatAdapter
from engine.providers.routes import Route

__all__ = [
    "ADAPTERS",
    "FINISH_REASONS",
    "NON_TRANSIENT_CODES",
    "RETRYABLE_STATUSES",
    "Adapter",
    "AnthropicMessagesAdapter",
    "GeminiGenerateAdapter",
    "OpenAIChatAdapter",
    "Reply",
    "adapter_for",
    "error_for_status",
    "normalise_usage",
    "parse_retry_after",
    "status_error_class",
]


ADAPTERS: dict[str, Adapter] = {
    "openai-chat": OpenAIChatAdapter(),
    "anthropic-messages": AnthropicMessagesAdapter(),
    "gemini-generate": GeminiGenerateAdapter(),
    "oracle": OpenAIChatAdapter(),
}


def adapter_for(route: Route) -> Adapter:
    return ADAPTERS[route.adapter]
