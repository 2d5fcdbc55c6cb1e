//! A minimal HTTP/1.1 GET client over TCP or rustls: one request per connection (a fetch is a
//! handful of large files), redirects followed (bounded, never from https to http), `Range` for
//! resuming, and a timeout on every wait so a stalled mirror ends in an error, not a hang. The
//! framing rules are in [`super::http1`]; this file only moves bytes.
//!
//! HTTPS trusts the system's CA bundle, read only when an https:// URL is first used.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use anyhow::{Context as _, anyhow, bail};
use bytes::{Buf as _, Bytes, BytesMut};
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, ServerName};
use rustls::{ClientConfig, RootCertStore};
use tokio::io::{AsyncRead, AsyncReadExt as _, AsyncWrite, AsyncWriteExt as _};
use tokio::net::TcpStream;
use tokio::time::timeout;
use tokio_rustls::TlsConnector;
use url::{Host, Position, Url};

use super::http1::{self, Decoder, Head, Step};
use super::rules::{self, Answer};

/// The Debian/Ubuntu (ca-certificates) bundle of trusted CAs, PEM.
pub const TRUST_STORE: &str = "/etc/ssl/certs/ca-certificates.crt";
/// TCP connect plus TLS handshake.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(30);
/// From the request sent to the end of the response head.
const RESPONSE_TIMEOUT: Duration = Duration::from_secs(60);
/// Between two reads of a body.
const IDLE_TIMEOUT: Duration = Duration::from_secs(60);
/// Room made in the buffer before each read.
const READ_SIZE: usize = 256 * 1024;

/// A connection: TCP or TLS over TCP.
trait Connection: AsyncRead + AsyncWrite + Send + Unpin {}
impl<T: AsyncRead + AsyncWrite + Send + Unpin> Connection for T {}

/// Sends GETs; holds the TLS configuration once it is built.
#[derive(Debug)]
pub struct Client {
    trust_store: PathBuf,
    tls: OnceLock<Arc<ClientConfig>>,
}

/// A response whose body has not been read yet.
#[derive(Debug)]
pub struct Response {
    pub head: Head,
    pub body: Body,
}

/// A response body, read piece by piece.
pub struct Body {
    io: Box<dyn Connection>,
    /// Received and not yet consumed.
    buf: BytesMut,
    decoder: Decoder,
}

impl std::fmt::Debug for Body {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Body")
            .field("buffered", &self.buf.len())
            .field("decoder", &self.decoder)
            .finish_non_exhaustive()
    }
}

impl Body {
    /// The next piece of the body, `None` at its end; an error if nothing arrives for a minute
    /// or the connection closes before the body's end.
    pub async fn next_chunk(&mut self) -> anyhow::Result<Option<Bytes>> {
        loop {
            match self.decoder.step(&self.buf)? {
                Step::Done => return Ok(None),
                Step::Data(n) => return Ok(Some(self.buf.split_to(n).freeze())),
                Step::Skip(n) => self.buf.advance(n),
                Step::NeedMore => {
                    let read = timeout(IDLE_TIMEOUT, read_some(&mut self.io, &mut self.buf))
                        .await
                        .map_err(|_| anyhow!("nothing received for {IDLE_TIMEOUT:?}"))?
                        .context("reading the body")?;
                    if read == 0 {
                        self.decoder.at_close()?;
                        return Ok(None);
                    }
                }
            }
        }
    }
}

/// Reads what is there into `buf`; 0 at the end of the connection.
async fn read_some(io: &mut Box<dyn Connection>, buf: &mut BytesMut) -> io::Result<usize> {
    buf.reserve(READ_SIZE);
    match io.read_buf(buf).await {
        // A TLS peer that closes without close_notify: the framing decides whether the body
        // was complete, and the digest would catch a truncation anyway.
        Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => Ok(0),
        other => other,
    }
}

impl Client {
    pub fn new() -> Client {
        Client {
            trust_store: PathBuf::from(TRUST_STORE),
            tls: OnceLock::new(),
        }
    }

    /// A client that trusts the CAs in `path` instead of the system's.
    #[cfg(test)]
    fn with_trust_store(path: &Path) -> Client {
        Client {
            trust_store: path.to_owned(),
            tls: OnceLock::new(),
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
            if !rules::is_redirect(response.head.status) {
                return Ok(response);
            }
            let location = response.head.get("location").with_context(|| {
                format!("GET {at}: {} without a Location", response.head.status)
            })?;
            at = rules::redirect_target(&at, location).with_context(|| format!("GET {at}"))?;
        }
        bail!("GET {url}: more than {} redirects", rules::MAX_REDIRECTS)
    }

    /// The whole body of `url`, which must answer 200 with at most `limit` bytes.
    pub async fn get_bytes(&self, url: &Url, limit: usize) -> anyhow::Result<Vec<u8>> {
        let mut response = self.get(url, 0).await?;
        let answer = rules::interpret(response.head.status, None, 0);
        if answer.with_context(|| format!("GET {url}"))? != Answer::Whole {
            bail!("GET {url}: the server answered {}", response.head.status);
        }
        let mut out = Vec::new();
        while let Some(chunk) = response
            .body
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
        let mut io = timeout(CONNECT_TIMEOUT, self.connect(url))
            .await
            .map_err(|_| anyhow!("no connection within {CONNECT_TIMEOUT:?}"))??;
        let request = http1::request_head(
            &url[Position::BeforePath..Position::AfterQuery],
            &url[Position::BeforeHost..Position::AfterPort],
            from,
        );
        let mut buf = BytesMut::new();
        let head = timeout(RESPONSE_TIMEOUT, async {
            io.write_all(request.as_bytes()).await?;
            io.flush().await?;
            read_head(&mut io, &mut buf).await
        })
        .await
        .map_err(|_| anyhow!("no response within {RESPONSE_TIMEOUT:?}"))?
        .context("reading the response")?;
        let decoder = http1::framing(&head)?;
        Ok(Response {
            head,
            body: Body { io, buf, decoder },
        })
    }

    async fn connect(&self, url: &Url) -> anyhow::Result<Box<dyn Connection>> {
        let host = url.host().context("the URL has no host")?;
        let port = url.port_or_known_default().context("the URL has no port")?;
        let tcp = match &host {
            Host::Domain(d) => TcpStream::connect((*d, port)).await,
            Host::Ipv4(a) => TcpStream::connect((*a, port)).await,
            Host::Ipv6(a) => TcpStream::connect((*a, port)).await,
        }
        .with_context(|| format!("can't connect to {host}:{port}"))?;
        if url.scheme() != "https" {
            return Ok(Box::new(tcp));
        }
        let name = match &host {
            Host::Domain(d) => ServerName::try_from((*d).to_owned())
                .with_context(|| format!("`{d}` is not a valid TLS server name"))?,
            Host::Ipv4(a) => ServerName::IpAddress(std::net::IpAddr::V4(*a).into()),
            Host::Ipv6(a) => ServerName::IpAddress(std::net::IpAddr::V6(*a).into()),
        };
        let tls = TlsConnector::from(self.tls_config()?)
            .connect(name, tcp)
            .await
            .with_context(|| format!("TLS with {host}:{port}"))?;
        Ok(Box::new(tls))
    }

    fn tls_config(&self) -> anyhow::Result<Arc<ClientConfig>> {
        if let Some(c) = self.tls.get() {
            return Ok(Arc::clone(c));
        }
        let config = tls_config(&self.trust_store)?;
        Ok(Arc::clone(self.tls.get_or_init(|| config)))
    }
}

/// Reads until a final (non-1xx) response head is complete; what follows it stays in `buf`.
async fn read_head(io: &mut Box<dyn Connection>, buf: &mut BytesMut) -> anyhow::Result<Head> {
    loop {
        if let Some((head, len)) = http1::parse_head(buf)? {
            buf.advance(len);
            if head.status.is_informational() {
                continue;
            }
            return Ok(head);
        }
        if read_some(io, buf).await? == 0 {
            bail!("the connection closed before a complete response head");
        }
    }
}

/// A TLS client configuration that trusts the CAs in `trust_store` (PEM).
fn tls_config(trust_store: &Path) -> anyhow::Result<Arc<ClientConfig>> {
    let certs = CertificateDer::pem_file_iter(trust_store)
        .and_then(Iterator::collect::<Result<Vec<_>, _>>)
        .with_context(|| {
            format!(
                "reading the trusted CAs from {} (is ca-certificates installed?)",
                trust_store.display()
            )
        })?;
    let mut roots = RootCertStore::empty();
    let (added, _unparsable) = roots.add_parsable_certificates(certs);
    anyhow::ensure!(
        added > 0,
        "{} holds no usable CA certificate",
        trust_store.display()
    );
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .context("TLS protocol versions")?
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

#[cfg(test)]
mod tests {
    use std::process::Command;

    use rustls::ServerConfig;
    use rustls::pki_types::PrivateKeyDer;
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
            e.contains("reading the trusted CAs from /nonexistent/ca.pem"),
            "{e}"
        );
    }
}
