//! Checks a request against the official Proxmox VE API schema
//! (`tests/contracts/pve-api-schema.json`, the api-viewer's apidata.js as JSON): the path
//! must exist, the method must be defined there and allow API tokens, every parameter must be
//! defined, of its type, range, enum, pattern and format (property strings such as
//! `net[n]: virtio=MAC,bridge=vmbr1` are parsed and checked key by key), and every required
//! parameter present. Anything else is a violation, which fails the test.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde_json::{Map, Value};

pub struct Schema {
    /// Every endpoint: its path split into segments (`{name}` for a parameter), and its node.
    endpoints: Vec<(Vec<String>, Value)>,
}

/// A request that matched an endpoint: its template and path parameters.
#[derive(Debug)]
pub struct Matched {
    pub template: String,
    pub info: Value,
    pub path_params: BTreeMap<String, String>,
}

impl Schema {
    /// The schema in `tests/contracts/` of the repository, or `$OKD_PVE_SCHEMA`. Missing is a
    /// failure, not a skip: the double means nothing without it.
    pub fn load() -> Schema {
        let path = std::env::var_os("OKD_PVE_SCHEMA").map_or_else(
            || {
                PathBuf::from(env!("CARGO_MANIFEST_DIR"))
                    .join("../tests/contracts/pve-api-schema.json")
            },
            PathBuf::from,
        );
        let text =
            std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let tree: Value =
            serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let mut endpoints = Vec::new();
        fn walk(node: &Value, out: &mut Vec<(Vec<String>, Value)>) {
            if let Some(path) = node.get("path").and_then(Value::as_str) {
                let segments = path
                    .split('/')
                    .filter(|s| !s.is_empty())
                    .map(str::to_owned)
                    .collect();
                out.push((segments, node.clone()));
            }
            for child in node
                .get("children")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                walk(child, out);
            }
        }
        for root in tree.as_array().expect("the schema is a list of trees") {
            walk(root, &mut endpoints);
        }
        assert!(endpoints.len() > 300, "the schema looks truncated");
        Schema { endpoints }
    }

    /// The endpoint for `path` (already percent-decoded segments): literal segments beat
    /// parameters.
    pub fn route(&self, segments: &[String]) -> Option<Matched> {
        let mut best: Option<(usize, &(Vec<String>, Value))> = None;
        for ep in &self.endpoints {
            if ep.0.len() != segments.len() {
                continue;
            }
            let mut literal = 0;
            let fits = ep.0.iter().zip(segments).all(|(t, s)| {
                if t.starts_with('{') {
                    true
                } else {
                    literal += 1;
                    t == s
                }
            });
            if fits && best.is_none_or(|(n, _)| literal > n) {
                best = Some((literal, ep));
            }
        }
        let (_, (template, node)) = best?;
        let path_params = template
            .iter()
            .zip(segments)
            .filter_map(|(t, s)| {
                t.strip_prefix('{')
                    .and_then(|t| t.strip_suffix('}'))
                    .map(|name| (name.to_owned(), s.clone()))
            })
            .collect();
        Some(Matched {
            template: format!("/{}", template.join("/")),
            info: node.get("info").cloned().unwrap_or(Value::Null),
            path_params,
        })
    }
}

/// Every violation of the method's schema by `params` (path parameters included).
pub fn check(
    matched: &Matched,
    method: &str,
    params: &BTreeMap<String, String>,
    token_auth: bool,
) -> Vec<String> {
    let Some(info) = matched.info.get(method) else {
        return vec![format!("{method} is not defined for {}", matched.template)];
    };
    let mut out = Vec::new();
    let at = format!("{method} {}", matched.template);
    if token_auth && info.get("allowtoken").and_then(Value::as_i64) != Some(1) {
        out.push(format!(
            "{at} does not allow API tokens (allowtoken is not 1)"
        ));
    }
    let parameters = info.get("parameters").cloned().unwrap_or(Value::Null);
    let props = parameters
        .get("properties")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    let extra_allowed = parameters
        .get("additionalProperties")
        .is_some_and(|v| v.as_i64() == Some(1) || v.as_bool() == Some(true));
    if params.contains_key("args") {
        out.push(format!(
            "{at}: `args` can only be set by root@pam, never with an API token"
        ));
    }
    for (name, value) in params {
        match property(&props, name) {
            Some(schema) => {
                for problem in check_value(schema, value) {
                    out.push(format!("{at}: parameter {name}={value:?}: {problem}"));
                }
                if let Some(req) = schema.get("requires").and_then(Value::as_str)
                    && !params.contains_key(req)
                {
                    out.push(format!("{at}: parameter {name} requires {req}"));
                }
            }
            None if extra_allowed => {}
            None => out.push(format!(
                "{at}: parameter {name} is not defined in the schema"
            )),
        }
    }
    for (name, schema) in &props {
        if name.contains("[n]") || is_optional(schema) {
            continue;
        }
        if !params.contains_key(name) {
            out.push(format!("{at}: required parameter {name} is missing"));
        }
    }
    out
}

/// Problems of an answer's `data` against the method's `returns` schema. Numbers and booleans
/// may come as strings, as Proxmox's Perl sends them (`nextid` answers `"100"`).
pub fn check_return(schema: &Value, value: &Value, at: &str) -> Vec<String> {
    let mut out = Vec::new();
    let Some(ty) = schema.get("type").and_then(Value::as_str) else {
        return out;
    };
    let numeric = |v: &Value| v.is_number() || v.as_str().is_some_and(|s| s.parse::<f64>().is_ok());
    let fits = match ty {
        "null" => value.is_null(),
        "string" => value.is_string(),
        "integer" | "number" => numeric(value),
        "boolean" => {
            value.is_boolean()
                || matches!(value.as_i64(), Some(0 | 1))
                || matches!(value.as_str(), Some("0" | "1"))
        }
        "array" => value.is_array(),
        "object" => value.is_object(),
        "any" => true,
        other => {
            out.push(format!(
                "{at}: the schema's type {other} is unknown to the double"
            ));
            return out;
        }
    };
    // An optional answer may be null (DELETE of a volume without a task).
    let optional = is_optional(schema);
    let accepted = fits || (optional && value.is_null());
    if !accepted {
        out.push(format!("{at}: expected {ty}, got {value}"));
        return out;
    }
    if let (Some(items), Some(values)) = (schema.get("items"), value.as_array()) {
        for (i, v) in values.iter().enumerate() {
            out.extend(check_return(items, v, &format!("{at}[{i}]")));
        }
    }
    if let (Some(props), Some(fields)) = (
        schema.get("properties").and_then(Value::as_object),
        value.as_object(),
    ) {
        for (name, prop) in props {
            match fields.get(name) {
                Some(v) => out.extend(check_return(prop, v, &format!("{at}.{name}"))),
                None if !is_optional(prop) => out.push(format!("{at}.{name} is missing")),
                None => {}
            }
        }
    }
    out
}

/// `net0` is defined as `net[n]`.
fn property<'a>(props: &'a Map<String, Value>, name: &str) -> Option<&'a Value> {
    if let Some(p) = props.get(name) {
        return Some(p);
    }
    let stem = name.trim_end_matches(|c: char| c.is_ascii_digit());
    if stem.len() < name.len() {
        return props.get(&format!("{stem}[n]"));
    }
    None
}

fn is_optional(schema: &Value) -> bool {
    schema.get("optional").and_then(Value::as_i64) == Some(1)
        || schema.get("optional").and_then(Value::as_bool) == Some(true)
}

/// The problems of one value against its schema.
fn check_value(schema: &Value, value: &str) -> Vec<String> {
    let mut out = Vec::new();
    let ty = schema
        .get("type")
        .and_then(Value::as_str)
        .unwrap_or("string");
    match ty {
        "integer" => match value.parse::<i64>() {
            Ok(n) => range(schema, n as f64, &mut out),
            Err(_) => out.push("not an integer".into()),
        },
        "number" => match value.parse::<f64>() {
            Ok(n) => range(schema, n, &mut out),
            Err(_) => out.push("not a number".into()),
        },
        "boolean" => {
            if !matches!(value, "0" | "1") {
                out.push("not a boolean (0 or 1)".into());
            }
        }
        "string" => {
            if let Some(max) = schema.get("maxLength").and_then(Value::as_u64)
                && value.len() as u64 > max
            {
                out.push(format!("longer than {max}"));
            }
            if let Some(items) = schema.get("enum").and_then(Value::as_array)
                && !items.iter().any(|i| i.as_str() == Some(value))
            {
                out.push(format!("not one of {items:?}"));
            }
            if let Some(p) = schema.get("pattern").and_then(Value::as_str)
                && !full_match(p, value)
            {
                out.push(format!("does not match the pattern {p}"));
            }
            match schema.get("format") {
                None => {}
                Some(Value::Object(keys)) => property_string(keys, value, &mut out),
                Some(Value::String(name)) => {
                    if let Err(e) = named_format(name, value) {
                        out.push(e);
                    }
                }
                Some(other) => out.push(format!("unreadable format {other}")),
            }
        }
        other => out.push(format!("type {other} can't be sent as a parameter")),
    }
    out
}

fn range(schema: &Value, n: f64, out: &mut Vec<String>) {
    if let Some(min) = schema.get("minimum").and_then(Value::as_f64)
        && n < min
    {
        out.push(format!("below the minimum {min}"));
    }
    if let Some(max) = schema.get("maximum").and_then(Value::as_f64)
        && n > max
    {
        out.push(format!("above the maximum {max}"));
    }
}

/// Perl patterns as the schema writes them (`(?^:...)`), matched whole as Proxmox does.
fn full_match(pattern: &str, value: &str) -> bool {
    let inner = pattern
        .strip_prefix("(?^:")
        .and_then(|p| p.strip_suffix(')'))
        .unwrap_or(pattern);
    let re = regex::Regex::new(&format!("^(?:{inner})$"))
        .unwrap_or_else(|e| panic!("schema pattern {pattern}: {e}"));
    re.is_match(value)
}

/// A property string: `[default_key=]value,key=value,...`, with aliases (`virtio=MAC` is
/// `model=virtio,macaddr=MAC`).
fn property_string(keys: &Map<String, Value>, value: &str, out: &mut Vec<String>) {
    let default_key = keys
        .iter()
        .find(|(_, s)| s.get("default_key").and_then(Value::as_i64) == Some(1))
        .map(|(k, _)| k.clone());
    let mut seen: BTreeMap<String, String> = BTreeMap::new();
    for (i, part) in value.split(',').enumerate() {
        if part.is_empty() {
            out.push("an empty element".into());
            continue;
        }
        let (key, val) = match part.split_once('=') {
            Some((k, v)) => (k.to_owned(), v.to_owned()),
            None if i == 0 && default_key.is_some() => {
                (default_key.clone().unwrap_or_default(), part.to_owned())
            }
            None => {
                out.push(format!("`{part}` has no key"));
                continue;
            }
        };
        let Some(schema) = keys.get(&key) else {
            out.push(format!("unknown key `{key}`"));
            continue;
        };
        if let Some(target) = schema.get("alias").and_then(Value::as_str) {
            if let Some(key_alias) = schema.get("keyAlias").and_then(Value::as_str) {
                // `virtio=MAC`: the key names the model, the value is the MAC.
                seen.insert(key_alias.to_owned(), key.clone());
            }
            seen.insert(target.to_owned(), val);
            continue;
        }
        if seen.insert(key.clone(), val).is_some() {
            out.push(format!("key `{key}` given twice"));
        }
    }
    for (key, val) in &seen {
        let Some(schema) = keys.get(key) else {
            out.push(format!("unknown key `{key}`"));
            continue;
        };
        for problem in check_value(schema, val) {
            out.push(format!("{key}={val}: {problem}"));
        }
    }
    for (key, schema) in keys {
        if schema.get("alias").is_none() && !is_optional(schema) && !seen.contains_key(key) {
            out.push(format!("required key `{key}` is missing"));
        }
    }
}

/// Proxmox's named string formats, those the appliance sends. A format this double does not
/// know is a violation too, so nothing goes unchecked by accident.
fn named_format(name: &str, v: &str) -> Result<(), String> {
    let re = |p: &str| {
        regex::Regex::new(&format!("^(?:{p})$"))
            .expect("pattern")
            .is_match(v)
    };
    let ok = match name {
        "pve-node" => re(r"[a-zA-Z0-9]([a-zA-Z0-9\-]*[a-zA-Z0-9])?"),
        "pve-vmid" => re(r"[1-9][0-9]{2,8}"),
        "pve-storage-id" => re(r"[a-z][a-z0-9\-_.]*[a-z0-9]"),
        "pve-bridge-id" => re(r"[-_.\w\d]+") && v.len() <= 15,
        // pve-access-control `AccessControl.pm` `verify_poolname`.
        "pve-poolid" => super::access::is_pool_id(v),
        "dns-name" => re(
            r"(?:(?:[a-zA-Z0-9]([a-zA-Z0-9\-]*[a-zA-Z0-9])?)\.)*(?:[A-Za-z0-9]([A-Za-z0-9\-]*[A-Za-z0-9])?)",
        ),
        "mac-addr" => re(r"(?i)[a-f0-9][02468ace](?::[a-f0-9]{2}){5}"),
        "pve-storage-content" => re(r"(images|rootdir|vztmpl|iso|backup|snippets|import)"),
        "pve-configid" => re(r"[a-z][a-z0-9_]+"),
        // `STORAGE:VOLUME` (or `STORAGE:SIZE` to allocate), an absolute path, `none`, `cdrom`.
        "pve-volume-id-or-qm-path" => {
            re(r"[a-z][a-z0-9\-_.]*[a-z0-9]:.+")
                || v.starts_with('/')
                || v == "none"
                || v == "cdrom"
        }
        "pve-qm-boot" => {
            let device =
                regex::Regex::new(r"^(ide|sata|scsi|virtio|net|efidisk|tpmstate|usb|hostpci)\d+$")
                    .expect("pattern");
            let legacy = regex::Regex::new(r"^[acdn]{1,4}$").expect("pattern");
            v.split(',').all(|part| match part.split_once('=') {
                Some(("order", devs)) => devs.split(';').all(|d| device.is_match(d)),
                Some(("legacy", l)) => legacy.is_match(l),
                None => legacy.is_match(part),
                _ => false,
            })
        }
        "pve-vm-cpu-conf" => {
            let mut parts = v.split(',');
            let first = parts.next().unwrap_or("");
            let model = first.strip_prefix("cputype=").unwrap_or(first);
            let models = [
                "host",
                "kvm64",
                "qemu64",
                "max",
                "x86-64-v2",
                "x86-64-v2-AES",
                "x86-64-v3",
                "x86-64-v4",
            ];
            models.contains(&model)
                && parts.all(|p| {
                    matches!(
                        p.split_once('=').map(|(k, _)| k),
                        Some(
                            "flags"
                                | "hidden"
                                | "hv-vendor-id"
                                | "phys-bits"
                                | "reported-model"
                                | "guest-phys-bits"
                        )
                    )
                })
        }
        "disk-size" => re(r"\d+(\.\d+)?[KMGT]?"),
        "urlencoded" => !v.contains(|c: char| c.is_whitespace() || c == ','),
        other => {
            return Err(format!(
                "format {other} is unknown to the test double: teach it"
            ));
        }
    };
    if ok {
        Ok(())
    } else {
        Err(format!("not in format {name}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_double_refuses_what_proxmox_refuses() {
        let schema = Schema::load();
        let seg = |p: &str| {
            p.split('/')
                .filter(|s| !s.is_empty())
                .map(str::to_owned)
                .collect::<Vec<_>>()
        };
        let m = schema.route(&seg("/nodes/pve1/qemu")).unwrap();
        assert_eq!(m.template, "/nodes/{node}/qemu");
        let params = |pairs: &[(&str, &str)]| {
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect::<BTreeMap<_, _>>()
        };
        let good = params(&[
            ("node", "pve1"),
            ("vmid", "9002"),
            ("name", "master-0.okd.example.com"),
            ("net0", "virtio=BC:24:11:00:00:02,bridge=vmbr1,tag=20"),
            ("scsi0", "local-lvm:120"),
            ("ide2", "local:iso/w.iso,media=cdrom"),
            ("memory", "16384"),
            ("boot", "order=net0;scsi0"),
            ("cpu", "x86-64-v2-AES"),
        ]);
        assert_eq!(check(&m, "POST", &good, true), Vec::<String>::new());
        for (key, bad) in [
            ("vmid", "42"),
            ("net0", "virtio=BC:24:11:00:00:02,bridge=vmbr1,speed=10"),
            ("net0", "bridge=vmbr1"),
            ("net0", "virtio=01:24:11:00:00:02"),
            ("memory", "lots"),
            ("boot", "order=net0;floppy"),
            ("args", "-fw_cfg name=opt/x"),
            ("ide2", "local:iso/w.iso,media=tape"),
        ] {
            let mut p = good.clone();
            p.insert(key.into(), bad.into());
            assert!(
                !check(&m, "POST", &p, true).is_empty(),
                "{key}={bad} passed"
            );
        }
        let mut missing = good.clone();
        missing.remove("vmid");
        assert!(check(&m, "POST", &missing, true)[0].contains("required parameter vmid"));
        assert!(!check(&m, "PATCH", &good, true).is_empty());
    }
}
