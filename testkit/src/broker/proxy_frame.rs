//! Reading a Kafka request's header and first body field, for the fault proxy's triggers.
//! Header: api_key, api_version, correlation_id, client_id (nullable int16 string in every
//! header version), then tagged fields in flexible versions.

use super::api;

/// The request's `client_id` (frame without its length); `None` if null or unreadable.
pub(crate) fn client_id(req: &[u8]) -> Option<&str> {
    let len = usize::try_from(i16::from_be_bytes(req.get(8..10)?.try_into().ok()?)).ok()?;
    std::str::from_utf8(req.get(10..10 + len)?).ok()
}

/// Whether a request (frame without its length) carries a non-null `transactional_id` as
/// the first field of its body: Produce v3 and later. Header: api_key, api_version,
/// correlation_id, client_id (nullable int16 string), then tagged fields in flexible
/// versions (Produce v9+), where the body's strings are compact (unsigned varint length+1).
pub(crate) fn has_transactional_id(req: &[u8]) -> bool {
    let rd16 = |at: usize| req.get(at..at + 2).map(|b| i16::from_be_bytes([b[0], b[1]]));
    let (Some(api), Some(version)) = (rd16(0), rd16(2)) else { return false };
    if api != api::PRODUCE || version < 3 {
        return false;
    }
    let mut at = 8;
    let Some(client_id) = rd16(at) else { return false };
    at += 2 + usize::try_from(client_id).unwrap_or(0);
    if version >= 9 {
        // Tagged fields of the header: a count, then (tag, size, bytes) each.
        let Some((count, n)) = uvarint(&req[at.min(req.len())..]) else { return false };
        at += n;
        for _ in 0..count {
            let Some((_, n)) = uvarint(&req[at.min(req.len())..]) else { return false };
            at += n;
            let Some((size, n)) = uvarint(&req[at.min(req.len())..]) else { return false };
            at += n + size as usize;
        }
        matches!(uvarint(&req[at.min(req.len())..]), Some((len, _)) if len > 0)
    } else {
        matches!(rd16(at), Some(len) if len >= 0)
    }
}

fn uvarint(b: &[u8]) -> Option<(u64, usize)> {
    let mut v = 0u64;
    for (i, byte) in b.iter().enumerate().take(10) {
        v |= u64::from(byte & 0x7f) << (7 * i);
        if byte & 0x80 == 0 {
            return Some((v, i + 1));
        }
    }
    None
}
