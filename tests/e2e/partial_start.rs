//! Partial start (issue 39): a host file of two clusters whose second cluster's
//! `appliance_ip` is not on the services host yet. `serve` starts, the first cluster's DNS and
//! boot server answer, the missing listeners are reported (log and `status --json`'s faults);
//! once the address is added, they bind within the retry interval and the second cluster
//! answers too; `check --install` there names the missing address. Before, `serve` bound
//! nothing and exited: every cluster was down.

use std::time::Duration;

use harness::{require_root, require_tools, wait_until};

use crate::clusters::{
    TwoSegments, expect_names, get, okd_on_its_own_segment, script_url, test_on_its_own_segment,
    write_host,
};
use crate::dns_support::start_appliance;

#[test]
fn a_missing_cluster_address_stops_only_that_cluster_until_it_comes() {
    if !require_root() || !require_tools(&["dig", "busybox", "unshare", "curl", "python3"]) {
        return;
    }
    let (okd, test) = (okd_on_its_own_segment(), test_on_its_own_segment());
    let dir = tempfile::Builder::new()
        .prefix("okd-e2e-partial-")
        .tempdir()
        .expect("tempdir");
    let host = write_host(dir.path(), &[&okd, &test]);
    let lab = TwoSegments::start("clp", &okd, &test);
    let services = lab.topo.services();
    let test_cidr = format!("{}/24", test.appliance);
    services
        .ip(["addr", "del", &test_cidr, "dev", "br1"])
        .expect("take test's appliance address away");

    let mut app = start_appliance(services, &host);
    let log = app.stderr();
    let missing = format!("http/tcp {}:8080 of cluster test not bound", test.appliance);
    assert!(log.contains(&missing), "no {missing:?}\n{log}");
    // The first cluster serves meanwhile: its names (at its own address) and its scripts.
    expect_names(&lab.okd_node, okd.appliance, &okd);
    let okd_m0 = okd.node("master-0");
    let (code, script) = get(&lab.okd_node, &script_url(&okd, &okd_m0));
    assert_eq!(code, "200", "{script}");
    // status says which listeners wait, and why.
    let faults = crate::support::faults(&dir.path().join("state"), "okd");
    assert!(
        faults.iter().any(|f| f["state"] == "not-bound"
            && f["scope"] == "cluster test"
            && f["service"] == format!("http/tcp {}:8080", test.appliance)),
        "{faults:?}"
    );

    // The preflight on the services host names the missing address, and only that one.
    let bin = harness::appliance_bin().expect("okd-appliance binary");
    let preflight = services
        .exec([
            bin.as_os_str(),
            "check".as_ref(),
            "--install".as_ref(),
            host.as_os_str(),
        ])
        .env("NO_COLOR", "1")
        .output()
        .expect("check --install");
    let said = String::from_utf8_lossy(&preflight.stderr);
    assert_eq!(preflight.status.code(), Some(1), "{said}");
    let named = format!("error: {} is not on this host: ", test.appliance);
    assert!(said.contains(&named), "no {named:?}\n{said}");
    assert!(
        !said.contains(&format!("{} is not on this host", okd.appliance)),
        "{said}"
    );

    // The address arrives: within the retry interval the second cluster serves too.
    services
        .ip(["addr", "add", &test_cidr, "dev", "br1"])
        .expect("give test's appliance address back");
    let bound = format!(
        "http/tcp {}:8080 of cluster test bound at last",
        test.appliance
    );
    assert!(
        wait_until(Duration::from_secs(15), || app.stderr().contains(&bound)),
        "no {bound:?}\n{}",
        app.log_tails()
    );
    let test_m0 = test.node("master-0");
    let ok = wait_until(Duration::from_secs(5), || {
        get(&lab.test_node, &script_url(&test, &test_m0)).0 == "200"
    });
    assert!(
        ok,
        "test's boot server does not answer\n{}",
        app.log_tails()
    );
    expect_names(&lab.test_node, test.appliance, &test);
    expect_names(&lab.okd_node, okd.appliance, &okd);
    app.assert_running()
        .expect("okd-appliance is still running");
}
