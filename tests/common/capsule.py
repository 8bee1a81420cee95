# A stand-in for a running murmur capsule, for the registry's tests: one real process that
# serves an A2A v1.0 agent card naming its session on 127.0.0.1:<ephemeral>, like `mur`'s door.
#
# Usage: python3 capsule.py <session_id> [<session_id> ...]
# One door per session id, each on its own port, all held by this one process. Prints one
# line "<session_id> <port>" per door once every door listens, then serves until killed.
# SIGSTOP freezes every door at once (connections are still accepted by the kernel, nothing
# answers), SIGCONT thaws them: exactly what a stopped capsule looks like from outside.
import http.server
import json
import sys
import threading

EXTENSION = "https://docs.murmur.nexus/reference/agent-card/#murmur-capsule-v1"


def door_for(session_id):
    card = json.dumps(
        {
            "protocolVersion": "1.0",
            "name": "test-capsule",
            "description": "a capsule stand-in for murmur-registry's tests",
            "version": "0.1.0",
            "capabilities": {
                "streaming": False,
                "extensions": [
                    {"uri": EXTENSION, "required": False, "params": {"sessionId": session_id}}
                ],
            },
        }
    ).encode()

    class Door(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self):
            if self.path == "/.well-known/agent-card.json":
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(card)))
                self.end_headers()
                self.wfile.write(card)
            else:
                self.send_error(404)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Door)
    server.daemon_threads = True
    return server


servers = [(sid, door_for(sid)) for sid in sys.argv[1:]]
for sid, server in servers:
    threading.Thread(target=server.serve_forever, daemon=True).start()
for sid, server in servers:
    print(sid, server.server_address[1])
sys.stdout.flush()
threading.Event().wait()
