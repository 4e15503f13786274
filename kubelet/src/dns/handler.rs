//! The server's answer to each request: names of the cluster domain (and
//! reverse names of the cluster's addresses) from the records, every other
//! name from the upstreams. Checks what the server library leaves to it:
//! one question, a standard query, EDNS version 0.

use std::sync::Arc;

use hickory_proto::op::{
    Edns, Header, HeaderCounts, Message, Metadata, OpCode, Query, ResponseCode,
};
use hickory_proto::rr::{DNSClass, Name, Record, RecordType};
use hickory_server::net::runtime::Time;
use hickory_server::server::{Request, RequestHandler, ResponseHandler, ResponseInfo};
use hickory_server::zone_handler::MessageResponseBuilder;

use super::forward::Forwarder;
use super::informer::Informed;
use super::names::{classify, ip_of_reverse_name, ClusterName};
use super::records::{pointer_records, Lookup};
use super::zone::Zone;

/// How many CNAMEs of ExternalName Services are followed inside the zone.
const MAX_ALIASES: usize = 8;
/// The largest UDP answer offered to clients that speak EDNS.
const MAX_UDP_PAYLOAD: u16 = 4096;

/// The response to one question, before it is encoded.
#[derive(Debug, Clone, PartialEq)]
pub struct Answer {
    pub code: ResponseCode,
    pub authoritative: bool,
    pub answers: Vec<Record>,
    pub authorities: Vec<Record>,
    pub additionals: Vec<Record>,
}

impl Answer {
    fn code(code: ResponseCode) -> Answer {
        Answer {
            code,
            authoritative: false,
            answers: Vec::new(),
            authorities: Vec::new(),
            additionals: Vec::new(),
        }
    }
}

/// The cluster DNS's request handler.
pub struct ClusterDnsHandler {
    zone: Zone,
    informed: Arc<Informed>,
    forwarder: Forwarder,
}

impl ClusterDnsHandler {
    pub fn new(zone: Zone, informed: Arc<Informed>, forwarder: Forwarder) -> ClusterDnsHandler {
        ClusterDnsHandler {
            zone,
            informed,
            forwarder,
        }
    }

    /// The answer to `query`, whose whole message (`raw`) is what is
    /// forwarded when the name is not the cluster's.
    pub async fn resolve(&self, query: &Query, raw: &[u8]) -> Answer {
        let name = query.name();
        if let Some(cluster_name) = classify(name, self.zone.origin()) {
            return self.cluster_answer(&cluster_name, query).await;
        }
        if let Some(answer) = self.reverse_answer(query) {
            return answer;
        }
        self.forwarded(raw).await
    }

    async fn cluster_answer(&self, cluster_name: &ClusterName, query: &Query) -> Answer {
        if !matches!(query.query_class(), DNSClass::IN | DNSClass::ANY) {
            return Answer::code(ResponseCode::Refused);
        }
        if matches!(query.query_type(), RecordType::AXFR | RecordType::IXFR) {
            // The zone changes with every Service: no transfers.
            return Answer::code(ResponseCode::Refused);
        }
        if !self.informed.synced() {
            return Answer::code(ResponseCode::ServFail);
        }
        let lookup = self.informed.records.read().lookup(
            &self.zone,
            cluster_name,
            query.name(),
            query.query_type(),
        );
        let mut answer = Answer {
            authoritative: true,
            ..Answer::code(ResponseCode::NoError)
        };
        match lookup {
            Lookup::Alias { cname, target } => {
                answer.answers.push(*cname);
                if query.query_type() != RecordType::CNAME {
                    self.follow_alias(target, query.query_type(), &mut answer)
                        .await;
                }
            }
            other => self.settle(other, &mut answer),
        }
        answer
    }

    /// Adds what a lookup found to `answer`, or says it found nothing.
    fn settle(&self, lookup: Lookup, answer: &mut Answer) {
        let soa = || self.zone.soa(self.informed.records.read().serial());
        match lookup {
            Lookup::Found {
                answers,
                additionals,
            } => {
                answer.answers.extend(answers);
                answer.additionals.extend(additionals);
            }
            Lookup::NoData => answer.authorities.push(soa()),
            Lookup::NxDomain => {
                answer.code = ResponseCode::NXDomain;
                answer.authorities.push(soa());
            }
            Lookup::Alias { cname, .. } => answer.answers.push(*cname),
        }
    }

    /// Resolves the target of an ExternalName's CNAME into `answer`: in the
    /// zone from the records, outside it through the upstreams.
    async fn follow_alias(&self, mut target: Name, qtype: RecordType, answer: &mut Answer) {
        for _ in 0..MAX_ALIASES {
            let Some(cluster_name) = classify(&target, self.zone.origin()) else {
                return self.forward_alias(&target, qtype, answer).await;
            };
            let lookup =
                self.informed
                    .records
                    .read()
                    .lookup(&self.zone, &cluster_name, &target, qtype);
            match lookup {
                Lookup::Alias {
                    cname,
                    target: next,
                } => {
                    answer.answers.push(*cname);
                    target = next;
                }
                other => return self.settle(other, answer),
            }
        }
        tracing::debug!(name = %target, "cluster DNS: too many ExternalName aliases in a row");
    }

    async fn forward_alias(&self, target: &Name, qtype: RecordType, answer: &mut Answer) {
        let mut message = Message::query();
        message.metadata.recursion_desired = true;
        message.add_query(Query::query(target.clone(), qtype));
        let Ok(raw) = message.to_vec() else {
            return;
        };
        match self.forwarder.forward(&raw).await {
            Ok(upstream) => {
                if upstream.metadata.response_code == ResponseCode::NXDomain {
                    answer.code = ResponseCode::NXDomain;
                }
                answer.answers.extend(upstream.answers);
                answer.authorities.extend(upstream.authorities);
            }
            // The CNAME alone: the client may ask for its target itself.
            Err(err) => {
                tracing::debug!(name = %target, error = %err, "cluster DNS: resolving an ExternalName")
            }
        }
    }

    /// PTR answers for the cluster's addresses; `None` for any other
    /// question, which goes upstream.
    fn reverse_answer(&self, query: &Query) -> Option<Answer> {
        if !matches!(query.query_type(), RecordType::PTR | RecordType::ANY)
            || !self.informed.synced()
        {
            return None;
        }
        let ip = ip_of_reverse_name(query.name())?;
        let targets = self.informed.records.read().reverse(&self.zone, ip);
        if targets.is_empty() {
            return None;
        }
        let mut name = query.name().to_lowercase();
        name.set_fqdn(true);
        Some(Answer {
            authoritative: true,
            answers: pointer_records(&name, targets),
            ..Answer::code(ResponseCode::NoError)
        })
    }

    async fn forwarded(&self, raw: &[u8]) -> Answer {
        match self.forwarder.forward(raw).await {
            Ok(upstream) => Answer {
                code: upstream.metadata.response_code,
                authoritative: false,
                answers: upstream.answers,
                authorities: upstream.authorities,
                additionals: upstream.additionals,
            },
            Err(err) => {
                tracing::debug!(error = %err, "cluster DNS: forwarding failed");
                Answer::code(ResponseCode::ServFail)
            }
        }
    }

    /// The answer to a whole request.
    async fn answer_request(&self, request: &Request) -> Answer {
        if request.metadata.op_code != OpCode::Query {
            return Answer::code(ResponseCode::NotImp);
        }
        let [query] = request.queries.queries() else {
            return Answer::code(ResponseCode::FormErr);
        };
        if request.edns.as_ref().is_some_and(|e| e.version() > 0) {
            return Answer::code(ResponseCode::BADVERS);
        }
        self.resolve(query.original(), request.as_slice()).await
    }
}

#[async_trait::async_trait]
impl RequestHandler for ClusterDnsHandler {
    async fn handle_request<R: ResponseHandler, T: Time>(
        &self,
        request: &Request,
        mut response_handle: R,
    ) -> ResponseInfo {
        let answer = self.answer_request(request).await;
        let mut metadata = Metadata::response_from_request(&request.metadata);
        metadata.recursion_available = true;
        metadata.authoritative = answer.authoritative;
        metadata.response_code = answer.code;
        // A client that speaks EDNS gets it back, with the payload it can take.
        let edns = request.edns.as_ref().map(|theirs| {
            let mut ours = Edns::new();
            ours.set_max_payload(theirs.max_payload().clamp(512, MAX_UDP_PAYLOAD));
            ours
        });
        let response = MessageResponseBuilder::new(&request.queries, edns.as_ref()).build(
            metadata,
            answer.answers.iter(),
            answer.authorities.iter(),
            std::iter::empty(),
            answer.additionals.iter(),
        );
        match response_handle.send_response(response).await {
            Ok(info) => info,
            Err(err) => {
                tracing::debug!(error = %err, src = %request.src(), "cluster DNS: sending an answer");
                metadata.response_code = ResponseCode::ServFail;
                ResponseInfo::from(Header {
                    metadata,
                    counts: HeaderCounts::default(),
                })
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use std::net::{Ipv4Addr, SocketAddr};
    use std::time::Duration;

    use hickory_proto::rr::rdata::A;
    use hickory_proto::rr::RData;
    use hickory_server::Server;
    use k8s_openapi::api::core::v1::Service;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::{TcpStream, UdpSocket};

    use crate::dns::records::ClusterRecords;

    fn service(json: serde_json::Value) -> Service {
        serde_json::from_value(json).unwrap()
    }

    fn records() -> ClusterRecords {
        let mut records = ClusterRecords::new();
        records.apply_service(&service(serde_json::json!({
            "metadata": {"name": "web", "namespace": "shop"},
            "spec": {"clusterIP": "10.96.3.4", "ports": [{"name": "http", "port": 80}]}})));
        records.apply_service(&service(serde_json::json!({
            "metadata": {"name": "mail", "namespace": "shop"},
            "spec": {"type": "ExternalName", "externalName": "smtp.example.com"}})));
        records.apply_service(&service(serde_json::json!({
            "metadata": {"name": "front", "namespace": "shop"},
            "spec": {"type": "ExternalName", "externalName": "web.shop.svc.cluster.local"}})));
        records
    }

    /// An upstream of the test's own: every name under `example.com` is
    /// 192.0.2.1, any other NXDOMAIN.
    async fn upstream() -> SocketAddr {
        crate::dns::forward::tests::upstream(|asked| {
            let mut answer = Message::response(asked.metadata.id, asked.metadata.op_code);
            answer.add_queries(asked.queries.iter().cloned());
            let name = asked.queries[0].name().clone();
            if name.to_ascii().ends_with(".example.com.") {
                answer.add_answer(Record::from_rdata(name, 60, RData::A(A::new(192, 0, 2, 1))));
            } else {
                answer.metadata.response_code = ResponseCode::NXDomain;
            }
            Some(answer)
        })
        .await
    }

    /// The server on a port of its own, answering from `informed`.
    async fn server(informed: Informed) -> SocketAddr {
        let (udp, tcp) = super::super::bind_both("127.0.0.1:0".parse().unwrap())
            .await
            .unwrap();
        let address = udp.local_addr().unwrap();
        let forwarder = Forwarder::new(vec![upstream().await], Duration::from_secs(1));
        let handler = ClusterDnsHandler::new(
            Zone::new("cluster.local").unwrap(),
            Arc::new(informed),
            forwarder,
        );
        tokio::spawn(async move {
            let mut server = Server::new(handler);
            server.register_socket(udp);
            server.register_listener(tcp, Duration::from_secs(5), 8);
            let _ = server.block_until_done().await;
        });
        address
    }

    fn query(name: &str, qtype: RecordType) -> Vec<u8> {
        let mut message = Message::query();
        message.metadata.recursion_desired = true;
        message.add_query(Query::query(Name::from_ascii(name).unwrap(), qtype));
        message.to_vec().unwrap()
    }

    async fn over_udp(server: SocketAddr, raw: &[u8]) -> Message {
        let socket = UdpSocket::bind("127.0.0.1:0").await.unwrap();
        socket.send_to(raw, server).await.unwrap();
        let mut buffer = vec![0u8; 65535];
        let (length, _) =
            tokio::time::timeout(Duration::from_secs(5), socket.recv_from(&mut buffer))
                .await
                .expect("an answer in time")
                .unwrap();
        Message::from_vec(&buffer[..length]).unwrap()
    }

    async fn over_tcp(server: SocketAddr, raw: &[u8]) -> Message {
        let mut stream = TcpStream::connect(server).await.unwrap();
        stream
            .write_all(&(raw.len() as u16).to_be_bytes())
            .await
            .unwrap();
        stream.write_all(raw).await.unwrap();
        let length = stream.read_u16().await.unwrap();
        let mut buffer = vec![0u8; usize::from(length)];
        stream.read_exact(&mut buffer).await.unwrap();
        Message::from_vec(&buffer).unwrap()
    }

    fn addresses(message: &Message) -> Vec<String> {
        message
            .answers
            .iter()
            .filter(|r| r.record_type() == RecordType::A)
            .map(|r| r.data.to_string())
            .collect()
    }

    #[tokio::test]
    async fn cluster_names_are_answered_and_others_forwarded() {
        let server = server(Informed::listed(records())).await;
        let web = over_udp(server, &query("web.shop.svc.cluster.local.", RecordType::A)).await;
        assert_eq!(web.metadata.response_code, ResponseCode::NoError);
        assert!(web.metadata.authoritative && web.metadata.recursion_available);
        assert_eq!(addresses(&web), ["10.96.3.4"]);
        let web = over_tcp(server, &query("Web.Shop.Svc.Cluster.Local.", RecordType::A)).await;
        assert_eq!(addresses(&web), ["10.96.3.4"]);

        let missing = over_udp(server, &query("api.shop.svc.cluster.local.", RecordType::A)).await;
        assert_eq!(missing.metadata.response_code, ResponseCode::NXDomain);
        assert_eq!(missing.authorities[0].record_type(), RecordType::SOA);
        let no_data = over_udp(
            server,
            &query("web.shop.svc.cluster.local.", RecordType::AAAA),
        )
        .await;
        assert_eq!(no_data.metadata.response_code, ResponseCode::NoError);
        assert!(no_data.answers.is_empty());
        assert_eq!(no_data.authorities[0].record_type(), RecordType::SOA);

        // Outside the zone: the upstream's answer, not authoritative.
        let outside = over_udp(server, &query("www.example.com.", RecordType::A)).await;
        assert_eq!(addresses(&outside), ["192.0.2.1"]);
        assert!(!outside.metadata.authoritative);
        let outside = over_tcp(server, &query("nowhere.test.", RecordType::A)).await;
        assert_eq!(outside.metadata.response_code, ResponseCode::NXDomain);

        // The cluster IP's reverse name is the cluster's; others go upstream.
        let ptr = over_udp(server, &query("4.3.96.10.in-addr.arpa.", RecordType::PTR)).await;
        assert_eq!(
            ptr.answers[0].data.to_string(),
            "web.shop.svc.cluster.local."
        );
        let ptr = over_udp(server, &query("1.2.0.192.in-addr.arpa.", RecordType::PTR)).await;
        assert_eq!(ptr.metadata.response_code, ResponseCode::NXDomain);
        assert!(!ptr.metadata.authoritative);
    }

    #[tokio::test]
    async fn external_names_are_followed_inside_and_outside_the_zone() {
        let server = server(Informed::listed(records())).await;
        let mail = over_udp(
            server,
            &query("mail.shop.svc.cluster.local.", RecordType::A),
        )
        .await;
        assert_eq!(mail.answers[0].record_type(), RecordType::CNAME);
        assert_eq!(mail.answers[0].data.to_string(), "smtp.example.com.");
        assert_eq!(addresses(&mail), ["192.0.2.1"]);
        let front = over_udp(
            server,
            &query("front.shop.svc.cluster.local.", RecordType::A),
        )
        .await;
        assert_eq!(front.answers[0].record_type(), RecordType::CNAME);
        assert_eq!(addresses(&front), ["10.96.3.4"]);
        // Asked for the CNAME itself: that alone.
        let cname = over_udp(
            server,
            &query("mail.shop.svc.cluster.local.", RecordType::CNAME),
        )
        .await;
        assert_eq!(cname.answers.len(), 1);
    }

    #[tokio::test]
    async fn before_the_first_lists_cluster_names_fail_and_others_resolve() {
        let server = server(Informed::default()).await;
        let early = over_udp(server, &query("web.shop.svc.cluster.local.", RecordType::A)).await;
        assert_eq!(early.metadata.response_code, ResponseCode::ServFail);
        let outside = over_udp(server, &query("www.example.com.", RecordType::A)).await;
        assert_eq!(addresses(&outside), ["192.0.2.1"]);
    }

    #[tokio::test]
    async fn malformed_and_unsupported_requests_get_errors_not_silence() {
        let server = server(Informed::listed(records())).await;
        // A header announcing a question that is not there.
        let mut truncated = query("web.shop.svc.cluster.local.", RecordType::A);
        truncated.truncate(20);
        let answer = over_udp(server, &truncated).await;
        assert_eq!(answer.metadata.response_code, ResponseCode::FormErr);
        // Two questions.
        let mut two = Message::query();
        for name in ["a.example.com.", "b.example.com."] {
            two.add_query(Query::query(Name::from_ascii(name).unwrap(), RecordType::A));
        }
        let answer = over_udp(server, &two.to_vec().unwrap()).await;
        assert_eq!(answer.metadata.response_code, ResponseCode::FormErr);
        // No question.
        let answer = over_tcp(server, &Message::query().to_vec().unwrap()).await;
        assert_eq!(answer.metadata.response_code, ResponseCode::FormErr);
        // Not a query.
        let mut status = Message::new(7, hickory_proto::op::MessageType::Query, OpCode::Status);
        status.add_query(Query::query(
            Name::from_ascii("a.example.com.").unwrap(),
            RecordType::A,
        ));
        let answer = over_udp(server, &status.to_vec().unwrap()).await;
        assert_eq!(answer.metadata.response_code, ResponseCode::NotImp);
        // A zone transfer, and another class.
        let answer = over_tcp(server, &query("cluster.local.", RecordType::AXFR)).await;
        assert_eq!(answer.metadata.response_code, ResponseCode::Refused);
        let mut chaos = Message::query();
        let mut question = Query::query(
            Name::from_ascii("web.shop.svc.cluster.local.").unwrap(),
            RecordType::A,
        );
        question.set_query_class(DNSClass::CH);
        chaos.add_query(question);
        let answer = over_udp(server, &chaos.to_vec().unwrap()).await;
        assert_eq!(answer.metadata.response_code, ResponseCode::Refused);
        // Still answering after all that.
        let web = over_udp(server, &query("web.shop.svc.cluster.local.", RecordType::A)).await;
        assert_eq!(addresses(&web), [Ipv4Addr::new(10, 96, 3, 4).to_string()]);
    }

    #[tokio::test]
    async fn a_big_answer_over_udp_is_truncated_and_whole_over_tcp() {
        let mut records = ClusterRecords::new();
        records.apply_service(&service(serde_json::json!({
            "metadata": {"name": "many", "namespace": "shop"},
            "spec": {"clusterIP": "None"}})));
        let endpoints: Vec<serde_json::Value> = (0..200)
            .map(|i| serde_json::json!({"addresses": [format!("10.244.{}.{}", i / 250, i % 250 + 1)]}))
            .collect();
        let slice = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "many-1", "namespace": "shop",
                         "labels": {"kubernetes.io/service-name": "many"}},
            "addressType": "IPv4", "endpoints": endpoints}))
        .unwrap();
        records.apply_slice(&slice);
        let server = server(Informed::listed(records)).await;
        let raw = query("many.shop.svc.cluster.local.", RecordType::A);
        let udp = over_udp(server, &raw).await;
        assert!(udp.metadata.truncation);
        assert!(udp.answers.len() < 200);
        let tcp = over_tcp(server, &raw).await;
        assert!(!tcp.metadata.truncation);
        assert_eq!(tcp.answers.len(), 200);
    }
}
