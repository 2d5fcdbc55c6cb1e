//! The contents `render --format install-config` reads from the files an `install_config`
//! section names, fixed for the tests: a fake pull secret, an SSH public key and a CA
//! certificate (made once with `openssl req -x509 -newkey ec` for the tests, valid until 2126,
//! its key thrown away), so that goldens do not depend on the machine.

#![allow(dead_code)] // reason: each test binary uses a part

use okd_appliance::install_config::Inputs;

/// A pull secret as openshift-install wants one (OKD installs accept a fake one).
pub const PULL_SECRET: &str = r#"{"auths":{"example.com":{"auth":"b2tkOmFwcGxpYW5jZQ=="}}}"#;

pub const SSH_KEY: &str = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGZha2Uga2V5IGZvciBva2QtYXBwbGlhbmNlIHRlc3Qh okd-appliance-tests";

pub const CA: &str = "-----BEGIN CERTIFICATE-----
MIIBvDCCAWOgAwIBAgIUWTqDKi5rQy6nFrEpH53IuZ82Wi8wCgYIKoZIzj0EAwIw
MzExMC8GA1UEAwwoTWlycm9yIFJlZ2lzdHJ5IENBIChva2QtYXBwbGlhbmNlIHRl
c3RzKTAgFw0yNjExMjYxNTA5MDdaGA8yMTI2MTEwMjE1MDkwN1owMzExMC8GA1UE
AwwoTWlycm9yIFJlZ2lzdHJ5IENBIChva2QtYXBwbGlhbmNlIHRlc3RzKTBZMBMG
ByqGSM49AgEGCCqGSM49AwEHA0IABHTFkDBJ3s6r+9ECE71bCJAvNBhParMjo/Nk
eUZYTyFetLen/ibxAfqjbmemEANKjvZIXKhi4evCp0W7OMrVpcijUzBRMB0GA1Ud
DgQWBBQJVztZXdIE3sSHlSTxD/xzZ0TCljAfBgNVHSMEGDAWgBQJVztZXdIE3sSH
lSTxD/xzZ0TCljAPBgNVHRMBAf8EBTADAQH/MAoGCCqGSM49BAMCA0cAMEQCICCz
UMxU8MPF5L7+B4x7KZph/DDjbdh1JnCKf1Nnur/jAiBkuau4d9FdpLLWt5Tac8VW
rB8z6cA5nRZ+csMGl/5Y8w==
-----END CERTIFICATE-----";

/// What the files of a config's `install_config` section would hold: the SSH key and the CA
/// only where the config names those files.
pub fn inputs(config: &okd_appliance::config::Config) -> Inputs {
    let ic = &config.install_config;
    Inputs {
        pull_secret: PULL_SECRET.to_owned(),
        ssh_key: ic.ssh_key_file.as_ref().map(|_| SSH_KEY.to_owned()),
        trust_bundle: ic
            .additional_trust_bundle_file
            .as_ref()
            .map(|_| CA.to_owned()),
    }
}
