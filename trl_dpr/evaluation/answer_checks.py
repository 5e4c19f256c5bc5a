"""Answer checks for a task of your own: a function in your own file, or a pattern, that says which answers are right.

    answer_check: my_checks:fahrenheit      def fahrenheit(completions, answer, **kw) -> list[float]   (TRL's reward_funcs)
    answer_pattern: 'The answer is (-?[0-9.]+)'    the last match's group 1 equals the answer (numbers compared as numbers)

A check gets what TRL's GRPOTrainer passes a reward function for the file's format: for a conversational file (`prompt`
as chat messages, or `messages` rows) `prompts` are message lists and each completion is `[{"role": "assistant",
"content": text}]`; for a standard one (`prompt` a string) both are strings. `answer` is the file's `answer` column (or,
without one, the demonstration's text); each score is in [0, 1] (1 = right). The preview (`quality: exact`) and
`trl-dpr evaluate` (`judge: exact`, `benchmarks: [jsonl]`) both reach a check through `answer_check_from`.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence

from ..embedded.task import extract_answer, is_correct
from ..rewards import _import_from_working_directory


def _is_conversational(prompt) -> bool:
    # TRL's rule (`trl.data_utils.is_conversational`): a prompt that is a list of chat messages.
    return isinstance(prompt, list) and bool(prompt) and isinstance(prompt[0], dict) and "role" in prompt[0]


def _text(completion) -> str:
    # A completion as TRL passes it, back to its text: a string, or the assistant's message(s) of a conversation.
    return completion if isinstance(completion, str) else "".join(m.get("content") or "" for m in completion)


class AnswerCheck:
    """A user's check, called as TRL calls a reward function (keyword arguments, completions in the prompts' format),
    its scores checked on the way out. `prompts` are the file's, as written: strings, or chat messages."""

    def __init__(self, function: Callable[..., Sequence[float]], name: str):
        self.function = function
        self.name = name

    def __call__(
        self, completions: Sequence[str], answers: Sequence[str], prompts: Sequence | None = None
    ) -> list[float]:
        if len(completions) != len(answers):
            raise ValueError(f"{len(completions)} completions for {len(answers)} answers.")
        if not completions:
            return []
        prompts = list(prompts or [])
        conversational = bool(prompts) and _is_conversational(prompts[0])
        if conversational:  # as GRPOTrainer decodes them without a response parser: one assistant message each
            completions = [[{"role": "assistant", "content": text}] for text in completions]
        try:
            scores = self.function(completions=list(completions), answer=list(answers), prompts=prompts)
        except Exception as error:  # the user's code: say what it was given, not only where it broke
            given = (
                'lists [{"role": "assistant", "content": text}], as TRL passes them for a conversational file'
                if conversational
                else "strings, as TRL passes them for a file whose prompts are strings"
            )
            raise ValueError(
                f"answer_check {self.name} raised {type(error).__name__}: {error}. It is called with completions "
                f"({given}), answer (the `answer` column, or the demonstration's text when the file has none; the "
                f"first: {answers[0]!r:.80}) and prompts."
            ) from error
        if not isinstance(scores, Sequence) or isinstance(scores, str) or len(scores) != len(completions):
            raise ValueError(
                f"answer_check {self.name} returned {_describe(scores)} for {len(completions)} completions; it must "
                "return a list with one score in [0, 1] per completion (1 = right)."
            )
        bad = [s for s in scores if not isinstance(s, (int, float)) or math.isnan(s) or not 0 <= s <= 1]
        if bad:
            raise ValueError(
                f"answer_check {self.name} returned {bad[0]!r}; each score must be a number in [0, 1] (1 = right, 0 = "
                "wrong; a partial credit in between)."
            )
        return [float(s) for s in scores]


def _describe(value) -> str:
    return f"a {type(value).__name__} of {len(value)}" if hasattr(value, "__len__") else repr(value)


def _same_answer(found: str | None, expected: str) -> bool:
    """Equal as text (whitespace-normalised), or as numbers when both are: `-40.0` is `-40`, `98.60` is `98.6`."""
    if found is None:
        return False
    found, expected = " ".join(found.split()), " ".join(str(expected).split())
    if found == expected:
        return True
    try:
        return math.isclose(float(found), float(expected), rel_tol=1e-9, abs_tol=1e-9)
    except ValueError:
        return False


def pattern_check(pattern: str) -> AnswerCheck:
    """The check of `answer_pattern`: a completion is right when its last match's first group (or the whole match,
    without a group) equals the answer. An answer that is a whole demonstration is read with the same pattern.

    Example:
        >>> check = pattern_check(r"The answer is (-?[0-9.]+)")
        >>> check(["So -40 °F. The answer is -40.", "The answer is 212"], ["-40.0", "The answer is 211."])
        [1.0, 0.0]
    """
    try:
        compiled = re.compile(pattern)
    except re.error as error:
        raise ValueError(
            f"answer_pattern {pattern!r} is not a regular expression ({error}); e.g. 'The answer is (-?[0-9.]+)'."
        ) from None

    def last(text: str) -> str | None:
        matches = list(compiled.finditer(text or ""))
        if not matches:
            return None
        match = matches[-1]
        return match.group(1) if compiled.groups else match.group(0)

    def check(completions, answer, **kwargs):
        return [float(_same_answer(last(_text(c)), last(a) or a)) for c, a in zip(completions, answer)]

    return AnswerCheck(check, f"pattern {pattern!r}")


def import_named(spec: str, key: str, example: str, needs: str):
    """The object a recipe names as `key: module:Name`, imported as `dense_reward: module:Class` is (the folder the
    command runs in first); one line saying what to write when it cannot be. `needs` is what `Name` must be."""
    module_name, _, attribute = spec.partition(":")
    if not module_name or not attribute:
        raise ValueError(
            f"{key} must be 'module:Name' (e.g. {example}, with {example.split(':')[0]}.py in the folder you run from), "
            f"got {spec!r}."
        )
    try:
        module = _import_from_working_directory(module_name)
    except ImportError as error:
        raise ValueError(
            f"{key} {spec!r}: cannot import {module_name!r} ({error}). Run from the folder that holds "
            f"{module_name.replace('.', '/')}.py, or install the package that provides it."
        ) from None
    named = getattr(module, attribute, None)
    if not callable(named):
        raise ValueError(f"{key} {spec!r}: {module_name!r} has no {attribute!r}; it needs {needs.format(attribute)}.")
    return named


def load_answer_check(spec: str) -> AnswerCheck:
    """`answer_check: module:function`, a function of yours (`import_named`)."""
    function = import_named(
        spec, "answer_check", "my_checks:fahrenheit", "`def {}(completions, answer, **kwargs) -> list[float]`"
    )
    return AnswerCheck(function, spec)


def embedded_check() -> AnswerCheck:
    """The embedded task's check: the final `The answer is X.` equals the answer (non-negative integers, sorted lists);
    an answer that is a whole demonstration is read the same way."""

    def check(completions, answer, **kwargs):
        return [float(is_correct(_text(c), extract_answer(a) or a)) for c, a in zip(completions, answer)]

    return AnswerCheck(check, "embedded task")


def answer_check_from(answer_check: str | None, answer_pattern: str | None) -> AnswerCheck | None:
    """The check a recipe names (`answer_check` or `answer_pattern`, not both); None when it names neither."""
    if answer_check and answer_pattern:
        raise ValueError(
            "Give answer_check (a function of yours) or answer_pattern (a regular expression), not both: they would "
            "be two answers to one question."
        )
    if answer_check:
        return load_answer_check(answer_check)
    if answer_pattern:
        return pattern_check(answer_pattern)
    return None
