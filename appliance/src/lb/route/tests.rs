//! The peek parsers on real ClientHellos (rustls writes them, whole and re-framed) and request
//! heads, and the table on every kind of name.

use std::sync::Arc;

use rustls::pki_types::ServerName;
use tokio_util::sync::CancellationToken;

use super::*;

/// The first flight of a TLS client connecting to `name` (a DNS name, or an IP literal), with
/// `alpn` offered: one handshake record holding the ClientHello.
fn client_hello(name: &str, alpn: Vec<Vec<u8>>) -> Vec<u8> {
    let mut config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .expect("ring has the default versions")
    .with_root_certificates(rustls::RootCertStore::empty())
    .with_no_client_auth();
    config.alpn_protocols = alpn;
    let server = ServerName::try_from(name.to_owned()).expect("a server name");
    let mut client = rustls::ClientConnection::new(Arc::new(config), server).expect("a client");
    let mut out = Vec::new();
    while client.wants_write() {
        client.write_tls(&mut out).expect("writes to a Vec");
    }
    out
}

/// `flight` (one handshake record) as several records of at most `size` bytes of payload each:
/// TLS lets a ClientHello span records.
fn reframed(flight: &[u8], size: usize) -> Vec<u8> {
    let (header, payload) = flight.split_at(5);
    let mut out = Vec::new();
    for chunk in payload.chunks(size) {
        out.extend_from_slice(&header[..3]);
        out.extend_from_slice(&u16::try_from(chunk.len()).expect("small").to_be_bytes());
        out.extend_from_slice(chunk);
    }
    out
}

#[test]
fn a_client_hello_names_its_server_once_it_is_whole() {
    let hello = client_hello("API-int.okd.lab.example.com", Vec::new());
    assert_eq!(
        tls_server_name(&hello),
        Peeked::Name("api-int.okd.lab.example.com".to_owned())
    );
    // Every cut of it, as TCP may deliver it, asks for more and never answers early.
    for cut in 0..hello.len() {
        assert_eq!(tls_server_name(&hello[..cut]), Peeked::More, "cut at {cut}");
    }
    // What follows it (a client's next bytes) changes nothing.
    let mut more = hello.clone();
    more.extend_from_slice(&[0x17, 3, 3, 0, 1, 0]);
    assert_eq!(
        tls_server_name(&more),
        Peeked::Name("api-int.okd.lab.example.com".to_owned())
    );
}

#[test]
fn a_client_hello_split_across_records_is_read_whole() {
    // Many ALPN names make a ClientHello of several kilobytes, as post-quantum key shares do.
    let alpn: Vec<Vec<u8>> = (0..200)
        .map(|i| format!("protocol-{i:04}").into_bytes())
        .collect();
    let hello = client_hello("console.apps.okd.lab.example.com", alpn);
    assert!(hello.len() > 2500, "{}", hello.len());
    for size in [1, 7, 100, 1000] {
        let split = reframed(&hello, size);
        assert_eq!(
            tls_server_name(&split),
            Peeked::Name("console.apps.okd.lab.example.com".to_owned()),
            "records of {size}"
        );
        assert_eq!(tls_server_name(&split[..split.len() - 1]), Peeked::More);
    }
}

#[test]
fn a_client_hello_to_an_address_names_no_server() {
    // Go's crypto/tls and rustls both leave SNI out for an IP literal.
    assert_eq!(
        tls_server_name(&client_hello("10.0.0.1", Vec::new())),
        Peeked::NoName
    );
}

#[test]
fn what_is_not_a_client_hello_is_unparsable() {
    assert_eq!(
        tls_server_name(b"GET / HTTP/1.1\r\n\r\n"),
        Peeked::Unparsable
    );
    // A handshake record whose message is not a ClientHello (a ServerHello, type 2).
    assert_eq!(
        tls_server_name(&[0x16, 3, 1, 0, 4, 2, 0, 0, 0]),
        Peeked::Unparsable
    );
    // A record longer than TLS allows.
    assert_eq!(
        tls_server_name(&[0x16, 3, 1, 0xff, 0xff]),
        Peeked::Unparsable
    );
}

#[test]
fn a_request_head_names_its_host_without_the_port() {
    let cases: [(&[u8], Peeked); 9] = [
        (
            b"GET / HTTP/1.1\r\nHost: Console.apps.okd.lab.example.com.:80\r\n\r\n",
            Peeked::Name("console.apps.okd.lab.example.com".to_owned()),
        ),
        (
            b"GET /x HTTP/1.1\r\nUser-Agent: curl\r\nhost: a.apps.okd.lab.example.com\r\n\r\n",
            Peeked::Name("a.apps.okd.lab.example.com".to_owned()),
        ),
        (
            b"GET / HTTP/1.1\r\nHost: [fd00::1]:80\r\n\r\n",
            Peeked::Name("fd00::1".to_owned()),
        ),
        (b"GET / HTTP/1.0\r\n\r\n", Peeked::NoName),
        (b"GET / HTTP/1.1\r\nHost: \r\n\r\n", Peeked::NoName),
        (b"GET / HTTP/1.1\r\nHost: a.apps.okd", Peeked::More),
        (b"GET / HT", Peeked::More),
        (b"", Peeked::More),
        (b"\x16\x03\x01\x02\x00\x01", Peeked::Unparsable),
    ];
    for (head, want) in cases {
        assert_eq!(http_host(head), want, "{}", String::from_utf8_lossy(head));
    }
}

fn route(id: &str) -> Route {
    Route {
        id: Arc::from(id),
        pools: Arc::new(arc_swap::ArcSwap::from_pointee(
            super::super::pool::Pools::from_plan(
                &crate::plan::LbPlan {
                    balance: crate::config::Balance::RoundRobin,
                    check_ca: None,
                    drain_timeout: std::time::Duration::from_secs(1),
                    frontends: Vec::new(),
                    sharing: crate::plan::Sharing::Routed,
                },
                None,
            ),
        )),
        token: CancellationToken::new(),
    }
}

fn table(default: Option<&str>) -> Routes {
    Routes::new(
        vec![
            ("okd.lab.example.com".to_owned(), route("okd")),
            ("test.lab.example.com".to_owned(), route("test")),
        ],
        default,
    )
}

fn picked(routes: &Routes, kind: FrontendKind, name: &str) -> Result<String, Unrouted> {
    routes
        .pick(kind, &Peeked::Name(name.to_owned()))
        .map(|r| r.id.to_string())
}

#[test]
fn each_port_routes_exactly_its_clusters_names() {
    use FrontendKind::{Api, IngressHttp, IngressHttps, MachineConfig};
    let routes = table(None);
    let ok = |id: &str| Ok(id.to_owned());
    for (kind, name, want) in [
        (Api, "api.okd.lab.example.com", ok("okd")),
        (Api, "api-int.test.lab.example.com", ok("test")),
        (MachineConfig, "api-int.okd.lab.example.com", ok("okd")),
        (
            IngressHttps,
            "console-openshift-console.apps.test.lab.example.com",
            ok("test"),
        ),
        (IngressHttp, "a.b.apps.okd.lab.example.com", ok("okd")),
        // A name under another cluster's domain that is not an apps name.
        (
            IngressHttps,
            "x.apps.okd.lab.example.com.evil.example",
            Err(Unrouted::UnknownName),
        ),
        // The API's names are not ingress names, nor the other way round.
        (
            IngressHttps,
            "api.okd.lab.example.com",
            Err(Unrouted::UnknownName),
        ),
        (
            Api,
            "console.apps.okd.lab.example.com",
            Err(Unrouted::UnknownName),
        ),
        // `apps.<domain>` itself is no route's name (the wildcard covers names under it).
        (
            IngressHttp,
            "apps.okd.lab.example.com",
            Err(Unrouted::UnknownName),
        ),
        (Api, "api.prod.lab.example.com", Err(Unrouted::UnknownName)),
        (
            Api,
            "master-0.okd.lab.example.com",
            Err(Unrouted::UnknownName),
        ),
    ] {
        assert_eq!(picked(&routes, kind, name), want, "{kind:?} {name}");
    }
    assert_eq!(
        routes.pick(Api, &Peeked::NoName).map(|r| r.id.clone()),
        Err(Unrouted::NoName)
    );
    assert_eq!(
        routes.pick(Api, &Peeked::Unparsable).map(|r| r.id.clone()),
        Err(Unrouted::Unparsable)
    );
    assert_eq!(
        routes.pick(Api, &Peeked::More).map(|r| r.id.clone()),
        Err(Unrouted::Timeout)
    );
}

#[test]
fn the_default_cluster_takes_what_no_cluster_names() {
    let routes = table(Some("test"));
    assert_eq!(
        picked(&routes, FrontendKind::Api, "api.okd.lab.example.com"),
        Ok("okd".to_owned())
    );
    assert_eq!(
        picked(&routes, FrontendKind::Api, "10.0.0.1"),
        Ok("test".to_owned())
    );
    assert_eq!(
        routes
            .pick(FrontendKind::IngressHttps, &Peeked::NoName)
            .map(|r| r.id.to_string()),
        Ok("test".to_owned())
    );
    // A default that is no routed cluster (a single node reached directly) is none.
    let routes = table(Some("sno"));
    assert_eq!(
        picked(&routes, FrontendKind::Api, "10.0.0.1"),
        Err(Unrouted::UnknownName)
    );
}

#[test]
fn fed_a_byte_at_a_time_each_parser_answers_at_the_last_byte() {
    let hello = reframed(&client_hello("api.test.lab.example.com", Vec::new()), 100);
    let mut tls = TlsHello::default();
    for (i, b) in hello.iter().enumerate() {
        let got = tls.feed(std::slice::from_ref(b));
        if i + 1 < hello.len() {
            assert_eq!(got, Peeked::More, "at {i}");
        } else {
            assert_eq!(got, Peeked::Name("api.test.lab.example.com".to_owned()));
        }
    }
    let head = b"GET / HTTP/1.1\r\nUser-Agent: x\r\nHost: a.apps.test.lab.example.com\r\n\r\n";
    let mut http = HttpHead::default();
    for end in 1..=head.len() {
        let got = http.feed_tail(&head[..end], 1);
        if end < head.len() {
            assert_eq!(got, Peeked::More, "at {end}");
        } else {
            assert_eq!(got, Peeked::Name("a.apps.test.lab.example.com".to_owned()));
        }
    }
    // Not HTTP is known at once, whatever comes after.
    assert_eq!(
        HttpHead::default().feed_tail(b"\x16\x03\x01", 3),
        Peeked::Unparsable
    );
}

#[test]
fn a_first_message_is_whole_only_with_its_last_byte() {
    let hello = client_hello("api.okd.lab.example.com", Vec::new());
    for kind in [
        FrontendKind::Api,
        FrontendKind::MachineConfig,
        FrontendKind::IngressHttps,
    ] {
        assert!(first_message_whole(kind, &hello), "{kind:?}");
        for cut in 0..hello.len() {
            assert!(!first_message_whole(kind, &hello[..cut]), "cut at {cut}");
        }
        // A ClientHello over two records is not whole with the first record only.
        let two = reframed(&hello, hello.len() / 2);
        let first_record = 5 + hello.len() / 2;
        assert!(!first_message_whole(kind, &two[..first_record]));
        // A request on the TLS port, or a TLS record that is not a handshake, is not.
        assert!(!first_message_whole(kind, b"GET / HTTP/1.1\r\n\r\n"));
        assert!(!first_message_whole(kind, &[23, 3, 3, 0, 1, 0]));
    }
    let http = FrontendKind::IngressHttp;
    let get = b"GET /small.bin HTTP/1.1\r\nHost: a.apps.okd.test\r\nConnection: close\r\n\r\n";
    assert!(first_message_whole(http, get));
    for cut in 0..get.len() {
        assert!(!first_message_whole(http, &get[..cut]), "cut at {cut}");
    }
    let post = b"POST /x HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\r\nhello";
    assert!(first_message_whole(http, post));
    for cut in 0..post.len() {
        assert!(!first_message_whole(http, &post[..cut]), "cut at {cut}");
    }
    // What follows a whole message changes nothing.
    let mut pipelined = get.to_vec();
    pipelined.extend_from_slice(b"GET / HT");
    assert!(first_message_whole(http, &pipelined));
    // A body whose end is not looked for, a length that is not one, bytes that are not HTTP.
    let chunked = b"POST /x HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n";
    assert!(!first_message_whole(http, chunked));
    assert!(!first_message_whole(
        http,
        b"POST /x HTTP/1.1\r\nContent-Length: x\r\n\r\n"
    ));
    assert!(!first_message_whole(http, &hello));
    assert!(!first_message_whole(http, b"HHHHHHHHHH"));
}
