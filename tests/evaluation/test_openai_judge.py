"""The OpenAI-compatible judge (the `openai` client) against a real chat-completions server on 127.0.0.1 (http.server in
a thread). The server asks for 1 ms between retries (`retry-after-ms`), which the client honours."""

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from trl_dpr.evaluation import (
    ChatRequestError,
    LLMPairwiseJudge,
    MissingAPIKeyError,
    OpenAIChatModel,
    PairToJudge,
)

KEY_ENV = "TRL_DPR_TEST_JUDGE_KEY"
KEY = "test-key-3f9a"


class FakeChatCompletions:
    """A chat-completions endpoint: records every request; answers from a script of (status, reply, delay) steps,
    then with `default(messages)`."""

    def __init__(self):
        self.requests = []
        self.script = []
        self.default = lambda messages: "Both are fine. [[A=B]]"
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                outer.requests.append(
                    {"path": self.path, "headers": {k.lower(): v for k, v in self.headers.items()}, "body": body}
                )
                status, reply, delay = outer.script.pop(0) if outer.script else (200, None, 0.0)
                time.sleep(delay)
                if status == 200:
                    text = reply if reply is not None else outer.default(body["messages"])
                    payload = {
                        "id": "x",
                        "object": "chat.completion",
                        "model": body["model"],
                        "choices": [
                            {"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": text}}
                        ],
                    }
                else:
                    payload = {"error": {"message": reply or f"status {status}", "type": "test"}}
                data = json.dumps(payload).encode()
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    if status != 200:
                        self.send_header("retry-after-ms", "1")
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):  # the client gave up (timeout test)
                    pass

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
        self.thread.start()
        self.base_url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def server():
    fake = FakeChatCompletions()
    yield fake
    fake.close()


@pytest.fixture
def api_key(monkeypatch):
    monkeypatch.setenv(KEY_ENV, KEY)


def make_client(server, **overrides):
    values = dict(model="gpt-4o", base_url=server.base_url, api_key_env=KEY_ENV, max_retries=3, timeout_s=5.0)
    values.update(overrides)
    return OpenAIChatModel(**values)


def test_a_request_is_a_chat_completion_with_the_bearer_key_and_temperature_zero(server, api_key):
    server.script = [(200, "Rating: [[8]]", 0.0)]
    client = make_client(server)
    reply = client.complete([{"role": "user", "content": "Rate this."}])
    assert reply == "Rating: [[8]]"
    (request,) = server.requests
    assert request["path"] == "/v1/chat/completions"
    assert request["headers"]["authorization"] == f"Bearer {KEY}"
    assert request["headers"]["content-type"].startswith("application/json")
    assert request["body"]["model"] == "gpt-4o"
    assert request["body"]["temperature"] == 0
    assert request["body"]["messages"] == [{"role": "user", "content": "Rate this."}]
    assert KEY not in repr(client)


def test_429_then_500_are_retried_then_succeed(server, api_key):
    server.script = [(429, "Rate limit reached", 0.0), (500, "Internal error", 0.0), (200, "[[B>A]]", 0.0)]
    client = make_client(server)
    started = time.monotonic()
    assert client.complete([{"role": "user", "content": "q"}]) == "[[B>A]]"
    assert len(server.requests) == 3
    assert time.monotonic() - started < 2.0  # the server's retry-after-ms, not the client's default backoff


def test_a_persistent_500_is_a_clear_error_after_the_retries(server, api_key):
    server.script = [(500, "The server had an error", 0.0)] * 10
    client = make_client(server, max_retries=2)
    with pytest.raises(ChatRequestError) as error:
        client.complete([{"role": "user", "content": "q"}])
    message = str(error.value)
    assert "failed 3 times" in message and "HTTP 500" in message and "The server had an error" in message
    assert "max_retries" in message and KEY not in message
    assert len(server.requests) == 3


def test_a_slow_server_times_out_is_retried_and_then_a_clear_error(server, api_key):
    server.script = [(200, "[[A>B]]", 0.6)] * 3
    client = make_client(server, timeout_s=0.2, max_retries=1)
    started = time.monotonic()
    with pytest.raises(ChatRequestError, match="no response within timeout_s=0.2"):
        client.complete([{"role": "user", "content": "q"}])
    assert len(server.requests) == 2
    assert time.monotonic() - started < 3.0  # the client stopped waiting; it did not sit out the server's delays


def test_a_timeout_followed_by_an_answer_succeeds(server, api_key):
    server.script = [(200, "[[A>B]]", 0.6), (200, "[[B>A]]", 0.0)]
    client = make_client(server, timeout_s=0.2)
    assert client.complete([{"role": "user", "content": "q"}]) == "[[B>A]]"
    assert len(server.requests) == 2


def test_a_refused_request_is_not_retried_and_says_what_to_check(server, api_key):
    server.script = [(401, "Incorrect API key provided", 0.0)]
    client = make_client(server)
    with pytest.raises(ChatRequestError, match=f"HTTP 401: Incorrect API key provided.*\\${KEY_ENV}"):
        client.complete([{"role": "user", "content": "q"}])
    assert len(server.requests) == 1


def test_an_absent_api_key_is_an_error_naming_the_variable_before_any_request(server, monkeypatch):
    monkeypatch.delenv(KEY_ENV, raising=False)
    with pytest.raises(MissingAPIKeyError, match=KEY_ENV):
        make_client(server)
    monkeypatch.setenv(KEY_ENV, "")  # set but empty counts as absent
    with pytest.raises(MissingAPIKeyError, match=KEY_ENV):
        make_client(server)
    assert server.requests == []


def test_the_key_is_read_at_request_time_not_stored(server, monkeypatch):
    monkeypatch.setenv(KEY_ENV, "first-key")
    client = make_client(server)
    monkeypatch.setenv(KEY_ENV, "rotated-key")
    client.complete([{"role": "user", "content": "q"}])
    assert server.requests[0]["headers"]["authorization"] == "Bearer rotated-key"
    assert "first-key" not in repr(client.__dict__)


def answer_from_position(messages):
    """A judge that prefers the answer containing 'correct', wherever it is shown."""
    user = messages[-1]["content"]
    answer_a = user.split("[The Start of Assistant A's Answer]")[1].split("[The End of Assistant A's Answer]")[0]
    answer_b = user.split("[The Start of Assistant B's Answer]")[1].split("[The End of Assistant B's Answer]")[0]
    if "correct" in answer_a and "correct" not in answer_b:
        return "Assistant A gives the correct total.\n\nMy final verdict is: [[A>B]]"
    if "correct" in answer_b and "correct" not in answer_a:
        return "Assistant B gives the correct total.\n\nMy final verdict is: [[B>A]]"
    return "Neither stands out. [[A=B]]"


def test_the_pairwise_judge_asks_in_both_orders_and_combines_them(server, api_key):
    server.default = answer_from_position
    client = make_client(server, max_workers=4)
    judge = LLMPairwiseJudge(client)
    pairs = [
        PairToJudge("How much did Mia earn?", "46 dollars, the correct total.", "13 dollars."),
        PairToJudge("How much did Leo earn?", "12 dollars.", "30 dollars, the correct total."),
        PairToJudge("Sort 3 1 2.", "1 2 3", "1 2 3"),
    ]
    judgements = judge.judge_pairs(pairs)
    assert [j.outcome for j in judgements] == ["win", "loss", "tie"]
    assert judgements[0].verdicts == ("A>B", "B>A")  # candidate first as A, then as B
    assert len(server.requests) == 6
    system_prompts = {r["body"]["messages"][0]["content"] for r in server.requests}
    assert len(system_prompts) == 1 and "[[A>B]]" in system_prompts.pop()
    first_question = [r for r in server.requests if "Mia" in r["body"]["messages"][1]["content"]]
    shown_first = [
        r["body"]["messages"][1]["content"].index("46 dollars")
        < r["body"]["messages"][1]["content"].index("13 dollars")
        for r in first_question
    ]
    assert sorted(shown_first) == [False, True]  # the candidate was shown once in each position


def test_unparseable_judge_replies_are_counted_not_dropped(server, api_key):
    server.default = lambda messages: "Assistant A is better overall. A>B"  # no brackets
    client = make_client(server)
    (judgement,) = LLMPairwiseJudge(client).judge_pairs([PairToJudge("q", "a", "b")])
    assert judgement.outcome is None and "no verdict" in judgement.problem
    assert judgement.judge_outputs == ("Assistant A is better overall. A>B",) * 2
