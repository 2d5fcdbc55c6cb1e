//! TFTP packets: read requests with their options in, OACK/DATA/ERROR out.

#![deny(clippy::indexing_slicing)] // wire-facing: no unchecked slice (see crate::isolate)

pub const RRQ: u16 = 1;
pub const WRQ: u16 = 2;
pub const DATA: u16 = 3;
pub const ACK: u16 = 4;
pub const ERROR: u16 = 5;
pub const OACK: u16 = 6;

/// RFC 1350 section 5 error codes.
pub mod code {
    pub const UNDEFINED: u16 = 0;
    pub const NOT_FOUND: u16 = 1;
    pub const ACCESS: u16 = 2;
    pub const ILLEGAL: u16 = 4;
    pub const OPTIONS: u16 = 8;
}

pub const DEFAULT_BLOCK: usize = 512;
/// RFC 2348 upper bound.
pub const MAX_BLOCK: usize = 65_464;

/// A read request with the options the server accepted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadRequest {
    pub file: String,
    pub block_size: Option<usize>,
    /// The client asked for the transfer size (it sends 0).
    pub wants_size: bool,
    pub timeout_secs: Option<u8>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Request {
    Read(ReadRequest),
    /// An error to send back at once: (code, message).
    Refuse(u16, &'static str),
    /// Not worth an answer (too short, a stray ACK).
    Ignore,
}

/// Parses the first packet of a transfer.
pub fn parse_request(packet: &[u8]) -> Request {
    let [hi, lo, rest @ ..] = packet else {
        return Request::Ignore;
    };
    if rest.len() < 2 {
        return Request::Ignore;
    }
    match u16::from_be_bytes([*hi, *lo]) {
        RRQ => {}
        WRQ => return Request::Refuse(code::ACCESS, "this server is read-only"),
        DATA | ACK | ERROR | OACK => return Request::Ignore,
        _ => return Request::Refuse(code::ILLEGAL, "unknown opcode"),
    }
    let mut fields = rest.split(|&b| b == 0);
    let (Some(file), Some(mode)) = (fields.next(), fields.next()) else {
        return Request::Refuse(code::ILLEGAL, "malformed read request");
    };
    let (Ok(file), Ok(mode)) = (std::str::from_utf8(file), std::str::from_utf8(mode)) else {
        return Request::Refuse(code::ILLEGAL, "file name and mode must be text");
    };
    if !mode.eq_ignore_ascii_case("octet") {
        // netascii would need line-ending conversion; boot files are binary.
        return Request::Refuse(code::ILLEGAL, "only octet mode is served");
    }
    let mut req = ReadRequest {
        file: file.to_owned(),
        block_size: None,
        wants_size: false,
        timeout_secs: None,
    };
    // Options come in name/value pairs; unknown ones are ignored (RFC 2347).
    while let (Some(name), Some(value)) = (fields.next(), fields.next()) {
        let (Ok(name), Ok(value)) = (std::str::from_utf8(name), std::str::from_utf8(value)) else {
            continue;
        };
        match name.to_ascii_lowercase().as_str() {
            "blksize" => {
                if let Ok(n) = value.parse::<usize>() {
                    if n < 8 {
                        return Request::Refuse(code::OPTIONS, "blksize below 8");
                    }
                    req.block_size = Some(n.min(MAX_BLOCK));
                }
            }
            "tsize" => req.wants_size = true,
            "timeout" => req.timeout_secs = value.parse::<u8>().ok().filter(|t| *t >= 1),
            _ => {}
        }
    }
    Request::Read(req)
}

pub fn error(code: u16, message: &str) -> Vec<u8> {
    let mut p = Vec::with_capacity(5 + message.len());
    p.extend_from_slice(&ERROR.to_be_bytes());
    p.extend_from_slice(&code.to_be_bytes());
    p.extend_from_slice(message.as_bytes());
    p.push(0);
    p
}

pub fn oack(options: &[(&str, String)]) -> Vec<u8> {
    let mut p = OACK.to_be_bytes().to_vec();
    for (name, value) in options {
        p.extend_from_slice(name.as_bytes());
        p.push(0);
        p.extend_from_slice(value.as_bytes());
        p.push(0);
    }
    p
}

/// The block number an ACK acknowledges, if the packet is an ACK.
pub fn acked_block(packet: &[u8]) -> Option<u16> {
    match packet {
        [op_hi, op_lo, hi, lo, ..] if u16::from_be_bytes([*op_hi, *op_lo]) == ACK => {
            Some(u16::from_be_bytes([*hi, *lo]))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rrq(parts: &[&str]) -> Vec<u8> {
        let mut p = RRQ.to_be_bytes().to_vec();
        for part in parts {
            p.extend_from_slice(part.as_bytes());
            p.push(0);
        }
        p
    }

    #[test]
    fn read_requests_with_options() {
        let req = parse_request(&rrq(&[
            "undionly.kpxe",
            "octet",
            "blksize",
            "1432",
            "tsize",
            "0",
            "timeout",
            "3",
            "windowsize",
            "4",
        ]));
        assert_eq!(
            req,
            Request::Read(ReadRequest {
                file: "undionly.kpxe".into(),
                block_size: Some(1432),
                wants_size: true,
                timeout_secs: Some(3)
            })
        );
        assert_eq!(
            parse_request(&rrq(&["f", "OCTET", "blksize", "999999"])),
            Request::Read(ReadRequest {
                file: "f".into(),
                block_size: Some(MAX_BLOCK),
                wants_size: false,
                timeout_secs: None
            })
        );
    }

    #[test]
    fn writes_odd_modes_and_junk_are_refused() {
        let mut wrq = rrq(&["f", "octet"]);
        wrq[1] = 2;
        assert!(matches!(
            parse_request(&wrq),
            Request::Refuse(code::ACCESS, _)
        ));
        assert!(matches!(
            parse_request(&rrq(&["f", "netascii"])),
            Request::Refuse(code::ILLEGAL, _)
        ));
        assert!(matches!(
            parse_request(&rrq(&["f", "octet", "blksize", "4"])),
            Request::Refuse(code::OPTIONS, _)
        ));
        assert_eq!(parse_request(&[0, 1]), Request::Ignore);
        assert!(matches!(
            parse_request(&[0, 1, b'f', 0]),
            Request::Refuse(code::ILLEGAL, _)
        ));
    }
}
