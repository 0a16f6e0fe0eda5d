//! One store of one partition: its committed backend and the open transaction's overlay,
//! read through by the typed store handles.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::backend::{BackendError, KeyValueBackend};
use super::error::StateError;
use crate::record::Topic;

/// One store of one partition: committed backend plus the open transaction's overlay.
pub(crate) struct StoreCell {
    pub(super) name: Arc<str>,
    pub(super) partition: i32,
    pub(super) version: u8,
    pub(super) changelog: Topic,
    pub(super) backend: Box<dyn KeyValueBackend>,
    /// Changes of the open transaction, latest per key; `None` is a delete.
    pub(super) pending: BTreeMap<Vec<u8>, Option<Vec<u8>>>,
}

impl StoreCell {
    pub(super) fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, StateError> {
        match self.pending.get(key) {
            Some(v) => Ok(v.clone()),
            None => self.backend.try_get(key).map_err(|source| self.backend_error(source)),
        }
    }

    pub(super) fn backend_error(&self, source: BackendError) -> StateError {
        StateError::Backend { store: self.name.to_string(), partition: self.partition, source }
    }

    /// Committed entries with the overlay applied, in key byte order.
    pub(super) fn merged(&self) -> Vec<(Vec<u8>, Vec<u8>)> {
        let mut out = Vec::with_capacity(self.backend.len());
        let mut pending = self.pending.iter().peekable();
        for (k, v) in self.backend.scan() {
            while let Some((pk, pv)) = pending.next_if(|(pk, _)| pk.as_slice() < k.as_slice()) {
                if let Some(pv) = pv {
                    out.push((pk.clone(), pv.clone()));
                }
            }
            match pending.next_if(|(pk, _)| pk.as_slice() == k.as_slice()) {
                Some((_, Some(pv))) => out.push((k, pv.clone())),
                Some((_, None)) => {}
                None => out.push((k, v)),
            }
        }
        out.extend(pending.filter_map(|(k, v)| v.as_ref().map(|v| (k.clone(), v.clone()))));
        out
    }
}
