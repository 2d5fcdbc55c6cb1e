"""A Kubernetes/OpenShift API test double for the install orchestration's end-to-end test.

Speaks the real API's JSON shapes over HTTPS with the PKI openshift-install makes, and follows
kube-apiserver's rules where a client could depend on them. Each rule names the upstream source
it follows (kubernetes/kubernetes paths unless said otherwise):

PKI and authentication (openshift/installer, pkg/asset/tls/ and pkg/asset/kubeconfig/):
- RSA-2048 keys, written as PKCS#1 "RSA PRIVATE KEY" PEM (utils.go, PrivateKeyToPem; the legacy
  key path every install takes without the ConfigurablePKI feature gate, signerkey_params.go);
- the serving side: kube-apiserver-lb-signer signs kube-apiserver-internal-lb-server (DNS
  api-int.<domain> only) and kube-apiserver-external-lb-server (DNS api.<domain> only), each
  served with its signer appended (apiserver.go, AppendParent), chosen by SNI as kube-apiserver's
  SNI certificates are; the kubeconfig's certificate-authority-data is
  kube-apiserver-complete-server-ca-bundle: the localhost, service-network and lb signers, in
  that order (apiserver.go, KubeAPIServerCompleteCABundle);
- the client side, a separate CA: admin-kubeconfig-signer signs CN=system:admin,O=system:masters
  (adminkubeconfig.go); the kubeconfig is YAML without apiVersion/kind, as yaml.Marshal of
  clientcmd's v1.Config writes it (kubeconfig/kubeconfig.go), server https://api.<domain>:6443,
  mode 0640 (pkg/asset/asset.go, PersistToFile);
- a request without a client certificate is system:anonymous (anonymous auth stays on in
  OpenShift: staging/src/k8s.io/apiserver/pkg/authentication/request/anonymous/anonymous.go,
  pkg/kubeapiserver/authenticator/config.go) and RBAC denies it: 403 Forbidden with the
  message of staging/src/k8s.io/apiserver/pkg/endpoints/handlers/responsewriters/errors.go
  (forbiddenMessage), not 401; /readyz, /livez, /healthz and /version answer anyone
  (system:public-info-viewer, plugin/pkg/auth/authorizer/rbac/bootstrappolicy/policy.go), so the
  load balancer's health check works. Not modelled: a certificate from an unknown CA is refused
  in the TLS handshake here (Python's ssl cannot defer verification), where kube-apiserver
  accepts the handshake and answers 401.

Objects and reads (staging/src/k8s.io/apiserver/pkg/):
- every object has metadata.uid, resourceVersion and creationTimestamp (seconds, RFC 3339:
  staging/src/k8s.io/apimachinery/pkg/apis/meta/v1/time.go), one resourceVersion counter for all;
  an update that changes nothing keeps its resourceVersion (storage/etcd3/store.go,
  GuaranteedUpdate);
- lists carry metadata.resourceVersion and no apiVersion/kind in their items (only the list has
  them: endpoints/handlers/responsewriters encode the list as one object);
- labelSelector (=, ==, !=, exists, !exists, in, notin: apimachinery/pkg/labels/selector.go) and
  fieldSelector (=, ==, != on the resource's selectable fields, anything else 400 "field label not
  supported": pkg/apis/certificates/v1/conversion.go, pkg/apis/core/v1/conversion.go, and
  metadata.name/namespace for custom resources);
- limit and continue: a continue token is storage/continue.go's (base64url JSON {v, rv, start}),
  pages come from the snapshot at its rv, remainingItemCount when no selector is used, and a
  token older than the last compaction is 410 Expired with an inconsistent continue token
  (storage/etcd3/errors.go, handleCompactedErrorForPaging); resourceVersion with continue is 422
  (apimachinery/pkg/apis/meta/internalversion/validation); resourceVersionMatch=Exact reads the
  snapshot at that resourceVersion or 410;
- watch=true is a chunked stream of {type, object} events (objects whole, with apiVersion/kind);
  without resourceVersion it starts with ADDED for what exists; from a resourceVersion older
  than the compacted history it is 200 with one ERROR event carrying a 410 Expired Status
  ("too old resource version: N (M)": storage/cacher/watch_cache.go; cacher.go returns an
  error watcher rather than an HTTP error); timeoutSeconds ends it; an object leaving or entering
  the selector is DELETED or ADDED. History is compacted after 5 minutes (the default
  --etcd-compaction-interval, storage/storagebackend/factory/etcd3.go); the start is compacted,
  so a resourceVersion from before the double started is always too old.

Certificate signing requests:
- made as kubelets make them: POSTed with generateName "csr-" (client-go,
  util/certificate/csr/csr.go, RequestCertificate; the kubelet's certificate manager), named by
  names.SimpleNameGenerator (storage/names/generate.go: 5 characters of
  apimachinery/pkg/util/rand's alphabet), spec.username/groups/uid from the requester and status
  emptied (pkg/registry/certificates/certificates/strategy.go, PrepareForCreate); <dir>/csr-names
  tells the test which generated name is which request;
- PUT .../approval (strategy.go, csrApprovalStrategy): the body's spec and status.certificate
  are ignored (the stored ones kept), only status.conditions taken; lastUpdateTime filled when
  missing, lastTransitionTime from the stored condition of the same type and status or now
  (populateConditionTimestamps); the body's name must be the URL's (400,
  endpoints/handlers/update.go, checkName); resourceVersion: absent means unconditional
  (AllowUnconditionalUpdate), another than the stored one is 409 Conflict
  (registry/generic/registry/store.go, Update); 422 Invalid for a condition without type or
  status, Approved/Denied/Failed not True, Approved with Denied, a duplicate type, or a removed
  Approved/Denied/Failed condition (pkg/apis/certificates/validation/validation.go,
  validateConditions and validateCertificateSigningRequestUpdate); uid and creationTimestamp
  cannot change (rest/update.go, BeforeUpdate);
- the signer (kube-controller-manager's csrsigning, pkg/controller/certificates/signer/signer.go)
  issues an approved request of a kubelet signer with its own CA ("csr-signer", neither the
  serving nor the admin CA), 5 minutes backdated, or adds Failed=True SignerValidationFailure if
  the request is not a kubelet's (pkg/apis/certificates/helpers.go, ValidateKubeletClientCSR and
  ValidateKubeletServingCSR); status.certificate is the PEM.

The cluster, in the middle of its install, as the test's flag files in DIR tell it:
- kube-system/bootstrap does not exist (404) until <dir>/bootstrap-complete does, then says
  "complete" (openshift/installer, data/data/bootstrap/files/usr/local/bin/bootkube.sh.template);
- etcds.operator.openshift.io/cluster has no EtcdBootstrapMemberRemoved condition until
  <dir>/etcd-bootstrap-removed exists, then True (cluster-etcd-operator never writes False:
  pkg/operator/bootstrapteardown/bootstrap_teardown_controller.go), with EtcdRunningInCluster
  True, reason EnoughEtcdMembers before and BootstrapAlreadyRemoved after, as `removeBootstrap`
  writes them in every release; with <dir>/etcd-operator-before-2023 (an operator from before
  cluster-etcd-operator#992, 4.11 or an early 4.12) EtcdBootstrapMemberRemoved is never written;
- the master's Node is there and Ready once <dir>/masters-joined exists;
- once <dir>/kubelets exists, each configured worker's kubelet files a client CSR (from the
  node-bootstrapper service account), and a second one at once (one client certificate per
  node per install attempt: exactly one of the two may be approved); when one is issued, the
  worker's Node appears (NotReady) and its kubelet files a serving CSR; when that one is issued,
  the Node turns Ready;
- hostile CSRs (an unknown node, an extra SAN, the wrong user, the wrong usages, and with a
  BOOTSTRAP name a client CSR of the bootstrap node) are filed at the start;
- ClusterVersion (at an OKD 4.15) is not Available and Progressing until 2 s after etcd let its
  bootstrap member go, then Available, not Failing, not Progressing;
- no ClusterOperator exists (the list is empty) until the masters joined and
  <dir>/operators-listed exists, then three, of which ingress is not Available (and not
  Progressing, reason IngressUnavailable); with <dir>/ingress-degraded it is Available and not
  Progressing but Degraded (reason IngressDegraded), as cluster-ingress-operator reports a
  degraded default IngressController (pkg/operator/controller/status/controller.go,
  computeOperatorDegradedCondition, in later releases its
  computeIngressControllerDegradedCondition); once <dir>/operators-settled exists every
  operator is Available, not Progressing, not Degraded. Each change is an update (new
  resourceVersion, lastTransitionTime of the conditions whose status moved).

The cluster moves by itself (every 100 ms, as its controllers do), whether or not anyone asks:
a condition that changes while the API is down has its lastTransitionTime from then.

Outages, as the test's flag files tell them:
- <dir>/api-down: kube-apiserver stopped, as during its static-pod rollouts in an install.
  Upstream's graceful termination (staging/src/k8s.io/apiserver/pkg/server/genericapiserver.go,
  RunWithContext: after ShutdownDelayDuration the listener is closed, and net/http's
  Server.Shutdown closes idle connections) leaves nothing listening, so a connection is refused:
  here every new connection is reset as it is accepted (the nearest a listening socket comes to
  refusing), and a kept-alive connection's next request is closed without an answer. /readyz is
  unreachable with the rest, so a load balancer's health check takes the backend out.
- <dir>/api-stalled: the API's host unreachable (a partition, a hung node): nothing answers,
  new connections wait before their TLS handshake and requests before their answer, until the
  flag goes (at most 120 s); a client sees only its own timeouts.

The first approval meets a concurrent write: another client annotates the request after the
orchestration read it, so its resourceVersion is stale and the answer is 409 Conflict (to be
read again and retried, as every client of the real API must).

Every approval that adds an Approved condition is appended to <dir>/approvals (name, signer).
What the product must never do is logged to <dir>/violations: any write but a PUT to
/approval, an approval without an Approved=True condition, a Denied condition.

usage: kube_double.py DIR BIND_IP PORT DOMAIN MASTER WORKER=IP[,WORKER=IP...] [BOOTSTRAP]
"""

import base64, copy, datetime, http.server, ipaddress, json, os, random, re, socket, ssl
import struct, sys, threading, time, uuid
from urllib.parse import parse_qs, urlsplit

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
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
TLS = os.path.join(DIR, "tls")
os.makedirs(TLS, exist_ok=True)


def now():
    return datetime.datetime.now(datetime.timezone.utc)


def timestamp(t=None):
    # metav1.Time marshals as RFC 3339 in UTC, seconds only.
    return (t or now()).strftime("%Y-%m-%dT%H:%M:%SZ")


def write(path, data, mode=0o644):
    tmp = path + ".tmp"
    with os.fdopen(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode), "wb") as f:
        f.write(data)
    os.rename(tmp, path)


# ---------------------------------------------------------------------------------------------
# The installer's PKI.

def pem(cert):
    return cert.public_bytes(serialization.Encoding.PEM)


def rsa_key():
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


def key_pem(key):
    # openshift-install's PrivateKeyToPem: x509.MarshalPKCS1PrivateKey, "RSA PRIVATE KEY".
    return key.private_bytes(serialization.Encoding.PEM,
                             serialization.PrivateFormat.TraditionalOpenSSL,
                             serialization.NoEncryption())


def name(cn, org=None, ou=None):
    attrs = []
    if org:
        attrs.append(x509.NameAttribute(NameOID.ORGANIZATION_NAME, org))
    if ou:
        attrs.append(x509.NameAttribute(NameOID.ORGANIZATIONAL_UNIT_NAME, ou))
    attrs.append(x509.NameAttribute(NameOID.COMMON_NAME, cn))
    return x509.Name(attrs)


def issue(ca_key, ca_name, subject, public_key, sans=None, eku=None, ca=False,
          days=2, backdate=datetime.timedelta(hours=1), not_after_cap=None,
          usages=("digital signature", "key encipherment")):
    not_after = now() + datetime.timedelta(days=days)
    if not_after_cap and not_after > not_after_cap:
        not_after = not_after_cap
    b = (x509.CertificateBuilder().subject_name(subject).issuer_name(ca_name)
         .public_key(public_key).serial_number(x509.random_serial_number())
         .not_valid_before(now() - backdate).not_valid_after(not_after)
         .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
         .add_extension(x509.KeyUsage(
             digital_signature="digital signature" in usages,
             key_encipherment="key encipherment" in usages, key_cert_sign=ca,
             content_commitment=False, data_encipherment=False, key_agreement=False,
             crl_sign=False, encipher_only=False, decipher_only=False), critical=True))
    if sans:
        b = b.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    if eku:
        b = b.add_extension(x509.ExtendedKeyUsage(eku), critical=False)
    return b.sign(ca_key, hashes.SHA256())


class Signer:
    """A self-signed CA as openshift-install's SelfSignedCertKey makes them (OU=openshift)."""

    def __init__(self, cn):
        self.key = rsa_key()
        self.name = name(cn, ou="openshift")
        self.cert = issue(self.key, self.name, self.name, self.key.public_key(), ca=True,
                          days=3650)


localhost_signer = Signer("kube-apiserver-localhost-signer")
service_network_signer = Signer("kube-apiserver-service-network-signer")
lb_signer = Signer("kube-apiserver-lb-signer")
admin_signer = Signer("admin-kubeconfig-signer")
# kube-controller-manager's signer for kubelet certificates (openshift/cluster-kube-controller-
# manager-operator's csr-signer): a CA of its own.
csr_signer = Signer("kube-csr-signer")


def serving(cn_and_dns):
    key = rsa_key()
    cert = issue(lb_signer.key, lb_signer.name, name(cn_and_dns), key.public_key(),
                 [x509.DNSName(cn_and_dns)], [ExtendedKeyUsageOID.SERVER_AUTH], days=1)
    return key, cert


internal_key, internal_cert = serving("api-int." + DOMAIN)
external_key, external_cert = serving("api." + DOMAIN)
admin_key = rsa_key()
admin_cert = issue(admin_signer.key, admin_signer.name, name("system:admin", "system:masters"),
                   admin_key.public_key(), None,
                   [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH], days=3650)

server_bundle = pem(localhost_signer.cert) + pem(service_network_signer.cert) + pem(lb_signer.cert)
files = {
    "internal-lb-server.crt": pem(internal_cert) + pem(lb_signer.cert),
    "internal-lb-server.key": key_pem(internal_key),
    "external-lb-server.crt": pem(external_cert) + pem(lb_signer.cert),
    "external-lb-server.key": key_pem(external_key),
    # kube-apiserver's --client-ca-file: the admin signer and the kubelets' signer.
    "client-ca.crt": pem(admin_signer.cert) + pem(csr_signer.cert),
    # For the test's own requests with curl (openshift-install keeps these in its state file).
    "kube-apiserver-complete-server-ca-bundle.crt": server_bundle,
    "admin-kubeconfig-client.crt": pem(admin_cert),
    "admin-kubeconfig-client.key": key_pem(admin_key),
}
for f, data in files.items():
    write(os.path.join(TLS, f), data, 0o600)

b64 = lambda b: base64.b64encode(b).decode()
# yaml.Marshal of clientcmd v1.Config: keys sorted, apiVersion and kind omitted (empty,
# omitempty), preferences always there.
kubeconfig = """clusters:
- cluster:
    certificate-authority-data: %s
    server: https://api.%s:6443
  name: okd
contexts:
- context:
    cluster: okd
    user: admin
  name: admin
current-context: admin
preferences: {}
users:
- name: admin
  user:
    client-certificate-data: %s
    client-key-data: %s
""" % (b64(server_bundle), DOMAIN, b64(pem(admin_cert)), b64(key_pem(admin_key)))
write(os.path.join(DIR, "kubeconfig"), kubeconfig.encode(), 0o640)


# ---------------------------------------------------------------------------------------------
# Storage: objects, one resourceVersion counter, history for watches and consistent pages.

class Resource:
    def __init__(self, group, version, plural, kind, namespaced, fields):
        self.group, self.version, self.plural, self.kind = group, version, plural, kind
        self.api_version = group + "/" + version if group else version
        self.namespaced = namespaced
        self.fields = fields  # selectable fields

    def qualified(self):
        return self.plural + ("." + self.group if self.group else "")


CRD_FIELDS = {"metadata.name", "metadata.namespace"}
RESOURCES = {r.plural: r for r in [
    Resource("", "v1", "configmaps", "ConfigMap", True, {"metadata.name", "metadata.namespace"}),
    Resource("", "v1", "nodes", "Node", False, {"metadata.name", "spec.unschedulable"}),
    Resource("certificates.k8s.io", "v1", "certificatesigningrequests",
             "CertificateSigningRequest", False, {"metadata.name", "spec.signerName"}),
    Resource("operator.openshift.io", "v1", "etcds", "Etcd", False, CRD_FIELDS),
    Resource("config.openshift.io", "v1", "clusterversions", "ClusterVersion", False, CRD_FIELDS),
    Resource("config.openshift.io", "v1", "clusteroperators", "ClusterOperator", False,
             CRD_FIELDS),
]}
CSRS = "certificatesigningrequests"

lock = threading.RLock()
version = [100]
START = version[0]
objects = {p: {} for p in RESOURCES}
history = {p: [] for p in RESOURCES}  # events: rv, type, key, obj, prev, at
compacted = {p: START for p in RESOURCES}  # states older than this are gone
COMPACTION_INTERVAL = 300


class Expired(Exception):
    pass


def next_rv():
    version[0] += 1
    return version[0]


def key_of(res, ns, n):
    return "%s/%s" % (ns, n) if res.namespaced else n


def record(plural, rv, kind, key, obj, prev):
    history[plural].append({"rv": rv, "type": kind, "key": key, "obj": obj, "prev": prev,
                            "at": time.monotonic()})


def compact():
    cutoff = time.monotonic() - COMPACTION_INTERVAL
    for p, events in history.items():
        while events and events[0]["at"] < cutoff:
            compacted[p] = max(compacted[p], events.pop(0)["rv"])


ALPHABET = "bcdfghjklmnpqrstvwxz2456789"


def create(plural, obj):
    res = RESOURCES[plural]
    o = copy.deepcopy(obj)
    o["apiVersion"], o["kind"] = res.api_version, res.kind
    m = o.setdefault("metadata", {})
    ns = m.get("namespace", "")
    if not m.get("name"):
        base = m["generateName"][:58]
        while True:
            n = base + "".join(random.choice(ALPHABET) for _ in range(5))
            if key_of(res, ns, n) not in objects[plural]:
                break
        m["name"] = n
    rv = next_rv()
    m.update(uid=str(uuid.uuid4()), resourceVersion=str(rv), creationTimestamp=timestamp())
    key = key_of(res, ns, m["name"])
    objects[plural][key] = o
    record(plural, rv, "ADDED", key, o, None)
    return o


def without_rv(obj):
    o = copy.deepcopy(obj)
    o["metadata"].pop("resourceVersion", None)
    return o


def update(plural, new):
    res = RESOURCES[plural]
    m = new["metadata"]
    key = key_of(res, m.get("namespace", ""), m["name"])
    old = objects[plural][key]
    if without_rv(old) == without_rv(new):
        return old
    o = copy.deepcopy(new)
    rv = next_rv()
    o["metadata"]["resourceVersion"] = str(rv)
    objects[plural][key] = o
    record(plural, rv, "MODIFIED", key, o, old)
    return o


def state_at(plural, rv):
    if rv < compacted[plural]:
        raise Expired()
    state = dict(objects[plural])
    for e in reversed(history[plural]):
        if e["rv"] <= rv:
            break
        if e["prev"] is None:
            state.pop(e["key"], None)
        else:
            state[e["key"]] = e["prev"]
    return state


# ---------------------------------------------------------------------------------------------
# Answers.

def status(code, reason, message, details=None, list_meta=None):
    body = {"kind": "Status", "apiVersion": "v1", "metadata": list_meta or {},
            "status": "Failure", "message": message, "reason": reason, "code": code}
    if details is not None:
        # StatusDetails' fields are omitempty.
        body["details"] = {k: v for k, v in details.items() if v not in ("", None, [])}
    return code, body


def not_found(res, n):
    return status(404, "NotFound", '%s "%s" not found' % (res.qualified(), n),
                  {"name": n, "group": res.group, "kind": res.plural})


def bad_request(message):
    return status(400, "BadRequest", message)


def invalid(kind_group, n, errors):
    # apierrors.NewInvalid: one error bare, several in brackets; each a cause.
    text = [e["field"] + ": " + e["message"] for e in errors]
    message = '%s "%s" is invalid: %s' % (kind_group, n,
                                          text[0] if len(text) == 1 else "[" + ", ".join(text) + "]")
    group = kind_group.split(".", 1)[1] if "." in kind_group else ""
    return status(422, "Invalid", message,
                  {"name": n, "group": group, "kind": kind_group.split(".")[0],
                   "causes": errors})


def field_error(reason, path, message):
    return {"reason": reason, "message": message, "field": path}


def expired(message, list_meta=None):
    return status(410, "Expired", message, list_meta=list_meta)


def strip(obj):
    """A list item: the real API omits apiVersion and kind there."""
    o = copy.deepcopy(obj)
    o.pop("apiVersion", None)
    o.pop("kind", None)
    return o


# Selectors -----------------------------------------------------------------------------------

LABEL_KEY = r"[A-Za-z0-9]([-A-Za-z0-9_./]*[A-Za-z0-9])?"
LABEL_VALUE = r"([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?"


def split_top(text):
    parts, depth, cur = [], 0, ""
    for ch in text:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    parts.append(cur)
    return parts


def parse_labels(text):
    """Requirements as apimachinery/pkg/labels/selector.go parses them; None if malformed."""
    reqs = []
    if not text.strip():
        return reqs
    for part in split_top(text):
        part = part.strip()
        m = re.fullmatch(r"(!?)\s*(%s)" % LABEL_KEY, part)
        if m:
            reqs.append(("!" if m.group(1) else "exists", m.group(2), None))
            continue
        m = re.fullmatch(r"(%s)\s*(==|=|!=)\s*(%s)" % (LABEL_KEY, LABEL_VALUE), part)
        if m:
            reqs.append(("!=" if m.group(3) == "!=" else "=", m.group(1), {m.group(4)}))
            continue
        m = re.fullmatch(r"(%s)\s+(in|notin)\s*\(([^)]*)\)" % LABEL_KEY, part)
        if m:
            values = {v.strip() for v in m.group(4).split(",")}
            if all(re.fullmatch(LABEL_VALUE, v) for v in values):
                reqs.append((m.group(3), m.group(1), values))
                continue
        return None
    return reqs


def labels_match(reqs, obj):
    labels = obj["metadata"].get("labels") or {}
    for op, k, values in reqs:
        has = k in labels
        if op == "exists" and not has or op == "!" and has:
            return False
        if op in ("=", "in") and (not has or labels[k] not in values):
            return False
        if op in ("!=", "notin") and has and labels[k] in values:
            return False
    return True


def parse_fields(res, text):
    """Terms as apimachinery/pkg/fields/selector.go parses them: (field, op, value)."""
    terms = []
    if not text.strip():
        return terms, None
    for part in text.split(","):
        m = re.fullmatch(r"([^=!]+)(==|=|!=)(.*)", part)
        if not m:
            return None, bad_request("invalid selector: '%s'; can't understand '%s'"
                                     % (text, part))
        f, op, v = m.group(1).strip(), m.group(2), m.group(3).strip()
        if f not in res.fields:
            return None, bad_request("field label not supported: " + f)
        terms.append((f, "!=" if op == "!=" else "=", v))
    return terms, None


def field_value(obj, path):
    v = obj
    for part in path.split("."):
        v = v.get(part) if isinstance(v, dict) else None
    if isinstance(v, bool):
        return "true" if v else "false"
    return "" if v is None else str(v)


def fields_match(terms, obj):
    return all((field_value(obj, f) == v) == (op == "=") for f, op, v in terms)


# Lists and watches ---------------------------------------------------------------------------

def encode_continue(start, rv):
    token = json.dumps({"v": "meta.k8s.io/v1", "rv": rv, "start": start},
                       separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(token).rstrip(b"=").decode()


def decode_continue(token):
    try:
        raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
        c = json.loads(raw)
        if c.get("v") != "meta.k8s.io/v1" or not c.get("start") or not c.get("rv"):
            raise ValueError
        return c["start"], int(c["rv"])
    except (ValueError, TypeError, AttributeError):
        raise ValueError("continue key is not valid")


def one(q, k):
    return q.get(k, [""])[-1]


def selectors(res, q):
    labels = parse_labels(one(q, "labelSelector"))
    if labels is None:
        return None, None, bad_request("unable to parse requirement: " + one(q, "labelSelector"))
    fields, err = parse_fields(res, one(q, "fieldSelector"))
    return labels, fields, err


def list_(res, ns, q):
    labels, fields, err = selectors(res, q)
    if err:
        return err
    token, rv_param = one(q, "continue"), one(q, "resourceVersion")
    if token and rv_param not in ("", "0"):
        return invalid("ListOptions.meta.k8s.io", "", [field_error(
            "FieldValueForbidden", "resourceVersion",
            "Forbidden: specifying resource version is not allowed when using continue")])
    try:
        limit = max(int(one(q, "limit") or 0), 0)
    except ValueError:
        return bad_request("limit: invalid value")
    start = ""
    if token:
        try:
            start, rv = decode_continue(token)
        except ValueError as e:
            return bad_request(str(e))
        if rv < 0:
            # An inconsistent continuation: the latest state.
            rv = version[0]
    elif rv_param and one(q, "resourceVersionMatch") == "Exact":
        try:
            rv = int(rv_param)
        except ValueError:
            return bad_request("invalid resource version: " + rv_param)
    else:
        try:
            wanted = int(rv_param or 0)
        except ValueError:
            return bad_request("invalid resource version: " + rv_param)
        if wanted > version[0]:
            # The watch cache waits up to 3 s for a resourceVersion it has not seen, then gives
            # up (storage/cacher/watch_cache.go, waitUntilFreshAndBlock).
            return status(504, "Timeout", "Too large resource version: %d, current: %d"
                          % (wanted, version[0]), {"retryAfterSeconds": 1})
        rv = version[0]
    try:
        state = state_at(res.plural, rv)
    except Expired:
        if token:
            return expired(
                "The provided continue parameter is too old to display a consistent list "
                "result. You can start a new list without the continue parameter, or use the "
                "continue token in this response to retrieve the remainder of the results. "
                "Continuing with the provided token results in an inconsistent list - objects "
                "that were created, modified, or deleted between the time the first chunk was "
                "returned and now may show up in the list.",
                {"continue": encode_continue(start, -1)})
        return expired("too old resource version: %d (%d)" % (rv, compacted[res.plural]))
    items = [state[k] for k in sorted(state)
             if (not ns or state[k]["metadata"].get("namespace") == ns) and k >= start
             and labels_match(labels, state[k]) and fields_match(fields, state[k])]
    meta = {"resourceVersion": str(rv)}
    if limit and len(items) > limit:
        last = items[limit - 1]["metadata"]
        meta["continue"] = encode_continue(
            key_of(res, last.get("namespace", ""), last["name"]) + "\x00", rv)
        if not labels and not fields:
            meta["remainingItemCount"] = len(items) - limit
        items = items[:limit]
    return 200, {"apiVersion": res.api_version, "kind": res.kind + "List", "metadata": meta,
                 "items": [strip(o) for o in items]}


def get_one(res, ns, n):
    obj = objects[res.plural].get(key_of(res, ns, n))
    if obj is None:
        return not_found(res, n)
    return 200, obj


# ---------------------------------------------------------------------------------------------
# Certificate signing requests.

CLIENT = "kubernetes.io/kube-apiserver-client-kubelet"
SERVING = "kubernetes.io/kubelet-serving"
csr_names = {}  # what the test calls a request -> its generated name


def file_csr(role, cn, org, sans, user, groups, usages, signer):
    """What a kubelet POSTs, and what the API server makes of it."""
    key = ec.generate_private_key(ec.SECP256R1())
    b = x509.CertificateSigningRequestBuilder().subject_name(name(cn, org))
    if sans:
        b = b.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    req = b.sign(key, hashes.SHA256())
    obj = create(CSRS, {
        "metadata": {"generateName": "csr-"},
        # PrepareForCreate: the requester's identity, an empty status.
        "spec": {"request": b64(pem(req)), "signerName": signer, "usages": usages,
                 "username": user, "groups": groups, "uid": str(uuid.uuid4())},
        "status": {},
    })
    csr_names[role] = obj["metadata"]["name"]
    write(os.path.join(DIR, "csr-names"), json.dumps(csr_names, indent=1).encode())
    return obj


def conditions_of(obj):
    return (obj.get("status") or {}).get("conditions") or []


def has(obj, kind):
    return any(c.get("type") == kind and c.get("status") == "True" for c in conditions_of(obj))


def parse_time(value):
    t = datetime.datetime.fromisoformat(value.replace("Z", "+00:00"))
    if t.tzinfo is None:
        raise ValueError(value)
    return timestamp(t.astimezone(datetime.timezone.utc))


TRUE_ONLY = {"Approved", "Denied", "Failed"}


def validate_conditions(new, old):
    """pkg/apis/certificates/validation/validation.go: validateConditions, with the
    tolerances for what the stored object already has, and the removal rule of
    validateCertificateSigningRequestUpdate."""
    errors, seen = [], set()
    old_types = [c.get("type", "") for c in old]
    allow_empty = "" in old_types
    allow_dupes = len(set(old_types)) != len(old_types)
    allow_both = "Approved" in old_types and "Denied" in old_types
    approved = denied = False
    path = "status.conditions"
    for i, c in enumerate(new):
        t, s = c.get("type", ""), c.get("status", "")
        if not t and not allow_empty:
            errors.append(field_error("FieldValueRequired", "%s[%d].type" % (path, i),
                                      "Required value"))
        allowed = ["True"] if t in TRUE_ONLY else ["False", "True", "Unknown"]
        if not s:
            errors.append(field_error("FieldValueRequired", "%s[%d].status" % (path, i),
                                      "Required value"))
        elif s not in allowed:
            errors.append(field_error(
                "FieldValueNotSupported", "%s[%d].status" % (path, i),
                'Unsupported value: "%s": supported values: %s'
                % (s, ", ".join('"%s"' % a for a in allowed))))
        if not allow_both and t in ("Approved", "Denied"):
            if t == "Approved":
                approved = True
            else:
                denied = True
            if approved and denied:
                errors.append(field_error(
                    "FieldValueInvalid", path, 'Invalid value: "%s": Approved and Denied '
                    "conditions are mutually exclusive" % t))
        if not allow_dupes:
            if t in seen:
                errors.append(field_error("FieldValueDuplicate", "%s[%d].type" % (path, i),
                                          'Duplicate value: "%s"' % t))
            seen.add(t)
    for t in ("Approved", "Denied", "Failed"):
        if sum(c.get("type") == t for c in new) < old_types.count(t):
            errors.append(field_error(
                "FieldValueForbidden", path,
                'Forbidden: updates may not remove a condition of type "%s"' % t))
    return errors


def approve(n, body):
    res = RESOURCES[CSRS]
    if not isinstance(body, dict):
        return bad_request("the body is not an object")
    if body.get("apiVersion") not in (None, "", res.api_version) or \
            body.get("kind") not in (None, "", res.kind):
        return bad_request("the API version in the data (%s) does not match the expected API "
                           "version (%s)" % (body.get("apiVersion"), res.api_version))
    meta = body.get("metadata") or {}
    if meta.get("name") != n:
        return bad_request("the name of the object (%s) does not match the name on the URL (%s)"
                           % (meta.get("name", ""), n))
    old = objects[CSRS].get(n)
    if old is None:
        return not_found(res, n)
    if "concurrent-write" not in done:
        # Another client's write that landed after the orchestration read the request.
        done.add("concurrent-write")
        touched = copy.deepcopy(old)
        touched["metadata"].setdefault("annotations", {})["example.com/seen-by"] = "auditor"
        old = update(CSRS, touched)
    rv = meta.get("resourceVersion")
    if rv:
        if not str(rv).isdigit():
            return invalid("CertificateSigningRequest.certificates.k8s.io", n, [field_error(
                "FieldValueInvalid", "metadata.resourceVersion",
                'Invalid value: "%s": must be a number' % rv)])
        if rv != old["metadata"]["resourceVersion"]:
            return status(409, "Conflict",
                          'Operation cannot be fulfilled on %s "%s": the object has been '
                          "modified; please apply your changes to the latest version and try "
                          "again" % (res.qualified(), n),
                          {"name": n, "group": res.group, "kind": res.plural})
    if meta.get("uid") and meta["uid"] != old["metadata"]["uid"]:
        return invalid("CertificateSigningRequest.certificates.k8s.io", n, [field_error(
            "FieldValueInvalid", "metadata.uid",
            'Invalid value: "%s": field is immutable' % meta["uid"])])
    conds = (body.get("status") or {}).get("conditions") or []
    if not isinstance(conds, list) or not all(isinstance(c, dict) for c in conds):
        return bad_request("status.conditions: not a list of conditions")
    conds = copy.deepcopy(conds)
    old_conds = conditions_of(old)
    stamp = timestamp()
    try:
        for c in conds:
            for k in ("lastUpdateTime", "lastTransitionTime"):
                if c.get(k):
                    c[k] = parse_time(c[k])
            # populateConditionTimestamps
            if not c.get("lastUpdateTime"):
                c["lastUpdateTime"] = stamp
            if not c.get("lastTransitionTime"):
                c["lastTransitionTime"] = next(
                    (o["lastTransitionTime"] for o in old_conds
                     if o.get("type") == c.get("type") and o.get("status") == c.get("status")
                     and o.get("lastTransitionTime")), stamp)
    except (ValueError, AttributeError) as e:
        return bad_request("unable to decode a condition time: %s" % e)
    errors = validate_conditions(conds, old_conds)
    if errors:
        return invalid("CertificateSigningRequest.certificates.k8s.io", n, errors)
    new_meta = copy.deepcopy(meta)
    for k in ("uid", "creationTimestamp", "generateName"):
        if k in old["metadata"]:
            new_meta[k] = old["metadata"][k]
    new_meta["resourceVersion"] = old["metadata"]["resourceVersion"]
    new = {"apiVersion": res.api_version, "kind": res.kind, "metadata": new_meta,
           # The approval strategy keeps the stored spec and status; only conditions change.
           "spec": copy.deepcopy(old["spec"]),
           "status": dict(copy.deepcopy(old.get("status") or {}), conditions=conds)}
    if not conds:
        new["status"].pop("conditions")
    stored = update(CSRS, new)
    if has(stored, "Approved") and not has(old, "Approved"):
        with open(os.path.join(DIR, "approvals"), "a") as f:
            f.write("%s %s\n" % (n, old["spec"]["signerName"]))
    elif not has(stored, "Approved"):
        violation("approval without an Approved=True condition: " + n)
    if any(c.get("type") == "Denied" for c in conds):
        violation("a Denied condition: " + n)
    return 200, stored


def kubelet_request_problem(req, usages, signer):
    """pkg/apis/certificates/helpers.go: ValidateKubeletClientCSR, ValidateKubeletServingCSR."""
    orgs = [a.value for a in req.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)]
    cns = [a.value for a in req.subject.get_attributes_for_oid(NameOID.COMMON_NAME)]
    try:
        sans = req.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        sans = x509.SubjectAlternativeName([])
    dns, ips = sans.get_values_for_type(x509.DNSName), sans.get_values_for_type(x509.IPAddress)
    other = len(list(sans)) - len(dns) - len(ips)
    if orgs != ["system:nodes"]:
        return "subject organization is not system:nodes"
    if not (cns and cns[0].startswith("system:node:")):
        return "subject common name does not begin with system:node:"
    if signer == CLIENT:
        if dns or ips or other:
            return "subjectAltNames are not allowed"
        allowed = [{"digital signature", "key encipherment", "client auth"},
                   {"digital signature", "client auth"}]
    else:
        if not dns and not ips:
            return "DNS or IP subjectAltName is required"
        if other:
            return "Email and URI subjectAltNames are not allowed"
        allowed = [{"digital signature", "key encipherment", "server auth"},
                   {"digital signature", "server auth"}]
    if set(usages) not in allowed:
        return "usages did not match %s" % sorted(allowed[0])
    return None


def sign_approved():
    """kube-controller-manager's csrsigning for the kubelet signers."""
    for obj in list(objects[CSRS].values()):
        spec = obj["spec"]
        if spec["signerName"] not in (CLIENT, SERVING) or not has(obj, "Approved") \
                or has(obj, "Failed") or (obj.get("status") or {}).get("certificate"):
            continue
        req = x509.load_pem_x509_csr(base64.b64decode(spec["request"]))
        new = copy.deepcopy(obj)
        problem = kubelet_request_problem(req, spec["usages"], spec["signerName"])
        if problem:
            new["status"]["conditions"].append({
                "type": "Failed", "status": "True", "reason": "SignerValidationFailure",
                "message": problem, "lastUpdateTime": timestamp(),
                "lastTransitionTime": timestamp()})
        else:
            try:
                sans = list(req.extensions.get_extension_for_class(
                    x509.SubjectAlternativeName).value)
            except x509.ExtensionNotFound:
                sans = None
            eku = [ExtendedKeyUsageOID.CLIENT_AUTH if spec["signerName"] == CLIENT
                   else ExtendedKeyUsageOID.SERVER_AUTH]
            cert = issue(csr_signer.key, csr_signer.name, req.subject, req.public_key(), sans,
                         eku, days=365, backdate=datetime.timedelta(minutes=5),
                         not_after_cap=csr_signer.cert.not_valid_after_utc,
                         usages=spec["usages"])
            new["status"]["certificate"] = b64(pem(cert))
        update(CSRS, new)


def violation(text):
    with open(os.path.join(DIR, "violations"), "a") as f:
        f.write(text + "\n")


# ---------------------------------------------------------------------------------------------
# The cluster.

def flag(n):
    return os.path.exists(os.path.join(DIR, n))


def condition(t, s, reason=None, message=None):
    c = {"type": t, "status": s, "lastTransitionTime": timestamp()}
    if reason:
        c["reason"] = reason
    if message:
        c["message"] = message
    return c


def set_conditions(plural, n, conds):
    """Status as an operator writes it: a condition's lastTransitionTime moves when its status
    does."""
    obj = copy.deepcopy(objects[plural][n])
    old = {c["type"]: c for c in obj["status"].get("conditions", [])}
    merged = []
    for c in conds:
        o = old.get(c["type"])
        if o and o["status"] == c["status"]:
            c = dict(c, lastTransitionTime=o["lastTransitionTime"])
        merged.append(c)
    obj["status"]["conditions"] = merged
    update(plural, obj)


def node(n, role, ready):
    obj = {"metadata": {"name": n, "labels": {
               "kubernetes.io/hostname": n, "kubernetes.io/os": "linux",
               "node-role.kubernetes.io/" + role: ""}},
           "spec": {},
           "status": {"conditions": [condition(
               "Ready", "True" if ready else "False",
               "KubeletReady" if ready else "KubeletNotReady")]}}
    if n not in objects["nodes"]:
        create("nodes", obj)
    else:
        set_conditions("nodes", n, obj["status"]["conditions"])


OPERATORS = ("etcd", "kube-apiserver", "ingress")


def operator_conditions(n):
    """An operator's conditions as the flag files have them now."""
    if n != "ingress" or flag("operators-settled"):
        return [condition("Available", "True"), condition("Progressing", "False"),
                condition("Degraded", "False")]
    if flag("ingress-degraded"):
        return [condition("Available", "True"), condition("Progressing", "False"),
                condition("Degraded", "True", "IngressDegraded",
                          'The "default" ingress controller reports Degraded=True: '
                          'DegradedConditions: One or more other status conditions indicate '
                          'a degraded state.')]
    return [condition("Available", "False", "IngressUnavailable",
                      'The "default" ingress controller reports Available=False'),
            condition("Progressing", "False"), condition("Degraded", "False")]


create("etcds", {"metadata": {"name": "cluster"}, "spec": {"managementState": "Managed"},
                 "status": {"conditions": [
                     condition("EtcdMembersAvailable", "True"),
                     condition("EtcdRunningInCluster", "True", "EnoughEtcdMembers",
                               "enough members found")]}})
create("clusterversions", {
    "metadata": {"name": "version"},
    "spec": {"clusterID": str(uuid.uuid4()), "channel": "stable-4"},
    "status": {"desired": {"version": "4.15.0-0.okd-2024-03-10-010116"},
               "conditions": [condition("Available", "False"), condition("Failing", "False"),
                              condition("Progressing", "True", None,
                                        "Working towards 4.15.0-0.okd-2024-03-10-010116")]}})
# The cluster-version operator reports the install done a while after etcd let its bootstrap
# member go: a status that changes over time, so the orchestration's waits run end to end.
CV_SETTLES_AFTER = 2.0
w0 = next(iter(WORKERS))
file_csr("intruder", "system:node:intruder", "system:nodes", None, BOOTSTRAPPER,
         BOOTSTRAPPER_GROUPS, ["digital signature", "client auth"], CLIENT)
file_csr("extra-san", "system:node:" + w0, "system:nodes",
         [x509.DNSName(w0), x509.DNSName("api." + DOMAIN)], "system:node:" + w0,
         ["system:nodes", "system:authenticated"], ["digital signature", "server auth"], SERVING)
file_csr("wrong-user", "system:node:" + w0, "system:nodes", None,
         "system:serviceaccount:default:builder", BOOTSTRAPPER_GROUPS,
         ["digital signature", "client auth"], CLIENT)
file_csr("wrong-usages", "system:node:" + w0, "system:nodes", None, BOOTSTRAPPER,
         BOOTSTRAPPER_GROUPS, ["digital signature", "client auth", "server auth"], CLIENT)
if BOOTSTRAP:
    file_csr("client-" + BOOTSTRAP, "system:node:" + BOOTSTRAP, "system:nodes", None,
             BOOTSTRAPPER, BOOTSTRAPPER_GROUPS, ["digital signature", "client auth"], CLIENT)
done = set()
etcd_at = [0.0]


def issued(role):
    obj = objects[CSRS].get(csr_names.get(role, ""))
    return bool(obj and (obj.get("status") or {}).get("certificate"))


def cluster_moves():
    """What the cluster does by itself, as the test's flag files tell it to."""
    compact()
    sign_approved()
    if flag("masters-joined") and "masters" not in done:
        done.add("masters")
        node(MASTER, "master", True)
    if flag("operators-listed") and "masters" in done and "operators" not in done:
        done.add("operators")
        for n in OPERATORS:
            create("clusteroperators", {"metadata": {"name": n}, "spec": {},
                                        "status": {"conditions": operator_conditions(n)}})
    if "operators" in done:
        # An update only when a status moved (update() keeps the resourceVersion otherwise).
        for n in OPERATORS:
            set_conditions("clusteroperators", n, operator_conditions(n))
    if flag("bootstrap-complete") and "bootstrap" not in done:
        done.add("bootstrap")
        create("configmaps", {"metadata": {"name": "bootstrap", "namespace": "kube-system"},
                              "data": {"status": "complete"}})
    if "etcd" in done and "cv" not in done and time.time() - etcd_at[0] >= CV_SETTLES_AFTER:
        done.add("cv")
        set_conditions("clusterversions", "version", [
            condition("Available", "True"), condition("Failing", "False"),
            condition("Progressing", "False", None,
                      "Cluster version is 4.15.0-0.okd-2024-03-10-010116")])
    if flag("etcd-bootstrap-removed") and "etcd" not in done:
        done.add("etcd")
        etcd_at[0] = time.time()
        removed = [condition("EtcdMembersAvailable", "True"),
                   condition("EtcdRunningInCluster", "True", "BootstrapAlreadyRemoved",
                             "etcd-bootstrap member is already removed")]
        if not flag("etcd-operator-before-2023"):
            removed.append(condition("EtcdBootstrapMemberRemoved", "True",
                                     "BootstrapMemberRemoved", "etcd bootstrap member is removed"))
        set_conditions("etcds", "cluster", removed)
    if flag("kubelets") and "kubelets" not in done:
        done.add("kubelets")
        for w in WORKERS:
            for suffix in ("", "-again"):
                file_csr("client-" + w + suffix, "system:node:" + w, "system:nodes", None,
                         BOOTSTRAPPER, BOOTSTRAPPER_GROUPS,
                         ["digital signature", "client auth"], CLIENT)
    # The kubelets, once their certificates are issued.
    for w, ip in WORKERS.items():
        if (issued("client-" + w) or issued("client-" + w + "-again")) \
                and "serving-" + w not in csr_names:
            node(w, "worker", False)
            file_csr("serving-" + w, "system:node:" + w, "system:nodes",
                     [x509.DNSName(w), x509.IPAddress(ipaddress.ip_address(ip))],
                     "system:node:" + w, ["system:nodes", "system:authenticated"],
                     ["digital signature", "key encipherment", "server auth"], SERVING)
        if issued("serving-" + w) and w + "-ready" not in done:
            done.add(w + "-ready")
            node(w, "worker", True)


# ---------------------------------------------------------------------------------------------
# HTTP.

PUBLIC = ("/readyz", "/livez", "/healthz", "/version")


def route(path):
    """(resource, namespace, name, subresource) of an API path, or None."""
    parts = [p for p in path.split("/") if p]
    if parts[:2] == ["api", "v1"]:
        group, version_, rest = "", "v1", parts[2:]
    elif len(parts) >= 3 and parts[0] == "apis":
        group, version_, rest = parts[1], parts[2], parts[3:]
    else:
        return None
    ns = ""
    if len(rest) >= 3 and rest[0] == "namespaces":
        ns, rest = rest[1], rest[2:]
    if not rest or len(rest) > 3:
        return None
    res = RESOURCES.get(rest[0])
    if res is None or (res.group, res.version) != (group, version_):
        return None
    if ns and not res.namespaced or res.namespaced and not ns and len(rest) > 1:
        return None
    return res, ns, rest[1] if len(rest) > 1 else None, rest[2] if len(rest) > 2 else None


def verb(method, n, q):
    if method == "GET":
        return "watch" if one(q, "watch") in ("true", "1") else ("get" if n else "list")
    return {"PUT": "update", "POST": "create", "PATCH": "patch", "DELETE": "delete"}[method]


def stalled():
    """Waits while <dir>/api-stalled exists (bounded, so a test that forgot it still ends)."""
    deadline = time.monotonic() + 120
    while flag("api-stalled") and time.monotonic() < deadline:
        time.sleep(0.05)


def reset(sock):
    """Closes with a TCP reset (SO_LINGER 0): what a client of a stopped server meets."""
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    except OSError:
        pass
    sock.close()


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def parse_request(self):
        # Called once a request line arrived (a kept-alive connection waits for it): what an
        # outage does to the request is decided here; False closes the connection unanswered.
        stalled()
        if flag("api-down"):
            self.close_connection = True
            return False
        return super().parse_request()

    def answer(self, code, obj, content_type="application/json"):
        data = obj if isinstance(obj, bytes) else json.dumps(obj).encode()
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def user(self):
        cert = self.connection.getpeercert()
        if not cert:
            return "system:anonymous", ["system:unauthenticated"]
        subject = dict(kv for rdn in cert["subject"] for kv in rdn)
        orgs = [v for rdn in cert["subject"] for k, v in rdn if k == "organizationName"]
        return subject.get("commonName", ""), orgs + ["system:authenticated"]

    def forbidden(self, user, method, path, target, q):
        if target is None:
            return status(403, "Forbidden", 'forbidden: User "%s" cannot %s path "%s"'
                          % (user, method.lower(), path), {})
        res, ns, n, sub = target
        resource = res.plural + ("/" + sub if sub else "")
        where = 'in the namespace "%s"' % ns if ns else "at the cluster scope"
        message = 'User "%s" cannot %s resource "%s" in API group "%s" %s' % (
            user, verb(method, n, q), resource, res.group, where)
        subject = '%s "%s"' % (res.qualified(), n) if n else res.qualified()
        return status(403, "Forbidden", "%s is forbidden: %s" % (subject, message),
                      dict({"group": res.group, "kind": res.plural}, **({"name": n} if n else {})))

    def handle_api(self, method, body=None):
        url = urlsplit(self.path)
        path, q = url.path, parse_qs(url.query, keep_blank_values=True)
        if method == "GET" and path.rstrip("/") in PUBLIC:
            if path.startswith("/version"):
                return self.answer(200, {"major": "1", "minor": "28", "gitVersion": "v1.28.7",
                                         "platform": "linux/amd64"})
            return self.answer(200, b"ok", "text/plain; charset=utf-8")
        target = route(path)
        user, groups = self.user()
        if "system:masters" not in groups:
            return self.answer(*self.forbidden(user, method, path, target, q))
        if target is None:
            return self.answer(*status(404, "NotFound",
                                       "the server could not find the requested resource", {}))
        res, ns, n, sub = target
        if method != "GET":
            if method == "PUT" and res.plural == CSRS and n and sub == "approval":
                with lock:
                    cluster_moves()
                    return self.answer(*approve(n, body))
            violation("%s %s" % (method, path))
            return self.answer(*status(405, "MethodNotAllowed", "the test expects PUT"))
        if sub:
            return self.answer(*status(404, "NotFound",
                                       "the server could not find the requested resource", {}))
        if one(q, "watch") in ("true", "1"):
            return self.watch(res, ns, q)
        with lock:
            cluster_moves()
            self.answer(*(get_one(res, ns, n) if n else list_(res, ns, q)))

    def chunk(self, data):
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()

    def event(self, kind, obj):
        self.chunk(json.dumps({"type": kind, "object": obj}).encode() + b"\n")

    def watch(self, res, ns, q):
        labels, fields, err = selectors(res, q)
        if err:
            return self.answer(*err)
        rv_param = one(q, "resourceVersion")
        try:
            timeout = int(one(q, "timeoutSeconds") or 1800)
            since = int(rv_param) if rv_param not in ("", "0") else None
        except ValueError:
            return self.answer(*bad_request("invalid resourceVersion or timeoutSeconds"))
        matches = lambda o: o is not None and \
            (not ns or o["metadata"].get("namespace") == ns) and \
            labels_match(labels, o) and fields_match(fields, o)
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        deadline = time.monotonic() + timeout
        try:
            with lock:
                cluster_moves()
                if since is None:
                    since = version[0]
                    initial = [o for _, o in sorted(objects[res.plural].items()) if matches(o)]
                elif since < compacted[res.plural]:
                    initial = None
                else:
                    initial = []
            if initial is None:
                _, s = expired("too old resource version: %d (%d)"
                               % (since, compacted[res.plural]))
                self.event("ERROR", s)
            else:
                for o in initial:
                    self.event("ADDED", o)
                while time.monotonic() < deadline:
                    with lock:
                        cluster_moves()
                        events = [e for e in history[res.plural] if e["rv"] > since]
                    for e in events:
                        since = e["rv"]
                        was, now_ = matches(e["prev"]), matches(e["obj"])
                        if now_:
                            self.event("MODIFIED" if was else "ADDED", e["obj"])
                        elif was:
                            self.event("DELETED", e["obj"])
                    time.sleep(0.1)
            self.chunk(b"")
        except (BrokenPipeError, ConnectionResetError, ssl.SSLError):
            self.close_connection = True

    def do_GET(self):
        self.handle_api("GET")

    def body(self):
        data = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        try:
            return json.loads(data)
        except ValueError:
            return ValueError

    def do_PUT(self):
        body = self.body()
        if body is ValueError:
            return self.answer(*bad_request("the body is not JSON"))
        self.handle_api("PUT", body)

    def do_POST(self):
        self.body()
        self.handle_api("POST")

    do_PATCH = do_DELETE = do_POST

    def log_request(self, code="-", size="-"):
        sys.stderr.write("%s %s %s %s\n" % (self.user()[0] if self.connection else "-",
                                             self.command, self.path, code))

    def log_message(self, fmt, *args):
        sys.stderr.write((fmt % args) + "\n")


def context(chain, key):
    c = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    c.load_cert_chain(os.path.join(TLS, chain), os.path.join(TLS, key))
    c.load_verify_locations(os.path.join(TLS, "client-ca.crt"))
    c.verify_mode = ssl.CERT_OPTIONAL
    return c


internal = context("internal-lb-server.crt", "internal-lb-server.key")
external = context("external-lb-server.crt", "external-lb-server.key")


def by_name(sslobj, server_name, _ctx):
    if server_name == "api." + DOMAIN:
        sslobj.context = external


internal.sni_callback = by_name


class Server(http.server.ThreadingHTTPServer):
    def get_request(self):
        sock, addr = self.socket.accept()
        stalled()
        if flag("api-down"):
            reset(sock)
            raise OSError("kube-apiserver is down (api-down)")
        return internal.wrap_socket(sock, server_side=True), addr


def ticking():
    while True:
        with lock:
            cluster_moves()
        time.sleep(0.1)


threading.Thread(target=ticking, daemon=True).start()
Server((BIND, PORT), Handler).serve_forever()
