//! The builder's state: stores, their backend, tables and global tables, and the late
//! topics and timers the window operators declare with their stores.

use serde::de::DeserializeOwned;
use serde::Serialize;

use super::PipelineBuilder;
use crate::record::Topic;
use crate::state::{Store, StoreSpec};

impl PipelineBuilder {
    /// Declares an in-memory state store with key type `K` and value type `V` (schema
    /// version 1) and returns its handle: `ctx.store(&handle)` in the processor. Its
    /// changelog topic `<application_id>-<name>-changelog` is created at start-up if
    /// missing: compacted, one partition per input partition. Stores need a single input
    /// topic. See [`crate::state`].
    ///
    /// Takes `&mut self` (unlike the other options) because it returns the handle:
    /// ```
    /// # use kafka_eos::Pipeline;
    /// let mut builder = Pipeline::builder().application_id("close");
    /// let totals = builder.store::<String, i64>("totals");
    /// let builder = builder.processor(move |ctx, _rec| {
    ///     let n = ctx.store(&totals).get(&"all".to_string())?.unwrap_or(0);
    ///     ctx.store(&totals).put(&"all".to_string(), &(n + 1))?;
    ///     Ok(())
    /// });
    /// ```
    pub fn store<K, V>(&mut self, name: impl Into<String>) -> Store<K, V>
    where
        K: Serialize + DeserializeOwned + 'static,
        V: Serialize + DeserializeOwned + 'static,
    {
        self.store_spec(StoreSpec::new(name))
    }

    /// Keeps the committed state of every store declared without a backend of its own
    /// (with [`store`](Self::store), by the [operators](crate::operators), or a
    /// [`StoreSpec`] without [`backend`](StoreSpec::backend)) in `factory`'s backends —
    /// e.g. `kafka_eos_disk::DiskStore::at(dir).factory()`, whose checkpoints make a
    /// restart restore only the changelog's tail. Default: memory.
    pub fn state_backend(mut self, factory: crate::state::backend::BackendFactory) -> Self {
        self.state_backend = Some(factory);
        self
    }

    /// Declares a state store from a full [`StoreSpec`] (another backend, a schema version,
    /// migrations) and returns its handle.
    pub fn store_spec<K, V>(&mut self, spec: StoreSpec<K, V>) -> Store<K, V>
    where
        K: Serialize + DeserializeOwned + 'static,
        V: Serialize + DeserializeOwned + 'static,
    {
        let def = spec.into_def();
        let handle = Store::new(self.stores.len(), def.name.clone());
        self.stores.push(def);
        handle
    }

    /// Declares a table read from the compacted topic `topic`, its values decoded with
    /// `codec`, and returns its handle: `ctx.table(&handle).get(key)` in the processor, for
    /// stream–table joins. The topic must have as many partitions as the input topic and be
    /// keyed like it: input partition *n* sees table partition *n*, read to its end before
    /// the partition's first record and kept up to date before every batch. See
    /// [`crate::table`] for what a lookup sees and what it costs.
    /// ```
    /// # use kafka_eos::{codec::Json, Pipeline};
    /// #[derive(serde::Serialize, serde::Deserialize)]
    /// struct Merchant { country: String }
    /// let mut builder = Pipeline::builder().application_id("enrich").input_topic("payments");
    /// let merchants = builder.table::<Merchant, _>("merchants", Json);
    /// assert_eq!(merchants.topic(), "merchants");
    /// ```
    pub fn table<V, C>(&mut self, topic: impl Into<String>, codec: C) -> crate::table::Table<V>
    where
        V: Send + Sync + 'static,
        C: crate::codec::Codec<V> + 'static,
    {
        let (def, handle) = crate::table::declare(self.tables.len(), false, topic.into(), codec);
        self.tables.push(def);
        handle
    }

    /// Declares a global table read from the compacted topic `topic`, its values decoded
    /// with `codec`, and returns its handle, looked up as a co-partitioned table's is:
    /// `ctx.table(&handle).get(key)`. Every instance reads every partition of the topic
    /// (any partition count, any keys: no co-partitioning with the input), to its end before
    /// the pipeline processes its first record, and keeps it current while it runs; one
    /// copy per instance, shared by all its tasks. For lookups by a key the stream is not
    /// partitioned by (merchant categories, currency rates). See [`crate::table`] for what
    /// a lookup sees, what it means for a replay, and what it costs.
    /// ```
    /// # use kafka_eos::{codec::Json, Pipeline};
    /// #[derive(serde::Serialize, serde::Deserialize)]
    /// struct Rate { per_eur: f64 }
    /// let mut builder = Pipeline::builder().application_id("convert").input_topic("payments");
    /// let rates = builder.global_table::<Rate, _>("currency-rates", Json);
    /// assert!(rates.is_global());
    /// ```
    pub fn global_table<V, C>(&mut self, topic: impl Into<String>, codec: C) -> crate::table::Table<V>
    where
        V: Send + Sync + 'static,
        C: crate::codec::Codec<V> + 'static,
    {
        let (def, handle) = crate::table::declare(self.global_tables.len(), true, topic.into(), codec);
        self.global_tables.push(def);
        handle
    }

    /// Declares the store of an operator: as [`store`](Self::store), with the operator's
    /// `role` (`dedup`, `tumbling windows`, ...) for the topology description.
    pub(crate) fn operator_store<K, V>(&mut self, name: impl Into<String>, role: &'static str) -> Store<K, V>
    where
        K: Serialize + DeserializeOwned + 'static,
        V: Serialize + DeserializeOwned + 'static,
    {
        let handle = self.store(name);
        if let Some(def) = self.stores.last_mut() {
            def.role = role;
        }
        handle
    }

    /// Declares the late-records topic of the window operator whose store is `store`: an
    /// [output topic](Self::output_topic), listed as a late topic in the topology description.
    pub(crate) fn late_topic(&mut self, topic: &str, store: &str) -> Topic {
        self.late_topics.push((topic.to_string(), store.to_string()));
        self.output_topic(topic)
    }

    /// Registers the pipeline's [`Timers`](crate::timers::Timers) (their constructor calls it).
    pub(crate) fn declare_timers(&mut self, timers: crate::timers::Timers) {
        self.timers.push(timers);
    }

    /// The stores declared so far.
    #[cfg(test)]
    pub(crate) fn store_defs(&self) -> &[crate::state::StoreDef] {
        &self.stores
    }
}
