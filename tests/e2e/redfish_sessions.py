"""A Redfish SessionService in front of sushy-emulator (which has none), as BMCs that prefer
sessions (iDRAC, iLO, XCC) offer it, for tests/e2e/redfish.rs.

The service root gains `SessionService` and `Links.Sessions`; `POST Links.Sessions` with the
right `UserName`/`Password` answers 201 with `X-Auth-Token` and `Location`; every other request
needs a live token (Basic is refused, so a client that ignores the session fails); `DELETE` of
the session's URI closes it. At most MAX sessions are open at once (503 beyond, as a full BMC
answers). The counts go to STATE (JSON: opened, open, refused_basic) after every change.

usage: redfish_sessions.py PORT CERT KEY UPSTREAM USER PASSWORD STATE MAX
"""

import base64, http.server, json, secrets, ssl, sys, threading, urllib.request

PORT, CERT, KEY, UPSTREAM, USER, PASSWORD, STATE, MAX = sys.argv[1:9]
MAX = int(MAX)
BASIC = "Basic " + base64.b64encode(("%s:%s" % (USER, PASSWORD)).encode()).decode()
SESSIONS = "/redfish/v1/SessionService/Sessions"
lock = threading.Lock()
tokens = {}  # token -> session id
counts = {"opened": 0, "open": 0, "refused_basic": 0}
upstream_ctx = ssl.create_default_context()
upstream_ctx.check_hostname = False
upstream_ctx.verify_mode = ssl.CERT_NONE


def save():
    counts["open"] = len(tokens)
    with open(STATE, "w") as f:
        json.dump(counts, f)


save()


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def reply(self, code, body=b"", headers=()):
        self.send_response(code)
        for k, v in headers:
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        if body:
            self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(body)

    def error(self, code, message):
        self.reply(code, json.dumps({"error": {"code": "Base.1.0.GeneralError",
                                               "message": message}}).encode())

    def body(self):
        return self.rfile.read(int(self.headers.get("Content-Length", "0")))

    def forward(self, data):
        req = urllib.request.Request(UPSTREAM + self.path, data=data or None,
                                     method=self.command,
                                     headers={"Authorization": BASIC,
                                              "Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, context=upstream_ctx, timeout=30) as r:
                return r.status, r.read()
        except urllib.error.HTTPError as e:
            return e.code, e.read()

    def authorized(self):
        token = self.headers.get("X-Auth-Token")
        with lock:
            if token in tokens:
                return True
            if self.headers.get("Authorization"):
                counts["refused_basic"] += 1
                save()
        self.error(401, "a session token is required")
        return False

    def handle_any(self):
        data = self.body()
        path = self.path.rstrip("/")
        if self.command == "POST" and path == SESSIONS:
            try:
                creds = json.loads(data)
            except ValueError:
                return self.error(400, "not JSON")
            if creds.get("UserName") != USER or creds.get("Password") != PASSWORD:
                return self.error(401, "invalid credentials")
            with lock:
                if len(tokens) >= MAX:
                    return self.error(503, "the maximum number of sessions is reached")
                token, sid = secrets.token_hex(16), secrets.token_hex(4)
                tokens[token] = sid
                counts["opened"] += 1
                save()
            body = json.dumps({"@odata.id": SESSIONS + "/" + sid, "Id": sid,
                               "UserName": USER}).encode()
            return self.reply(201, body, [("X-Auth-Token", token),
                                          ("Location", SESSIONS + "/" + sid)])
        if not self.authorized():
            return
        if self.command == "DELETE" and path.startswith(SESSIONS + "/"):
            sid = path.rsplit("/", 1)[1]
            with lock:
                for t, s in list(tokens.items()):
                    if s == sid:
                        del tokens[t]
                save()
            return self.reply(204)
        status, body = self.forward(data)
        if self.command == "GET" and path == "/redfish/v1" and status == 200:
            root = json.loads(body)
            root["SessionService"] = {"@odata.id": "/redfish/v1/SessionService"}
            root.setdefault("Links", {})["Sessions"] = {"@odata.id": SESSIONS}
            body = json.dumps(root).encode()
        self.reply(status, body)

    do_GET = do_POST = do_PATCH = do_DELETE = handle_any

    def log_message(self, fmt, *args):
        sys.stderr.write("%s %s\n" % (self.command, self.path))


class RootOpen(Handler):
    """The service root answers without a token, as the Redfish spec has it."""

    def authorized(self):
        if self.path.rstrip("/") == "/redfish/v1" and self.command == "GET":
            return True
        return super().authorized()


ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
ctx.load_cert_chain(CERT, KEY)
server = http.server.ThreadingHTTPServer(("127.0.0.1", int(PORT)), RootOpen)
server.socket = ctx.wrap_socket(server.socket, server_side=True)
server.serve_forever()
