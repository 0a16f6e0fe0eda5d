//! The cluster's finalized feature levels (`metadata.version`, `transaction.version`, ...), as
//! a broker reports them in its `ApiVersions` response.
//!
//! rdkafka exposes neither `DescribeFeatures` nor those fields, so the harness sends one
//! `ApiVersions` request (version 3, the first flexible one) over a plain TCP connection and
//! reads the response's tagged field 2, `FinalizedFeatures`: an array of
//! `(name, max_version_level, min_version_level)`. Brokers fill it from the metadata log, so
//! it is what `kafka-features describe` prints as `FinalizedVersionLevel`.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use super::{BrokerError, LocalCluster};

/// The finalized features of the cluster that the broker at `addr` (`host:port`) belongs to:
/// `(name, level)` pairs sorted by name, e.g. `("transaction.version", 2)`.
pub fn finalized_features(addr: &str) -> std::io::Result<Vec<(String, i16)>> {
    let mut s = TcpStream::connect(addr)?;
    s.set_read_timeout(Some(Duration::from_secs(5)))?;
    let client_id = b"kafka-eos-testkit";
    let mut req = Vec::new();
    req.extend(18i16.to_be_bytes()); // api key: ApiVersions
    req.extend(3i16.to_be_bytes()); // version 3: request header v2
    req.extend(11i32.to_be_bytes()); // correlation id
    req.extend((client_id.len() as i16).to_be_bytes());
    req.extend(client_id);
    req.push(0); // header tagged fields
    for text in [&b"kafka-eos"[..], env!("CARGO_PKG_VERSION").as_bytes()] {
        req.push(text.len() as u8 + 1); // compact string (short: one varint byte)
        req.extend(text);
    }
    req.push(0); // body tagged fields
    s.write_all(&(req.len() as i32).to_be_bytes())?;
    s.write_all(&req)?;
    let mut len = [0u8; 4];
    s.read_exact(&mut len)?;
    let mut resp = vec![0u8; i32::from_be_bytes(len).max(0) as usize];
    s.read_exact(&mut resp)?;
    parse(&resp).ok_or_else(|| std::io::Error::new(std::io::ErrorKind::InvalidData, "malformed ApiVersions response"))
}

/// Reads an `ApiVersions` v3 response (after the length prefix; header v0 = correlation id).
fn parse(resp: &[u8]) -> Option<Vec<(String, i16)>> {
    let mut r = Reader(resp);
    r.take(4)?; // correlation id
    let code = r.i16()?;
    if code != 0 {
        return None;
    }
    for _ in 0..r.compact_len()? {
        r.take(6)?; // api key, min and max version
        r.skip_tags()?;
    }
    r.take(4)?; // throttle time
    let mut features = Vec::new();
    for _ in 0..r.varint()? {
        let tag = r.varint()?;
        let size = r.varint()? as usize;
        let mut field = Reader(r.take(size)?);
        if tag == 2 {
            for _ in 0..field.compact_len()? {
                let len = field.compact_len()?;
                let name = field.take(len)?;
                let max_level = field.i16()?;
                field.i16()?; // min level
                field.skip_tags()?;
                features.push((String::from_utf8_lossy(name).into_owned(), max_level));
            }
        }
    }
    features.sort();
    Some(features)
}

struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let (head, rest) = (self.0.get(..n)?, self.0.get(n..)?);
        self.0 = rest;
        Some(head)
    }
    fn i16(&mut self) -> Option<i16> {
        self.take(2).map(|b| i16::from_be_bytes([b[0], b[1]]))
    }
    fn varint(&mut self) -> Option<u64> {
        let mut value = 0u64;
        for shift in (0..64).step_by(7) {
            let b = self.take(1)?[0];
            value |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return Some(value);
            }
        }
        None
    }
    /// A compact array's or string's length (stored plus one; 0 is null, read as empty).
    fn compact_len(&mut self) -> Option<usize> {
        self.varint().map(|n| n.saturating_sub(1) as usize)
    }
    fn skip_tags(&mut self) -> Option<()> {
        for _ in 0..self.varint()? {
            self.varint()?;
            let size = self.varint()? as usize;
            self.take(size)?;
        }
        Some(())
    }
}

impl LocalCluster {
    /// The cluster's finalized feature levels, asked of the first node that answers over its
    /// direct listener: `(name, level)` sorted by name, e.g. `("transaction.version", 0)`.
    pub fn finalized_features(&self) -> Result<Vec<(String, i16)>, BrokerError> {
        let mut last = String::new();
        for addr in self.direct_bootstrap_servers().split(',') {
            match finalized_features(addr) {
                Ok(features) => return Ok(features),
                Err(e) => last = format!("{addr}: {e}"),
            }
        }
        Err(BrokerError::Probe(format!("no node answered ApiVersions: {last}")))
    }

    /// The finalized `transaction.version` (0 when the cluster does not list it).
    pub fn transaction_version(&self) -> Result<i16, BrokerError> {
        let features = self.finalized_features()?;
        Ok(features.iter().find(|(name, _)| name == "transaction.version").map_or(0, |f| f.1))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_finalized_features() {
        let mut resp = vec![0, 0, 0, 11, 0, 0]; // correlation id, no error
        resp.extend([2, 0, 18, 0, 0, 0, 4, 0]); // one api key: ApiVersions 0..4
        resp.extend([0, 0, 0, 0]); // throttle time
        resp.push(2); // two tagged fields
        resp.extend([1, 8, 0, 0, 0, 0, 0, 0, 0, 5]); // tag 1: finalized epoch 5
        let mut field = vec![3]; // two features
        for (name, level) in [("transaction.version", 2i16), ("metadata.version", 27)] {
            field.push(name.len() as u8 + 1);
            field.extend(name.as_bytes());
            field.extend(level.to_be_bytes());
            field.extend(level.to_be_bytes());
            field.push(0);
        }
        resp.extend([2, field.len() as u8]);
        resp.extend(field);
        let want = vec![("metadata.version".to_string(), 27), ("transaction.version".to_string(), 2)];
        assert_eq!(parse(&resp), Some(want));
        assert_eq!(parse(&resp[..resp.len() - 3]), None, "truncated");
        assert_eq!(parse(&[0, 0, 0, 11, 0, 35]), None, "error code");
    }
}
