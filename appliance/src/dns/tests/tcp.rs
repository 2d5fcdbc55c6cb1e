//! DNS over TCP on loopback: one client address holds at most its share of the connections,
//! and another address is still answered (issue 39: 300 idle connections from one host got
//! every other client's TCP query reset).

use std::sync::Arc;
use std::time::Duration;

use hickory_proto::op::{Message, MessageType, OpCode, Query};
use hickory_proto::rr::{Name, RecordType};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};
use tokio_util::sync::CancellationToken;

use super::super::server::{Shared, TCP_PER_ADDRESS, serve_tcp};
use super::LAB;

async fn connect_from(source: [u8; 4], to: std::net::SocketAddr) -> TcpStream {
    let socket = TcpSocket::new_v4().unwrap();
    socket
        .bind(std::net::SocketAddr::from((source, 0)))
        .unwrap();
    socket.connect(to).await.unwrap()
}

#[tokio::test]
async fn one_address_holds_at_most_its_share_and_others_are_answered() {
    let loaded = crate::config::parse(
        LAB,
        "lab.yml",
        std::path::Path::new("."),
        crate::config::InstallCheck::Skip,
    )
    .unwrap_or_else(|e| panic!("{}", e.render(crate::config::RenderStyle::Plain)));
    let plan = crate::plan::Plan::derive(&loaded.config, 7);
    let handle = Arc::new(arc_swap::ArcSwap::from_pointee(plan));
    let shared = Shared::new(handle, Arc::new(crate::metrics::Metrics::new()));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let at = listener.local_addr().unwrap();
    let token = CancellationToken::new();
    let server = tokio::spawn(serve_tcp(listener, shared, token.clone()));

    let mut held = Vec::new();
    for _ in 0..TCP_PER_ADDRESS {
        held.push(connect_from([127, 0, 0, 2], at).await);
    }
    // Accepted in order: once one more from the same address is closed, the share is full.
    let mut over = connect_from([127, 0, 0, 2], at).await;
    let mut byte = [0u8; 1];
    let read = tokio::time::timeout(Duration::from_secs(5), over.read(&mut byte)).await;
    assert!(
        matches!(read, Ok(Ok(0) | Err(_))),
        "the connection over the share was not closed: {read:?}"
    );

    // Another address is served.
    let mut query = Message::new(7, MessageType::Query, OpCode::Query);
    query.add_query(Query::query(
        Name::from_ascii("api.okd.lab.example.com.").unwrap(),
        RecordType::A,
    ));
    let bytes = query.to_vec().unwrap();
    let mut other = connect_from([127, 0, 0, 3], at).await;
    other
        .write_all(&u16::try_from(bytes.len()).unwrap().to_be_bytes())
        .await
        .unwrap();
    other.write_all(&bytes).await.unwrap();
    let len = tokio::time::timeout(Duration::from_secs(5), other.read_u16())
        .await
        .expect("an answer in time")
        .unwrap();
    let mut reply = vec![0u8; usize::from(len)];
    other.read_exact(&mut reply).await.unwrap();
    let reply = Message::from_vec(&reply).unwrap();
    assert_eq!(reply.metadata.id, 7);
    assert_eq!(reply.answers.len(), 1, "{reply:?}");
    drop(held);
    token.cancel();
    server.await.unwrap().unwrap();
}
