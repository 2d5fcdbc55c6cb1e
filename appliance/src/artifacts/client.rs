//! The HTTP(S) GETs of `artifacts fetch`, on reqwest (hyper's client over rustls): redirects
//! followed here by [`super::rules`] (bounded, never from https to http), `Range` for resuming,
//! timeouts on connect and on every read so a stalled mirror ends in an error, not a hang, and the
//! proxies of the environment (`HTTP_PROXY`, `HTTPS_PROXY`, `ALL_PROXY`, `NO_PROXY`, upper or
//! lower case, with curl's rules; https goes through a CONNECT tunnel).
//!
//! HTTPS trusts the platform's CAs as rustls-native-certs finds them: `SSL_CERT_FILE` and
//! `SSL_CERT_DIR` when set, else the distribution's bundle (Debian's
//! /etc/ssl/certs/ca-certificates.crt, Fedora's, SUSE's, ...). They are read when the first request
//! is sent, and only an https URL needs them.
//!
//! One connection per request, HTTP/1.1 only (a handful of large sequential downloads gains
//! nothing from HTTP/2), `Accept-Encoding: identity` so that no mirror compresses what the
//! digest covers. A proxy variable that is set but not an http(s) URL is an error, not a direct
//! connection (hyper-util's matcher would skip it silently). Errors name the proxy a request
//! went through and only the innermost cause (reqwest's and hyper's layers repeat each other).
//!
//! Why reqwest (0.13, `rustls-no-provider`, no default features) rather than hyper-util's
//! client with glue of our own: lab networks need `HTTP(S)_PROXY` and `NO_PROXY` with curl's
//! rules, forward proxying for http and CONNECT tunnels for https, and reqwest is the
//! maintained composition of exactly that (hyper, hyper-util's proxy matcher and tunnel,
//! hyper-rustls). What it adds is small and pure Rust; no OpenSSL and no aws-lc-rs (its default
//! TLS provider, a C and cmake build), so the binary links no new shared library.

use std::error::Error as StdError;
use std::io;
#[cfg(test)]
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use anyhow::{Context as _, anyhow, bail};
use bytes::Bytes;
use hyper::StatusCode;
use hyper::header::{self, HeaderMap, HeaderValue};
use hyper_util::client::proxy::matcher::Matcher;
use rustls::{ClientConfig, RootCertStore};
use url::Url;

use super::rules::{self, Answer};

/// TCP connect plus TLS handshake (through the proxy's tunnel, if any).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(30);
/// Waiting for the response head, or for the next bytes of a body.
const READ_TIMEOUT: Duration = Duration::from_secs(60);

/// The proxy variables, in the order hyper-util's matcher reads them.
const PROXY_VARIABLES: [&str; 6] = [
    "ALL_PROXY",
    "all_proxy",
    "HTTPS_PROXY",
    "https_proxy",
    "HTTP_PROXY",
    "http_proxy",
];

/// Where the trusted CAs come from.
#[derive(Debug, Clone)]
enum TrustStore {
    /// rustls-native-certs: `SSL_CERT_FILE`/`SSL_CERT_DIR`, else the system's bundle.
    Platform,
    /// Only the CAs in this PEM file.
    #[cfg(test)]
    File(PathBuf),
}

/// Sends GETs; builds its HTTP client on the first request.
#[derive(Debug)]
pub struct Client {
    trust: TrustStore,
    built: OnceLock<Built>,
}

#[derive(Debug)]
struct Built {
    http: reqwest::Client,
    /// The proxies as reqwest applies them, to name them in errors.
    proxies: Matcher,
    /// Why no CA could be loaded: an https URL fails with this before anything is sent.
    no_roots: Option<String>,
}

/// A response whose body has not been read yet.
#[derive(Debug)]
pub struct Response {
    inner: reqwest::Response,
}

impl Response {
    pub fn status(&self) -> StatusCode {
        self.inner.status()
    }

    /// The value of header `name`, if it is there and text.
    pub fn header(&self, name: header::HeaderName) -> Option<&str> {
        self.inner.headers().get(name)?.to_str().ok()
    }

    /// The length of the body as the server declared it.
    pub fn content_length(&self) -> Option<u64> {
        self.header(header::CONTENT_LENGTH)?.trim().parse().ok()
    }

    /// The next piece of the body, `None` at its end; an error if nothing arrives for a minute
    /// or the connection closes before the body's end.
    pub async fn next_chunk(&mut self) -> anyhow::Result<Option<Bytes>> {
        self.inner.chunk().await.map_err(|e| {
            if e.is_timeout() {
                anyhow!("nothing received for {} s", READ_TIMEOUT.as_secs())
            } else {
                anyhow!("reading the body: {}", root_cause(&e))
            }
        })
    }
}

impl Client {
    pub fn new() -> Client {
        Client {
            trust: TrustStore::Platform,
            built: OnceLock::new(),
        }
    }

    /// A client that trusts the CAs in `path` instead of the platform's.
    #[cfg(test)]
    fn with_trust_store(path: &Path) -> Client {
        Client {
            trust: TrustStore::File(path.to_owned()),
            built: OnceLock::new(),
        }
    }

    /// GETs `url`, asking for the bytes from `from` on when it is not 0, and follows redirects.
    /// Any status other than a redirect is the caller's to interpret.
    pub async fn get(&self, url: &Url, from: u64) -> anyhow::Result<Response> {
        let mut at = url.clone();
        for _ in 0..=rules::MAX_REDIRECTS {
            let response = self
                .send(&at, from)
                .await
                .with_context(|| format!("GET {at}"))?;
            if !rules::is_redirect(response.status()) {
                return Ok(response);
            }
            let location = response
                .header(header::LOCATION)
                .with_context(|| format!("GET {at}: {} without a Location", response.status()))?;
            at = rules::redirect_target(&at, location).with_context(|| format!("GET {at}"))?;
        }
        bail!("GET {url}: more than {} redirects", rules::MAX_REDIRECTS)
    }

    /// The whole body of `url`, which must answer 200 with at most `limit` bytes.
    pub async fn get_bytes(&self, url: &Url, limit: usize) -> anyhow::Result<Vec<u8>> {
        let mut response = self.get(url, 0).await?;
        let answer = rules::interpret(response.status(), None, 0);
        if answer.with_context(|| format!("GET {url}"))? != Answer::Whole {
            bail!("GET {url}: the server answered {}", response.status());
        }
        let mut out = Vec::new();
        while let Some(chunk) = response
            .next_chunk()
            .await
            .with_context(|| format!("GET {url}"))?
        {
            if out.len() + chunk.len() > limit {
                bail!("GET {url}: the body is larger than {limit} bytes");
            }
            out.extend_from_slice(&chunk);
        }
        Ok(out)
    }

    async fn send(&self, url: &Url, from: u64) -> anyhow::Result<Response> {
        let built = self.built()?;
        if url.scheme() == "https"
            && let Some(why) = &built.no_roots
        {
            bail!("no trusted CA certificates for https: {why}");
        }
        let mut request = built.http.get(url.clone());
        if from > 0 {
            request = request.header(header::RANGE, format!("bytes={from}-"));
        }
        let inner = request
            .send()
            .await
            .map_err(|e| explain(&e, url, &built.proxies))?;
        Ok(Response { inner })
    }

    fn built(&self) -> anyhow::Result<&Built> {
        if let Some(built) = self.built.get() {
            return Ok(built);
        }
        let built = build(&self.trust)?;
        Ok(self.built.get_or_init(|| built))
    }

    /// The TLS configuration of the requests, for the tests.
    #[cfg(test)]
    fn tls_config(&self) -> anyhow::Result<ClientConfig> {
        tls_config(load_roots(&self.trust).map_err(|e| anyhow!(e))?)
    }
}

fn build(trust: &TrustStore) -> anyhow::Result<Built> {
    check_proxy_variables()?;
    let (roots, no_roots) = match load_roots(trust) {
        Ok(roots) => (roots, None),
        Err(why) => (RootCertStore::empty(), Some(why)),
    };
    let mut headers = HeaderMap::new();
    // Without Accept-Encoding any coding is acceptable (RFC 9110 section 12.5.3): a mirror
    // could then send a compressed body, whose digest is not the stream's.
    headers.insert(
        header::ACCEPT_ENCODING,
        HeaderValue::from_static("identity"),
    );
    let http = reqwest::Client::builder()
        .tls_backend_preconfigured(tls_config(roots)?)
        .user_agent(concat!("okd-appliance/", env!("CARGO_PKG_VERSION")))
        .default_headers(headers)
        // Redirects are followed in `Client::get`, by the rules of `rules.rs`.
        .redirect(reqwest::redirect::Policy::none())
        // One connection per request, as a fetch is a handful of large files: a connection the
        // mirror closed while it sat idle in a pool can't fail the next request.
        .pool_max_idle_per_host(0)
        .http1_only()
        .connect_timeout(CONNECT_TIMEOUT)
        .read_timeout(READ_TIMEOUT)
        .build()
        .context("setting up the HTTP client")?;
    Ok(Built {
        http,
        proxies: Matcher::from_env(),
        no_roots,
    })
}

/// Refuses a proxy variable that hyper-util's matcher would skip without a word (not a URL, or a
/// scheme this build can't use), so a misspelt proxy never turns into a direct connection.
/// The value is not repeated: it may hold credentials.
fn check_proxy_variables() -> anyhow::Result<()> {
    for name in PROXY_VARIABLES {
        let Some(value) = std::env::var_os(name) else {
            continue;
        };
        let value = value
            .into_string()
            .map_err(|_| anyhow!("{name} is not UTF-8"))?;
        if value.trim().is_empty() {
            continue;
        }
        let scheme_ok = match value.split_once("://") {
            Some((scheme, _)) => matches!(scheme.to_ascii_lowercase().as_str(), "http" | "https"),
            None => true,
        };
        let probe = "http://proxy-check.invalid/".parse().expect("a valid URI");
        let usable = Matcher::builder()
            .http(value.as_str())
            .build()
            .intercept(&probe)
            .is_some();
        if !scheme_ok || !usable {
            bail!(
                "{name} is not a proxy URL this client can use (http://HOST:PORT or https://HOST:PORT)"
            );
        }
    }
    Ok(())
}

/// The trusted CAs, or why there are none.
fn load_roots(trust: &TrustStore) -> Result<RootCertStore, String> {
    let (certs, errors, source) = match trust {
        TrustStore::Platform => {
            let found = rustls_native_certs::load_native_certs();
            let set: Vec<String> = ["SSL_CERT_FILE", "SSL_CERT_DIR"]
                .into_iter()
                .filter_map(|name| {
                    let value = std::env::var_os(name)?;
                    Some(format!("{name}={}", value.to_string_lossy()))
                })
                .collect();
            let source = if set.is_empty() {
                "the system's CA bundle (is ca-certificates installed?)".to_owned()
            } else {
                set.join(" and ")
            };
            let errors: Vec<String> = found.errors.iter().map(ToString::to_string).collect();
            (found.certs, errors, source)
        }
        #[cfg(test)]
        TrustStore::File(path) => {
            use rustls::pki_types::CertificateDer;
            use rustls::pki_types::pem::PemObject as _;
            let read = CertificateDer::pem_file_iter(path)
                .and_then(Iterator::collect::<Result<Vec<_>, _>>);
            match read {
                Ok(certs) => (certs, Vec::new(), path.display().to_string()),
                Err(e) => (Vec::new(), vec![e.to_string()], path.display().to_string()),
            }
        }
    };
    let mut roots = RootCertStore::empty();
    let (added, _unparsable) = roots.add_parsable_certificates(certs);
    if added > 0 {
        for e in errors {
            tracing::debug!("artifacts: a CA certificate was skipped: {e}");
        }
        return Ok(roots);
    }
    let mut why = format!("none could be read from {source}");
    for e in errors {
        why.push_str("; ");
        why.push_str(&e);
    }
    Err(why)
}

/// rustls with ring, trusting `roots`.
fn tls_config(roots: RootCertStore) -> anyhow::Result<ClientConfig> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .context("TLS protocol versions")?
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(config)
}

/// A failed request in one line: what failed, with what (the proxy, when one was used), and the
/// innermost cause; reqwest's and hyper's layers above it would repeat each other.
fn explain(e: &reqwest::Error, url: &Url, proxies: &Matcher) -> anyhow::Error {
    let host = url.host_str().unwrap_or_default();
    let at = match url.port_or_known_default() {
        Some(port) => format!("{host}:{port}"),
        None => host.to_owned(),
    };
    let proxy = url
        .as_str()
        .parse::<hyper::Uri>()
        .ok()
        .and_then(|uri| proxies.intercept(&uri))
        .and_then(|p| p.uri().authority().map(ToString::to_string));
    let cause = root_cause(e);
    if is_tls(e) {
        return anyhow!("TLS with {at}: {cause}");
    }
    let to = match &proxy {
        Some(p) => format!("the proxy {p} (for {at})"),
        None => at,
    };
    if e.is_connect() && e.is_timeout() {
        anyhow!(
            "no connection to {to} within {} s",
            CONNECT_TIMEOUT.as_secs()
        )
    } else if e.is_connect() {
        anyhow!("can't connect to {to}: {cause}")
    } else if e.is_timeout() {
        anyhow!("no response within {} s", READ_TIMEOUT.as_secs())
    } else if let Some(p) = proxy {
        anyhow!("through the proxy {p}: {cause}")
    } else {
        anyhow!("{cause}")
    }
}

/// The innermost error of `e`'s chain: the one that says what happened.
fn root_cause(e: &(dyn StdError + 'static)) -> String {
    let mut last: &(dyn StdError + 'static) = e;
    while let Some(next) = last.source() {
        last = next;
    }
    last.to_string()
}

/// Whether the TLS handshake failed (rustls's error, possibly inside an I/O error).
fn is_tls(e: &(dyn StdError + 'static)) -> bool {
    let mut at: Option<&(dyn StdError + 'static)> = Some(e);
    while let Some(err) = at {
        if err.is::<rustls::Error>() {
            return true;
        }
        // An I/O error's `source` skips the error it wraps (tokio-rustls's io::Error inside
        // hyper-util's): look inside it directly.
        if let Some(inner) = err.downcast_ref::<io::Error>().and_then(io::Error::get_ref)
            && is_tls(inner)
        {
            return true;
        }
        at = err.source();
    }
    false
}

#[cfg(test)]
mod tests {
    use std::process::Command;

    use bytes::BytesMut;
    use rustls::ServerConfig;
    use rustls::pki_types::pem::PemObject as _;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    use tokio::net::TcpListener;
    use tokio_rustls::TlsAcceptor;

    use super::*;

    fn openssl(args: &[&str]) {
        let out = Command::new("openssl")
            .args(args)
            .output()
            .expect("the HTTPS test needs the openssl command (Debian: openssl, which ca-certificates depends on)");
        assert!(
            out.status.success(),
            "openssl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// A test CA and a certificate for 127.0.0.1 signed by it: (ca.pem, cert.pem, key.pem).
    fn pki(dir: &Path) -> (PathBuf, PathBuf, PathBuf) {
        let p = |f: &str| dir.join(f).to_str().unwrap().to_owned();
        let key = "ec_paramgen_curve:prime256v1";
        openssl(&[
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            key,
            "-nodes",
            "-days",
            "2",
            "-subj",
            "/CN=test CA",
            "-keyout",
            &p("ca.key"),
            "-out",
            &p("ca.pem"),
        ]);
        openssl(&[
            "req",
            "-newkey",
            "ec",
            "-pkeyopt",
            key,
            "-nodes",
            "-subj",
            "/CN=127.0.0.1",
            "-keyout",
            &p("key.pem"),
            "-out",
            &p("csr.pem"),
        ]);
        std::fs::write(
            dir.join("ext"),
            "subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n",
        )
        .unwrap();
        openssl(&[
            "x509",
            "-req",
            "-in",
            &p("csr.pem"),
            "-CA",
            &p("ca.pem"),
            "-CAkey",
            &p("ca.key"),
            "-CAcreateserial",
            "-days",
            "2",
            "-extfile",
            &p("ext"),
            "-out",
            &p("cert.pem"),
        ]);
        (
            dir.join("ca.pem"),
            dir.join("cert.pem"),
            dir.join("key.pem"),
        )
    }

    /// Answers TLS connections on 127.0.0.1 with `hello` (Content-Length) until the test ends;
    /// a handshake the client refuses just ends that connection.
    async fn tls_server(cert: &Path, key: &Path) -> std::net::SocketAddr {
        let certs = CertificateDer::pem_file_iter(cert)
            .unwrap()
            .collect::<Result<Vec<_>, _>>()
            .unwrap();
        let key = PrivateKeyDer::from_pem_file(key).unwrap();
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(certs, key)
            .unwrap();
        let acceptor = TlsAcceptor::from(Arc::new(config));
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                let Ok(mut tls) = acceptor.accept(tcp).await else {
                    continue;
                };
                let mut head = BytesMut::new();
                while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                    if tls.read_buf(&mut head).await.unwrap_or(0) == 0 {
                        break;
                    }
                }
                let _ = tls
                    .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello")
                    .await;
                let _ = tls.shutdown().await;
            }
        });
        addr
    }

    #[tokio::test]
    async fn https_works_against_a_trusted_ca_and_refuses_an_unknown_one() {
        let dir = tempfile::tempdir().unwrap();
        let (ca, cert, key) = pki(dir.path());
        let addr = tls_server(&cert, &key).await;
        let url = Url::parse(&format!("https://{addr}/stable.json")).unwrap();

        let body = Client::with_trust_store(&ca)
            .get_bytes(&url, 1024)
            .await
            .unwrap();
        assert_eq!(body, b"hello");

        // The server's certificate is signed by a CA that `cert.pem` does not hold.
        let e = Client::with_trust_store(&cert)
            .get_bytes(&url, 1024)
            .await
            .unwrap_err();
        let e = format!("{e:#}");
        assert!(
            e.contains(&format!("TLS with 127.0.0.1:{}", addr.port())),
            "{e}"
        );
        assert!(e.contains("certificate"), "{e}");
    }

    #[test]
    fn a_missing_trust_store_is_named() {
        let e = Client::with_trust_store(Path::new("/nonexistent/ca.pem"))
            .tls_config()
            .unwrap_err();
        let e = format!("{e:#}");
        assert!(
            e.contains("none could be read from /nonexistent/ca.pem"),
            "{e}"
        );
    }

    #[tokio::test]
    async fn without_trusted_cas_https_fails_before_sending_and_http_still_works() {
        let client = Client::with_trust_store(Path::new("/nonexistent/ca.pem"));
        let url = Url::parse("https://127.0.0.1:9/stable.json").unwrap();
        let e = format!("{:#}", client.get(&url, 0).await.unwrap_err());
        assert!(e.contains("no trusted CA certificates for https"), "{e}");
        assert!(e.contains("/nonexistent/ca.pem"), "{e}");

        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            let (mut tcp, _) = listener.accept().await.unwrap();
            let mut head = BytesMut::new();
            while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                if tcp.read_buf(&mut head).await.unwrap_or(0) == 0 {
                    break;
                }
            }
            let _ = tcp
                .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
                .await;
        });
        let url = Url::parse(&format!("http://{addr}/s.json")).unwrap();
        assert_eq!(client.get_bytes(&url, 10).await.unwrap(), b"ok");
    }

    #[test]
    fn the_root_cause_is_the_innermost_error() {
        let inner = io::Error::new(io::ErrorKind::ConnectionRefused, "refused");
        let outer = anyhow::Error::new(inner).context("connect");
        let outer: &(dyn StdError + 'static) = outer.as_ref();
        assert_eq!(root_cause(outer), "refused");
        let tls = io::Error::new(
            io::ErrorKind::InvalidData,
            rustls::Error::InvalidCertificate(rustls::CertificateError::UnknownIssuer),
        );
        assert!(is_tls(&tls));
        // As hyper-util hands it over: wrapped once more.
        assert!(is_tls(&io::Error::other(tls)));
        assert!(!is_tls(&io::Error::other("plain")));
    }
}
