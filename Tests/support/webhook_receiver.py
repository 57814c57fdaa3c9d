"""A webhook receiver for the notice tests: verifies each POST with the Standard Webhooks reference library
(standardwebhooks, from PyPI), answers 500 to the first --fail-first posts and 204 to the others, and appends one
JSON line a post to --log: its webhook-id, whether its signature verified, its type and download id, and the answer.
Prints the port it listens on (127.0.0.1, a free one), then serves until killed."""
import argparse
import json
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from standardwebhooks.webhooks import Webhook, WebhookVerificationError

parser = argparse.ArgumentParser()
parser.add_argument("--secret", required=True)
parser.add_argument("--log", required=True)
parser.add_argument("--fail-first", type=int, default=0)
arguments = parser.parse_args()
webhook = Webhook(arguments.secret)
posts = 0


class Handler(BaseHTTPRequestHandler):
    def do_POST(self):
        global posts
        body = self.rfile.read(int(self.headers.get("content-length", "0")))
        entry = {"id": self.headers.get("webhook-id"), "contentType": self.headers.get("content-type")}
        try:
            payload = webhook.verify(body, dict(self.headers.items()))
            entry.update(verified=True, type=payload["type"], event=payload["id"], download=payload["data"]["id"],
                         state=payload["data"]["state"])
        except (WebhookVerificationError, ValueError, KeyError) as error:
            entry.update(verified=False, error=str(error))
        posts += 1
        status = 500 if posts <= arguments.fail_first else 204
        entry["status"] = status
        with open(arguments.log, "a") as log:
            log.write(json.dumps(entry) + "\n")
        self.send_response(status)
        self.send_header("content-length", "0")
        self.end_headers()

    def log_message(self, *_):
        pass


server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
print(server.server_address[1], flush=True)
server.serve_forever()
