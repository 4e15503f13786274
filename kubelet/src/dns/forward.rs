//! Forwarding of names outside the cluster to upstream resolvers (the
//! host's `nameserver`s, or given ones): the client's query as it came,
//! under an ID of our own, over UDP, and again over TCP when the answer was
//! truncated. Not a cache and not a recursive resolver.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::Duration;

use hickory_proto::op::{Message, MessageType, ResponseCode};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpStream, UdpSocket};
use tokio::sync::Semaphore;

/// How long one upstream gets to answer one attempt.
pub const UPSTREAM_TIMEOUT: Duration = Duration::from_secs(2);
/// At most this many forwarded queries are in flight; more get SERVFAIL
/// (a client asks again), so a flood cannot take every socket.
pub const MAX_IN_FLIGHT: usize = 512;

#[derive(Debug, thiserror::Error)]
pub enum ForwardError {
    #[error("no upstream resolver is configured (none given, and no nameserver in the host's resolv.conf)")]
    NoUpstream,
    #[error("{MAX_IN_FLIGHT} forwarded queries are already in flight")]
    Busy,
    #[error("the query cannot be forwarded: {0}")]
    BadQuery(String),
    #[error("no upstream resolver answered ({0})")]
    Unanswered(String),
}

/// The upstream resolvers and the bound on queries in flight to them.
#[derive(Debug)]
pub struct Forwarder {
    upstreams: Vec<SocketAddr>,
    timeout: Duration,
    in_flight: Semaphore,
}

impl Forwarder {
    pub fn new(upstreams: Vec<SocketAddr>, timeout: Duration) -> Forwarder {
        Forwarder {
            upstreams,
            timeout,
            in_flight: Semaphore::new(MAX_IN_FLIGHT),
        }
    }

    pub fn upstreams(&self) -> &[SocketAddr] {
        &self.upstreams
    }

    /// The upstream's answer to `query` (a whole DNS message as the client
    /// sent it), its ID the query's. Upstreams are asked in order; one
    /// that fails (SERVFAIL, REFUSED) is passed over while others remain.
    pub async fn forward(&self, query: &[u8]) -> Result<Message, ForwardError> {
        if self.upstreams.is_empty() {
            return Err(ForwardError::NoUpstream);
        }
        let _permit = self
            .in_flight
            .try_acquire()
            .map_err(|_| ForwardError::Busy)?;
        if query.len() < 12 {
            return Err(ForwardError::BadQuery("shorter than a DNS header".into()));
        }
        let asked = Message::from_vec(query).map_err(|e| ForwardError::BadQuery(e.to_string()))?;
        let client_id = asked.metadata.id;
        let mut ours = query.to_vec();
        let mut failed = Vec::new();
        let mut fallback = None;
        for upstream in &self.upstreams {
            let id: u16 = rand::random();
            ours[..2].copy_from_slice(&id.to_be_bytes());
            match self.exchange(*upstream, &ours, id, &asked).await {
                Ok(mut answer) => {
                    answer.metadata.id = client_id;
                    let code = answer.metadata.response_code;
                    if matches!(code, ResponseCode::ServFail | ResponseCode::Refused) {
                        failed.push(format!("{upstream}: {code}"));
                        fallback = Some(answer);
                        continue;
                    }
                    return Ok(answer);
                }
                Err(why) => failed.push(format!("{upstream}: {why}")),
            }
        }
        fallback.ok_or_else(|| ForwardError::Unanswered(failed.join("; ")))
    }

    /// One upstream's answer: over UDP, then TCP if it was truncated.
    async fn exchange(
        &self,
        upstream: SocketAddr,
        query: &[u8],
        id: u16,
        asked: &Message,
    ) -> Result<Message, String> {
        let answer = tokio::time::timeout(self.timeout, over_udp(upstream, query, id, asked))
            .await
            .map_err(|_| format!("no answer over UDP in {:?}", self.timeout))??;
        if !answer.metadata.truncation {
            return Ok(answer);
        }
        tokio::time::timeout(self.timeout, over_tcp(upstream, query, id, asked))
            .await
            .map_err(|_| format!("no answer over TCP in {:?}", self.timeout))?
    }
}

/// Whether `answer` answers our query: our ID, a response, the question
/// asked (so that a stray datagram is not taken for the answer).
fn answers(answer: &Message, id: u16, asked: &Message) -> bool {
    let same_question = answer.queries.len() == asked.queries.len()
        && answer.queries.iter().zip(&asked.queries).all(|(a, q)| {
            a.query_type() == q.query_type()
                && a.query_class() == q.query_class()
                && a.name().eq_ignore_root_case(q.name())
        });
    answer.metadata.id == id
        && answer.metadata.message_type == MessageType::Response
        && same_question
}

async fn over_udp(
    upstream: SocketAddr,
    query: &[u8],
    id: u16,
    asked: &Message,
) -> Result<Message, String> {
    let local: SocketAddr = match upstream.ip() {
        IpAddr::V4(_) => (Ipv4Addr::UNSPECIFIED, 0).into(),
        IpAddr::V6(_) => (Ipv6Addr::UNSPECIFIED, 0).into(),
    };
    let socket = UdpSocket::bind(local).await.map_err(|e| e.to_string())?;
    socket.connect(upstream).await.map_err(|e| e.to_string())?;
    socket.send(query).await.map_err(|e| e.to_string())?;
    let mut buffer = vec![0u8; 65535];
    loop {
        let length = socket.recv(&mut buffer).await.map_err(|e| e.to_string())?;
        match Message::from_vec(&buffer[..length]) {
            Ok(answer) if answers(&answer, id, asked) => return Ok(answer),
            // Not ours, or not DNS: wait for ours until the timeout.
            _ => continue,
        }
    }
}

async fn over_tcp(
    upstream: SocketAddr,
    query: &[u8],
    id: u16,
    asked: &Message,
) -> Result<Message, String> {
    let length =
        u16::try_from(query.len()).map_err(|_| "the query is too long for TCP".to_string())?;
    let mut stream = TcpStream::connect(upstream)
        .await
        .map_err(|e| e.to_string())?;
    let mut framed = Vec::with_capacity(query.len() + 2);
    framed.extend_from_slice(&length.to_be_bytes());
    framed.extend_from_slice(query);
    stream.write_all(&framed).await.map_err(|e| e.to_string())?;
    let length = stream.read_u16().await.map_err(|e| e.to_string())?;
    let mut buffer = vec![0u8; usize::from(length)];
    stream
        .read_exact(&mut buffer)
        .await
        .map_err(|e| e.to_string())?;
    let answer =
        Message::from_vec(&buffer).map_err(|e| format!("an answer that is not DNS: {e}"))?;
    match answers(&answer, id, asked) {
        true => Ok(answer),
        false => Err("an answer to another question".into()),
    }
}

/// The upstreams of the host: the `nameserver` lines of its resolv.conf
/// text, on port 53 (addresses with a zone or a port are not nameserver
/// lines the C library reads either).
pub fn host_upstreams(resolv_conf: &str) -> Vec<SocketAddr> {
    crate::network::resolv::ResolverConfig::parse(resolv_conf)
        .nameservers
        .iter()
        .filter_map(|server| server.parse::<IpAddr>().ok())
        .map(|ip| SocketAddr::new(ip, 53))
        .collect()
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    use hickory_proto::op::{Message, Query};
    use hickory_proto::rr::rdata::A;
    use hickory_proto::rr::{Name, RData, Record, RecordType};

    fn query(name: &str) -> Message {
        let mut message = Message::query();
        message.metadata.recursion_desired = true;
        message.add_query(Query::query(Name::from_ascii(name).unwrap(), RecordType::A));
        message
    }

    /// An upstream of the test's own on UDP: answers `behaviour(query)`,
    /// or stays silent for `None`.
    pub(crate) async fn upstream(
        behaviour: impl Fn(&Message) -> Option<Message> + Send + 'static,
    ) -> SocketAddr {
        let socket = UdpSocket::bind("127.0.0.1:0").await.unwrap();
        let address = socket.local_addr().unwrap();
        tokio::spawn(async move {
            let mut buffer = vec![0u8; 4096];
            while let Ok((length, from)) = socket.recv_from(&mut buffer).await {
                let Ok(asked) = Message::from_vec(&buffer[..length]) else {
                    continue;
                };
                if let Some(answer) = behaviour(&asked) {
                    let _ = socket.send_to(&answer.to_vec().unwrap(), from).await;
                }
            }
        });
        address
    }

    fn answer_with(asked: &Message, code: ResponseCode, ip: Option<[u8; 4]>) -> Message {
        let mut answer = Message::response(asked.metadata.id, asked.metadata.op_code);
        answer.metadata.response_code = code;
        answer.add_queries(asked.queries.iter().cloned());
        if let Some(ip) = ip {
            let name = asked.queries[0].name().clone();
            answer.add_answer(Record::from_rdata(
                name,
                60,
                RData::A(A::from(Ipv4Addr::from(ip))),
            ));
        }
        answer
    }

    #[tokio::test]
    async fn an_upstream_answers_under_the_clients_id() {
        let good =
            upstream(|q| Some(answer_with(q, ResponseCode::NoError, Some([192, 0, 2, 7])))).await;
        let forwarder = Forwarder::new(vec![good], Duration::from_secs(2));
        let asked = query("www.example.com.");
        let answer = forwarder.forward(&asked.to_vec().unwrap()).await.unwrap();
        assert_eq!(answer.metadata.id, asked.metadata.id);
        assert_eq!(answer.answers.len(), 1);
        assert_eq!(answer.answers[0].data, RData::A(A::new(192, 0, 2, 7)));
    }

    #[tokio::test]
    async fn a_truncated_answer_is_asked_again_over_tcp() {
        let (udp, tcp) = crate::dns::bind_both("127.0.0.1:0".parse().unwrap())
            .await
            .unwrap();
        let address = udp.local_addr().unwrap();
        tokio::spawn(async move {
            let mut buffer = vec![0u8; 4096];
            while let Ok((length, from)) = udp.recv_from(&mut buffer).await {
                let asked = Message::from_vec(&buffer[..length]).unwrap();
                let mut answer = answer_with(&asked, ResponseCode::NoError, None);
                answer.metadata.truncation = true;
                let _ = udp.send_to(&answer.to_vec().unwrap(), from).await;
            }
        });
        tokio::spawn(async move {
            while let Ok((mut stream, _)) = tcp.accept().await {
                let length = stream.read_u16().await.unwrap();
                let mut buffer = vec![0u8; usize::from(length)];
                stream.read_exact(&mut buffer).await.unwrap();
                let asked = Message::from_vec(&buffer).unwrap();
                let answer = answer_with(&asked, ResponseCode::NoError, Some([192, 0, 2, 9]));
                let bytes = answer.to_vec().unwrap();
                stream
                    .write_all(&(bytes.len() as u16).to_be_bytes())
                    .await
                    .unwrap();
                stream.write_all(&bytes).await.unwrap();
            }
        });
        let forwarder = Forwarder::new(vec![address], Duration::from_secs(2));
        let answer = forwarder
            .forward(&query("big.example.com.").to_vec().unwrap())
            .await
            .unwrap();
        assert!(!answer.metadata.truncation);
        assert_eq!(answer.answers[0].data, RData::A(A::new(192, 0, 2, 9)));
    }

    #[tokio::test]
    async fn failing_and_silent_upstreams_are_passed_over() {
        let silent = upstream(|_| None).await;
        let failing = upstream(|q| Some(answer_with(q, ResponseCode::ServFail, None))).await;
        let missing = upstream(|q| Some(answer_with(q, ResponseCode::NXDomain, None))).await;
        let forwarder = Forwarder::new(vec![silent, failing, missing], Duration::from_millis(300));
        let answer = forwarder
            .forward(&query("nothing.example.com.").to_vec().unwrap())
            .await
            .unwrap();
        assert_eq!(answer.metadata.response_code, ResponseCode::NXDomain);

        // Only failures: the last failure is the answer.
        let forwarder = Forwarder::new(vec![silent, failing], Duration::from_millis(300));
        let answer = forwarder
            .forward(&query("x.example.").to_vec().unwrap())
            .await
            .unwrap();
        assert_eq!(answer.metadata.response_code, ResponseCode::ServFail);

        // Only silence: an error that names the upstream.
        let forwarder = Forwarder::new(vec![silent], Duration::from_millis(200));
        let err = forwarder
            .forward(&query("x.example.").to_vec().unwrap())
            .await
            .unwrap_err()
            .to_string();
        assert!(err.contains(&silent.to_string()), "{err}");
    }

    #[tokio::test]
    async fn an_answer_to_another_question_is_not_taken() {
        let liar = upstream(|q| {
            let mut other = query("evil.example.");
            other.metadata.id = q.metadata.id;
            Some(answer_with(
                &other,
                ResponseCode::NoError,
                Some([203, 0, 113, 1]),
            ))
        })
        .await;
        let forwarder = Forwarder::new(vec![liar], Duration::from_millis(300));
        assert!(forwarder
            .forward(&query("bank.example.").to_vec().unwrap())
            .await
            .is_err());
    }

    #[tokio::test]
    async fn without_upstreams_or_with_garbage_forwarding_says_why() {
        let forwarder = Forwarder::new(Vec::new(), UPSTREAM_TIMEOUT);
        let err = forwarder
            .forward(&query("a.example.").to_vec().unwrap())
            .await
            .unwrap_err();
        assert!(matches!(err, ForwardError::NoUpstream), "{err}");
        let forwarder = Forwarder::new(vec!["127.0.0.1:9".parse().unwrap()], UPSTREAM_TIMEOUT);
        let err = forwarder.forward(&[1, 2, 3]).await.unwrap_err();
        assert!(matches!(err, ForwardError::BadQuery(_)), "{err}");
    }

    #[test]
    fn the_hosts_nameservers_are_the_upstreams() {
        let upstreams = host_upstreams(
            "nameserver 192.0.2.53\nnameserver fd00::53\nnameserver bogus\nsearch x\n",
        );
        assert_eq!(
            upstreams,
            [
                "192.0.2.53:53".parse::<SocketAddr>().unwrap(),
                "[fd00::53]:53".parse().unwrap()
            ]
        );
    }
}
