//! The builder's options of queryable state ([`crate::query`]): the endpoint an instance
//! advertises, the input's partitioner, and the stores served over HTTP.

use super::PipelineBuilder;
use crate::config::pipeline::Advertise;
use crate::query::Partitioner;
#[cfg(feature = "ops-server")]
use crate::state::Store;
use crate::state::StoreDef;

impl PipelineBuilder {
    /// The endpoint (`host:port`) the other instances of the pipeline reach this one at to
    /// query its state — Kafka Streams' `application.server`: this instance advertises it
    /// with its assignment on the compacted topic `<application-id>-endpoints` (created at
    /// start-up if missing: one partition, the changelogs' replication), and reads the
    /// others' adverts to tell which instance owns a key
    /// ([`StateQuery::metadata_for_key`](crate::query::StateQuery::metadata_for_key)). The
    /// application serves the queries there itself, with a
    /// [`StateQuery`](crate::query::StateQuery), or lets the ops server do it (`serve_store`,
    /// `advertise_ops_address`: feature `ops-server`).
    /// Needs a store. Default: none (queries still answer for this instance's own
    /// partitions, without the owners of the others).
    pub fn advertised_endpoint(mut self, endpoint: impl Into<String>) -> Self {
        self.advertise = Some(Advertise::Endpoint(endpoint.into()));
        self
    }

    /// Advertises the address the ops server is bound to ([`ops_address`](Self::ops_address),
    /// its port known once bound: port 0 works) as this instance's endpoint, as
    /// [`advertised_endpoint`](Self::advertised_endpoint) does. The ops address must then name
    /// an interface the other instances reach (not `0.0.0.0`): behind a proxy or NAT,
    /// advertise the name they use instead. Feature `ops-server`.
    #[cfg(feature = "ops-server")]
    pub fn advertise_ops_address(mut self) -> Self {
        self.advertise = Some(Advertise::OpsAddress);
        self
    }

    /// How the producers of the input topics partition records by key: what a query uses
    /// to find the partition, and so the owner, of a key. Default
    /// [`Partitioner::murmur2`], the Java client's default; producers built on librdkafka
    /// must set `partitioner=murmur2_random` to match it (librdkafka's own default places
    /// keys differently), or give the pipeline their rule with [`Partitioner::custom`].
    pub fn input_partitioner(mut self, partitioner: Partitioner) -> Self {
        self.partitioner = Some(partitioner);
        self
    }

    /// Serves `store` on the ops server: `GET /state/<store>/<key>` answers the key's
    /// committed value as JSON, from the instance that owns it (or redirects there; see
    /// [`crate::query`]). The key in the URL is parsed with `K: FromStr`, and its text is
    /// the input record key the partitioner is given. Needs an
    /// [`ops_address`](Self::ops_address). Feature `ops-server`.
    ///
    /// # Panics
    /// If the handle was declared on another builder.
    #[cfg(feature = "ops-server")]
    pub fn serve_store<K, V>(&mut self, store: &Store<K, V>)
    where
        K: std::str::FromStr + serde::Serialize + serde::de::DeserializeOwned + 'static,
        K::Err: std::fmt::Display,
        V: serde::Serialize + serde::de::DeserializeOwned + 'static,
    {
        match self.stores.get_mut(store.index) {
            Some(def) if std::sync::Arc::ptr_eq(&def.name, &store.name) => {
                def.http = Some(crate::query::served::HttpCodec::of::<K, V>());
            }
            _ => panic!(
                "store handle {:?} was declared on another pipeline's builder: serve the handle this builder \
                 returned",
                store.name()
            ),
        }
    }
}

/// Why the queryable-state options are refused, if they are: the builder's `advertise`,
/// `stores` and `ops_address` (the validation has moved other fields out already).
pub(super) fn check(
    advertise: Option<&Advertise>,
    stores: &[StoreDef],
    ops_address: Option<std::net::SocketAddr>,
) -> Result<(), String> {
    if let Some(advertise) = advertise {
        if stores.is_empty() {
            return Err("an endpoint is advertised for queries, but the pipeline has no store to query".into());
        }
        match advertise {
            Advertise::Endpoint(e) if !is_endpoint(e) => {
                return Err(format!(
                    "advertised_endpoint {e:?} must be host:port: a host name or address the other instances \
                     reach, and a port from 1 to 65535"
                ))
            }
            Advertise::Endpoint(_) => {}
            #[cfg(feature = "ops-server")]
            Advertise::OpsAddress => match ops_address {
                None => return Err("advertise_ops_address needs an ops_address".into()),
                Some(a) if a.ip().is_unspecified() => {
                    return Err(format!(
                        "advertise_ops_address: the ops address {a} is not one the other instances can reach; \
                         bind a specific interface, or advertise the name they reach this instance by with \
                         advertised_endpoint"
                    ))
                }
                Some(_) => {}
            },
        }
    }
    match stores.iter().find(|s| s.is_served()) {
        Some(s) if ops_address.is_none() => {
            Err(format!("serve_store({:?}) needs an ops_address: the ops server serves the store", s.name()))
        }
        _ => Ok(()),
    }
}

/// Whether `endpoint` is `host:port` (an IPv6 address in brackets: `[::1]:9100`).
fn is_endpoint(endpoint: &str) -> bool {
    let clean = !endpoint.contains(|c: char| c.is_whitespace() || c == '/');
    match endpoint.rsplit_once(':') {
        Some((host, port)) => clean && !host.is_empty() && port.parse::<u16>().is_ok_and(|p| p > 0),
        None => false,
    }
}
