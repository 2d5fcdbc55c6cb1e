//! Per-node live ISOs against a CoreOS-structured ISO built here with xorriso, ISOLINUX and
//! GRUB EFI (`harness::liveiso`): the embed areas are found where the image has them, a node's
//! image equals a copy patched independently of the appliance's parser, and `serve` streams it
//! with HEAD, ranges over every boundary of the replaced areas, validators per node and per
//! base file, reloads, and clear errors for images it can't use.
//!
//! The comparison with coreos-installer itself is `coreos_installer_*` below, ignored by
//! default: it needs `cargo install coreos-installer` (about 10 minutes of build here), which
//! tests/iso/coreos-installer-check.sh does before running it.

mod common;

use std::io::{Read as _, Write as _};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use common::Serve;
use harness::liveiso::{self, LiveIsoBuilder};
use nix::sys::signal::Signal;
use okd_appliance::liveiso::{AreaSource, BaseIso, Piece};

const DEFAULT_KARGS: &str = "console=ttyS0,115200n8 coreos.liveiso=okd-e2e ignition.firstboot \
                             ignition.platform.id=metal";

fn tools_present() -> bool {
    harness::require_tools(liveiso::TOOLS) && liveiso::FILES.iter().all(harness::require_path)
}

/// Deterministic bytes standing in for a kernel or an initramfs (these images are not booted).
fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| ((i as u32).wrapping_mul(2_654_435_761) >> 24) as u8 ^ seed)
        .collect()
}

/// Builds a test ISO in `dir` and returns its path.
fn build(dir: &Path, name: &str, edit: impl FnOnce(LiveIsoBuilder) -> LiveIsoBuilder) -> PathBuf {
    let kernel = dir.join("vmlinuz");
    let initrd = dir.join("initrd.img");
    if !kernel.exists() {
        std::fs::write(&kernel, pattern(700_000, 1)).unwrap();
        std::fs::write(&initrd, pattern(300_000, 2)).unwrap();
    }
    let work = dir.join(format!("{name}.work"));
    std::fs::create_dir_all(&work).unwrap();
    let out = dir.join(name);
    edit(LiveIsoBuilder::new(&kernel, &initrd))
        .build(&work, &out)
        .unwrap();
    out
}

/// `base` with `kargs` in every area, patched the way the image build lays out an area: found
/// by content (the default arguments, a newline, `#` padding), not by the appliance's parser.
fn patched(base: &[u8], default: &str, kargs: &str, size: usize) -> Vec<u8> {
    let offsets = liveiso::area_offsets(base, default);
    assert_eq!(
        offsets.len(),
        2,
        "one area in isolinux.cfg, one in grub.cfg"
    );
    let mut area = format!("{kargs}\n").into_bytes();
    assert!(area.len() <= size);
    area.resize(size, b'#');
    let mut out = base.to_vec();
    for at in offsets {
        out[at..at + size].copy_from_slice(&area);
    }
    out
}

#[test]
fn a_coreos_structured_iso_is_read_and_a_node_image_equals_a_patched_copy() {
    if !tools_present() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let iso = build(dir.path(), "live.iso", |b| b);
    let bytes = std::fs::read(&iso).unwrap();
    let (_, base) = BaseIso::load(&iso).unwrap();
    let k = &base.kargs;
    assert_eq!(k.source, AreaSource::KargsJson);
    assert_eq!(k.size, 1139);
    assert_eq!(k.current, DEFAULT_KARGS);
    assert_eq!(k.default, DEFAULT_KARGS);
    let offsets: Vec<u64> = k.areas.iter().map(|a| a.offset).collect();
    let found: Vec<u64> = liveiso::area_offsets(&bytes, DEFAULT_KARGS)
        .into_iter()
        .map(|o| o as u64)
        .collect();
    assert_eq!(offsets, found, "the areas kargs.json points at");
    assert_eq!(base.ignition_file, "images/ignition.img");

    let args = vec![
        "coreos.inst.install_dev=/dev/vda".to_owned(),
        "coreos.inst.ignition_url=http://10.0.0.1:8080/ignition/master-0.ign".to_owned(),
    ];
    let image = base.node_image(&args).unwrap();
    let kargs = format!("{DEFAULT_KARGS} {}", args.join(" "));
    assert_eq!(image.kargs, kargs);
    let expected = patched(&bytes, DEFAULT_KARGS, &kargs, 1139);
    let mut got = Vec::with_capacity(bytes.len());
    for piece in image.pieces(0, image.len) {
        match piece {
            Piece::Base { offset, len } => {
                got.extend_from_slice(&bytes[offset as usize..(offset + len) as usize]);
            }
            Piece::Patch(b) => got.extend_from_slice(&b),
        }
    }
    assert!(
        got == expected,
        "the node image differs from the patched copy"
    );
    // The first 32 KiB, the descriptors and the directories are the base's: nothing outside
    // the two areas moved.
    let differing = got.iter().zip(&bytes).filter(|(a, b)| a != b).count();
    assert!(differing > 0 && differing <= 2 * 1139, "{differing}");
}

#[test]
fn images_the_appliance_cannot_use_are_refused_with_the_reason() {
    if !tools_present() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let plain = build(dir.path(), "plain.iso", LiveIsoBuilder::without_kargs_json);
    let err = BaseIso::load(&plain).unwrap_err().to_string();
    assert!(
        err.contains("no kernel-argument embed area: neither coreos/kargs.json nor a coreKarg"),
        "{err}"
    );
    let mut ignition = vec![0u8; 64 * 1024];
    ignition[..6].copy_from_slice(b"\x1f\x8b\x08\x00\x00\x00");
    let secret = build(dir.path(), "secret.iso", |b| b.ignition_area(ignition));
    let err = BaseIso::load(&secret).unwrap_err().to_string();
    assert!(
        err.contains("carries an embedded ignition config or network settings"),
        "{err}"
    );
    let small = build(dir.path(), "small.iso", |b| b.area_size(120));
    let (_, base) = BaseIso::load(&small).unwrap();
    // The default arguments, a space, then these: 120 bytes, one too many with the newline.
    let long = vec!["x".repeat(120 - DEFAULT_KARGS.len() - 1)];
    let err = base.node_image(&long).unwrap_err();
    assert_eq!((err.len, err.max), (120, 119));
    let fits = vec!["x".repeat(119 - DEFAULT_KARGS.len() - 1)];
    assert_eq!(base.node_image(&fits).unwrap().kargs.len(), 119);
    assert!(base.node_image(&fits).is_ok());
}

/// Every node of config/dual-stack.yml, with its two `ip=` arguments, fits Fedora CoreOS's
/// 1139-byte area after a live ISO's own arguments (as long as a release's), within the limit
/// `check` and `serve` hold each node's ISO to (the area's size less its end character) and
/// using less than half of it, which leaves the rest to the operator's `kernel_args`.
#[test]
fn dual_stack_nodes_arguments_fit_a_fedora_coreos_area() {
    if !tools_present() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let fcos = "coreos.liveiso=fedora-coreos-42.20250803.3.0 ignition.firstboot \
                ignition.platform.id=metal";
    let iso = build(dir.path(), "fcos.iso", |b| b.default_kargs(fcos));
    let (_, base) = BaseIso::load(&iso).unwrap();
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../config/dual-stack.yml");
    let text = std::fs::read_to_string(&path).unwrap();
    let loaded = okd_appliance::config::parse(
        &text,
        "dual-stack.yml",
        path.parent().unwrap(),
        okd_appliance::config::InstallCheck::Skip,
    )
    .unwrap();
    let plan = okd_appliance::plan::Plan::derive(&loaded.config, 1);
    assert_eq!(plan.boot.len(), 5);
    for boot in &plan.boot {
        assert_eq!(
            boot.iso_kernel_args
                .iter()
                .filter(|a| a.starts_with("ip="))
                .count(),
            2,
            "{:?}",
            boot.iso_kernel_args
        );
        let image = base
            .node_image(&boot.iso_kernel_args)
            .unwrap_or_else(|e| panic!("{}: {e}", boot.node));
        println!(
            "{}: {} of 1138 bytes ({} of them the node's)",
            boot.node,
            image.kargs.len(),
            boot.iso_kernel_args.join(" ").len()
        );
        assert!(image.kargs.len() < 1138 / 2, "{}", image.kargs);
    }
}

// ----- serving -----

const NODES: [(&str, &str, &str); 2] = [
    ("master-0", "52:54:00:00:00:02", "10.0.0.2"),
    ("worker-0", "52:54:00:00:00:05", "10.0.0.5"),
];

fn config(dir: &Path, worker_args: &str) -> PathBuf {
    std::fs::create_dir_all(dir.join("install_dir")).unwrap();
    for role in ["master", "worker"] {
        std::fs::write(
            dir.join(format!("install_dir/{role}.ign")),
            r#"{"ignition":{"version":"3.2.0"}}"#,
        )
        .unwrap();
    }
    let nodes: String = NODES
        .iter()
        .map(|(name, mac, ip)| {
            let role = if name.starts_with("master") {
                "master"
            } else {
                "worker"
            };
            let extra = if role == "worker" { worker_args } else { "" };
            format!(
                "  - {{ name: {name}, role: {role}, mac: \"{mac}\", ip: {ip}, install_dev: /dev/vda{extra} }}\n"
            )
        })
        .collect();
    let path = dir.join("okd.yml");
    std::fs::write(
        &path,
        format!(
            r#"version: 1
cluster: {{ name: okd, base_domain: lab.example.com }}
network: {{ subnet: 10.0.0.0/24, appliance_ip: 10.0.0.1 }}
nodes:
{nodes}install:
  ignition_dir: ./install_dir
  artifacts_dir: ./artifacts
  base_url: http://10.0.0.1:8080
  kernel_args: [console=ttyS0]
state_dir: ./state
listen:
  dns: []
  dhcp: []
  tftp: []
  http: ["127.0.0.1:0"]
  api: []
  machine_config: []
  ingress_https: []
  ingress_http: []
"#
        ),
    )
    .unwrap();
    path
}

/// One HTTP/1.1 exchange on a fresh connection.
struct Reply {
    status: u16,
    head: String,
    body: Vec<u8>,
}

impl Reply {
    fn header(&self, name: &str) -> Option<&str> {
        self.head.lines().skip(1).find_map(|l| {
            let (n, v) = l.split_once(':')?;
            n.eq_ignore_ascii_case(name).then(|| v.trim())
        })
    }
}

fn request(addr: SocketAddr, method: &str, path: &str, headers: &[(&str, &str)]) -> Reply {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let mut req = format!("{method} {path} HTTP/1.1\r\nhost: t\r\nconnection: close\r\n");
    for (n, v) in headers {
        req.push_str(&format!("{n}: {v}\r\n"));
    }
    req.push_str("\r\n");
    s.write_all(req.as_bytes()).unwrap();
    let mut all = Vec::new();
    s.read_to_end(&mut all).unwrap();
    let end = all
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("a response head");
    let head = String::from_utf8(all[..end].to_vec()).unwrap();
    let status = head[9..12].parse().unwrap();
    let reply = Reply {
        status,
        head,
        body: all[end + 4..].to_vec(),
    };
    if method == "GET"
        && let Some(len) = reply.header("content-length")
    {
        assert_eq!(
            reply.body.len(),
            len.parse::<usize>().unwrap(),
            "body length"
        );
    }
    reply
}

fn get(addr: SocketAddr, path: &str, headers: &[(&str, &str)]) -> Reply {
    request(addr, "GET", path, headers)
}

/// The address `serve` logged for its HTTP listener.
fn http_addr(serve: &mut Serve) -> SocketAddr {
    let line = serve.expect_line("listening for http/tcp on ");
    line.rsplit(' ').next().unwrap().parse().unwrap()
}

fn appliance(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_okd-appliance"))
        .args(args)
        .env("NO_COLOR", "1")
        .output()
        .unwrap()
}

/// The line `node kargs` prints, without its newline.
fn node_kargs(config: &Path, node: &str) -> String {
    let out = appliance(&["node", "kargs", node, config.to_str().unwrap()]);
    assert!(out.status.success(), "{out:?}");
    String::from_utf8(out.stdout).unwrap().trim_end().to_owned()
}

#[test]
fn serve_streams_each_node_its_iso_with_ranges_validators_and_reloads() {
    if !tools_present() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let artifacts = dir.path().join("artifacts");
    std::fs::create_dir_all(&artifacts).unwrap();
    let iso = build(dir.path(), "live.iso", |b| b);
    std::fs::copy(&iso, artifacts.join("live.iso")).unwrap();
    let base = std::fs::read(&iso).unwrap();
    let cfg = config(dir.path(), "");

    // What an operator types at the console is what the ISO has built in.
    let master_line = node_kargs(&cfg, "master-0");
    assert_eq!(
        master_line,
        "coreos.inst.install_dev=/dev/vda coreos.inst.ignition_url=http://10.0.0.1:8080/ignition/master-0.ign console=ttyS0"
    );
    let pxe = appliance(&["node", "kargs", "--pxe", "master-0", cfg.to_str().unwrap()]);
    let pxe = String::from_utf8(pxe.stdout).unwrap();
    assert!(
        pxe.starts_with("coreos.live.rootfs_url=http://10.0.0.1:8080/artifacts/rootfs.img "),
        "{pxe}"
    );
    let out = appliance(&["node", "kargs", "nobody", cfg.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("no node `nobody`"),
        "{out:?}"
    );
    let out = appliance(&["check", cfg.to_str().unwrap()]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{out:?}");
    assert!(
        stdout.contains("live ISO ok: 2 kernel-argument area(s)"),
        "{stdout}"
    );

    let mut serve = Serve::start(&cfg);
    let addr = http_addr(&mut serve);
    // Parsed at start (this line may come before or after "ready").
    serve.expect_line("per-node ISOs from ");

    let master = patched(
        &base,
        DEFAULT_KARGS,
        &format!("{DEFAULT_KARGS} {master_line}"),
        1139,
    );
    let head = request(addr, "HEAD", "/iso/master-0.iso", &[]);
    assert_eq!(head.status, 200, "{}", head.head);
    assert_eq!(
        head.header("content-length"),
        Some(base.len().to_string().as_str())
    );
    assert_eq!(head.header("accept-ranges"), Some("bytes"));
    assert_eq!(
        head.header("content-type"),
        Some("application/x-iso9660-image")
    );
    assert!(head.body.is_empty());
    let etag = head.header("etag").expect("an etag").to_owned();

    let full = get(addr, "/iso/master-0.iso", &[]);
    assert_eq!(full.status, 200);
    assert!(
        full.body == master,
        "the served ISO differs from the patched copy"
    );
    serve.expect_line("master-0: live ISO read by 127.0.0.1:");

    // Ranges across every boundary of both areas, and some that span both.
    let offsets = liveiso::area_offsets(&base, DEFAULT_KARGS);
    let mut ranges: Vec<(usize, usize)> = Vec::new();
    for &o in &offsets {
        let e = o + 1139;
        for (a, b) in [
            (o - 1, o),
            (o, o),
            (o - 300, o + 10),
            (o + 5, o + 17),
            (o, e - 1),
            (e - 1, e),
            (e - 3, e + 300),
            (o - 4096, e + 4096),
            (e, e + 9),
        ] {
            ranges.push((a, b));
        }
    }
    ranges.push((offsets[0] - 7, offsets[1] + 1139 + 7));
    ranges.push((0, base.len() - 1));
    for (a, b) in ranges {
        let r = get(
            addr,
            "/iso/master-0.iso",
            &[("range", &format!("bytes={a}-{b}"))],
        );
        assert_eq!(r.status, 206, "{a}-{b}: {}", r.head);
        assert_eq!(
            r.header("content-range"),
            Some(format!("bytes {a}-{b}/{}", base.len()).as_str())
        );
        assert!(r.body == master[a..=b], "bytes {a}-{b} differ");
    }
    let tail = get(addr, "/iso/master-0.iso", &[("range", "bytes=-5000")]);
    assert!(tail.body == master[master.len() - 5000..]);
    let open = format!("bytes={}-", offsets[1] - 2);
    let r = get(addr, "/iso/master-0.iso", &[("range", &open)]);
    assert!(r.body == master[offsets[1] - 2..]);
    let past = format!("bytes={}-", base.len());
    let r = get(addr, "/iso/master-0.iso", &[("range", &past)]);
    assert_eq!(r.status, 416);
    assert_eq!(
        r.header("content-range"),
        Some(format!("bytes */{}", base.len()).as_str())
    );

    // Validators: per node, and If-Range falls back to the whole image when stale.
    let r = get(addr, "/iso/master-0.iso", &[("if-none-match", &etag)]);
    assert_eq!(r.status, 304);
    assert!(r.body.is_empty());
    let worker = get(addr, "/iso/worker-0.iso", &[]);
    assert_eq!(worker.status, 200);
    let worker_etag = worker.header("etag").unwrap().to_owned();
    assert_ne!(worker_etag, etag);
    let worker_line = node_kargs(&cfg, "worker-0");
    assert!(
        worker.body
            == patched(
                &base,
                DEFAULT_KARGS,
                &format!("{DEFAULT_KARGS} {worker_line}"),
                1139
            )
    );
    let r = get(
        addr,
        "/iso/master-0.iso",
        &[("range", "bytes=0-9"), ("if-range", &worker_etag)],
    );
    assert_eq!(r.status, 200);
    let r = get(
        addr,
        "/iso/master-0.iso",
        &[("range", "bytes=0-9"), ("if-range", &etag)],
    );
    assert_eq!(r.status, 206);
    assert_eq!(get(addr, "/iso/nobody.iso", &[]).status, 404);

    // A reload that changes a node's arguments changes its image and its validator.
    config(dir.path(), ", kernel_args: [ip=dhcp]");
    serve.signal(Signal::SIGHUP);
    serve.expect_line("reloaded: now serving plan");
    let r = get(
        addr,
        "/iso/worker-0.iso",
        &[("if-none-match", &worker_etag)],
    );
    assert_eq!(r.status, 200, "a stale validator after the reload");
    let worker_line = node_kargs(&cfg, "worker-0");
    assert!(
        worker_line.ends_with(" console=ttyS0 ip=dhcp"),
        "{worker_line}"
    );
    assert!(
        r.body
            == patched(
                &base,
                DEFAULT_KARGS,
                &format!("{DEFAULT_KARGS} {worker_line}"),
                1139
            )
    );
    // The master's arguments did not change, nor did the file: same image, same validator.
    let r = get(addr, "/iso/master-0.iso", &[("if-none-match", &etag)]);
    assert_eq!(r.status, 304);

    // A new base ISO (another release) is picked up at the next request.
    let other = build(dir.path(), "other.iso", |b| {
        b.default_kargs("console=ttyS0 coreos.liveiso=other")
    });
    std::fs::copy(&other, artifacts.join("live.iso.new")).unwrap();
    std::fs::rename(artifacts.join("live.iso.new"), artifacts.join("live.iso")).unwrap();
    // Parsed and logged without waiting for a request (the service looks every 5 s).
    serve.expect_line("base arguments `console=ttyS0 coreos.liveiso=other`");
    let r = get(addr, "/iso/master-0.iso", &[("if-none-match", &etag)]);
    assert_eq!(r.status, 200);
    let other_bytes = std::fs::read(&other).unwrap();
    assert!(
        r.body
            == patched(
                &other_bytes,
                "console=ttyS0 coreos.liveiso=other",
                &format!("console=ttyS0 coreos.liveiso=other {master_line}"),
                1139
            )
    );

    // A base ISO without an embed area: a clear 500 and a log line, not a broken image.
    let plain = build(dir.path(), "plain.iso", LiveIsoBuilder::without_kargs_json);
    std::fs::copy(&plain, artifacts.join("live.iso.new")).unwrap();
    std::fs::rename(artifacts.join("live.iso.new"), artifacts.join("live.iso")).unwrap();
    let r = get(addr, "/iso/master-0.iso", &[]);
    assert_eq!(r.status, 500);
    let text = String::from_utf8_lossy(&r.body);
    assert!(text.contains("no kernel-argument embed area"), "{text}");
    serve.expect_line("can't be used: no kernel-argument embed area");
    // A warning for `check` (the unit runs it before every start: an unusable ISO must not stop
    // DNS and the load balancer), an error for `check --install`.
    let out = appliance(&["check", cfg.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("warning: "),
        "{out:?}"
    );
    let out = appliance(&["check", "--install", cfg.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("no kernel-argument embed area"),
        "{out:?}"
    );

    // No base ISO: 404 with what to do.
    std::fs::remove_file(artifacts.join("live.iso")).unwrap();
    let r = get(addr, "/iso/master-0.iso", &[]);
    assert_eq!(r.status, 404);
    assert!(String::from_utf8_lossy(&r.body).contains(
        "artifacts fetch CONFIG --stream https://builds.coreos.fedoraproject.org/streams/stable.json --iso"
    ));
}

#[test]
fn arguments_too_long_for_the_area_fail_that_node_only_and_check_says_so() {
    if !tools_present() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let artifacts = dir.path().join("artifacts");
    std::fs::create_dir_all(&artifacts).unwrap();
    build(dir.path(), "live.iso", |b| b.area_size(300));
    std::fs::rename(dir.path().join("live.iso"), artifacts.join("live.iso")).unwrap();
    let long = format!(", kernel_args: [rd.extra={}]", "x".repeat(120));
    let cfg = config(dir.path(), &long);
    let out = appliance(&["check", "--install", cfg.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("the ISO of worker-0: the kernel arguments are")
            && stderr.contains("the ISO's area holds 299"),
        "{stderr}"
    );
    assert!(!stderr.contains("ISO of master-0"), "{stderr}");

    let mut serve = Serve::start(&cfg);
    let addr = http_addr(&mut serve);
    serve.expect_line("per-node ISO of worker-0: the kernel arguments are");
    let r = get(addr, "/iso/worker-0.iso", &[]);
    assert_eq!(r.status, 500);
    assert!(String::from_utf8_lossy(&r.body).contains("worker-0's ISO can't be made"));
    assert_eq!(get(addr, "/iso/master-0.iso", &[]).status, 200);
}

// ----- against coreos-installer itself -----

/// coreos-installer: `OKD_COREOS_INSTALLER`, or the one in PATH.
fn coreos_installer() -> PathBuf {
    std::env::var_os("OKD_COREOS_INSTALLER")
        .map(PathBuf::from)
        .or_else(|| harness::which("coreos-installer"))
        .expect(
            "coreos-installer: `cargo install coreos-installer` (needs libzstd-dev), or \
             OKD_COREOS_INSTALLER=path; tests/iso/coreos-installer-check.sh does both",
        )
}

/// `coreos-installer iso kargs modify -a ARG... -o OUT IN`; the error text when it refuses.
fn kargs_modify(input: &Path, out: &Path, args: &[String]) -> Result<Vec<u8>, String> {
    let _ = std::fs::remove_file(out);
    let mut cmd = Command::new(coreos_installer());
    cmd.args(["iso", "kargs", "modify"]);
    for a in args {
        cmd.arg("-a").arg(a);
    }
    let result = cmd.arg("-o").arg(out).arg(input).output().unwrap();
    if result.status.success() {
        Ok(std::fs::read(out).unwrap())
    } else {
        Err(String::from_utf8_lossy(&result.stderr).into_owned())
    }
}

fn kargs_show(iso: &Path) -> String {
    let out = Command::new(coreos_installer())
        .args(["iso", "kargs", "show"])
        .arg(iso)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    String::from_utf8(out.stdout).unwrap().trim_end().to_owned()
}

/// The whole image of a node as the appliance composes it, read from the base file.
fn composed(base: &Path, args: &[String]) -> Result<Vec<u8>, String> {
    let (_, iso) = BaseIso::load(base).map_err(|e| e.to_string())?;
    let image = iso.node_image(args).map_err(|e| e.to_string())?;
    let bytes = std::fs::read(base).unwrap();
    let mut out = Vec::with_capacity(bytes.len());
    for piece in image.pieces(0, image.len) {
        match piece {
            Piece::Base { offset, len } => {
                out.extend_from_slice(&bytes[offset as usize..(offset + len) as usize]);
            }
            Piece::Patch(b) => out.extend_from_slice(&b),
        }
    }
    Ok(out)
}

/// The served ISO is byte for byte what `coreos-installer iso kargs modify` writes for the
/// node's arguments, and `iso kargs show` on it prints them. Ignored: it needs coreos-installer
/// (see tests/iso/coreos-installer-check.sh).
#[test]
#[ignore = "needs coreos-installer: run tests/iso/coreos-installer-check.sh"]
fn coreos_installer_writes_the_same_bytes_as_served() {
    assert!(tools_present(), "the ISO tools are needed");
    let dir = tempfile::tempdir().unwrap();
    let artifacts = dir.path().join("artifacts");
    std::fs::create_dir_all(&artifacts).unwrap();
    let iso = build(dir.path(), "live.iso", |b| b);
    std::fs::copy(&iso, artifacts.join("live.iso")).unwrap();
    assert_eq!(kargs_show(&iso), DEFAULT_KARGS);
    let cfg = config(dir.path(), ", kernel_args: [ip=dhcp, rd.neednet=1]");
    let mut serve = Serve::start(&cfg);
    let addr = http_addr(&mut serve);
    for (node, _, _) in NODES {
        let line = node_kargs(&cfg, node);
        let args: Vec<String> = line.split(' ').map(str::to_owned).collect();
        let expected = kargs_modify(&iso, &dir.path().join("modified.iso"), &args).unwrap();
        let served = get(addr, &format!("/iso/{node}.iso"), &[]);
        assert_eq!(served.status, 200);
        assert!(
            served.body == expected,
            "{node}: the served ISO differs from coreos-installer's"
        );
        let path = dir.path().join(format!("{node}.iso"));
        std::fs::write(&path, &served.body).unwrap();
        assert_eq!(kargs_show(&path), format!("{DEFAULT_KARGS} {line}"));
    }
}

/// The same for every CoreOS-built fixture ISO coreos-installer ships in its crate (legacy
/// `coreKarg` headers, kargs.json, x86_64 and s390x layouts), read from
/// `OKD_COREOS_FIXTURES` (a directory of `*.iso.xz`, e.g. the crate's `fixtures/iso` in
/// `~/.cargo/registry/src`): where coreos-installer modifies an image the appliance makes
/// the same bytes, and where it refuses one the appliance does too.
#[test]
#[ignore = "needs coreos-installer and its fixtures: run tests/iso/coreos-installer-check.sh"]
fn coreos_installer_fixtures_give_the_same_bytes() {
    let fixtures = PathBuf::from(
        std::env::var_os("OKD_COREOS_FIXTURES").expect("OKD_COREOS_FIXTURES=dir of *.iso.xz"),
    );
    let mut names: Vec<PathBuf> = std::fs::read_dir(&fixtures)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.to_string_lossy().ends_with(".iso.xz"))
        .collect();
    names.sort();
    assert!(!names.is_empty(), "no *.iso.xz in {}", fixtures.display());
    let dir = tempfile::tempdir().unwrap();
    let args = vec![
        "coreos.inst.install_dev=/dev/sda".to_owned(),
        "coreos.inst.ignition_url=http://10.0.0.1:8080/ignition/master-0.ign".to_owned(),
    ];
    let mut compared = 0;
    for xz in names {
        let iso = dir.path().join("fixture.iso");
        let out = Command::new("xz").args(["-dc"]).arg(&xz).output().unwrap();
        assert!(out.status.success(), "xz -dc {}", xz.display());
        std::fs::write(&iso, &out.stdout).unwrap();
        let theirs = kargs_modify(&iso, &dir.path().join("modified.iso"), &args);
        let ours = composed(&iso, &args);
        let name = xz.file_name().unwrap().to_string_lossy().into_owned();
        match (&theirs, &ours) {
            (Ok(t), Ok(o)) => {
                assert!(t == o, "{name}: bytes differ from coreos-installer's");
                compared += 1;
                eprintln!("{name}: identical");
            }
            (Err(t), Err(o)) => eprintln!(
                "{name}: both refuse it: {o} / {}",
                t.lines().next().unwrap_or_default()
            ),
            (Ok(_), Err(o)) => panic!("{name}: coreos-installer modifies it, the appliance: {o}"),
            (Err(t), Ok(_)) => {
                panic!("{name}: coreos-installer refuses it ({t}), the appliance not")
            }
        }
    }
    assert!(compared > 0, "no fixture was compared");
}
