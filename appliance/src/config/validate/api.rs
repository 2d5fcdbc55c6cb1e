//! The `api` section: the HTTP API and status page on a TCP address, which always takes TLS
//! (a certificate and key from files) and a bearer token (an owner-only file). Without it the
//! API is on the local socket `<state_dir>/api.sock` only.

use super::*;

impl Validator<'_> {
    pub(super) fn api(
        &mut self,
        raw: &Spanned<RawApi>,
        dir: &Path,
        files: Option<(&dyn InstallFiles, Severity)>,
    ) -> Option<Api> {
        let a = &raw.value;
        let listen = match a.listen.value.parse::<SocketAddr>() {
            Ok(addr) => Some(addr),
            Err(_) => {
                self.p
                    .error(
                        "config::api",
                        a.listen.referenced,
                        format!("api.listen `{}` is not an address:port", a.listen.value),
                        "not address:port",
                    )
                    .hint("e.g. 10.0.0.1:9443");
                None
            }
        };
        let mut path = |t: &Text, what: &str| {
            if t.value.trim().is_empty() {
                self.p.error(
                    "config::api",
                    t.referenced,
                    format!("api.{what} is empty"),
                    "empty",
                );
                None
            } else {
                Some(resolve(dir, &t.value))
            }
        };
        let cert_file = path(&a.cert_file, "cert_file");
        // The private key and the token: owner-only files, checked as credentials are. `serve`
        // reads them at start and refuses loose ones, so here too a problem is an error.
        let files = files.map(|(f, _)| (f, Severity::Error));
        let key_file = control::secret_file(&a.key_file, dir, files, self.p);
        let token_file = control::secret_file(&a.token_file, dir, files, self.p);
        Some(Api {
            listen: listen?,
            cert_file: cert_file?,
            key_file: key_file?,
            token_file: token_file?,
        })
    }
}
