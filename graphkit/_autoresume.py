"""Auto-resume: read a suspended tool's resume data from the user's next message.

The model's structured output is asked for the tool's `resume_schema`; anything it cannot
fill validly leaves the tool suspended (it asks again), never a crash. Only suspensions are
resumed this way: a message never decides an approval.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import BaseMessage, HumanMessage, SystemMessage
from langchain_core.tools import BaseTool
from pydantic import BaseModel, ValidationError

from graphkit._approvals import Extractor
from graphkit._state import CallPlan
from graphkit.tools import GraphkitTool

__all__ = ["make_extractor"]

logger = logging.getLogger("graphkit")

EXTRACT_INSTRUCTIONS = (
    "A tool paused to ask the user for input. Read the user's reply below and fill in the "
    "data the tool asked for, as {schema}. The tool {tool!r} (called with {args}) asked: "
    "{payload}. Use only what the user said; do not invent values."
)


def make_extractor(model: BaseChatModel, tools: Mapping[str, BaseTool]) -> Extractor:
    """An `Extractor` that uses `model.with_structured_output(resume_schema)`."""

    def extract(call: CallPlan, said: list[BaseMessage]) -> Any:
        tool = tools.get(call["tool_name"])
        schema = tool.resume_schema if isinstance(tool, GraphkitTool) else None
        suspension = call["suspension"]
        if schema is None or suspension is None:
            return None
        replies = [m for m in said if isinstance(m, HumanMessage)]
        if not replies:
            return None
        prompt = EXTRACT_INSTRUCTIONS.format(
            schema=schema.__name__,
            tool=call["tool_name"],
            args=json.dumps(call["args"], default=str),
            payload=json.dumps(suspension["metadata"].get("suspend_payload"), default=str),
        )
        try:
            raw = model.with_structured_output(schema).invoke([SystemMessage(prompt), *replies])
            parsed = raw if isinstance(raw, schema) else schema.model_validate(raw)
        except (ValidationError, ValueError, TypeError, KeyError) as exc:
            logger.info("auto-resume could not read %s from the reply: %s", schema.__name__, exc)
            return None
        except Exception:  # a model failure must not lose the suspension either
            logger.warning("auto-resume extraction failed; the tool stays suspended",
                           exc_info=True)
            return None
        return parsed.model_dump(mode="json") if isinstance(parsed, BaseModel) else None

    return extract
