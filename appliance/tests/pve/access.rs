//! Proxmox VE's permission model as the double evaluates it: built-in roles, users, API tokens
//! (with or without privilege separation), ACL entries with propagation, and the permission
//! checks the API handlers run, with the messages they give.
//!
//! Followed upstream (proxmox/pve-access-control unless said otherwise):
//! - `src/PVE/AccessControl.pm`: `$privgroups` and `create_roles` (the built-in roles; only
//!   `Administrator` holds the `root` privileges such as Sys.AccessNetwork and Sys.Modify),
//!   `roles` (the most specific ACL path with an entry for the user or token wins; a parent's
//!   entry counts below it only when it propagates; `NoAccess` wins).
//! - `src/PVE/RPCEnvironment.pm`: `permissions` (a token without privilege separation has its
//!   user's privileges; a privilege-separated one has the intersection of its own and its
//!   user's), `check` / `check_any` (`Permission check failed (PATH, PRIV)`, `(PATH, A|B)` for
//!   any-of), `exec_api2_perm_check` (`and` raises the first failing sub-check's message, `or`
//!   raises a bare `Permission check failed`).
//! - proxmox/pve-common `src/PVE/Exception.pm` `raise_perm_exc`: the message, HTTP 403.
//! - `src/PVE/RPCEnvironment.pm` `compute_api_permission`'s pool roles (at 5ccd07d): the roles a
//!   user or token has on `/pool/NAME` count on `/vms/ID` of each VM in the pool, beside the
//!   regular ones, never propagated and never over a `NoAccess` (a pool's `NoAccess` wins);
//!   `AccessControl.pm` `verify_poolname`: `^[A-Za-z0-9.-_]+(/[A-Za-z0-9.-_]+){0,2}$`, at
//!   most three levels (nesting came with libpve-access-control 8.0.7, PVE 8.1: e7224f6).
//! - `src/PVE/API2/ACL.pm` `update_acl`, `src/PVE/API2/Role.pm`, `src/PVE/API2/User.pm`
//!   (`privsep` defaults to 1), `src/PVE/CLI/pveum.pm`: the `pveum` commands the README and the
//!   provider's hints give, which tests apply to the double.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;

/// The user the double's token belongs to.
pub const USER: &str = "okd@pve";

/// Users, tokens, roles and ACL entries.
#[derive(Debug, Clone)]
pub struct Access {
    pub roles: BTreeMap<String, BTreeSet<String>>,
    pub users: BTreeSet<String>,
    /// Full token ID (`USER!NAME`) -> privilege separation.
    pub tokens: BTreeMap<String, bool>,
    /// (path, user or token ID, role) -> propagate.
    pub acl: BTreeMap<(String, String, String), bool>,
    /// Resource pools and their VMs (user.cfg's `pool:` lines).
    pub pools: BTreeMap<String, BTreeSet<u32>>,
}

impl Access {
    /// The built-in roles, no users.
    pub fn builtin() -> Access {
        // AccessControl.pm `$privgroups`: per category the root, admin, user and audit privileges.
        let groups: [(&str, [&[&str]; 4]); 7] = [
            (
                "VM",
                [
                    &[],
                    &[
                        "VM.Config.Disk",
                        "VM.Config.CPU",
                        "VM.Config.Memory",
                        "VM.Config.Network",
                        "VM.Config.HWType",
                        "VM.Config.Options",
                        "VM.Allocate",
                        "VM.Clone",
                        "VM.GuestAgent.Unrestricted",
                        "VM.Migrate",
                        "VM.Replicate",
                        "VM.Snapshot",
                        "VM.Snapshot.Rollback",
                    ],
                    &[
                        "VM.Config.CDROM",
                        "VM.Config.Cloudinit",
                        "VM.Console",
                        "VM.Backup",
                        "VM.GuestAgent.FileRead",
                        "VM.GuestAgent.FileSystemMgmt",
                        "VM.GuestAgent.FileWrite",
                        "VM.PowerMgmt",
                    ],
                    &["VM.Audit", "VM.GuestAgent.Audit"],
                ],
            ),
            (
                "Sys",
                [
                    &[
                        "Sys.PowerMgmt",
                        "Sys.Modify",
                        "Sys.Incoming",
                        "Sys.AccessNetwork",
                    ],
                    &["Sys.Console", "Sys.Syslog"],
                    &[],
                    &["Sys.Audit"],
                ],
            ),
            (
                "Datastore",
                [
                    &[],
                    &["Datastore.Allocate", "Datastore.AllocateTemplate"],
                    &["Datastore.AllocateSpace"],
                    &["Datastore.Audit"],
                ],
            ),
            (
                "SDN",
                [
                    &[],
                    &["SDN.Allocate", "SDN.Audit"],
                    &["SDN.Use"],
                    &["SDN.Audit"],
                ],
            ),
            (
                "User",
                [
                    &["Realm.Allocate"],
                    &["User.Modify", "Group.Allocate", "Realm.AllocateUser"],
                    &[],
                    &[],
                ],
            ),
            (
                "Pool",
                [&[], &["Pool.Allocate"], &["Pool.Audit"], &["Pool.Audit"]],
            ),
            (
                "Mapping",
                [
                    &[],
                    &["Mapping.Modify"],
                    &["Mapping.Use"],
                    &["Mapping.Audit"],
                ],
            ),
        ];
        let mut roles: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        let mut all: BTreeSet<String> = BTreeSet::from(["Permissions.Modify".to_owned()]);
        let mut add = |role: String, privilege: &str| {
            roles.entry(role).or_default().insert(privilege.to_owned());
        };
        for (cat, [root, admin, user, audit]) in groups {
            for p in root.iter().chain(admin).chain(user).chain(audit) {
                all.insert((*p).to_owned());
            }
            for p in admin.iter().chain(user).chain(audit) {
                add(format!("PVE{cat}Admin"), p);
                add("PVEAdmin".to_owned(), p);
            }
            if !user.is_empty() {
                for p in user.iter().chain(audit) {
                    add(format!("PVE{cat}User"), p);
                }
            }
            for p in audit {
                add("PVEAuditor".to_owned(), p);
            }
        }
        roles
            .get_mut("PVEAdmin")
            .expect("PVEAdmin")
            .remove("Mapping.Modify");
        roles.insert(
            "PVETemplateUser".to_owned(),
            BTreeSet::from(["VM.Clone".to_owned(), "VM.Audit".to_owned()]),
        );
        roles.insert("NoAccess".to_owned(), BTreeSet::new());
        roles.insert("Administrator".to_owned(), all);
        Access {
            roles,
            users: BTreeSet::new(),
            tokens: BTreeMap::new(),
            acl: BTreeMap::new(),
            pools: BTreeMap::new(),
        }
    }

    /// Runs `pveum` command lines (one per line; blank lines, `#` comments and lines that are
    /// not `pveum` commands are skipped).
    pub fn pveum_script(&mut self, script: &str) -> Result<(), String> {
        for line in script.lines() {
            let line = line.trim().trim_start_matches("$ ").trim();
            if line.starts_with("pveum ") {
                self.pveum(line)?;
            }
        }
        Ok(())
    }

    /// One `pveum` command, as pve-access-control's API handlers apply it: `user add`,
    /// `user token add` (`--privsep`, default 1), `user token modify --privsep`, `role add
    /// --privs`, `acl modify PATH --roles ... [--users ...] [--tokens ...] [--propagate 0]`.
    pub fn pveum(&mut self, line: &str) -> Result<(), String> {
        let words = shell_words(line)?;
        let (positional, options) = split_options(&words[1..])?;
        let opt = |name: &str| options.get(name).cloned();
        let pos: Vec<&str> = positional.iter().map(String::as_str).collect();
        match pos.as_slice() {
            ["user", "add", user] => {
                check_userid(user)?;
                if !self.users.insert((*user).to_owned()) {
                    return Err(format!("create user failed: user '{user}' already exists"));
                }
            }
            ["user", "token", "add", user, name] => {
                if !self.users.contains(*user) {
                    return Err(format!("user '{user}' does not exist"));
                }
                let id = format!("{user}!{name}");
                if self.tokens.contains_key(&id) {
                    return Err(format!("Token '{name}' for user '{user}' already exists."));
                }
                self.tokens
                    .insert(id, bool_opt(opt("privsep").as_deref(), true)?);
            }
            ["user", "token", "modify", user, name] => {
                let id = format!("{user}!{name}");
                let Some(privsep) = self.tokens.get_mut(&id) else {
                    return Err(format!("no such token '{name}' for user '{user}'"));
                };
                if let Some(v) = opt("privsep") {
                    *privsep = bool_opt(Some(v.as_str()), true)?;
                }
            }
            // `src/PVE/API2/Role.pm` `create_role` (its error wrapped by `lock_user_config`'s
            // "create role failed") and `update_role` (the role must exist; without `append`
            // its privileges are replaced).
            ["role", "add" | "modify", role] => {
                let adding = pos[1] == "add";
                if adding && self.roles.contains_key(*role) {
                    return Err(format!("create role failed: role '{role}' already exists"));
                }
                if !adding && !self.roles.contains_key(*role) {
                    return Err(format!("role '{role}' does not exist"));
                }
                let mut privs = BTreeSet::new();
                for p in split_list(&opt("privs").unwrap_or_default()) {
                    if !self.roles["Administrator"].contains(&p) {
                        return Err(format!("invalid privilege '{p}'"));
                    }
                    privs.insert(p);
                }
                self.roles.insert((*role).to_owned(), privs);
            }
            // pve-manager `PVE/API2/Pool.pm` `create_pool` (`pveum pool add`, at 14a22df): the
            // name's format, an existing pool refused, a nested pool's parent must exist
            // (4448f8d3, 8.1); each message wrapped by `lock_user_config`'s "create pool
            // failed". Not modelled: 9.0's "pool name must start with a letter" (7eadbed6).
            ["pool", "add", pool] => {
                if !is_pool_id(pool) {
                    return Err(format!("pool name '{pool}' contains invalid characters"));
                }
                if let Some((parent, _)) = pool.rsplit_once('/')
                    && !self.pools.contains_key(parent)
                {
                    return Err(format!(
                        "create pool failed: parent '{parent}' of pool '{pool}' does not exist"
                    ));
                }
                if self.pools.contains_key(*pool) {
                    return Err(format!("create pool failed: pool '{pool}' already exists"));
                }
                self.pools.insert((*pool).to_owned(), BTreeSet::new());
            }
            ["acl", "modify", path] => {
                let roles = split_list(&opt("roles").ok_or("roles: property is missing")?);
                let users = split_list(&opt("users").unwrap_or_default());
                let tokens = split_list(&opt("tokens").unwrap_or_default());
                if users.is_empty() && tokens.is_empty() {
                    return Err("either 'users', 'groups' or 'tokens' is required.".into());
                }
                if !valid_acl_path(path) {
                    return Err(format!("invalid ACL path '{path}'"));
                }
                let propagate = bool_opt(opt("propagate").as_deref(), true)?;
                for role in &roles {
                    if !self.roles.contains_key(role) {
                        return Err(format!("role '{role}' does not exist"));
                    }
                    for user in &users {
                        if !self.users.contains(user) {
                            return Err(format!("user '{user}' does not exist"));
                        }
                        self.acl
                            .insert((path.to_string(), user.clone(), role.clone()), propagate);
                    }
                    for token in &tokens {
                        if !self.tokens.contains_key(token) {
                            return Err(format!("no such token '{token}'"));
                        }
                        self.acl
                            .insert((path.to_string(), token.clone(), role.clone()), propagate);
                    }
                }
            }
            _ => return Err(format!("the double does not know `{line}`")),
        }
        Ok(())
    }

    /// AccessControl.pm `roles`: the roles `who` (a user or a token, never mixed) has on `path`.
    fn roles_on(&self, who: &str, path: &str) -> BTreeSet<String> {
        let mut prefixes = vec!["/".to_owned()];
        let mut at = String::new();
        for part in path.split('/').filter(|p| !p.is_empty()) {
            at.push('/');
            at.push_str(part);
            prefixes.push(at.clone());
        }
        let mut roles = BTreeSet::new();
        let last = prefixes.len() - 1;
        for (i, prefix) in prefixes.iter().enumerate() {
            let here: BTreeSet<String> = self
                .acl
                .iter()
                .filter(|((p, w, _), propagate)| {
                    p == prefix && w == who && (i == last || **propagate)
                })
                .map(|((_, _, role), _)| role.clone())
                .collect();
            if !here.is_empty() {
                // Overwrites what the parents gave.
                roles = here;
            }
        }
        if roles.contains("NoAccess") {
            return BTreeSet::from(["NoAccess".to_owned()]);
        }
        roles
    }

    /// The roles on `path` with those its pool gives (`compute_api_permission`): a VM in a
    /// pool has the pool's roles too, unless `NoAccess` is set on either.
    fn roles_with_pool(&self, who: &str, path: &str) -> BTreeSet<String> {
        let mut roles = self.roles_on(who, path);
        let vmid: Option<u32> = path.strip_prefix("/vms/").and_then(|id| id.parse().ok());
        let Some(pool) = vmid.and_then(|id| self.pool_of(id)) else {
            return roles;
        };
        if roles.contains("NoAccess") {
            return roles;
        }
        let pooled = self.roles_on(who, &format!("/pool/{pool}"));
        if pooled.contains("NoAccess") {
            return BTreeSet::from(["NoAccess".to_owned()]);
        }
        roles.extend(pooled);
        roles
    }

    /// The pool a VM is in.
    pub fn pool_of(&self, vmid: u32) -> Option<&str> {
        self.pools
            .iter()
            .find(|(_, vms)| vms.contains(&vmid))
            .map(|(name, _)| name.as_str())
    }

    fn privileges_of(&self, who: &str, path: &str) -> BTreeSet<String> {
        self.roles_with_pool(who, path)
            .iter()
            .filter_map(|r| self.roles.get(r))
            .flatten()
            .cloned()
            .collect()
    }

    /// RPCEnvironment.pm `permissions`: the privileges `who` has on `path`.
    pub fn privileges(&self, who: &str, path: &str) -> BTreeSet<String> {
        let Some((user, _)) = who.split_once('!') else {
            return if self.users.contains(who) {
                self.privileges_of(who, path)
            } else {
                BTreeSet::new()
            };
        };
        let Some(&privsep) = self.tokens.get(who) else {
            return BTreeSet::new();
        };
        let user_privs = self.privileges(user, path);
        if !privsep {
            return user_privs;
        }
        self.privileges_of(who, path)
            .intersection(&user_privs)
            .cloned()
            .collect()
    }
}

/// A permission check against one token: what the API handlers call on `$rpcenv`.
pub struct Checker<'a> {
    pub access: &'a Access,
    pub who: &'a str,
    /// Privileges taken from the token everywhere (a test's shortcut).
    pub withheld: &'a BTreeSet<String>,
}

/// A failed check: the 403's message (`Permission check failed (...)` or bare).
pub type Denied = String;

impl Checker<'_> {
    pub fn has(&self, path: &str, privilege: &str) -> bool {
        !self.withheld.contains(privilege)
            && self.access.privileges(self.who, path).contains(privilege)
    }

    /// `check`: every privilege; the first missing one is named.
    pub fn check(&self, path: &str, privs: &[&str]) -> Result<(), Denied> {
        match privs.iter().find(|p| !self.has(path, p)) {
            Some(p) => Err(format!("Permission check failed ({path}, {p})")),
            None => Ok(()),
        }
    }

    /// `check_any`: one of them; all are named.
    pub fn check_any(&self, path: &str, privs: &[&str]) -> Result<(), Denied> {
        if privs.iter().any(|p| self.has(path, p)) {
            Ok(())
        } else {
            Err(format!(
                "Permission check failed ({path}, {})",
                privs.join("|")
            ))
        }
    }

    pub fn check_full(&self, path: &str, privs: &[&str], any: bool) -> Result<(), Denied> {
        if any {
            self.check_any(path, privs)
        } else {
            self.check(path, privs)
        }
    }

    /// `exec_api2_perm_check` over a schema's `permissions.check`, with `{param}`s replaced
    /// from `params` (`PVE::Tools::template_replace`). `Ok(false)` only when `noerr`.
    pub fn exec(
        &self,
        check: &Value,
        params: &BTreeMap<String, String>,
        noerr: bool,
    ) -> Result<bool, Denied> {
        let items = check.as_array().cloned().unwrap_or_default();
        let test = items.first().and_then(Value::as_str).unwrap_or("");
        match test {
            "and" => {
                for sub in &items[1..] {
                    self.exec(sub, params, false)?;
                }
                Ok(true)
            }
            "or" => {
                for sub in &items[1..] {
                    if self.exec(sub, params, true)? {
                        return Ok(true);
                    }
                }
                if noerr {
                    Ok(false)
                } else {
                    Err("Permission check failed".into())
                }
            }
            "perm" => {
                let mut path = items
                    .get(1)
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_owned();
                for (k, v) in params {
                    path = path.replace(&format!("{{{k}}}"), v);
                }
                let privs: Vec<&str> = items
                    .get(2)
                    .and_then(Value::as_array)
                    .map(|a| a.iter().filter_map(Value::as_str).collect())
                    .unwrap_or_default();
                let options = &items[3.min(items.len())..];
                let any = options
                    .chunks(2)
                    .any(|kv| kv[0].as_str() == Some("any") && kv.get(1).is_some_and(truthy));
                if let Some(required) = options
                    .chunks(2)
                    .find(|kv| kv[0].as_str() == Some("require_param"))
                    .and_then(|kv| kv.get(1)?.as_str())
                    && !params.contains_key(required)
                {
                    return if noerr {
                        Ok(false)
                    } else {
                        Err("Permission check failed".into())
                    };
                }
                match self.check_full(&path, &privs, any) {
                    Ok(()) => Ok(true),
                    Err(_) if noerr => Ok(false),
                    Err(e) => Err(e),
                }
            }
            other => panic!("the double does not evaluate the permission test {other:?}"),
        }
    }
}

fn truthy(v: &Value) -> bool {
    v.as_i64() == Some(1) || v.as_bool() == Some(true) || v.as_str() == Some("1")
}

/// `pve-userid`: `NAME@REALM`.
fn check_userid(user: &str) -> Result<(), String> {
    match user.split_once('@') {
        Some((name, realm)) if !name.is_empty() && !realm.is_empty() && !user.contains('!') => {
            Ok(())
        }
        _ => Err(format!(
            "value '{user}' does not look like a valid user name"
        )),
    }
}

/// `AccessControl.pm` `verify_poolname`.
pub fn is_pool_id(pool: &str) -> bool {
    regex::Regex::new(r"^[A-Za-z0-9.\-_]+(?:/[A-Za-z0-9.\-_]+){0,2}$")
        .expect("pattern")
        .is_match(pool)
}

/// `PVE::AccessControl::check_path`, for the paths the appliance's set-up uses.
fn valid_acl_path(path: &str) -> bool {
    let re = regex::Regex::new(
        r"^/(|vms|vms/\d+|storage|storage/[^/]+|nodes|nodes/[^/]+|pool/[^/]+(?:/[^/]+){0,2}|sdn|sdn/zones|sdn/zones/[^/]+|sdn/zones/[^/]+/[^/]+|sdn/zones/[^/]+/[^/]+/\d+)$",
    )
    .expect("pattern");
    re.is_match(path)
}

/// `PVE::Tools::split_list`: commas, semicolons and white space separate.
fn split_list(s: &str) -> Vec<String> {
    s.split(|c: char| c == ',' || c == ';' || c.is_whitespace())
        .filter(|p| !p.is_empty())
        .map(str::to_owned)
        .collect()
}

fn bool_opt(v: Option<&str>, default: bool) -> Result<bool, String> {
    match v {
        None => Ok(default),
        Some("1" | "true" | "yes" | "on") => Ok(true),
        Some("0" | "false" | "no" | "off") => Ok(false),
        Some(other) => Err(format!("not a boolean: {other}")),
    }
}

/// `--name value` pairs and the positional words before and between them.
fn split_options(words: &[String]) -> Result<(Vec<String>, BTreeMap<String, String>), String> {
    let mut positional = Vec::new();
    let mut options = BTreeMap::new();
    let mut it = words.iter();
    while let Some(w) = it.next() {
        if let Some(name) = w.strip_prefix("--").or_else(|| w.strip_prefix('-')) {
            let (name, value) = match name.split_once('=') {
                Some((n, v)) => (n.to_owned(), v.to_owned()),
                None => (
                    name.to_owned(),
                    it.next()
                        .cloned()
                        .ok_or_else(|| format!("option --{name} has no value"))?,
                ),
            };
            if options.insert(name.clone(), value).is_some() {
                return Err(format!("option --{name} given twice"));
            }
        } else {
            positional.push(w.clone());
        }
    }
    Ok((positional, options))
}

/// Words of a shell command line: white space separates, single and double quotes group.
fn shell_words(line: &str) -> Result<Vec<String>, String> {
    let mut words = Vec::new();
    let mut word = String::new();
    let mut in_word = false;
    let mut quote: Option<char> = None;
    for c in line.chars() {
        match quote {
            Some(q) if c == q => quote = None,
            Some(_) => word.push(c),
            None if c == '\'' || c == '"' => {
                quote = Some(c);
                in_word = true;
            }
            None if c.is_whitespace() => {
                if in_word {
                    words.push(std::mem::take(&mut word));
                    in_word = false;
                }
            }
            None if c == '\\' || c == '`' || c == '$' || c == '|' || c == ';' || c == '&' => {
                return Err(format!("`{line}`: {c} is more shell than the double reads"));
            }
            None => {
                word.push(c);
                in_word = true;
            }
        }
    }
    if quote.is_some() {
        return Err(format!("`{line}`: an unclosed quote"));
    }
    if in_word {
        words.push(word);
    }
    Ok(words)
}

#[cfg(test)]
mod tests {
    use super::*;

    const TOKEN: &str = "okd@pve!appliance";

    fn set_up(privsep: &str) -> Access {
        let mut a = Access::builtin();
        a.pveum_script(&format!(
            "pveum user add okd@pve\npveum user token add okd@pve appliance --privsep {privsep}"
        ))
        .unwrap();
        a
    }

    #[test]
    fn a_privsep_token_gets_what_both_it_and_its_user_have() {
        let mut a = set_up("1");
        a.pveum("pveum acl modify /vms --tokens 'okd@pve!appliance' --roles PVEVMAdmin")
            .unwrap();
        assert!(a.privileges(TOKEN, "/vms/100").is_empty());
        a.pveum("pveum acl modify /vms --users okd@pve --roles PVEVMUser")
            .unwrap();
        let p = a.privileges(TOKEN, "/vms/100");
        assert!(
            p.contains("VM.PowerMgmt") && !p.contains("VM.Allocate"),
            "{p:?}"
        );
        // Without privilege separation the token is its user.
        let mut b = set_up("0");
        b.pveum("pveum acl modify /vms --users okd@pve --roles PVEVMAdmin")
            .unwrap();
        assert!(b.privileges(TOKEN, "/vms/100").contains("VM.Allocate"));
    }

    #[test]
    fn the_most_specific_entry_wins_and_propagation_counts() {
        let mut a = set_up("0");
        a.pveum("pveum acl modify / --users okd@pve --roles PVEAuditor")
            .unwrap();
        a.pveum("pveum acl modify /storage/local --users okd@pve --roles PVEDatastoreAdmin --propagate 0")
            .unwrap();
        assert!(
            a.privileges(USER, "/storage/local")
                .contains("Datastore.Allocate")
        );
        assert!(!a.privileges(USER, "/storage/local").contains("Sys.Audit"));
        assert!(
            a.privileges(USER, "/storage/other")
                .contains("Datastore.Audit")
        );
        assert!(a.privileges(USER, "/nodes/pve1").contains("Sys.Audit"));
        // Sys.AccessNetwork is in Administrator only.
        assert!(!a.roles["PVEAdmin"].contains("Sys.AccessNetwork"));
        assert!(a.roles["Administrator"].contains("Sys.AccessNetwork"));
        assert_eq!(
            a.roles["PVEDatastoreUser"],
            BTreeSet::from(["Datastore.AllocateSpace".into(), "Datastore.Audit".into()])
        );
    }

    #[test]
    fn compound_checks_name_what_proxmox_names() {
        let mut a = set_up("0");
        a.pveum("pveum acl modify /storage/local --users okd@pve --roles PVEDatastoreAdmin")
            .unwrap();
        let none = BTreeSet::new();
        let c = Checker {
            access: &a,
            who: TOKEN,
            withheld: &none,
        };
        let check = serde_json::json!([
            "and",
            ["perm", "/storage/{storage}", ["Datastore.AllocateTemplate"]],
            [
                "or",
                ["perm", "/", ["Sys.Audit", "Sys.Modify"]],
                ["perm", "/nodes/{node}", ["Sys.AccessNetwork"]]
            ]
        ]);
        let p = BTreeMap::from([
            ("storage".to_owned(), "local".to_owned()),
            ("node".to_owned(), "pve1".to_owned()),
        ]);
        assert_eq!(
            c.exec(&check, &p, false),
            Err("Permission check failed".into())
        );
        let other = BTreeMap::from([
            ("storage".to_owned(), "nfs".to_owned()),
            ("node".to_owned(), "pve1".to_owned()),
        ]);
        assert_eq!(
            c.exec(&check, &other, false),
            Err("Permission check failed (/storage/nfs, Datastore.AllocateTemplate)".into())
        );
        let any = serde_json::json!([
            "perm",
            "/storage/{storage}",
            ["Datastore.Audit", "Datastore.AllocateSpace"],
            "any",
            1
        ]);
        assert_eq!(
            c.exec(&any, &other, false),
            Err(
                "Permission check failed (/storage/nfs, Datastore.Audit|Datastore.AllocateSpace)"
                    .into()
            )
        );
    }
}
