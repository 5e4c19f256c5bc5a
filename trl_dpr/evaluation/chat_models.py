"""Chat models a judge talks to: messages in, the assistant's reply out.

    ChatModel         the protocol judges use (`complete_batch`)
    OpenAIChatModel   any OpenAI-compatible chat-completions endpoint, through the `openai` client
    LocalChatModel    a Hugging Face causal LM in this process (greedy, batched, chat template)

Judges only talk to the protocol: a judge is a template and a parser, the backend how the text is obtained.
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from .answers import resolve_device
from .sampling import generate_answers

Message = dict[str, str]  # {"role": "system" | "user" | "assistant", "content": ...}


@runtime_checkable
class ChatModel(Protocol):
    """A chat model that answers conversations (greedy / temperature 0 when used as a judge)."""

    name: str

    def complete_batch(self, conversations: list[list[Message]]) -> list[str]:
        """One reply per conversation, in order."""
        ...


class MissingAPIKeyError(RuntimeError):
    """The environment variable that should hold the judge's API key is not set (or empty)."""


class ChatRequestError(RuntimeError):
    """A chat-completions request failed for good (after its retries, or with a non-retryable status)."""


@dataclass
class OpenAIChatModel:
    """A chat model behind `POST {base_url}/chat/completions` (OpenAI, a vLLM / SGLang server, a proxy), e.g. GPT-4o
    as the paper's judge. Needs the `openai` client (`pip install "trl_dpr[judge]"`).

    The key is read from the variable NAMED `api_key_env` when built (a missing key fails before any generation) and
    at each request; it is never stored, written or put in a message. Retries are the `openai` client's (408 / 409 /
    429 / 5xx, timeouts), `max_retries` times with backoff; other 4xx stop at once. `base_url` ends with `/v1`.
    """

    model: str = "gpt-4o"
    base_url: str = "https://api.openai.com/v1"
    api_key_env: str = "OPENAI_API_KEY"
    temperature: float = 0.0
    max_tokens: int = 1024
    timeout_s: float = 120.0
    max_retries: int = 6
    max_workers: int = 8

    def __post_init__(self):
        if not self.api_key_env or not self.api_key_env.replace("_", "").isalnum():
            raise ValueError(
                f"api_key_env must be the NAME of an environment variable (e.g. OPENAI_API_KEY), got "
                f"{'a value that looks like a key' if len(self.api_key_env) > 40 else repr(self.api_key_env)}. "
                "Never put the key itself in a config: export it in your shell."
            )
        if self.max_retries < 0 or self.timeout_s <= 0 or self.max_workers < 1:
            raise ValueError(
                f"Need max_retries >= 0, timeout_s > 0 and max_workers >= 1; got {self.max_retries}, "
                f"{self.timeout_s}, {self.max_workers}."
            )
        if self.temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {self.temperature}.")
        self.check_api_key()
        _import_openai()  # a missing client is reported now, not after the answers are generated

    @property
    def name(self) -> str:
        return f"openai:{self.model}"

    def check_api_key(self) -> None:
        """Raise `MissingAPIKeyError` naming the variable when it is unset or empty."""
        if not os.environ.get(self.api_key_env):
            raise MissingAPIKeyError(
                f"The judge's API key is read from the environment variable {self.api_key_env}, which is not set. "
                f"Export it before running (`export {self.api_key_env}=...`), or name another variable with "
                "`judge_api_key_env`. Keys are never read from config files."
            )

    def complete(self, messages: list[Message]) -> str:
        """The reply to one conversation (retried as the class describes)."""
        openai = _import_openai()
        self.check_api_key()
        # A client per request: the key is read now, so a rotated key is picked up and none is kept on `self`.
        client = openai.OpenAI(
            api_key=os.environ[self.api_key_env],
            base_url=self.base_url,
            timeout=self.timeout_s,
            max_retries=self.max_retries,
        )
        where = f"POST {self.base_url.rstrip('/')}/chat/completions (model {self.model!r})"
        try:
            with client:
                response = client.chat.completions.create(
                    model=self.model, messages=messages, temperature=self.temperature, max_tokens=self.max_tokens
                )
        except openai.APIStatusError as error:
            detail = _error_message(error)
            if error.status_code in (408, 409, 429) or error.status_code >= 500:
                raise ChatRequestError(
                    f"{where} failed {self.max_retries + 1} times; last error: HTTP {error.status_code}: {detail}. "
                    "The endpoint is down or overloaded: retry later, or raise max_retries (judge_max_retries)."
                ) from None
            raise ChatRequestError(
                f"{where} was refused with HTTP {error.status_code}: {detail}. "
                + _hint_for_status(error.status_code, self.api_key_env)
            ) from None
        except openai.APITimeoutError:
            raise ChatRequestError(
                f"{where} failed {self.max_retries + 1} times; last error: no response within timeout_s="
                f"{self.timeout_s}. Raise judge_timeout_s or judge_max_retries, or check the endpoint."
            ) from None
        except openai.APIConnectionError as error:
            raise ChatRequestError(
                f"{where} failed {self.max_retries + 1} times; last error: connection failed ({error.__cause__ or error}). "
                "Check base_url (judge_base_url) and that the endpoint is up."
            ) from None
        try:
            content = response.choices[0].message.content
        except (AttributeError, IndexError, TypeError):
            raise ChatRequestError(
                f"{where} answered but not with a chat completion: {str(response)[:300]}. Is base_url an "
                "OpenAI-compatible /v1 endpoint?"
            ) from None
        return content or ""  # a refusal or content filter gives null content: an unparseable (counted) verdict

    def complete_batch(self, conversations: list[list[Message]]) -> list[str]:
        """Replies to many conversations, `max_workers` requests at a time, in order."""
        if self.max_workers == 1 or len(conversations) <= 1:
            return [self.complete(c) for c in conversations]
        with ThreadPoolExecutor(max_workers=self.max_workers) as pool:
            return list(pool.map(self.complete, conversations))


def _import_openai():
    try:
        import openai
    except ImportError:
        raise ImportError(
            'The OpenAI-compatible judge needs the `openai` client: `pip install "trl_dpr[judge]"` (or `pip install '
            "openai`). The exact judge (embedded task) and local judges need nothing more."
        ) from None
    return openai


def _error_message(error) -> str:
    """The server's own message (`{"error": {"message": ...}}`, which the client unwraps into `body`)."""
    body = getattr(error, "body", None)
    message = body.get("message") if isinstance(body, dict) else body
    return str(message or error.message)[:300]


def _hint_for_status(status: int, api_key_env: str) -> str:
    if status in (401, 403):
        return f"Check the key in ${api_key_env} and that it may use this model."
    if status == 404:
        return "Check base_url (it should end in /v1) and the model name."
    return "Check the request settings (model name, max_tokens)."


class LocalChatModel:
    """Greedy replies from a local causal LM through its chat template: judging without an API (an open judge such as
    an open instruct model), and the judge plumbing offline. The tokenizer needs a chat template; a judge that
    ignores the verdict format gives unparseable verdicts, which are counted.
    """

    def __init__(self, model, tokenizer, max_new_tokens: int = 512, batch_size: int = 8, name: str | None = None):
        if getattr(tokenizer, "chat_template", None) is None:
            raise ValueError(
                f"The local judge's tokenizer ({getattr(tokenizer, 'name_or_path', type(tokenizer).__name__)}) has no "
                "chat template, so the judge prompt cannot be rendered. Use an instruction-tuned judge model, or set "
                "tokenizer.chat_template."
            )
        self.model = model
        self.tokenizer = tokenizer
        self.max_new_tokens = max_new_tokens
        self.batch_size = batch_size
        self.name = f"local:{name or getattr(model.config, 'name_or_path', '') or type(model).__name__}"

    @classmethod
    def from_pretrained(
        cls, path: str, dtype: str = "auto", device: str = "auto", trust_remote_code: bool = False, **kwargs
    ) -> LocalChatModel:
        """Load a judge model and its tokenizer from a folder or Hub id onto `device` ("auto": the GPU when there is one)."""
        from transformers import AutoModelForCausalLM, AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(path, trust_remote_code=trust_remote_code)
        if tokenizer.pad_token is None:
            tokenizer.pad_token = tokenizer.eos_token
        model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype, trust_remote_code=trust_remote_code)
        model.to(resolve_device(device))
        return cls(model, tokenizer, name=path, **kwargs)

    def complete_batch(self, conversations: list[list[Message]]) -> list[str]:
        """Greedy replies, `batch_size` conversations at a time, in order."""
        if not conversations:
            return []
        return generate_answers(
            self.model,
            self.tokenizer,
            conversations,
            temperature=0.0,
            max_new_tokens=self.max_new_tokens,
            batch_size=self.batch_size,
            show_progress=False,
        )
