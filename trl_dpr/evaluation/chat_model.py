"""`ChatModel`: what an LLM judge needs from a model — chat messages in, the assistant's reply out.

Two backends implement it: `OpenAIChatModel` (any OpenAI-compatible HTTP endpoint) and `LocalChatModel` (a Hugging
Face causal LM in this process). Judges (`LLMPairwiseJudge`, `MTBenchGrader`) only talk to this protocol, so a judge
is a template and a parser, and the backend is how the text is obtained.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

__all__ = ["ChatModel", "Message"]

Message = dict[str, str]  # {"role": "system" | "user" | "assistant", "content": ...}


@runtime_checkable
class ChatModel(Protocol):
    """A chat model that answers conversations (greedy / temperature 0 when used as a judge).

    Example:
        >>> class Echo:
        ...     name = "echo"
        ...     def complete_batch(self, conversations):
        ...         return [c[-1]["content"] for c in conversations]
        >>> isinstance(Echo(), ChatModel), Echo().complete_batch([[{"role": "user", "content": "hi"}]])
        (True, ['hi'])
    """

    name: str

    def complete_batch(self, conversations: list[list[Message]]) -> list[str]:
        """One reply per conversation, in order."""
        ...
