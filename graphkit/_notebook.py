"""Deciding from a notebook: review cards with buttons (ipywidgets), and the agent's graph.

`agent.review(result, decided_by="alice")` shows each pending approval's card with Approve,
Edit and Decline (with a comment), and a suspension's form for its resume data. A click goes
through the Agent API, the same decision path as every other door: the approvers policy
decides, a refused reviewer sees why, and the continued run is shown below the cards.
`agent.draw()` is the graph as an SVG drawn here (any viewer shows it, offline) and as Mermaid.
"""

from __future__ import annotations

import json
import math
import shlex
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from graphkit import _html
from graphkit._review import named
from graphkit._secrets import MASK
from graphkit._validate import args_model
from graphkit.errors import GraphkitError
from graphkit.types import GenerateResult, PendingApproval

if TYPE_CHECKING:
    from graphkit.agent import Agent

__all__ = ["Drawing", "Review", "ReviewCard", "draw", "review"]

MISSING_WIDGETS = ("agent.review needs ipywidgets: pip install 'graphkit-hitl[notebook]' "
                   "(the cards still render without it: display(result))")


@dataclass(frozen=True, slots=True)
class Drawing:
    """The agent's graph (subagents expanded): an SVG drawn here, offline, which any notebook
    viewer shows (nbconvert's HTML, GitHub, JupyterLab without network), and its Mermaid
    text (`str(drawing)`; a Markdown output of it would win over the SVG in nbconvert, and
    be drawn only where Mermaid's script can be loaded)."""

    mermaid: str
    svg: str = ""

    def _repr_svg_(self) -> str:
        return self.svg

    def __str__(self) -> str:
        return self.mermaid


def draw(agent: Agent) -> Drawing:
    graph = agent.graph.get_graph(xray=True)
    edges = [(e.source, e.target, bool(e.conditional)) for e in graph.edges]
    return Drawing(graph.draw_mermaid(), _svg(agent.name, list(graph.nodes), edges))


BOX_W, BOX_H, GAP, PAD, TITLE, ARC = 120, 30, 24, 12, 22, 26


def _svg(name: str, nodes: list[str], edges: list[tuple[str, str, bool]]) -> str:
    """Each agent a frame holding its nodes in a row, each subagent a frame below its
    supervisor's, one level in. An edge within a row arcs above it (forward) or below it
    (back); a delegation goes down to its subagent's frame. Dashed: conditional."""
    agents: dict[tuple[str, ...], list[str]] = {}
    for node in nodes:
        parts = node.split(":")
        agents.setdefault(tuple(parts[:-1]), []).append(parts[-1])
    boxes: dict[str, tuple[float, float, tuple[str, ...]]] = {}
    shapes: list[str] = []
    y = float(PAD)
    for path in sorted(agents):
        x = float(PAD + len(path) * GAP)
        row = agents[path]
        width = len(row) * (BOX_W + GAP) - GAP + 2 * PAD
        height = TITLE + ARC + BOX_H + ARC + PAD
        label = " › ".join([name, *path])
        shapes.append(f"<rect x='{x}' y='{y}' width='{width}' height='{height}' rx='8' "
                      "fill='#f6f8fa' stroke='#8c959f'/>"
                      f"<text x='{x + PAD}' y='{y + 16}' font-size='12' font-weight='bold'>"
                      f"{_html._e(label)}</text>")
        for index, node in enumerate(row):
            bx, by = x + PAD + index * (BOX_W + GAP), y + TITLE + ARC
            boxes[":".join([*path, node])] = (bx, by, path)
            fill = "#eaeef2" if node.startswith("__") else "#ffffff"
            shapes.append(f"<rect x='{bx}' y='{by}' width='{BOX_W}' height='{BOX_H}' rx='6' "
                          f"fill='{fill}' stroke='#57606a'/><text x='{bx + BOX_W / 2}' "
                          f"y='{by + 19}' font-size='12' text-anchor='middle'>"
                          f"{_html._e(node)}</text>")
        y += height + GAP
    arrows = []
    for source, target, conditional in edges:
        if source == target or source not in boxes or target not in boxes:
            continue
        (sx, sy, spath), (tx, ty, tpath) = boxes[source], boxes[target]
        if spath == tpath:  # within one agent: an arc over (forward) or under (back) its row
            forward = tx > sx
            y1 = sy if forward else sy + BOX_H
            bend = -ARC if forward else ARC
            d = (f"M {sx + BOX_W / 2 + (8 if forward else -8)} {y1} Q {(sx + tx) / 2 + BOX_W / 2}"
                 f" {y1 + bend} {tx + BOX_W / 2 + (-8 if forward else 8)} {y1}")
        else:  # a delegation down to a subagent, or its answer back up
            down = ty > sy
            d = (f"M {sx + BOX_W / 2} {sy + (BOX_H if down else 0)} "
                 f"L {tx + BOX_W / 2} {ty + (0 if down else BOX_H)}")
        dash = " stroke-dasharray='4 3'" if conditional else ""
        arrows.append(f"<path d='{d}' fill='none' stroke='#0969da' stroke-opacity='0.6' "
                      f"marker-end='url(#arrow)'{dash}/>")
    total = max((bx for bx, _, _ in boxes.values()), default=0.0) + BOX_W + 2 * PAD
    return (f"<svg xmlns='http://www.w3.org/2000/svg' width='{total:.0f}' height='{y:.0f}' "
            "font-family='sans-serif'><defs><marker id='arrow' viewBox='0 0 10 10' refX='9' "
            "refY='5' markerWidth='6' markerHeight='6' orient='auto-start-reverse'>"
            "<path d='M 0 0 L 10 5 L 0 10 z' fill='#0969da'/></marker></defs>"
            + "".join(shapes) + "".join(arrows) + "</svg>")


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
    respond: Any = None
    """A reply in the call's place (where its tool allows `respond`), with `answer`'s text."""
    answer: Any = None


@dataclass
class Review:
    """What `agent.review` displays: a card per pending call and the continued run."""

    widget: Any
    cards: list[ReviewCard]
    output: Any
    results: list[GenerateResult] = field(default_factory=list)
    run_id: str = ""
    decided_by: str = ""

    def _ipython_display_(self) -> None:
        """The live widget, after a static page of it (folded: the cards and the commands to
        decide) for a notebook rendered without a kernel (nbconvert, GitHub), where a widget
        shows nothing and renderers drop any fallback inside its own output."""
        from IPython.display import HTML, display

        display(HTML(static_review(self)))  # type: ignore[no-untyped-call]
        display(self.widget)  # type: ignore[no-untyped-call]


def static_review(review: Review) -> str:
    """The review as static HTML, folded: each card, with the commands that decide it (or,
    once decided here, the continued run)."""
    by = review.decided_by or "NAME"
    asked = "; ".join(c.pending.prompt or c.pending.tool_name for c in review.cards)
    if not review.cards:
        summary = "Nothing waits for a decision in this run"
    elif review.results:
        summary = f"Decided: {asked}"
    else:
        summary = f"Waiting for a decision: {asked}"
    parts = ["<details class='graphkit-review'><summary>", _html._e(summary),
             " (the review card, and how to decide without this notebook's kernel)</summary>"]
    for card in review.cards:
        parts.append(_html.card(card.pending))
        if not review.results:
            parts.append("<p>To decide without this notebook's kernel:</p><pre>"
                         + _html._e("\n".join(_commands(card.pending, by))) + "</pre>")
    if review.results:
        parts.append(_html.result(review.results[-1]))
    elif review.cards:
        parts.append("<p>Then continue the run:</p><pre>"
                     + _html._e(f"graphkit resume {review.run_id} --agent module:attr")
                     + "</pre>")
    parts.append("</details>")
    return "".join(parts)


def _commands(pending: PendingApproval, by: str) -> list[str]:
    """Commands to paste in a shell (or Python), each value quoted as its own word: a name
    with a space, a quote or a `;` was pasted as more of the command (helper-66)."""
    q = shlex.quote
    if pending.kind == "suspension":
        return [f"Inbox(DB).resume({pending.id!r}, DATA, decided_by={by!r})",
                f"graphkit decline {q(pending.id)} --by {q(by)}"]
    allowed = pending.allowed_decisions or ()  # (the ones its tool allows: helper-114)
    commands = [f"graphkit approve {q(pending.id)} --by {q(by)}"] if "approve" in allowed else []
    if "reject" in allowed:
        commands.append(f"graphkit reject {q(pending.id)} --by {q(by)} --comment WHY")
    if "respond" in allowed:
        commands.append(f"graphkit respond {q(pending.id)} --by {q(by)} --message TEXT")
    return commands


def _field(widgets: Any, name: str, spec: Mapping[str, Any], value: Any) -> Any:
    """An input showing `value`; a null number is an empty text input and a null yes/no a
    choice of three, so that a reviewer's 0 or False is told from the null they left."""
    kind = spec.get("type")
    if kind == "boolean" and value is None:
        return widgets.Dropdown(options=[("null", None), ("true", True), ("false", False)],
                                value=None, description=name)
    if kind == "boolean":
        return widgets.Checkbox(value=bool(value), description=name)
    if kind in ("integer", "number") and value is None:
        return widgets.Text(value="", placeholder="null", description=name)
    if kind == "integer" and isinstance(value, int):
        return widgets.IntText(value=value, description=name)
    if kind == "number" and isinstance(value, int | float) and math.isfinite(value):
        return widgets.FloatText(value=float(value), description=name)
    if kind == "string" and (spec.get("format") == "password" or spec.get("writeOnly")):
        # a secret (a one-time code asked for): typed unseen, as the web form's password
        # input (it showed as typed: helper-114)
        return widgets.Password(value="" if value in (None, MASK) else str(value),
                                description=name)
    if kind == "string" and isinstance(value, str | None):
        text = "" if value is None else value
        multiline = "\n" in text or "\r" in text  # a one-line input drops line breaks
        return (widgets.Textarea if multiline else widgets.Text)(value=text, description=name)
    return widgets.Textarea(value=json.dumps(value), description=f"{name} (JSON)")


def _read(spec: Mapping[str, Any], widget: Any) -> Any:
    kind, value = spec.get("type"), widget.value
    if str(widget.description).endswith("(JSON)"):
        return json.loads(value or "null")
    if kind in ("integer", "number") and isinstance(value, str):  # a null's text input
        text = value.strip()
        return None if not text else int(text) if kind == "integer" else float(text)
    return value


_ABSENT = object()
"""An argument the call did not have (its input shows the schema's default)."""


def _edited(fields: Mapping[str, Any], shown: Mapping[str, tuple[Any, Any]],
            schema: Mapping[str, Any]) -> dict[str, Any]:
    """The values of a card's inputs; one the reviewer left as it was filled keeps the value
    the card showed (absent where it was absent): a null in a number input read as 0 and in
    a check box as False, and an edit of one field changed them (helper-66)."""
    props = schema.get("properties") or {}
    out: dict[str, Any] = {}
    for name, widget in fields.items():
        filled, absent_or_value = shown[name]
        if widget.value == filled:  # as shown: left out where absent, or the default
            if absent_or_value is not _ABSENT and not _html._is_default(props[name],
                                                                        absent_or_value):
                out[name] = absent_or_value
            continue
        out[name] = _read(props[name], widget)
    return out


def review(agent: Agent, target: GenerateResult | str, *, decided_by: str) -> Review:
    try:
        import ipywidgets as widgets
    except ImportError as exc:  # pragma: no cover - the extra is installed in tests
        raise ImportError(MISSING_WIDGETS) from exc
    if named(decided_by) is None:  # every click would be audited as by nobody
        msg = f"review needs decided_by, the name of who decides here; got {decided_by!r}"
        raise ValueError(msg)
    run_id = target.run_id if isinstance(target, GenerateResult) else target
    output = widgets.HTML()
    cards: list[ReviewCard] = []
    box = widgets.VBox()
    result = Review(widget=box, cards=cards, output=output, run_id=run_id,
                    decided_by=decided_by)

    def after(decide: Callable[[], GenerateResult], card: ReviewCard) -> None:
        try:
            continued = decide()
        except (GraphkitError, ValueError, RecursionError) as exc:
            card.message.value = (f"<p class='error'>Refused: "
                                  f"{_html._e(type(exc).__name__)}: {_html._e(str(exc))}</p>")
            return
        result.results.append(continued)
        for button in (card.approve, card.decline, card.edit, card.resume, card.respond):
            button.disabled = True  # the others can still be decided (a stale one is refused)
        card.message.value = "<p>Decided.</p>"
        output.value = _html.result(continued)

    for pending in agent.pending_approvals(run_id=run_id):
        if pending.status != "pending":
            continue
        tool = agent._find_tool(pending.agent_path, pending.tool_name)
        is_suspension = pending.kind == "suspension"
        schema_model = (getattr(tool, "resume_schema", None) if is_suspension
                        else args_model(tool) if tool is not None else None)
        make = getattr(schema_model, "model_json_schema", None)
        schema: Mapping[str, Any] = make() if callable(make) else {}
        values = {} if is_suspension else pending.args
        inputs = {name: _field(widgets, name, spec, values.get(name, spec.get("default")))
                  for name, spec in (schema.get("properties") or {}).items()}
        shown = {name: (widget.value, values.get(name, _ABSENT))
                 for name, widget in inputs.items()}
        allowed = pending.allowed_decisions or ()  # (the door refuses the others anyway)
        card = ReviewCard(
            pending=pending,
            widget=None,
            approve=widgets.Button(description="Approve", button_style="success",
                                   disabled=is_suspension or "approve" not in allowed),
            edit=widgets.Button(description="Approve with edits",
                                disabled=is_suspension or "edit" not in allowed),
            decline=widgets.Button(description="Decline", button_style="danger",
                                   disabled=not is_suspension and "reject" not in allowed),
            resume=widgets.Button(description="Resume", button_style="info",
                                  disabled=not is_suspension),
            comment=widgets.Text(description="comment"),
            fields=inputs,
            message=widgets.HTML(),
            respond=widgets.Button(description="Respond instead",
                                   disabled=is_suspension or "respond" not in allowed),
            answer=widgets.Text(description="answer",
                                placeholder="what the model reads in the call's place"),
        )

        def values_of(card: ReviewCard = card, schema: Mapping[str, Any] = schema
                      ) -> dict[str, Any]:
            props = schema.get("properties") or {}
            return {name: _read(props[name], w) for name, w in card.fields.items()}

        def edited_of(card: ReviewCard = card, schema: Mapping[str, Any] = schema,
                      shown: Mapping[str, tuple[Any, Any]] = shown) -> dict[str, Any]:
            return _edited(card.fields, shown, schema)

        def on_approve(_: Any, card: ReviewCard = card) -> None:
            after(lambda: agent.approve_tool_call_generate(
                run_id=run_id, tool_call_id=card.pending.id, decided_by=decided_by,
                comment=card.comment.value or None, args_digest=card.pending.args_digest), card)

        def on_edit(_: Any, card: ReviewCard = card, read: Callable[[], Any] = edited_of
                    ) -> None:
            try:
                edited = read()
            except (ValueError, RecursionError) as exc:
                card.message.value = f"<p class='error'>Not JSON: {_html._e(str(exc))}</p>"
                return
            after(lambda: agent.approve_tool_call_generate(  # an edit of what the card showed
                run_id=run_id, tool_call_id=card.pending.id, decided_by=decided_by,
                comment=card.comment.value or None, args=edited,
                args_digest=card.pending.args_digest), card)

        def on_decline(_: Any, card: ReviewCard = card) -> None:
            after(lambda: agent.decline_tool_call_generate(
                run_id=run_id, tool_call_id=card.pending.id, decided_by=decided_by,
                comment=card.comment.value or None), card)

        def on_respond(_: Any, card: ReviewCard = card) -> None:
            after(lambda: agent.respond_tool_call_generate(
                run_id=run_id, tool_call_id=card.pending.id, decided_by=decided_by,
                message=card.answer.value), card)

        def on_resume(_: Any, card: ReviewCard = card, read: Callable[[], Any] = values_of
                      ) -> None:
            after(lambda: agent.resume_generate(read(), run_id=run_id,
                                                tool_call_id=card.pending.id,
                                                decided_by=decided_by), card)

        card.approve.on_click(on_approve)
        card.edit.on_click(on_edit)
        card.decline.on_click(on_decline)
        card.resume.on_click(on_resume)
        card.respond.on_click(on_respond)
        buttons = [card.resume] if is_suspension else [card.approve, card.edit]
        replies = [] if card.respond.disabled else [card.answer]
        card.widget = widgets.VBox([
            widgets.HTML(_html.card(pending)), *inputs.values(), card.comment, *replies,
            widgets.HBox([*buttons, card.decline, *([] if card.respond.disabled
                                                     else [card.respond])]), card.message])
        cards.append(card)
    box.children = [*(c.widget for c in cards), output] if cards else [
        widgets.HTML("<p>Nothing waits for a decision in this run.</p>"), output]
    return result
