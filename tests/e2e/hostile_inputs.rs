//! The malformed inputs of the hostile-segment test (`hostile.rs`), made by a seeded generator
//! so that every run sends the same ones: a failure names an input that can be sent again.
//! Each family mixes structural breakage (lengths that run past the end, loops, truncation,
//! wrong versions and opcodes) with random bytes and sizes from empty to huge.

/// xorshift64*: deterministic, seeded per family.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed.max(1))
    }

    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    pub fn below(&mut self, n: usize) -> usize {
        usize::try_from(self.next() % n.max(1) as u64).unwrap_or(0)
    }

    /// Random bytes, fewer than `max` of them.
    pub fn up_to(&mut self, max: usize) -> Vec<u8> {
        let n = self.below(max);
        self.bytes(n)
    }

    pub fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next() as u8).collect()
    }
}

/// A well-formed DHCPDISCOVER (op, htype, hlen, ..., the cookie, a message type, the end).
fn discover(hlen: u8, xid: u32) -> Vec<u8> {
    let mut p = vec![1, 1, hlen, 0];
    p.extend_from_slice(&xid.to_be_bytes());
    p.extend_from_slice(&[0, 0, 0x80, 0]);
    p.extend_from_slice(&[0; 16]);
    p.extend_from_slice(&[0x52, 0x54, 0x00, 0xba, 0xd0, 0x01]);
    p.extend_from_slice(&[0; 10 + 64 + 128]);
    p.extend_from_slice(&[0x63, 0x82, 0x53, 0x63, 53, 1, 1]);
    p
}

/// DHCP: `hlen` 0/17/255, truncated headers and options, option lengths past the end, no end
/// option, every message type, overloaded sname/file, replies, empty and huge datagrams.
pub fn dhcp(n: usize) -> Vec<Vec<u8>> {
    let mut rng = Rng::new(0xd4c9);
    (0..n)
        .map(|i| {
            let xid = i as u32;
            let mut p = discover(6, xid);
            match i % 13 {
                0 => p[2] = 0,
                1 => p[2] = 17,
                2 => p[2] = 255,
                3 => p.truncate(rng.below(240)),
                4 => p.extend_from_slice(&[12, 200, b'x']),
                5 => p.extend_from_slice(&rng.bytes(40)),
                6 => {
                    p[242] = rng.below(256) as u8;
                    p.push(255);
                }
                7 => {
                    p.extend_from_slice(&[52, 1, 3, 255]);
                    p[44..236].copy_from_slice(&rng.bytes(192));
                }
                8 => p.clear(),
                9 => p = rng.bytes(1400),
                10 => {
                    p[0] = 2;
                    p.push(255);
                }
                11 => p.extend_from_slice(&[82, 6, 1, 9, b'a', 2, 200, 0, 255]),
                _ => {
                    for _ in 0..60 {
                        p.extend_from_slice(&[rng.below(256) as u8, 3, 1, 2, 3]);
                    }
                }
            }
            p
        })
        .collect()
}

/// A DNS header: id, flags, and the four counts.
fn header(id: u16, flags: u16, counts: [u16; 4]) -> Vec<u8> {
    let mut p = id.to_be_bytes().to_vec();
    p.extend_from_slice(&flags.to_be_bytes());
    for c in counts {
        p.extend_from_slice(&c.to_be_bytes());
    }
    p
}

/// DNS: compression loops and pointers past the end, labels and names over their limits,
/// counts the message doesn't hold, responses and every opcode, a broken OPT record, transfers
/// asked over UDP, random bytes from empty to 60 KB.
pub fn dns(n: usize) -> Vec<Vec<u8>> {
    let mut rng = Rng::new(0xd45);
    (0..n)
        .map(|i| {
            let id = i as u16;
            let question = |mut p: Vec<u8>, name: &[u8], qtype: u16| {
                p.extend_from_slice(name);
                p.extend_from_slice(&qtype.to_be_bytes());
                p.extend_from_slice(&[0, 1]);
                p
            };
            match i % 14 {
                0 => rng.up_to(512),
                1 => header(id, 0x0100, [65535, 0, 0, 0]),
                2 => question(header(id, 0x0100, [1, 0, 0, 0]), &[0xc0, 0x0c], 1),
                3 => question(
                    header(id, 0x0100, [1, 0, 0, 0]),
                    &[3, b'a', b'p', b'i', 0xc0, 0xff],
                    1,
                ),
                4 => {
                    let mut p = header(id, 0x0100, [1, 0, 0, 0]);
                    p.extend_from_slice(&[63, b'a', b'b']);
                    p
                }
                5 => {
                    let mut name = vec![64];
                    name.extend_from_slice(&[b'x'; 64]);
                    name.push(0);
                    question(header(id, 0x0100, [1, 0, 0, 0]), &name, 1)
                }
                6 => {
                    let mut name = Vec::new();
                    for _ in 0..60 {
                        name.extend_from_slice(&[5, b'l', b'a', b'b', b'e', b'l']);
                    }
                    name.push(0);
                    question(header(id, 0x0100, [1, 0, 0, 0]), &name, 1)
                }
                7 => question(header(id, 0x8180, [1, 1, 0, 0]), b"\x03api\x00", 1),
                8 => {
                    let opcode = (1 + rng.below(15) as u16) << 11;
                    question(header(id, opcode, [1, 0, 0, 0]), b"\x03api\x00", 1)
                }
                9 => {
                    let mut p = question(header(id, 0x0100, [1, 0, 0, 1]), b"\x03api\x00", 1);
                    p.extend_from_slice(&[0, 0, 41, 0x10, 0, 0, 0, 0, 0, 0xff, 0xff, 1, 2]);
                    p
                }
                10 => Vec::new(),
                11 => rng.bytes(60_000),
                12 => question(
                    header(id, 0x0000, [1, 0, 0, 0]),
                    b"\x03okd\x03lab\x07example\x03com\x00",
                    252,
                ),
                _ => {
                    let mut p = header(id, 0x0100, [3, 0, 0, 0]);
                    for _ in 0..3 {
                        p.extend_from_slice(&[0xc0, 0x0c + rng.below(30) as u8, 0, 1, 0, 1]);
                    }
                    p
                }
            }
        })
        .collect()
}

/// A TFTP request: opcode, then NUL-terminated parts.
fn request(opcode: u16, parts: &[&[u8]]) -> Vec<u8> {
    let mut p = opcode.to_be_bytes().to_vec();
    for part in parts {
        p.extend_from_slice(part);
        p.push(0);
    }
    p
}

/// TFTP: every opcode, requests without their NULs, names and options out of range, modes
/// nobody serves, packets only a transfer's port expects, random bytes.
pub fn tftp(n: usize) -> Vec<Vec<u8>> {
    let mut rng = Rng::new(0x7f7);
    (0..n)
        .map(|i| match i % 10 {
            0 => Vec::new(),
            1 => {
                let mut p = (rng.below(256) as u16).to_be_bytes().to_vec();
                p.extend_from_slice(&rng.up_to(64));
                p
            }
            2 => b"\x00\x01undionly.kpxe".to_vec(),
            3 => request(1, &[&[b'a'; 600], b"octet"]),
            4 => {
                let values: [&[u8]; 5] = [b"0", b"99999999999999999999", b"-1", b"8", b"x"];
                let v = values[rng.below(values.len())];
                request(
                    1,
                    &[
                        b"undionly.kpxe",
                        b"octet",
                        b"blksize",
                        v,
                        b"tsize",
                        v,
                        b"windowsize",
                        v,
                    ],
                )
            }
            5 => request(2, &[b"upload", b"octet"]),
            6 => {
                let mut p = (3 + rng.below(4) as u16).to_be_bytes().to_vec();
                p.extend_from_slice(&rng.up_to(516));
                p
            }
            7 => request(1, &[b"undionly.kpxe", b"mail"]),
            8 => rng.bytes(1400),
            _ => request(1, &[b"undionly.kpxe", b"octet", b"blksize"]),
        })
        .collect()
}

/// HTTP, for the fast path and hyper: request lines and heads broken every way, heads past the
/// limit, paths that climb out, absurd ranges and lengths, pipelines, bodies nobody asked for.
pub fn http(n: usize, script: &str) -> Vec<Vec<u8>> {
    let mut rng = Rng::new(0x477);
    (0..n)
        .map(|i| {
            let line = |path: &str, extra: &str| {
                format!("GET {path} HTTP/1.1\r\nHost: x\r\n{extra}\r\n").into_bytes()
            };
            match i % 16 {
                0 => rng.up_to(2048),
                1 => b"GET / HTTP/1.1".to_vec(),
                2 => line("/boot/x.ipxe", &format!("X: {}\r\n", "a".repeat(20_000))),
                3 => format!("GET /{} HTTP/1.1\r\n\r\n", "a".repeat(70_000)).into_bytes(),
                4 => b"GET / HTTP/9.9\r\n\r\n".to_vec(),
                5 => line("/boot/../../../../etc/passwd", ""),
                6 => line("/ignition/master-0.ign", ""),
                7 => line("/artifacts/kernel", "Range: bytes=99999999999999999999999-\r\n"),
                8 => line(script, &format!("Range: {}\r\n", "bytes=0-0,".repeat(500))),
                9 => b"POST /boot/x.ipxe HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n".to_vec(),
                10 => b"PUT / HTTP/1.1\r\nHost: x\r\nContent-Length: 1000000000000\r\n\r\nabc".to_vec(),
                11 => line(script, "").repeat(100),
                12 => line("/a\0b", ""),
                13 => b"GET http://elsewhere.example/ HTTP/1.1\r\nHost: elsewhere\r\n\r\n".to_vec(),
                14 => {
                    let mut head = b"GET / HTTP/1.1\r\n".to_vec();
                    for k in 0..1000 {
                        head.extend_from_slice(format!("H{k}: v\r\n").as_bytes());
                    }
                    head.extend_from_slice(b"\r\n");
                    head
                }
                _ => b"GET / HTTP/1.1\r\nno colon here\r\n\r\n".to_vec(),
            }
        })
        .collect()
}

/// TLS (the API): random bytes, records longer than the limit, truncated and SSLv2 hellos,
/// plain HTTP to the TLS port.
pub fn tls(n: usize) -> Vec<Vec<u8>> {
    let mut rng = Rng::new(0x715);
    (0..n)
        .map(|i| match i % 6 {
            0 => rng.up_to(1024),
            1 => vec![0x16, 0x03, 0x01, 0xff, 0xff, 0x01],
            2 => {
                let mut p = vec![
                    0x16, 0x03, 0x01, 0x00, 0x80, 0x01, 0x00, 0x00, 0x7c, 0x03, 0x03,
                ];
                p.extend_from_slice(&rng.bytes(20));
                p
            }
            3 => vec![0x80, 0x2e, 0x01, 0x00, 0x02, 0x00, 0x15],
            4 => b"GET /api/v1/status HTTP/1.1\r\nHost: x\r\n\r\n".to_vec(),
            _ => vec![0x17, 0x03, 0x03, 0x00, 0x10],
        })
        .collect()
}
