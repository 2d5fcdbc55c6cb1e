"""Drives headless Chromium over the DevTools protocol for the status page test.

usage: cdp.py PORT evaluate EXPRESSION      prints the expression's value (JSON)
       cdp.py PORT screenshot FILE           writes a PNG of the page

PORT is Chromium's --remote-debugging-port; the first page target is used.
"""

import base64, json, sys, urllib.request

import websocket

port, command, arg = sys.argv[1], sys.argv[2], sys.argv[3]
targets = json.load(urllib.request.urlopen("http://127.0.0.1:%s/json" % port, timeout=5))
page = next(t for t in targets if t.get("type") == "page")
ws = websocket.create_connection(page["webSocketDebuggerUrl"], timeout=10)


def call(method, **params):
    call.n += 1
    ws.send(json.dumps({"id": call.n, "method": method, "params": params}))
    while True:
        reply = json.loads(ws.recv())
        if reply.get("id") == call.n:
            if "error" in reply:
                raise SystemExit("%s: %s" % (method, reply["error"]))
            return reply["result"]


call.n = 0
if command == "evaluate":
    result = call("Runtime.evaluate", expression=arg, returnByValue=True)
    if "exceptionDetails" in result:
        raise SystemExit("exception: %s" % result["exceptionDetails"])
    print(json.dumps(result["result"].get("value")))
elif command == "screenshot":
    shot = call("Page.captureScreenshot", format="png")
    open(arg, "wb").write(base64.b64decode(shot["data"]))
    print(arg)
else:
    raise SystemExit("unknown command " + command)
