//! Replies that must fit the client's maximum message size: options overloaded into `file`
//! and `sname` (RFC 2131 section 4.1, option 52), trimmed, or the least wanted left out.

use super::*;

#[test]
fn replies_fit_the_client_maximum() {
    use dhcproto::Encodable;
    let plan = plan("");
    let mut state = State::new(Leases::in_memory());
    let offer = handle(
        &request(
            MASTER,
            MessageType::Discover,
            vec![DhcpOption::UserClass(b"iPXE".to_vec())],
        ),
        &plan,
        &mut state,
        0,
    )
    .unwrap();
    assert!(offer.message.to_vec().unwrap().len() <= 576 - 28);
}

/// What a client that honours option 52 reads from an encoded reply: the options field, then
/// `file`, then `sname` when option 52 names them (RFC 2131 section 4.1). dhcproto's message
/// decoder reads option 52 as a plain value and the fields as names, so the fields are read
/// here with dhcproto's option decoder.
struct Received {
    len: usize,
    message: Message,
    /// Option 52's value, 0 without it.
    overload: u8,
    /// The options field only.
    main: DhcpOptions,
    /// The options in `file` and `sname` when overloaded.
    file: DhcpOptions,
    sname: DhcpOptions,
    /// Every option, wherever it was.
    all: DhcpOptions,
}

fn receive(reply: &Message) -> Received {
    const SNAME: std::ops::Range<usize> = 44..108;
    const FILE: std::ops::Range<usize> = 108..236;
    let packet = reply.to_vec().unwrap();
    let message = Message::from_bytes(&packet).unwrap();
    let main = message.opts().clone();
    let overload = match main.get(OptionCode::OptionOverload) {
        Some(DhcpOption::OptionOverload(v)) => *v,
        _ => 0,
    };
    let overloaded = |bit: u8, field: &[u8]| {
        if overload & bit == 0 {
            return DhcpOptions::new();
        }
        assert_eq!(
            field.iter().rposition(|b| *b != 0).map(|i| field[i]),
            Some(255),
            "an overloaded field ends with END and PAD bytes"
        );
        DhcpOptions::decode(&mut Decoder::new(field)).unwrap()
    };
    let file = overloaded(1, &packet[FILE]);
    let sname = overloaded(2, &packet[SNAME]);
    let mut all = main.clone();
    for (code, o) in file.iter().chain(sname.iter()) {
        assert!(all.insert(o.clone()).is_none(), "{code:?} is in two places");
    }
    Received {
        len: packet.len(),
        message,
        overload,
        main,
        file,
        sname,
        all,
    }
}

/// The options that follow option 52 in an encoded reply, as dhcproto alone decodes them:
/// none, since it never looks into `file` and `sname`.
fn dhcproto_alone(reply: &Message) -> usize {
    Message::from_bytes(&reply.to_vec().unwrap())
        .unwrap()
        .opts()
        .len()
}

/// dhclient's request list in the e2e tests, the order it asks in.
const DHCLIENT_PRL: [OptionCode; 9] = [
    OptionCode::SubnetMask,
    OptionCode::BroadcastAddr,
    OptionCode::Router,
    OptionCode::DomainName,
    OptionCode::DomainNameServer,
    OptionCode::DomainSearch,
    OptionCode::Hostname,
    OptionCode::InterfaceMtu,
    OptionCode::NtpServers,
];

/// A plan whose replies are too big for 576 bytes: 15 DNS servers (62 bytes on the wire),
/// `ntp` NTP servers (2 + 4 each) and `search` long search domains (about 33 bytes each, 23 for
/// the cluster domain) on top of the usual options.
fn crowded_plan(ntp: u8, search: usize) -> DhcpPlan {
    let mut plan = plan("");
    plan.dns_servers = (1..=15).map(|i| Ipv4Addr::new(10, 0, 0, i)).collect();
    plan.ntp_servers = (1..=ntp).map(|i| Ipv4Addr::new(10, 0, 1, i)).collect();
    plan.domain_search
        .extend((0..search).map(|i| format!("search-domain-{i}.some-rather-long-name.example")));
    plan
}

/// A DISCOVER from the master node with dhclient's request list, the given maximum message
/// size and a 40-byte client identifier, plus (or instead) `extra` options.
fn crowded_discover(max: u16, extra: Vec<DhcpOption>) -> Message {
    let mut opts = vec![
        DhcpOption::ParameterRequestList(DHCLIENT_PRL.to_vec()),
        DhcpOption::MaxMessageSize(max),
        // Echoed back (RFC 6842): 2 + 40 bytes the reply must carry.
        DhcpOption::ClientIdentifier([0xaa; 40].to_vec()),
    ];
    opts.extend(extra);
    request(MASTER, MessageType::Discover, opts)
}

/// The reply `plan` gives `req`, and the same reply with room for everything, decoded.
fn crowded_reply(plan: &DhcpPlan, req: &Message) -> (Message, Received) {
    let mut state = State::new(Leases::in_memory());
    let reply = handle(req, plan, &mut state, 0).unwrap().message;
    let mut roomy = req.clone();
    roomy.opts_mut().insert(DhcpOption::MaxMessageSize(9000));
    let mut state = State::new(Leases::in_memory());
    let reference = receive(&handle(&roomy, plan, &mut state, 0).unwrap().message);
    assert_eq!(reference.overload, 0, "a roomy reply needs no overload");
    (reply, reference)
}

/// Every option of `got` is the one the roomy reply has, and all the roomy reply's options
/// are there except `missing`.
fn assert_same_options(got: &Received, reference: &Received, missing: &[OptionCode]) {
    for (code, o) in reference.all.iter() {
        if missing.contains(code) {
            assert!(got.all.get(*code).is_none(), "{code:?} should be left out");
        } else {
            assert_eq!(got.all.get(*code), Some(o), "{code:?}");
        }
    }
    for (code, _) in got.all.iter() {
        assert!(
            *code == OptionCode::OptionOverload || reference.all.get(*code).is_some(),
            "{code:?} came from nowhere"
        );
    }
}

#[test]
fn options_that_do_not_fit_go_into_file_then_sname() {
    // The requested options fill the options field but for the NTP servers, which go into
    // file; the lease times follow in the options field; the client identifier, last, fits
    // only in sname.
    let plan = crowded_plan(30, 4);
    let (reply, reference) = crowded_reply(&plan, &crowded_discover(576, vec![]));
    assert!(reference.len > 576 - 28, "the test must need overload");
    let got = receive(&reply);
    assert!(got.len <= 576 - 28, "{} bytes", got.len);
    assert_eq!(got.overload, 3, "file and sname both carry options");
    assert_same_options(&got, &reference, &[]);
    // The options clients check first, and option 52 itself, are in the options field.
    for code in [
        OptionCode::MessageType,
        OptionCode::ServerIdentifier,
        OptionCode::OptionOverload,
    ] {
        assert!(
            got.main.get(code).is_some(),
            "{code:?} in the options field"
        );
    }
    // What the client asked for first stays in the options field, where every client looks.
    for code in &DHCLIENT_PRL[..5] {
        assert!(
            got.main.get(*code).is_some(),
            "{code:?} in the options field"
        );
    }
    assert!(got.file.get(OptionCode::NtpServers).is_some());
    assert!(got.main.get(OptionCode::AddressLeaseTime).is_some());
    assert!(got.sname.get(OptionCode::ClientIdentifier).is_some());
    // dhcproto's decoder sees option 52 but not what follows it in file and sname.
    assert_eq!(dhcproto_alone(&reply), got.main.len());
    assert!(got.main.len() < got.all.len());
}

#[test]
fn a_small_overflow_uses_file_only() {
    let plan = crowded_plan(24, 2);
    let (reply, reference) = crowded_reply(&plan, &crowded_discover(576, vec![]));
    assert!(reference.len > 576 - 28, "the test must need overload");
    let got = receive(&reply);
    assert!(got.len <= 576 - 28, "{} bytes", got.len);
    assert_eq!(got.overload, 1);
    assert!(got.message.sname().is_none());
    assert!(got.file.get(OptionCode::NtpServers).is_some());
    assert_same_options(&got, &reference, &[]);
}

#[test]
fn replies_that_fit_are_not_overloaded() {
    let plan = crowded_plan(24, 2);
    let (reply, reference) = crowded_reply(&plan, &crowded_discover(1500, vec![]));
    let got = receive(&reply);
    assert_eq!(got.overload, 0);
    assert!(got.message.fname().is_none() && got.message.sname().is_none());
    assert_same_options(&got, &reference, &[]);
}

#[test]
fn an_option_too_big_for_any_field_is_left_out_if_optional() {
    // 242 bytes of NTP servers fit nowhere once the options asked for before them are in.
    let plan = crowded_plan(60, 4);
    let (reply, reference) = crowded_reply(&plan, &crowded_discover(576, vec![]));
    let got = receive(&reply);
    assert!(got.len <= 576 - 28, "{} bytes", got.len);
    assert_same_options(&got, &reference, &[OptionCode::NtpServers]);
}

#[test]
fn when_even_overload_is_short_the_least_wanted_optional_option_makes_room() {
    // A 120-byte client identifier must be echoed but finds no room: the NTP servers, asked
    // for last, leave file to it; the search list, asked for before them, stays.
    let plan = crowded_plan(30, 4);
    let big_id = DhcpOption::ClientIdentifier([0xbb; 120].to_vec());
    let (reply, reference) = crowded_reply(&plan, &crowded_discover(576, vec![big_id]));
    let got = receive(&reply);
    assert!(got.len <= 576 - 28, "{} bytes", got.len);
    assert_eq!(got.overload, 1);
    assert!(got.file.get(OptionCode::ClientIdentifier).is_some());
    assert_same_options(&got, &reference, &[OptionCode::NtpServers]);
}

#[test]
fn replies_with_a_boot_file_are_trimmed_not_overloaded() {
    // Boot firmware reads its boot file from `file`, and iPXE never reads option 52.
    let plan = crowded_plan(12, 2);
    let pxe = vec![
        DhcpOption::ClassIdentifier(b"PXEClient:Arch:00000:UNDI:002001".to_vec()),
        DhcpOption::ClientSystemArchitecture(Architecture::from(0)),
    ];
    let ipxe = vec![DhcpOption::UserClass(b"iPXE".to_vec())];
    let url = "http://10.0.0.1:8080/boot/52-54-00-00-00-02.ipxe";
    // The client identifier must be echoed, so optional options make room: for PXE the NTP
    // servers, asked for last; for iPXE, whose boot URL takes 35 bytes more, the search list,
    // which frees enough for the NTP servers to stay.
    let cases = [
        (pxe, BIOS_BOOT_FILE, OptionCode::NtpServers),
        (ipxe, url, OptionCode::DomainSearch),
    ];
    for (extra, file, left_out) in cases {
        let (reply, reference) = crowded_reply(&plan, &crowded_discover(576, extra));
        assert!(reference.len > 576 - 28, "the test must need overload");
        let got = receive(&reply);
        assert!(got.len <= 576 - 28, "{} bytes", got.len);
        assert_eq!(got.overload, 0, "{file}: no overload");
        assert_eq!(
            got.message.fname_str().unwrap().unwrap(),
            format!("{file}\0")
        );
        assert!(got.message.sname().is_none());
        assert_eq!(
            got.all.get(OptionCode::BootfileName),
            Some(&DhcpOption::BootfileName(file.as_bytes().to_vec()))
        );
        assert_same_options(&got, &reference, &[left_out]);
    }
}

#[test]
fn a_crowded_inform_answer_carries_no_lease_anywhere() {
    let plan = crowded_plan(24, 2);
    let mut inform = crowded_discover(576, vec![]);
    inform
        .opts_mut()
        .insert(DhcpOption::MessageType(MessageType::Inform));
    inform.set_ciaddr(Ipv4Addr::new(10, 0, 0, 77));
    let mut state = State::new(Leases::in_memory());
    let got = receive(&handle(&inform, &plan, &mut state, 0).unwrap().message);
    assert!(got.len <= 576 - 28, "{} bytes", got.len);
    for code in [
        OptionCode::AddressLeaseTime,
        OptionCode::Renewal,
        OptionCode::Rebinding,
    ] {
        assert!(got.all.get(code).is_none(), "{code:?}");
    }
    assert!(got.all.get(OptionCode::NtpServers).is_some());
}
