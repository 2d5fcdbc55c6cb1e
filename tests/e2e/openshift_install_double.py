#!/usr/bin/env python3
"""A stand-in for openshift-install: what the real one does to its --dir for the commands the
appliance runs, file for file (which it reads, consumes and writes, and their shapes), with a
cluster PKI of its own. References are to openshift/installer unless said otherwise.

- `create manifests` (pkg/asset/targets/targets.go `Manifests`): reads install-config.yaml and
  consumes it (pkg/asset/store/store.go `Fetch` -> `purge`: every asset loaded from disk that is
  not a target is deleted, "Consuming Install Config from target directory"); writes
  manifests/ and openshift/ (pkg/asset/manifests: cluster-config.yaml, cluster-dns-02-config.yml
  `dnsCfgFilename`, cluster-infrastructure-02-config.yml `infraCfgFilename`, cvo-overrides.yaml;
  openshift/99_openshift-machineconfig_99-{master,worker}-ssh.yaml `machineConfigFileName`,
  99_kubeadmin-password-secret.yaml) and .openshift_install_state.json (store.go
  `stateFileName`: each asset's Go type name to the asset as JSON; `*installconfig.InstallConfig`
  holds it under `config`, installconfigbase.go `AssetBase`; `*tls.RootCA` as `CertRaw`/`KeyRaw`,
  pkg/asset/tls/certkey.go `CertKey`). Directories 0750, files 0640 (pkg/asset `PersistToFile`).
- `create ignition-configs` (targets.go `IgnitionConfigs`): without manifests on disk it makes
  them first (they are its dependencies); loads manifests/* and openshift/*.{yaml,yml,json}
  (pkg/asset/manifests/openshift.go `Openshift.Load`) and consumes what it loaded (a directory
  goes only when empty, store.go `isDirEmpty`); writes bootstrap.ign with every manifest as
  /opt/openshift/manifests/<name> and /opt/openshift/openshift/<name>
  (pkg/asset/ignition/bootstrap/common.go `addParentFiles`, `rootDir = "/opt/openshift"`, 0644,
  TLS files 0600 under /opt/openshift/tls), master.ign and worker.ign as pointer configs
  (pkg/asset/ignition/machine/node.go `pointerIgnitionConfig`: Ignition 3.2.0, one merge
  source https://api-int.<domain>:22623/config/<role>, the root CA as a data URL),
  metadata.json (pkg/asset/cluster/metadata), auth/kubeconfig (pkg/asset/kubeconfig/admin.go,
  https://api.<domain>:6443) and auth/kubeadmin-password.
- `create single-node-ignition-config` (targets.go `SingleNodeIgnitionConfig`): as above but
  bootstrap-in-place-for-live-iso.ign instead of the three role configs
  (pkg/asset/ignition/bootstrap/bootstrap_in_place.go), refused unless controlPlane.replicas is
  1 and bootstrapInPlace.installationDisk is set (`verifyBootstrapInPlace`'s messages).
- `coreos print-stream-json` (pkg/coreoscli/cmd.go `printStreamJSON`): the CoreOS stream the
  release installs, on stdout; here the file $OPENSHIFT_INSTALL_DOUBLE_STREAM names.

Logs go to stderr as logrus writes them off a terminal (`level=info msg="..."`) and are appended
to <dir>/.openshift_install.log. Every call is appended, as one JSON line (argv and the files in
--dir before it ran), to $OPENSHIFT_INSTALL_DOUBLE_LOG when set. $OPENSHIFT_INSTALL_DOUBLE_FAIL
set to a target (`manifests`, `ignition-configs`, ...) makes that command fail as the real one
does on an invalid input: a `level=fatal` line and exit status 1, having written nothing.
$OPENSHIFT_INSTALL_DOUBLE_BASE_DOMAIN makes the set for another base domain than the install
config's (an installer that disagrees with its input, for the appliance's check to catch).
"""

import base64
import datetime
import json
import os
import secrets
import sys
import uuid

import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import NameOID

STATE = ".openshift_install_state.json"
IC_ASSET = "*installconfig.InstallConfig"
CA_ASSET = "*tls.RootCA"


def log(d, level, msg):
    line = 'level=%s msg="%s"' % (level, msg.replace('"', '\\"'))
    print(line, file=sys.stderr, flush=True)
    if d and os.path.isdir(d):
        with open(os.path.join(d, ".openshift_install.log"), "a") as f:
            f.write('time="%s" %s\n' % (datetime.datetime.now().isoformat(), line))


def fatal(d, msg):
    log(d, "fatal", msg)
    sys.exit(1)


def persist(d, rel, data, mode=0o640):
    path = os.path.join(d, rel)
    os.makedirs(os.path.dirname(path), mode=0o750, exist_ok=True)
    with open(path, "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode())
    os.chmod(path, mode)


def data_url(b):
    return "data:text/plain;charset=utf-8;base64," + base64.b64encode(b).decode()


def load_state(d):
    try:
        with open(os.path.join(d, STATE)) as f:
            return json.load(f)
    except FileNotFoundError:
        return {}


def save_state(d, state):
    persist(d, STATE, json.dumps(state, indent=2))


def cert_key(cn, ou, ca, signer=None):
    """A key and its certificate: self-signed, or signed by `signer` (a cert_key result)."""
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    name = x509.Name([
        x509.NameAttribute(NameOID.ORGANIZATIONAL_UNIT_NAME, ou),
        x509.NameAttribute(NameOID.COMMON_NAME, cn),
    ])
    if signer:
        issuer = x509.load_pem_x509_certificate(base64.b64decode(signer["CertRaw"]))
        issuer_key = serialization.load_pem_private_key(base64.b64decode(signer["KeyRaw"]), None)
        issuer_name = issuer.subject
    else:
        issuer_key, issuer_name = key, name
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(issuer_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=1))
        .not_valid_after(now + datetime.timedelta(days=3650))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
        .sign(issuer_key, hashes.SHA256())
    )
    pem = cert.public_bytes(serialization.Encoding.PEM)
    key_pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.TraditionalOpenSSL,
        serialization.NoEncryption(),
    )
    return {"CertRaw": base64.b64encode(pem).decode(), "KeyRaw": base64.b64encode(key_pem).decode()}


def root_ca():
    """pkg/asset/tls/root.go: CN root-ca, OU openshift, ten years."""
    return cert_key("root-ca", "openshift", ca=True)


def install_config(d, state):
    """The install config: install-config.yaml when present (consumed), else the state's."""
    path = os.path.join(d, "install-config.yaml")
    if os.path.exists(path):
        with open(path) as f:
            try:
                ic = yaml.safe_load(f)
            except yaml.YAMLError as e:
                fatal(d, 'failed to fetch Master Machines: failed to load asset "Install Config": %s' % e)
        for field in ("metadata", "baseDomain", "pullSecret"):
            if not isinstance(ic, dict) or field not in ic:
                fatal(d, 'failed to fetch Master Machines: failed to load asset "Install Config": failed to create install config: invalid "install-config.yaml" file: %s: Required value' % field)
        log(d, "info", "Consuming Install Config from target directory")
        os.remove(path)
        state[IC_ASSET] = {"config": ic}
        return ic
    if IC_ASSET in state:
        return state[IC_ASSET]["config"]
    fatal(d, 'failed to fetch Master Machines: failed to load asset "Install Config": failed to create install config: open %s: no such file or directory' % path)


def domain(ic):
    base = os.environ.get("OPENSHIFT_INSTALL_DOUBLE_BASE_DOMAIN") or ic["baseDomain"]
    return "%s.%s" % (ic["metadata"]["name"], base)


def create_manifests(d, state):
    ic = install_config(d, state)
    state.setdefault(CA_ASSET, root_ca())
    dom = domain(ic)
    infra_id = "%s-%s" % (ic["metadata"]["name"], secrets.token_hex(3)[:5])
    state["*installconfig.ClusterID"] = {"UUID": str(uuid.uuid4()), "InfraID": infra_id}
    m = {
        "manifests/cluster-config.yaml": yaml.safe_dump({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "cluster-config-v1", "namespace": "kube-system"},
            "data": {"install-config": yaml.safe_dump({k: v for k, v in ic.items() if k != "pullSecret"})},
        }),
        "manifests/cluster-dns-02-config.yml": "apiVersion: config.openshift.io/v1\nkind: DNS\nmetadata:\n  creationTimestamp: null\n  name: cluster\nspec:\n  baseDomain: %s\n  platform:\n    aws: null\n    type: \"\"\nstatus: {}\n" % dom,
        "manifests/cluster-infrastructure-02-config.yml": "apiVersion: config.openshift.io/v1\nkind: Infrastructure\nmetadata:\n  creationTimestamp: null\n  name: cluster\nspec:\n  cloudConfig:\n    name: \"\"\n  platformSpec:\n    type: None\nstatus:\n  apiServerInternalURI: https://api-int.%s:6443\n  apiServerURL: https://api.%s:6443\n  infrastructureName: %s\n  platform: None\n" % (dom, dom, infra_id),
        "manifests/cvo-overrides.yaml": "apiVersion: config.openshift.io/v1\nkind: ClusterVersion\nmetadata:\n  name: version\n  namespace: openshift-cluster-version\nspec:\n  channel: stable-4\n  clusterID: %s\n" % state["*installconfig.ClusterID"]["UUID"],
        "openshift/99_kubeadmin-password-secret.yaml": "apiVersion: v1\nkind: Secret\nmetadata:\n  name: kubeadmin\n  namespace: kube-system\ntype: Opaque\n",
    }
    for role in ("master", "worker"):
        m["openshift/99_openshift-machineconfig_99-%s-ssh.yaml" % role] = (
            "apiVersion: machineconfiguration.openshift.io/v1\nkind: MachineConfig\nmetadata:\n  labels:\n    machineconfiguration.openshift.io/role: %s\n  name: 99-%s-ssh\nspec:\n  config:\n    ignition:\n      version: 3.2.0\n    passwd:\n      users:\n      - name: core\n        sshAuthorizedKeys:\n        - %s\n" % (role, role, json.dumps(ic.get("sshKey", "")))
        )
    for rel, text in m.items():
        persist(d, rel, text)
    save_state(d, state)
    log(d, "info", "Manifests created in: %s/manifests and %s/openshift" % (d, d))


def load_manifests(d):
    """What `Manifests.Load` and `Openshift.Load` read (the user's files among them), consumed:
    the store logs each asset it purges by its Name() ("Common Manifests", "Openshift
    Manifests")."""
    files = []
    for sub, suffixes, name in (("manifests", None, "Common Manifests"),
                                ("openshift", (".yaml", ".yml", ".json"), "Openshift Manifests")):
        path = os.path.join(d, sub)
        if not os.path.isdir(path):
            continue
        log(d, "info", "Consuming %s from target directory" % name)
        for name in sorted(os.listdir(path)):
            full = os.path.join(path, name)
            if not os.path.isfile(full) or (suffixes and not name.endswith(suffixes)):
                continue
            with open(full, "rb") as f:
                files.append(("/opt/openshift/%s/%s" % (sub, name), f.read()))
            os.remove(full)
        if not os.listdir(path):
            os.rmdir(path)
    return files


def storage_file(path, contents, mode):
    return {"overwrite": True, "path": path, "user": {"name": "root"},
            "contents": {"source": data_url(contents)}, "mode": mode}


def create_ignition(d, state, single):
    if not os.path.isdir(os.path.join(d, "manifests")):
        create_manifests(d, state)
    ic = state[IC_ASSET]["config"]
    dom = domain(ic)
    if single:
        replicas = (ic.get("controlPlane") or {}).get("replicas")
        if replicas != 1:
            fatal(d, "failed to fetch Single-Node Bootstrap In Place Ignition Config: failed to generate asset \"Single-Node Bootstrap In Place Ignition Config\": control plane replicas must be 1 for single-node installs, got %s" % replicas)
        bip = ic.get("bootstrapInPlace")
        if not bip:
            fatal(d, "failed to fetch Single-Node Bootstrap In Place Ignition Config: bootstrapInPlace is required when creating a single node bootstrap-in-place ignition")
        if not bip.get("installationDisk"):
            fatal(d, "failed to fetch Single-Node Bootstrap In Place Ignition Config: bootstrapInPlace.installationDisk: Required value: installationDisk must be set the target disk drive for the installation")
    ca_pem = base64.b64decode(state[CA_ASSET]["CertRaw"])
    files = [storage_file(p, c, 0o644) for p, c in load_manifests(d)]
    files.append(storage_file("/opt/openshift/tls/root-ca.crt", ca_pem, 0o600))
    users = [{"name": "core", "sshAuthorizedKeys": [ic["sshKey"]] if ic.get("sshKey") else []}]
    boot = {"ignition": {"version": "3.2.0"}, "passwd": {"users": users},
            "storage": {"files": files},
            "systemd": {"units": [{"name": "bootkube.service", "enabled": True}]}}
    if single:
        boot["systemd"]["units"].append({"name": "install-to-disk.service", "enabled": True})
        persist(d, "bootstrap-in-place-for-live-iso.ign", json.dumps(boot))
    else:
        persist(d, "bootstrap.ign", json.dumps(boot))
        for role in ("master", "worker"):
            persist(d, "%s.ign" % role, json.dumps({"ignition": {
                "config": {"merge": [{"source": "https://api-int.%s:22623/config/%s" % (dom, role)}]},
                "security": {"tls": {"certificateAuthorities": [{"source": data_url(ca_pem)}]}},
                "version": "3.2.0"}}))
    cid = state.get("*installconfig.ClusterID", {})
    persist(d, "metadata.json", json.dumps({"clusterName": ic["metadata"]["name"],
                                             "clusterID": cid.get("UUID", ""),
                                             "infraID": cid.get("InfraID", ""), "none": {}}))
    # pkg/asset/tls/adminkubeconfig.go: the admin's client certificate (CN system:admin, O
    # system:masters); signed here by the root CA rather than its own signer.
    admin = state.setdefault("*tls.AdminKubeConfigClientCertKey",
                             cert_key("system:admin", "system:masters", ca=False, signer=state[CA_ASSET]))
    kubeconfig = {
        "apiVersion": "v1", "kind": "Config",
        "clusters": [{"name": ic["metadata"]["name"], "cluster": {
            "server": "https://api.%s:6443" % dom,
            "certificate-authority-data": base64.b64encode(ca_pem).decode()}}],
        "users": [{"name": "admin", "user": {"client-certificate-data": admin["CertRaw"],
                                             "client-key-data": admin["KeyRaw"]}}],
        "contexts": [{"name": "admin", "context": {"cluster": ic["metadata"]["name"], "user": "admin"}}],
        "current-context": "admin", "preferences": {},
    }
    persist(d, "auth/kubeconfig", yaml.safe_dump(kubeconfig))
    persist(d, "auth/kubeadmin-password", secrets.token_urlsafe(18))
    save_state(d, state)
    log(d, "info", "Ignition-Configs created in: %s and %s/auth" % (d, d))


def main(argv):
    record = os.environ.get("OPENSHIFT_INSTALL_DOUBLE_LOG")
    d = None
    if "--dir" in argv:
        i = argv.index("--dir")
        d = os.path.abspath(argv[i + 1])
        argv = argv[:i] + argv[i + 2:]
    if record:
        before = []
        if d and os.path.isdir(d):
            for root, _, names in os.walk(d):
                before += [os.path.relpath(os.path.join(root, n), d) for n in names]
        with open(record, "a") as f:
            f.write(json.dumps({"argv": argv, "dir": d, "before": sorted(before)}) + "\n")
    if argv == ["coreos", "print-stream-json"]:
        with open(os.environ["OPENSHIFT_INSTALL_DOUBLE_STREAM"], "rb") as f:
            sys.stdout.buffer.write(f.read())
        return
    if argv == ["version"]:
        print("openshift-install 4.19.0-okd-scos.1 (okd-appliance test double)")
        return
    if len(argv) != 2 or argv[0] != "create":
        fatal(None, "unknown command %r" % " ".join(argv))
    target = argv[1]
    d = d or os.getcwd()
    if os.environ.get("OPENSHIFT_INSTALL_DOUBLE_FAIL") == target:
        fatal(d, 'failed to fetch %s: failed to generate asset: the stand-in was told to fail' % target)
    state = load_state(d)
    if target == "manifests":
        create_manifests(d, state)
    elif target == "ignition-configs":
        create_ignition(d, state, single=False)
    elif target == "single-node-ignition-config":
        create_ignition(d, state, single=True)
    else:
        fatal(d, 'unknown target %r' % target)


if __name__ == "__main__":
    main(sys.argv[1:])
