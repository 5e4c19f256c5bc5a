"""The vLLM backend's routing of prompts, with a fake engine: vLLM is not installed here (it needs a GPU), so
`VLLMAnswerGenerator` is built without its `__init__` and given an object with `LLM.generate` and `LLM.chat`."""

from types import SimpleNamespace

from trl_dpr.evaluation.answers import VLLMAnswerGenerator


class FakeLLM:
    """`LLM.generate` answers `text:<prompt>`, `LLM.chat` answers `chat:<last message>`; every call is recorded."""

    def __init__(self):
        self.calls = []

    def _outputs(self, answers):
        return [SimpleNamespace(outputs=[SimpleNamespace(text=a)]) for a in answers]

    def generate(self, prompts, sampling_params, use_tqdm=True):
        self.calls.append(("generate", list(prompts)))
        return self._outputs(f"text:{p}" for p in prompts)

    def chat(self, conversations, sampling_params, use_tqdm=True):
        self.calls.append(("chat", list(conversations)))
        return self._outputs(f"chat:{c[-1]['content']}" for c in conversations)


def test_a_chunk_mixing_raw_text_and_messages_sends_each_kind_to_its_own_vllm_call_in_order():
    generator = VLLMAnswerGenerator.__new__(VLLMAnswerGenerator)
    generator.llm, generator.sampling_params = FakeLLM(), None
    hello, bye = [{"role": "user", "content": "hello"}], [{"role": "user", "content": "bye"}]

    answers = generator.generate(["2+2=", hello, "3+3=", bye])

    assert answers == ["text:2+2=", "chat:hello", "text:3+3=", "chat:bye"]
    assert generator.llm.calls == [("generate", ["2+2=", "3+3="]), ("chat", [hello, bye])]
