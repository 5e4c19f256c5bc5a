"""`OpenAIChatModel`: an OpenAI-compatible chat-completions client (OpenAI, Azure-style proxies, vLLM / SGLang servers).

Standard library only (`urllib`). The API key is read from an environment variable at request time and never kept
on the object, written to a file or put in a message: the configuration names the variable, not the key. Requests that
fail with 408 / 429 / 5xx, a timeout or a dropped connection are retried with exponential backoff (and `Retry-After`
when the server sends one); other 4xx errors stop at once with the server's message.
"""

from __future__ import annotations

import json
import os
import random
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from .chat_model import Message

__all__ = ["ChatRequestError", "MissingAPIKeyError", "OpenAIChatModel"]

_RETRYABLE_STATUS = {408, 409, 429}


class MissingAPIKeyError(RuntimeError):
    """The environment variable that should hold the judge's API key is not set (or empty)."""


class ChatRequestError(RuntimeError):
    """A chat-completions request failed for good (after its retries, or with a non-retryable status)."""


@dataclass
class OpenAIChatModel:
    """A chat model behind `POST {base_url}/chat/completions`, e.g. GPT-4o as the paper's judge.

    Args:
        model: the model name sent in each request (paper: "gpt-4o").
        base_url: the API root, up to and including `/v1`.
        api_key_env: the environment variable holding the key (sent as `Authorization: Bearer ...`). It is checked
            when the object is built, so a missing key fails before any generation work, and read again per request.
        temperature: sampling temperature of the judge (paper: 0).
        max_tokens: the longest reply requested.
        timeout_s: seconds to wait for one response.
        max_retries: retries after the first attempt on 408/409/429/5xx, timeouts and dropped connections.
        backoff_initial_s, backoff_factor, backoff_max_s: the wait before retry k is
            min(backoff_max_s, backoff_initial_s · backoff_factor^k), at least the server's `Retry-After`.
        backoff_jitter: each wait is stretched by a random fraction up to this (spreads out parallel retries).
        max_workers: parallel requests in `complete_batch`.
        sleep: the function that waits (tests pass a recorder).

    Example:
        >>> import os
        >>> os.environ["DEMO_JUDGE_KEY"] = "sk-demo"
        >>> judge = OpenAIChatModel(model="gpt-4o", api_key_env="DEMO_JUDGE_KEY")
        >>> judge.name, "sk-demo" in repr(judge)
        ('openai:gpt-4o', False)
        >>> OpenAIChatModel(api_key_env="SURELY_UNSET_KEY_VAR")
        Traceback (most recent call last):
        ...
        trl_dpr.evaluation.openai_chat.MissingAPIKeyError: The judge's API key is read from the environment variable SURELY_UNSET_KEY_VAR, which is not set. ...
    """

    model: str = "gpt-4o"
    base_url: str = "https://api.openai.com/v1"
    api_key_env: str = "OPENAI_API_KEY"
    temperature: float = 0.0
    max_tokens: int = 1024
    timeout_s: float = 120.0
    max_retries: int = 6
    backoff_initial_s: float = 2.0
    backoff_factor: float = 2.0
    backoff_max_s: float = 120.0
    backoff_jitter: float = 0.1
    max_workers: int = 8
    sleep: Callable[[float], None] = field(default=time.sleep, repr=False, compare=False)

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

    @property
    def name(self) -> str:
        return f"openai:{self.model}"

    @property
    def url(self) -> str:
        return self.base_url.rstrip("/") + "/chat/completions"

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
        body = json.dumps(
            {"model": self.model, "messages": messages, "temperature": self.temperature, "max_tokens": self.max_tokens}
        ).encode()
        last_error = ""
        for attempt in range(self.max_retries + 1):
            self.check_api_key()
            request = urllib.request.Request(
                self.url,
                data=body,
                method="POST",
                headers={
                    "Content-Type": "application/json",
                    "Authorization": f"Bearer {os.environ[self.api_key_env]}",
                },
            )
            retry_after = None
            try:
                with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
                    return self._reply_text(response.read())
            except urllib.error.HTTPError as error:
                detail = _error_detail(error)
                if error.code not in _RETRYABLE_STATUS and error.code < 500:
                    raise ChatRequestError(
                        f"POST {self.url} (model {self.model!r}) was refused with HTTP {error.code}: {detail}. "
                        + _hint_for_status(error.code, self.api_key_env)
                    ) from None
                last_error = f"HTTP {error.code}: {detail}"
                retry_after = _retry_after_seconds(error.headers.get("Retry-After") if error.headers else None)
            except TimeoutError:
                last_error = f"no response within timeout_s={self.timeout_s}"
            except urllib.error.URLError as error:
                if isinstance(error.reason, TimeoutError):
                    last_error = f"no response within timeout_s={self.timeout_s}"
                else:
                    last_error = f"connection failed: {error.reason}"
            except (ConnectionError, OSError) as error:
                last_error = f"connection failed: {error}"
            if attempt < self.max_retries:
                self.sleep(self._backoff(attempt, retry_after))
        raise ChatRequestError(
            f"POST {self.url} (model {self.model!r}) failed {self.max_retries + 1} times; last error: {last_error}. "
            "The endpoint is down, overloaded or slower than timeout_s: retry later, raise max_retries / timeout_s "
            "(judge_max_retries / judge_timeout_s in the recipe), or check base_url."
        )

    def complete_batch(self, conversations: list[list[Message]]) -> list[str]:
        """Replies to many conversations, `max_workers` requests at a time, in order."""
        if self.max_workers == 1 or len(conversations) <= 1:
            return [self.complete(c) for c in conversations]
        with ThreadPoolExecutor(max_workers=self.max_workers) as pool:
            return list(pool.map(self.complete, conversations))

    def _backoff(self, attempt: int, retry_after: float | None) -> float:
        delay = min(self.backoff_max_s, self.backoff_initial_s * self.backoff_factor**attempt)
        delay *= 1.0 + self.backoff_jitter * random.random()
        if retry_after is not None:
            delay = max(delay, min(retry_after, self.backoff_max_s))
        return delay

    def _reply_text(self, raw: bytes) -> str:
        try:
            payload = json.loads(raw)
            content = payload["choices"][0]["message"]["content"]
        except (ValueError, KeyError, IndexError, TypeError):
            raise ChatRequestError(
                f"POST {self.url} answered 200 but not with a chat completion (expected "
                f"{{'choices': [{{'message': {{'content': ...}}}}]}}); got: {raw[:300]!r}. Is base_url an "
                "OpenAI-compatible /v1 endpoint?"
            ) from None
        return content or ""  # a refusal or content filter gives null content: an unparseable (counted) verdict


def _error_detail(error: urllib.error.HTTPError) -> str:
    try:
        raw = error.read()[:500].decode(errors="replace")
    except Exception:  # the body may be gone with the connection
        raw = ""
    try:
        message = json.loads(raw)["error"]["message"]
    except (ValueError, KeyError, TypeError):
        message = raw.strip() or error.reason
    return str(message)[:300]


def _hint_for_status(status: int, api_key_env: str) -> str:
    if status in (401, 403):
        return f"Check the key in ${api_key_env} and that it may use this model."
    if status == 404:
        return "Check base_url (it should end in /v1) and the model name."
    return "Check the request settings (model name, max_tokens)."


def _retry_after_seconds(value: str | None) -> float | None:
    try:
        return max(0.0, float(value)) if value is not None else None
    except ValueError:  # an HTTP date: fall back to the exponential backoff
        return None
