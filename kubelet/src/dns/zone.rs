//! The cluster domain as a DNS zone: its origin, the names of Services and
//! endpoints in it, and its SOA record, which negative answers carry so
//! that resolvers cache them only briefly.

use std::net::IpAddr;

use hickory_proto::rr::rdata::{A, AAAA, SOA};
use hickory_proto::rr::{Name, RData, Record};

/// The TTL of every answer: short, as Services and endpoints change.
pub const TTL: u32 = 5;

#[derive(Debug, thiserror::Error)]
#[error("{domain:?} is not a DNS domain such as cluster.local: {reason}")]
pub struct BadDomain {
    domain: String,
    reason: String,
}

/// The cluster domain (`cluster.local`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Zone {
    origin: Name,
}

impl Zone {
    /// The zone of `domain`, with or without its trailing dot.
    pub fn new(domain: &str) -> Result<Zone, BadDomain> {
        let bad = |reason: &str| BadDomain {
            domain: domain.to_string(),
            reason: reason.to_string(),
        };
        let trimmed = domain.trim().trim_end_matches('.');
        if trimmed.is_empty() {
            return Err(bad("it is empty"));
        }
        let valid_label = |label: &str| {
            !label.is_empty()
                && label.len() <= 63
                && label
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        };
        if !trimmed.split('.').all(valid_label) {
            return Err(bad(
                "each label must be 1 to 63 letters, digits, '-' or '_'",
            ));
        }
        let mut origin = Name::from_ascii(trimmed).map_err(|e| bad(&e.to_string()))?;
        origin.set_fqdn(true);
        Ok(Zone {
            origin: origin.to_lowercase(),
        })
    }

    pub fn origin(&self) -> &Name {
        &self.origin
    }

    /// `labels` (innermost first) under the zone; `None` when they do not
    /// make a DNS name (a label over 63 bytes, a name over 255).
    pub fn name(&self, labels: &[&str]) -> Option<Name> {
        Name::from_labels(labels.iter().map(|l| l.as_bytes()))
            .ok()?
            .append_domain(&self.origin)
            .ok()
    }

    /// `<svc>.<ns>.svc.<zone>`.
    pub fn service(&self, namespace: &str, service: &str) -> Option<Name> {
        self.name(&[service, namespace, "svc"])
    }

    /// `<hostname>.<svc>.<ns>.svc.<zone>`.
    pub fn endpoint(&self, hostname: &str, namespace: &str, service: &str) -> Option<Name> {
        self.name(&[hostname, service, namespace, "svc"])
    }

    /// The zone's SOA record; `serial` changes with the records.
    pub fn soa(&self, serial: u32) -> Record {
        let mname = self
            .name(&["ns", "dns"])
            .unwrap_or_else(|| self.origin.clone());
        let rname = self
            .name(&["hostmaster"])
            .unwrap_or_else(|| self.origin.clone());
        let soa = SOA::new(mname, rname, serial, 7200, 1800, 86400, TTL);
        Record::from_rdata(self.origin.clone(), TTL, RData::SOA(soa))
    }
}

/// An A or AAAA record of `name` for `ip`.
pub fn address_record(name: Name, ip: IpAddr) -> Record {
    let data = match ip {
        IpAddr::V4(v4) => RData::A(A(v4)),
        IpAddr::V6(v6) => RData::AAAA(AAAA(v6)),
    };
    Record::from_rdata(name, TTL, data)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_domain_is_checked_and_names_are_built_under_it() {
        let zone = Zone::new("Cluster.Local.").unwrap();
        assert_eq!(zone.origin().to_ascii(), "cluster.local.");
        assert_eq!(
            zone.service("default", "web").unwrap().to_ascii(),
            "web.default.svc.cluster.local."
        );
        assert_eq!(
            zone.endpoint("web-0", "default", "web").unwrap().to_ascii(),
            "web-0.web.default.svc.cluster.local."
        );
        assert_eq!(zone.service("default", &"x".repeat(64)), None);
        for bad in ["", ".", "a..b", "a b", &"x".repeat(64)] {
            let err = Zone::new(bad).unwrap_err().to_string();
            assert!(err.contains("is not a DNS domain"), "{bad}: {err}");
        }
        let soa = zone.soa(7);
        assert_eq!(soa.name.to_ascii(), "cluster.local.");
        let RData::SOA(data) = &soa.data else {
            panic!("{soa:?}")
        };
        assert_eq!(data.serial, 7);
        assert_eq!(data.minimum, TTL);
    }
}
