"""The prompts LLM judges see: pairwise comparison (`[[A>B]]` verdicts) and MT-Bench single-answer grading (`[[n]]`).

They follow the structure of MT-Bench's judge prompts (Zheng et al., 2023, "Judging LLM-as-a-Judge"): a system
instruction that fixes the output format, then the question and the answers between explicit start/end markers. The
same templates serve the OpenAI-compatible judge and the local Hugging Face judge, so both are asked the same thing.
"""

from __future__ import annotations

__all__ = [
    "PAIRWISE_SYSTEM_PROMPT",
    "pairwise_messages",
    "single_grade_messages",
]

PAIRWISE_SYSTEM_PROMPT = (
    "Please act as an impartial judge and evaluate the quality of the responses provided by two AI assistants to the "
    "user question displayed below. Choose the assistant that follows the user's instructions and answers the "
    "user's question better, considering helpfulness, relevance, accuracy, depth, creativity and level of detail. "
    "If a reference answer is given, use it to check correctness. Begin your evaluation by comparing the two "
    "responses and give a short explanation. Avoid any position bias: the order in which the responses are "
    "presented must not influence your decision. Do not let the length of the responses or the names of the "
    "assistants influence you. Be as objective as possible. After your explanation, output your final verdict by "
    'strictly following this format: "[[A>B]]" if assistant A is better, "[[B>A]]" if assistant B is better, and '
    '"[[A=B]]" for a tie.'
)

_PAIRWISE_USER = (
    "[User Question]\n{question}\n\n{reference_block}"
    "[The Start of Assistant A's Answer]\n{answer_a}\n[The End of Assistant A's Answer]\n\n"
    "[The Start of Assistant B's Answer]\n{answer_b}\n[The End of Assistant B's Answer]"
)

_GRADER_SYSTEM = "You are a helpful assistant."

_GRADE_INSTRUCTION = (
    "Please act as an impartial judge and evaluate the quality of the response provided by an AI assistant to the "
    "user question displayed below. Your evaluation should consider factors such as the helpfulness, relevance, "
    "accuracy, depth, creativity, and level of detail of the response. Begin your evaluation by providing a short "
    "explanation. Be as objective as possible. After providing your explanation, you must rate the response on a "
    'scale of 1 to 10 by strictly following this format: "[[rating]]", for example: "Rating: [[5]]".'
)
_GRADE_INSTRUCTION_WITH_REFERENCE = (
    "Please act as an impartial judge and evaluate the quality of the response provided by an AI assistant to the "
    "user question displayed below. Your evaluation should consider correctness and helpfulness. You will be given a "
    "reference answer and the assistant's answer. Begin your evaluation by comparing the assistant's answer with the "
    "reference answer. Identify and correct any mistakes. Be as objective as possible. After providing your "
    "explanation, you must rate the response on a scale of 1 to 10 by strictly following this format: "
    '"[[rating]]", for example: "Rating: [[5]]".'
)
_SECOND_TURN_FOCUS = " Your evaluation should focus on the assistant's answer to the second user question."


def pairwise_messages(question: str, answer_a: str, answer_b: str, reference: str | None = None) -> list[dict]:
    """Chat messages asking a judge to compare answers A and B to `question` (with an optional reference answer).

    Example:
        >>> messages = pairwise_messages("Name a prime.", "7", "8")
        >>> [m["role"] for m in messages], "[[A>B]]" in messages[0]["content"]
        (['system', 'user'], True)
    """
    reference_block = (
        f"[The Start of Reference Answer]\n{reference}\n[The End of Reference Answer]\n\n" if reference else ""
    )
    user = _PAIRWISE_USER.format(question=question, answer_a=answer_a, answer_b=answer_b, reference_block=reference_block)
    return [{"role": "system", "content": PAIRWISE_SYSTEM_PROMPT}, {"role": "user", "content": user}]


def single_grade_messages(
    questions: list[str], answers: list[str], references: list[str] | None = None
) -> list[dict]:
    """Chat messages asking a grader to rate the assistant's last answer from 1 to 10 (MT-Bench single grading).

    With one question this grades turn 1; with two, the whole conversation is shown and the grader is told to focus
    on the second answer. `references` (one per turn) switch to the correctness-first instruction MT-Bench uses for
    math, reasoning and coding.

    Example:
        >>> messages = single_grade_messages(["What is 2+2?"], ["4"], references=["4"])
        >>> "reference answer" in messages[1]["content"], "Rating: [[5]]" in messages[1]["content"]
        (True, True)
    """
    if not questions or len(questions) != len(answers):
        raise ValueError(f"Need one answer per question (got {len(questions)} questions, {len(answers)} answers).")
    if references is not None and len(references) < len(questions):
        raise ValueError(f"Need one reference per question (got {len(references)} for {len(questions)} questions).")
    instruction = _GRADE_INSTRUCTION_WITH_REFERENCE if references else _GRADE_INSTRUCTION
    if len(questions) == 1:
        body = ""
        if references:
            body += f"[The Start of Reference Answer]\n{references[0]}\n[The End of Reference Answer]\n\n"
        body += f"[Question]\n{questions[0]}\n\n[The Start of Assistant's Answer]\n{answers[0]}\n[The End of Assistant's Answer]"
    else:
        instruction += _SECOND_TURN_FOCUS
        body = ""
        if references:
            reference_turns = "".join(
                f"### User:\n{q}\n\n### Reference answer:\n{r}\n\n" for q, r in zip(questions, references)
            )
            body += f"<|The Start of Reference Answer|>\n\n{reference_turns}<|The End of Reference Answer|>\n\n\n"
        turns = "".join(f"### User:\n{q}\n\n### Assistant:\n{a}\n\n" for q, a in zip(questions, answers))
        body += (
            f"<|The Start of Assistant's Conversation with User|>\n\n{turns}"
            "<|The End of Assistant's Conversation with User|>"
        )
    return [{"role": "system", "content": _GRADER_SYSTEM}, {"role": "user", "content": f"{instruction}\n\n{body}"}]
