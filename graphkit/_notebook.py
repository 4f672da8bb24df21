"""Deciding from a notebook: review cards with buttons (ipywidgets), and the agent's graph.

`agent.review(result, decided_by="alice")` shows each pending approval's card with Approve,
Edit and Decline (with a comment), and a suspension's form for its resume data. A click goes
through the Agent API, the same decision path as every other door: the approvers policy
decides, a refused reviewer sees why, and the continued run is shown below the cards.
`agent.draw()` is the graph as Mermaid text, drawn by JupyterLab without any network call.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from graphkit import _html
from graphkit.errors import GraphkitError
from graphkit.types import GenerateResult, PendingApproval

if TYPE_CHECKING:
    from graphkit.agent import Agent

__all__ = ["Drawing", "Review", "ReviewCard", "draw", "review"]

MISSING_WIDGETS = ("agent.review needs ipywidgets: pip install 'graphkit-hitl[notebook]' "
                   "(the cards still render without it: display(result))")


@dataclass(frozen=True, slots=True)
class Drawing:
    """The agent's graph (subagents expanded) as Mermaid; Jupyter renders the Markdown."""

    mermaid: str

    def _repr_markdown_(self) -> str:
        return f"```mermaid\n{self.mermaid}\n```"

    def __str__(self) -> str:
        return self.mermaid


def draw(agent: Agent) -> Drawing:
    return Drawing(agent.graph.get_graph(xray=True).draw_mermaid())


@dataclass
class ReviewCard:
    """One pending approval's controls (exposed so tests and scripts can drive them)."""

    pending: PendingApproval
    widget: Any
    approve: Any
    decline: Any
    edit: Any
    resume: Any
    comment: Any
    fields: dict[str, Any] = field(default_factory=dict)
    message: Any = None


@dataclass
class Review:
    """What `agent.review` displays: a card per pending call and the continued run."""

    widget: Any
    cards: list[ReviewCard]
    output: Any
    results: list[GenerateResult] = field(default_factory=list)

    def _ipython_display_(self) -> None:
        from IPython.display import display

        display(self.widget)  # type: ignore[no-untyped-call]


def _field(widgets: Any, name: str, spec: Mapping[str, Any], value: Any) -> Any:
    kind = spec.get("type")
    if kind == "boolean":
        return widgets.Checkbox(value=bool(value), description=name)
    if kind == "integer":
        return widgets.IntText(value=int(value or 0), description=name)
    if kind == "number":
        return widgets.FloatText(value=float(value or 0), description=name)
    if kind == "string":
        return widgets.Text(value="" if value is None else str(value), description=name)
    return widgets.Textarea(value=json.dumps(value), description=f"{name} (JSON)")


def _read(spec: Mapping[str, Any], widget: Any) -> Any:
    if spec.get("type") in ("boolean", "integer", "number", "string"):
        return widget.value
    return json.loads(widget.value or "null")


def review(agent: Agent, target: GenerateResult | str, *, decided_by: str) -> Review:
    try:
        import ipywidgets as widgets
    except ImportError as exc:  # pragma: no cover - the extra is installed in tests
        raise ImportError(MISSING_WIDGETS) from exc
    run_id = target.run_id if isinstance(target, GenerateResult) else target
    output = widgets.HTML()
    cards: list[ReviewCard] = []
    box = widgets.VBox()
    result = Review(widget=box, cards=cards, output=output)

    def after(decide: Callable[[], GenerateResult], card: ReviewCard) -> None:
        try:
            continued = decide()
        except (GraphkitError, ValueError, RecursionError) as exc:
            card.message.value = (f"<p class='error'>Refused: "
                                  f"{_html._e(type(exc).__name__)}: {_html._e(str(exc))}</p>")
            return
        result.results.append(continued)
        for other in cards:
            for button in (other.approve, other.decline, other.edit, other.resume):
                button.disabled = True
        card.message.value = "<p>Decided.</p>"
        output.value = _html.result(continued)

    for pending in agent.pending_approvals(run_id=run_id):
        if pending.status != "pending":
            continue
        tool = agent._find_tool(pending.agent_path, pending.tool_name)
        is_suspension = pending.kind == "suspension"
        schema_model = getattr(tool, "resume_schema", None) if is_suspension else getattr(
            tool, "args_schema", None)
        make = getattr(schema_model, "model_json_schema", None)
        schema: Mapping[str, Any] = make() if callable(make) else {}
        values = {} if is_suspension else pending.args
        inputs = {name: _field(widgets, name, spec, values.get(name, spec.get("default")))
                  for name, spec in (schema.get("properties") or {}).items()}
        card = ReviewCard(
            pending=pending,
            widget=None,
            approve=widgets.Button(description="Approve", button_style="success",
                                   disabled=is_suspension),
            edit=widgets.Button(description="Approve with edits", disabled=is_suspension),
            decline=widgets.Button(description="Decline", button_style="danger"),
            resume=widgets.Button(description="Resume", button_style="info",
                                  disabled=not is_suspension),
            comment=widgets.Text(description="comment"),
            fields=inputs,
            message=widgets.HTML(),
        )

        def values_of(card: ReviewCard = card, schema: Mapping[str, Any] = schema
                      ) -> dict[str, Any]:
            props = schema.get("properties") or {}
            return {name: _read(props[name], w) for name, w in card.fields.items()}

        def on_approve(_: Any, card: ReviewCard = card) -> None:
            after(lambda: agent.approve_tool_call_generate(
                run_id=run_id, tool_call_id=card.pending.tool_call_id, decided_by=decided_by,
                comment=card.comment.value or None, args_digest=card.pending.args_digest), card)

        def on_edit(_: Any, card: ReviewCard = card, read: Callable[[], Any] = values_of
                    ) -> None:
            try:
                edited = read()
            except (ValueError, RecursionError) as exc:
                card.message.value = f"<p class='error'>Not JSON: {_html._e(str(exc))}</p>"
                return
            after(lambda: agent.approve_tool_call_generate(
                run_id=run_id, tool_call_id=card.pending.tool_call_id, decided_by=decided_by,
                comment=card.comment.value or None, args=edited), card)

        def on_decline(_: Any, card: ReviewCard = card) -> None:
            after(lambda: agent.decline_tool_call_generate(
                run_id=run_id, tool_call_id=card.pending.tool_call_id, decided_by=decided_by,
                comment=card.comment.value or None), card)

        def on_resume(_: Any, card: ReviewCard = card, read: Callable[[], Any] = values_of
                      ) -> None:
            after(lambda: agent.resume_generate(read(), run_id=run_id,
                                                tool_call_id=card.pending.tool_call_id,
                                                decided_by=decided_by), card)

        card.approve.on_click(on_approve)
        card.edit.on_click(on_edit)
        card.decline.on_click(on_decline)
        card.resume.on_click(on_resume)
        buttons = [card.resume] if is_suspension else [card.approve, card.edit]
        card.widget = widgets.VBox([
            widgets.HTML(_html.card(pending)), *inputs.values(), card.comment,
            widgets.HBox([*buttons, card.decline]), card.message])
        cards.append(card)
    box.children = [*(c.widget for c in cards), output] if cards else [
        widgets.HTML("<p>Nothing waits for a decision in this run.</p>"), output]
    return result
