"""Deterministic, offline models for tests, notebooks and demos.

`ScriptedChatModel` answers the n-th model turn of a conversation with the n-th scripted
message, where n counts the AI replies already in the conversation. The answer is therefore a
function of the conversation alone: a run paused in one process and resumed in another (or
replayed by LangGraph) gets the same answers, with no hidden cursor to keep in sync.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel, LanguageModelInput
from langchain_core.messages import AIMessage, AIMessageChunk, BaseMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatGenerationChunk, ChatResult
from langchain_core.runnables import Runnable, RunnableLambda
from pydantic import BaseModel, ConfigDict, PrivateAttr

from graphkit._client_writes import untied_result

__all__ = ["MalformedConversationError", "ScriptExhaustedError", "ScriptedChatModel",
           "conversation_errors", "reply_text"]

Script = Sequence[AIMessage | str] | Callable[[list[BaseMessage]], AIMessage | str]
StructuredScript = Sequence[Any] | Callable[[Any, list[BaseMessage]], Any]


class ScriptExhaustedError(AssertionError):
    """The conversation needs a reply the script does not have (a bug in the test)."""


class MalformedConversationError(ValueError):
    """The model was handed a conversation a chat provider refuses (OpenAI's API answers it
    with a 400): a tool result away from its call, a call left without its result."""


def conversation_errors(messages: Sequence[BaseMessage]) -> list[str]:
    """What a chat provider would refuse in `messages`: each model turn's calls are answered
    by one result each, right after it (nothing but results between), and a result answers a
    call of the turn right before it. OpenAI's and Anthropic's APIs refuse anything else, so
    an agent that hands a model such a conversation breaks its thread for a real model. A
    message in a tool's role that names no call (a `FunctionMessage`, or a `ChatMessage`
    with the role "tool" or "function") is refused too."""
    errors: list[str] = []
    asked: Counter[str] = Counter()  # (a model may give two calls one id: one result each)
    for message in messages:
        if untied_result(message):
            errors.append(f"a {type(message).__name__} speaks as a tool for no call")
            continue
        if isinstance(message, ToolMessage):
            if message.tool_call_id not in asked:
                errors.append(f"a result for call {message.tool_call_id!r} does not follow it")
            elif asked[message.tool_call_id] == 0:
                errors.append(f"call {message.tool_call_id!r} has more than one result")
            else:
                asked[message.tool_call_id] -= 1
            continue
        if open_ := sorted(+asked):
            errors.append(f"calls {open_} have no result before the next message")
        calls = getattr(message, "tool_calls", None) if isinstance(message, AIMessage) else None
        asked = Counter(str(c.get("id")) for c in calls or [])
    if open_ := sorted(+asked):
        errors.append(f"calls {open_} have no result")
    return errors


def _ai_turns(messages: Sequence[BaseMessage]) -> int:
    return sum(isinstance(m, AIMessage) for m in messages)


class ScriptedChatModel(BaseChatModel):
    """A chat model that replays a script: a list of `AIMessage`s, or a function of messages.

    Args:
        responses: The n-th item answers the n-th model turn of a conversation (n = the AI
            replies already in the messages it is given). Strings become plain AI messages.
            A function receives the messages and returns the reply.
        structured: Answers for `with_structured_output`: a list (used in order of the
            structured calls this model has served) or a function `(schema, messages)`.
            Without it, the reply the script would give is parsed: its first tool call's
            arguments, or its content as JSON.
        chunk_words: Stream text in pieces of this many words (for `text-delta` chunks).
        strict: Refuse, as a chat provider does, a conversation with a tool result away from
            its call or a call without its result (`MalformedConversationError`): a model
            that took it would hide a conversation a real model cannot be given.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    responses: Any
    structured: Any = None
    chunk_words: int = 1
    strict: bool = True
    _calls: list[list[BaseMessage]] = PrivateAttr(default_factory=list)
    _structured_calls: int = PrivateAttr(default=0)

    def __init__(self, responses: Script, **kwargs: Any) -> None:
        super().__init__(responses=responses, **kwargs)  # type: ignore[call-arg]

    @property
    def _llm_type(self) -> str:
        return "graphkit-scripted"

    @property
    def calls(self) -> list[list[BaseMessage]]:
        """The messages of every model call this instance served, in order."""
        return self._calls

    def reply_for(self, messages: Sequence[BaseMessage]) -> AIMessage:
        """The scripted reply to `messages` (without recording a call)."""
        conversation = list(messages)
        if self.strict and (errors := conversation_errors(conversation)):
            msg = ("a chat provider would refuse this conversation: " + "; ".join(errors))
            raise MalformedConversationError(msg)
        if callable(self.responses):
            reply = self.responses(conversation)
        else:
            index = _ai_turns(conversation)
            if index >= len(self.responses):
                msg = (
                    f"ScriptedChatModel has {len(self.responses)} scripted replies but the "
                    f"conversation asks for reply #{index + 1}; script one reply per model turn "
                    "(or pass a function of the messages)"
                )
                raise ScriptExhaustedError(msg)
            reply = self.responses[index]
        if isinstance(reply, str):
            reply = AIMessage(reply)
        # A fresh id per call: the same scripted message may answer several turns or threads.
        copied: AIMessage = reply.model_copy(update={"id": None}, deep=True)
        return copied

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        self._calls.append(list(messages))
        return ChatResult(generations=[ChatGeneration(message=self.reply_for(messages))])

    def _stream(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> Iterator[ChatGenerationChunk]:
        self._calls.append(list(messages))
        reply = self.reply_for(messages)
        text = reply.content if isinstance(reply.content, str) else ""
        pieces = re.findall(r"\S+\s*|\s+", text) if text else []
        size = max(1, self.chunk_words)
        for start in range(0, len(pieces), size):
            piece = "".join(pieces[start : start + size])
            chunk = ChatGenerationChunk(message=AIMessageChunk(content=piece))
            if run_manager:
                run_manager.on_llm_new_token(piece, chunk=chunk)
            yield chunk
        tool_chunks = [
            {"name": call["name"], "args": json.dumps(call["args"]), "id": call.get("id"),
             "index": index, "type": "tool_call_chunk"}
            for index, call in enumerate(reply.tool_calls)
        ]
        yield ChatGenerationChunk(
            message=AIMessageChunk(
                content="" if pieces else reply.content,
                tool_call_chunks=tool_chunks,  # type: ignore[arg-type]
                response_metadata={"finish_reason": "tool_calls" if tool_chunks else "stop"},
                chunk_position="last",
            )
        )

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> Runnable[LanguageModelInput,
                                                                         AIMessage]:
        """Accept tools as a real model would; the script decides what gets called."""
        return self.bind(**kwargs)  # type: ignore[return-value]

    def with_structured_output(  # type: ignore[override]
        self, schema: Any, *, include_raw: bool = False, **kwargs: Any
    ) -> Runnable[LanguageModelInput, Any]:
        """Answer with `structured` (or the scripted reply, parsed) validated into `schema`."""

        def answer(value: LanguageModelInput) -> Any:
            messages = list(self._convert_input(value).to_messages())
            if callable(self.structured):
                raw = self.structured(schema, messages)
            elif self.structured is not None:
                index = self._structured_calls
                self._structured_calls += 1
                if index >= len(self.structured):
                    msg = f"ScriptedChatModel has {len(self.structured)} structured replies"
                    raise ScriptExhaustedError(msg)
                raw = self.structured[index]
            else:
                reply = self.reply_for(messages)
                raw = reply.tool_calls[0]["args"] if reply.tool_calls else json.loads(
                    str(reply.content))
            parsed = _parse(schema, raw)
            return {"raw": None, "parsed": parsed, "parsing_error": None} if include_raw \
                else parsed

        return RunnableLambda(answer, name="ScriptedStructuredOutput")


def _parse(schema: Any, raw: Any) -> Any:
    if isinstance(schema, type) and issubclass(schema, BaseModel):
        return raw if isinstance(raw, schema) else schema.model_validate(raw)
    return raw


def reply_text(messages: list[Any]) -> str:
    """What the user said, in a structured-output stand-in for auto-resume: the text of the
    last `<user_reply>` data message graphkit's extractor sends (else the last message)."""
    for message in reversed(messages):
        text = str(getattr(message, "content", ""))
        if text.startswith("<user_reply>\n") and text.endswith("\n</user_reply>"):
            return text[len("<user_reply>\n"):-len("\n</user_reply>")]
    return str(getattr(messages[-1], "content", "")) if messages else ""
