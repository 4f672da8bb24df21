"""A local OpenAI-compatible chat completions server for tests: real HTTP on loopback, real
JSON and server-sent events (with tool calls streamed as deltas), answers from a script.

    with OpenAIServer(script) as server:
        ChatOpenAI(base_url=server.url, api_key="test", model="gpt-4o-mini")

`script(body) -> Reply` sees the request body (messages, tools) and returns the reply.
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Reply:
    content: str = ""
    tool_calls: list[tuple[str, str, dict[str, Any]]] = field(default_factory=list)
    """(id, name, arguments)."""


Script = Callable[[dict[str, Any]], Reply]


def _chunk(delta: dict[str, Any], finish: str | None = None, id: str = "chatcmpl-0") -> bytes:
    body = {"id": id, "object": "chat.completion.chunk",
            "created": int(time.time()), "model": "gpt-4o-mini",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
    return b"data: " + json.dumps(body).encode() + b"\n\n"


class OpenAIServer:
    def __init__(self, script: Script) -> None:
        self.script = script
        self.requests: list[dict[str, Any]] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                if not self.path.endswith("/chat/completions"):
                    self.send_error(404)
                    return
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                server.requests.append(body)
                reply = server.script(body)
                if body.get("stream"):
                    self._stream(reply)
                else:
                    self._whole(reply)

            def _whole(self, reply: Reply) -> None:
                message: dict[str, Any] = {"role": "assistant", "content": reply.content or None}
                if reply.tool_calls:
                    message["tool_calls"] = [
                        {"id": i, "type": "function",
                         "function": {"name": n, "arguments": json.dumps(a)}}
                        for i, n, a in reply.tool_calls]
                payload = json.dumps({
                    "id": "chatcmpl-graphkit", "object": "chat.completion",
                    "created": int(time.time()), "model": "gpt-4o-mini",
                    "choices": [{"index": 0, "message": message,
                                 "finish_reason": "tool_calls" if reply.tool_calls else "stop"}],
                    "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
                }).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def _stream(self, reply: Reply) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.end_headers()
                out = self.wfile
                out.write(_chunk({"role": "assistant", "content": ""}))
                for piece in re.findall(r"\S+\s*|\s+", reply.content):
                    out.write(_chunk({"content": piece}))
                for index, (call_id, name, args) in enumerate(reply.tool_calls):
                    out.write(_chunk({"tool_calls": [{"index": index, "id": call_id,
                                                      "type": "function", "function": {
                                                          "name": name, "arguments": ""}}]}))
                    text = json.dumps(args)
                    for start in range(0, len(text), 7):  # arguments arrive in pieces
                        out.write(_chunk({"tool_calls": [{"index": index, "function": {
                            "arguments": text[start:start + 7]}}]}))
                out.write(_chunk({}, "tool_calls" if reply.tool_calls else "stop"))
                out.write(b"data: [DONE]\n\n")
                out.flush()

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._httpd.server_address[1]}/v1"
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)

    def __enter__(self) -> OpenAIServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()


def last_tool_result(body: dict[str, Any]) -> dict[str, Any] | None:
    """The tool message at the end of the request, if the model is answering a tool result."""
    messages = body["messages"]
    return messages[-1] if messages and messages[-1]["role"] == "tool" else None
