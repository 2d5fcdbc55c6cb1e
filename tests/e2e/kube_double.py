"""A Kubernetes/OpenShift API test double for the install orchestration's end-to-end test.

Speaks the real API's JSON shapes over HTTPS: the installer-made PKI (a CA, a serving
certificate for api-int.<domain>, an admin client certificate written into a kubeconfig), and
client-certificate authentication on every /api and /apis request (/readyz answers anyone, as
kube-apiserver's does, so the load balancer's health check works).

It plays a cluster in the middle of its install:
- kube-system/bootstrap does not exist (404) until the file <dir>/bootstrap-complete does,
  then says "complete" (cluster-bootstrap creates it when it is done: openshift/installer,
  data/data/bootstrap/files/usr/local/bin/bootkube.sh.template);
- etcds.operator.openshift.io/cluster has no EtcdBootstrapMemberRemoved condition until the
  file <dir>/etcd-bootstrap-removed exists, then True (the etcd operator never writes False:
  cluster-etcd-operator, pkg/operator/bootstrapteardown/bootstrap_teardown_controller.go);
- the master's Node is there and Ready once the file <dir>/masters-joined exists;
- once <dir>/kubelets exists, each configured worker's kubelet files a client CSR (from the
  node-bootstrapper service account), and a second one at once (csr-client-<worker>-again,
  which must stay pending: one client certificate per node per install attempt); when the
  first is approved, the worker's Node appears (NotReady) and its kubelet files a serving CSR;
  when that one is approved, the Node turns Ready;
- hostile CSRs (an unknown name, an extra SAN, the wrong user, the wrong usages, and with a
  BOOTSTRAP name a client CSR of the bootstrap node) are filed too;
- every object's creationTimestamp is when it was made (a client CSR is approved only within a
  window after its node's ignition fetch);
- ClusterVersion is Available, not Failing, not Progressing; no ClusterOperator exists before
  the masters joined, then three, of which ingress is not Available (and not Progressing) until
  the file <dir>/operators-settled exists.

Every approval is appended to <dir>/approvals (name, signer) after checking it came as a PUT to
the /approval subresource with an Approved condition; anything else there is answered 400 and
logged to <dir>/violations.

usage: kube_double.py DIR BIND_IP PORT DOMAIN MASTER WORKER=IP[,WORKER=IP...] [BOOTSTRAP]
"""

import base64, datetime, http.server, ipaddress, json, os, ssl, sys, threading

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

DIR, BIND, PORT, DOMAIN, MASTER, WORKERS = sys.argv[1:7]
PORT = int(PORT)
WORKERS = dict(w.split("=") for w in WORKERS.split(","))
BOOTSTRAP = sys.argv[7] if len(sys.argv) > 7 else None
NOW = datetime.datetime.now(datetime.timezone.utc)
BOOTSTRAPPER = "system:serviceaccount:openshift-machine-config-operator:node-bootstrapper"
BOOTSTRAPPER_GROUPS = ["system:serviceaccounts",
                       "system:serviceaccounts:openshift-machine-config-operator",
                       "system:authenticated"]


def pem(obj):
    return obj.public_bytes(serialization.Encoding.PEM)


def key_pem(key):
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def name(cn, org=None):
    attrs = [x509.NameAttribute(NameOID.COMMON_NAME, cn)]
    if org:
        attrs.insert(0, x509.NameAttribute(NameOID.ORGANIZATION_NAME, org))
    return x509.Name(attrs)


def issue(ca_key, ca_name, subject, key, sans=None, usage=None, ca=False):
    b = (x509.CertificateBuilder().subject_name(subject).issuer_name(ca_name)
         .public_key(key.public_key()).serial_number(x509.random_serial_number())
         .not_valid_before(NOW - datetime.timedelta(hours=1))
         .not_valid_after(NOW + datetime.timedelta(days=2))
         .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True))
    if sans:
        b = b.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    if usage:
        b = b.add_extension(x509.ExtendedKeyUsage(usage), critical=False)
    return b.sign(ca_key, hashes.SHA256())


# The installer's PKI.
ca_key = ec.generate_private_key(ec.SECP256R1())
ca_name = name("kube-apiserver-test-ca")
ca = issue(ca_key, ca_name, ca_name, ca_key, ca=True)
srv_key = ec.generate_private_key(ec.SECP256R1())
srv = issue(ca_key, ca_name, name("api-int." + DOMAIN), srv_key,
            [x509.DNSName("api-int." + DOMAIN), x509.DNSName("api." + DOMAIN)],
            [ExtendedKeyUsageOID.SERVER_AUTH])
adm_key = ec.generate_private_key(ec.SECP256R1())
adm = issue(ca_key, ca_name, name("system:admin", "system:masters"), adm_key, None,
            [ExtendedKeyUsageOID.CLIENT_AUTH])
for f, data in [("ca.pem", pem(ca)), ("server.pem", pem(srv)), ("server.key", key_pem(srv_key))]:
    open(os.path.join(DIR, f), "wb").write(data)

b64 = lambda b: base64.b64encode(b).decode()
kubeconfig = {
    "apiVersion": "v1", "kind": "Config",
    "clusters": [{"name": "okd", "cluster": {
        "server": "https://api-int.%s:6443" % DOMAIN,
        "certificate-authority-data": b64(pem(ca))}}],
    "users": [{"name": "admin", "user": {
        "client-certificate-data": b64(pem(adm)), "client-key-data": b64(key_pem(adm_key))}}],
    "contexts": [{"name": "admin", "context": {"cluster": "okd", "user": "admin"}}],
    "current-context": "admin",
}
tmp = os.path.join(DIR, "kubeconfig.tmp")
# 0640, as openshift-install writes its assets (pkg/asset/asset.go, PersistToFile).
json.dump(kubeconfig, os.fdopen(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o640), "w"))  # JSON is YAML
os.rename(tmp, os.path.join(DIR, "kubeconfig"))

lock = threading.Lock()
version = [100]
csrs = {}    # name -> object
nodes = {}   # name -> object


def rv():
    version[0] += 1
    return str(version[0])


def meta(n):
    made = datetime.datetime.now(datetime.timezone.utc)
    return {"name": n, "uid": "uid-" + n, "resourceVersion": rv(),
            "creationTimestamp": made.strftime("%Y-%m-%dT%H:%M:%SZ")}


def node(n, ready):
    nodes[n] = {"apiVersion": "v1", "kind": "Node", "metadata": meta(n),
                "status": {"conditions": [{"type": "Ready", "status": "True" if ready else "False",
                                           "reason": "KubeletReady" if ready else "KubeletNotReady"}]}}


def file_csr(csr_name, cn, org, sans, user, groups, usages, signer):
    key = ec.generate_private_key(ec.SECP256R1())
    b = x509.CertificateSigningRequestBuilder().subject_name(name(cn, org))
    if sans:
        b = b.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    req = b.sign(key, hashes.SHA256())
    csrs[csr_name] = {
        "apiVersion": "certificates.k8s.io/v1", "kind": "CertificateSigningRequest",
        "metadata": meta(csr_name),
        "spec": {"request": b64(pem(req)), "signerName": signer, "usages": usages,
                 "username": user, "groups": groups, "uid": "u-" + csr_name},
        "status": {},
    }


CLIENT = "kubernetes.io/kube-apiserver-client-kubelet"
SERVING = "kubernetes.io/kubelet-serving"
w0, ip0 = next(iter(WORKERS.items()))
filed = set()


def flag(name):
    return os.path.exists(os.path.join(DIR, name))


def cluster_moves():
    """What the cluster does by itself, as the test's flag files tell it to."""
    if flag("masters-joined") and MASTER not in nodes:
        node(MASTER, True)
    if flag("kubelets") and "workers" not in filed:
        filed.add("workers")
        for w in WORKERS:
            for suffix in ("", "-again"):
                file_csr("csr-client-" + w + suffix, "system:node:" + w, "system:nodes", None,
                         BOOTSTRAPPER, BOOTSTRAPPER_GROUPS, ["digital signature", "client auth"],
                         CLIENT)


file_csr("csr-intruder", "system:node:intruder", "system:nodes", None, BOOTSTRAPPER,
         BOOTSTRAPPER_GROUPS, ["digital signature", "client auth"], CLIENT)
file_csr("csr-extra-san", "system:node:" + w0, "system:nodes",
         [x509.DNSName(w0), x509.DNSName("api." + DOMAIN)], "system:node:" + w0,
         ["system:nodes", "system:authenticated"], ["digital signature", "server auth"], SERVING)
file_csr("csr-wrong-user", "system:node:" + w0, "system:nodes", None,
         "system:serviceaccount:default:builder", BOOTSTRAPPER_GROUPS,
         ["digital signature", "client auth"], CLIENT)
file_csr("csr-wrong-usages", "system:node:" + w0, "system:nodes", None, BOOTSTRAPPER,
         BOOTSTRAPPER_GROUPS, ["digital signature", "client auth", "server auth"], CLIENT)
if BOOTSTRAP:
    file_csr("csr-client-" + BOOTSTRAP, "system:node:" + BOOTSTRAP, "system:nodes", None,
             BOOTSTRAPPER, BOOTSTRAPPER_GROUPS, ["digital signature", "client auth"], CLIENT)


def approved(obj):
    return any(c.get("type") == "Approved" for c in obj.get("status", {}).get("conditions") or [])


def after_approval(csr_name):
    """What the kubelet does next."""
    obj = csrs[csr_name]
    cn = obj["metadata"]["name"]
    for w, ip in WORKERS.items():
        if csr_name == "csr-client-" + w:
            node(w, False)
            file_csr("csr-serving-" + w, "system:node:" + w, "system:nodes",
                     [x509.DNSName(w), x509.IPAddress(ipaddress.ip_address(ip))],
                     "system:node:" + w, ["system:nodes", "system:authenticated"],
                     ["digital signature", "key encipherment", "server auth"], SERVING)
        if csr_name == "csr-serving-" + w:
            node(w, True)


def violation(text):
    with open(os.path.join(DIR, "violations"), "a") as f:
        f.write(text + "\n")


def listing(kind, api_version, items):
    return {"apiVersion": api_version, "kind": kind + "List",
            "metadata": {"resourceVersion": str(version[0])}, "items": list(items)}


def conditions(**kv):
    return [{"type": k, "status": v, "lastTransitionTime": NOW.strftime("%Y-%m-%dT%H:%M:%SZ")}
            for k, v in kv.items()]


def status(code, reason, message):
    return code, {"apiVersion": "v1", "kind": "Status", "status": "Failure", "code": code,
                  "reason": reason, "message": message, "metadata": {}}


CSR_PATH = "/apis/certificates.k8s.io/v1/certificatesigningrequests"


def get(path):
    with lock:
        cluster_moves()
        if path == "/api/v1/namespaces/kube-system/configmaps/bootstrap":
            if not os.path.exists(os.path.join(DIR, "bootstrap-complete")):
                return status(404, "NotFound", 'configmaps "bootstrap" not found')
            return 200, {"apiVersion": "v1", "kind": "ConfigMap",
                         "metadata": {"name": "bootstrap", "namespace": "kube-system"},
                         "data": {"status": "complete"}}
        if path == "/apis/operator.openshift.io/v1/etcds/cluster":
            removed = os.path.exists(os.path.join(DIR, "etcd-bootstrap-removed"))
            conds = conditions(EtcdMembersAvailable="True")
            if removed:
                conds += conditions(EtcdBootstrapMemberRemoved="True")
            return 200, {"apiVersion": "operator.openshift.io/v1", "kind": "Etcd",
                         "metadata": {"name": "cluster"},
                         "status": {"conditions": conds}}
        if path == CSR_PATH:
            return 200, listing("CertificateSigningRequest", "certificates.k8s.io/v1", csrs.values())
        if path == "/api/v1/nodes":
            return 200, listing("Node", "v1", nodes.values())
        if path == "/apis/config.openshift.io/v1/clusterversions/version":
            return 200, {"apiVersion": "config.openshift.io/v1", "kind": "ClusterVersion",
                         "metadata": {"name": "version"},
                         "status": {"conditions": conditions(Available="True", Failing="False",
                                                             Progressing="False")}}
        if path == "/apis/config.openshift.io/v1/clusteroperators":
            joined = os.path.exists(os.path.join(DIR, "masters-joined"))
            settled = os.path.exists(os.path.join(DIR, "operators-settled"))
            ops = [{"apiVersion": "config.openshift.io/v1", "kind": "ClusterOperator",
                    "metadata": {"name": n},
                    "status": {"conditions": conditions(
                        Available="True" if settled or n != "ingress" else "False",
                        Progressing="False", Degraded="False")}}
                   for n in ("etcd", "kube-apiserver", "ingress")] if joined else []
            return 200, listing("ClusterOperator", "config.openshift.io/v1", ops)
        return status(404, "NotFound", "the server could not find the requested resource")


def put(path, body):
    with lock:
        prefix = CSR_PATH + "/"
        if not (path.startswith(prefix) and path.endswith("/approval")):
            violation("PUT " + path)
            return status(405, "MethodNotAllowed", "not here")
        csr_name = path[len(prefix):-len("/approval")]
        obj = csrs.get(csr_name)
        if obj is None:
            return status(404, "NotFound", "no such csr")
        if body.get("metadata", {}).get("resourceVersion") != obj["metadata"]["resourceVersion"]:
            return status(409, "Conflict", "the object has been modified")
        conds = body.get("status", {}).get("conditions") or []
        if not any(c.get("type") == "Approved" and c.get("status") == "True" for c in conds):
            violation("approval without an Approved condition: " + csr_name)
            return status(400, "BadRequest", "no Approved condition")
        if body.get("spec") != obj["spec"]:
            violation("approval that changed the spec: " + csr_name)
            return status(400, "BadRequest", "spec changed")
        obj["status"] = {"conditions": conds}
        obj["metadata"]["resourceVersion"] = rv()
        with open(os.path.join(DIR, "approvals"), "a") as f:
            f.write("%s %s\n" % (csr_name, obj["spec"]["signerName"]))
        after_approval(csr_name)
        return 200, obj


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def answer(self, code, obj):
        data = json.dumps(obj).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def authenticated(self):
        if self.path.startswith("/readyz"):
            return True
        if self.connection.getpeercert():
            return True
        self.answer(*status(401, "Unauthorized", "Unauthorized"))
        return False

    def do_GET(self):
        if self.path.startswith("/readyz"):
            data = b"ok"
            self.send_response(200)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            return
        if self.authenticated():
            self.answer(*get(self.path.split("?")[0]))

    def do_PUT(self):
        length = int(self.headers.get("Content-Length", "0"))
        body = self.rfile.read(length)
        if self.authenticated():
            try:
                obj = json.loads(body)
            except ValueError:
                self.answer(*status(400, "BadRequest", "not JSON"))
                return
            self.answer(*put(self.path.split("?")[0], obj))

    def do_PATCH(self):
        violation("PATCH " + self.path)
        self.answer(*status(405, "MethodNotAllowed", "the test expects PUT"))

    do_POST = do_DELETE = do_PATCH

    def log_message(self, fmt, *args):
        sys.stderr.write("%s %s\n" % (self.command, self.path))


ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
ctx.load_cert_chain(os.path.join(DIR, "server.pem"), os.path.join(DIR, "server.key"))
ctx.load_verify_locations(os.path.join(DIR, "ca.pem"))
ctx.verify_mode = ssl.CERT_OPTIONAL
server = http.server.ThreadingHTTPServer((BIND, PORT), Handler)
server.socket = ctx.wrap_socket(server.socket, server_side=True)
server.serve_forever()
