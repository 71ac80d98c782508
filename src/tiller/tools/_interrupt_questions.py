"""`InterruptQuestions`: the broker of a served run, where a question is an interrupt.

A served run has no one waiting at a prompt: the question goes to the page as an AG-UI
interrupt (reason `question`), the run suspends, and the answer arrives with the resume,
in a later request that may reach another process. So this broker never waits. The loop
asks `holds(call_id)` before the `ask_user` call runs: a call with no answer yet is held
(the run suspends on it); a resumed run's broker carries the answers, by call id, and
`ask` returns the one for its call.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

from ..cancel import CancellationToken
from ._questions import Answer, Answered, Dismissed, Question, QuestionOutcome

__all__ = [
    "ASK_USER",
    "QUESTION_SCHEMA",
    "InterruptQuestions",
    "answers_from_payload",
    "question_interrupt_id",
    "questions_metadata",
]

#: The built-in tool whose calls become question interrupts.
ASK_USER: Final = "ask_user"


def question_interrupt_id(tool_call_id: str) -> str:
    """The question interrupt's id for a call: stable per call, like an approval's."""
    return f"question-{tool_call_id}"


class InterruptQuestions:
    """Questions as interrupts; `answers` are a resume's, by call id."""

    __slots__ = ("_answers",)

    def __init__(self, answers: Mapping[str, QuestionOutcome] | None = None) -> None:
        self._answers = dict(answers or {})

    def holds(self, call_id: str) -> bool:
        """Whether the call must wait for a person (no answer has come for it yet)."""
        return call_id not in self._answers

    async def ask(
        self, questions: Sequence[Question], *, call_id: str, token: CancellationToken
    ) -> QuestionOutcome:
        # An answer answers the one call it was given for, once (law 10).
        answer = self._answers.pop(call_id, None)
        if answer is None:
            # The loop holds unanswered calls before they run; this is the fail-safe.
            return Dismissed("the question could not be put to the person")
        return answer

    def __repr__(self) -> str:
        return f"InterruptQuestions({sorted(self._answers)})"


def questions_metadata(arguments: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The questions of an `ask_user` call as the interrupt shows them (camelCase)."""
    shown: list[dict[str, Any]] = []
    for raw in arguments.get("questions") or []:
        if not isinstance(raw, Mapping):
            continue
        options = [
            {
                "label": str(option.get("label", "")).strip(),
                "description": str(option.get("description", "")),
                "recommended": bool(option.get("recommended", False)),
            }
            for option in raw.get("options") or []
            if isinstance(option, Mapping)
        ]
        shown.append(
            {
                # Stripped as the tool strips them, so answers match by header.
                "header": str(raw.get("header", "")).strip(),
                "question": str(raw.get("question", "")).strip(),
                "options": options,
                "multiSelect": bool(raw.get("multi_select", raw.get("multiSelect", False))),
            }
        )
    return shown


#: What a question interrupt expects back: one answer per question.
QUESTION_SCHEMA: Final[dict[str, Any]] = {
    "type": "object",
    "properties": {
        "answers": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "header": {"type": "string"},
                    "question": {"type": "string"},
                    "selected": {"type": "array", "items": {"type": "string"}},
                    "note": {"type": "string"},
                },
            },
        }
    },
    "required": ["answers"],
}


def answers_from_payload(
    payload: Any, questions: Sequence[Mapping[str, Any]]
) -> QuestionOutcome | None:
    """A resume payload as the call's outcome; None when it does not fit the schema.

    Answers are matched to the questions by header, else by position."""
    if not isinstance(payload, Mapping) or not isinstance(payload.get("answers"), list):
        return None
    by_header = {str(q.get("header", "")): q for q in questions}
    answers: list[Answer] = []
    for index, raw in enumerate(payload["answers"]):
        if not isinstance(raw, Mapping):
            return None
        selected = raw.get("selected", [])
        note = raw.get("note", "")
        if not isinstance(selected, list) or not all(isinstance(s, str) for s in selected):
            return None
        if not isinstance(note, str):
            return None
        header = str(raw.get("header", ""))
        asked = by_header.get(header) or (questions[index] if index < len(questions) else None)
        if asked is None:
            return None
        answers.append(
            Answer(
                header=str(asked.get("header", "")),
                question=str(asked.get("question", "")),
                selected=tuple(selected),
                note=note,
            )
        )
    return Answered(tuple(answers))
