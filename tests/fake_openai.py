"""A minimal OpenAI-compatible chat-completions server on loopback, for tests: records what it
receives and can answer with scripted HTTP errors first."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class FakeOpenAI:
    def __init__(self, reply: str = "42"):
        self.reply = reply
        self.requests: list[dict] = []
        self.errors: list[int] = []  # statuses to answer with, in order, before succeeding
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 - http.server's naming
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                fake.requests.append(
                    {"path": self.path, "headers": dict(self.headers), "body": body}
                )
                if fake.errors:
                    self.send_response(fake.errors.pop(0))
                    self.end_headers()
                    return
                payload = {
                    "choices": [{"message": {"role": "assistant", "content": fake.reply}}],
                    "usage": {"prompt_tokens": 11, "completion_tokens": 3},
                }
                data = json.dumps(payload).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> FakeOpenAI:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()
