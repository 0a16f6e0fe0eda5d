//! librdkafka properties passed through verbatim, and the redaction of their secrets.

use std::collections::BTreeMap;

use rdkafka::ClientConfig;

/// librdkafka properties whose values are secrets: never printed by `Debug` or logs. Any
/// key ending in `password`, `secret` or `passphrase` is treated as one too.
const SENSITIVE: &[&str] = &[
    "sasl.password",
    "sasl.oauthbearer.client.secret",
    "sasl.oauthbearer.client.credentials.client.secret",
    "sasl.oauthbearer.config",
    "sasl.oauthbearer.assertion.private.key.passphrase",
    "sasl.oauthbearer.assertion.private.key.pem",
    "ssl.key.password",
    "ssl.keystore.password",
    "ssl.key.pem",
    "ssl_key",
];

/// Whether the value of librdkafka property `key` is a secret (see [`Properties`]).
pub fn is_sensitive(key: &str) -> bool {
    SENSITIVE.contains(&key) || ["password", "secret", "passphrase"].iter().any(|s| key.ends_with(s))
}

/// A librdkafka client-creation error as text, without the value of a sensitive property
/// (rust-rdkafka's `Display` of a rejected property includes its value). Public with the
/// feature `test-hooks` only (rdkafka's type).
pub fn client_error(e: &rdkafka::error::KafkaError) -> String {
    match e {
        rdkafka::error::KafkaError::ClientConfig(_, desc, key, _) if is_sensitive(key) => {
            format!("Client config error: {desc} {key} [redacted]")
        }
        e => e.to_string(),
    }
}

/// Properties passed to librdkafka verbatim, with secrets redacted in `Debug`: the values of
/// `sasl.password`, `ssl.key.password`, `ssl.keystore.password`, `ssl.key.pem`,
/// `sasl.oauthbearer.config`, `sasl.oauthbearer.client.secret` and the other keys
/// [`is_sensitive`] names print as `[redacted]`.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Properties(BTreeMap<String, String>);

impl Properties {
    /// Sets `key` to `value`.
    pub fn set(&mut self, key: impl Into<String>, value: impl Into<String>) {
        self.0.insert(key.into(), value.into());
    }
    /// The value of `key`, if set.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).map(String::as_str)
    }
    /// Every property, in key order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.0.iter().map(|(k, v)| (k.as_str(), v.as_str()))
    }
    /// `text` with the value of every sensitive property replaced by `[redacted]`: for
    /// quoting librdkafka's messages in errors and logs.
    pub fn redact(&self, text: &str) -> String {
        self.iter()
            .filter(|(k, v)| is_sensitive(k) && !v.is_empty())
            .fold(text.to_string(), |text, (_, v)| text.replace(v, "[redacted]"))
    }
    /// [`set_on`](Self::set_on), for the test kit's and the CLI's own clients (feature
    /// `test-hooks`, outside semver: rdkafka's type).
    #[cfg(feature = "test-hooks")]
    #[doc(hidden)]
    pub fn apply(&self, cfg: &mut ClientConfig) {
        self.set_on(cfg);
    }

    /// Sets every property on `cfg` (after what it has: a later value wins).
    pub(crate) fn set_on(&self, cfg: &mut ClientConfig) {
        for (k, v) in self.iter() {
            cfg.set(k, v);
        }
    }

    /// Sets every property of `other`, overriding the ones set here.
    pub fn extend(&mut self, other: &Properties) {
        for (k, v) in other.iter() {
            self.set(k, v);
        }
    }
}

impl std::fmt::Debug for Properties {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_map().entries(self.iter().map(|(k, v)| (k, if is_sensitive(k) { "[redacted]" } else { v }))).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn later_values_win_and_debug_redacts() {
        let mut p = Properties::default();
        p.set("security.protocol", "SASL_SSL");
        p.set("sasl.password", "hunter2");
        let mut q = Properties::default();
        q.set("security.protocol", "PLAINTEXT");
        q.set("linger.ms", "1");
        q.extend(&p);
        assert_eq!((q.get("security.protocol"), q.get("linger.ms")), (Some("SASL_SSL"), Some("1")));
        assert!(!format!("{q:?}").contains("hunter2"));
    }

    #[test]
    fn client_errors_redact_secrets() {
        // librdkafka refuses `ssl_key` as a string, and rust-rdkafka quotes the value.
        let create = |k: &str, v: &str| {
            ClientConfig::new().set(k, v).create::<rdkafka::consumer::BaseConsumer>().err().expect("rejected")
        };
        let e = create("ssl_key", "hunter2");
        assert!(e.to_string().contains("hunter2"), "{e}");
        let s = client_error(&e);
        assert!(!s.contains("hunter2") && s.contains("ssl_key"), "{s}");
        assert!(client_error(&create("linger.ms", "soon")).contains("soon"));
    }
}
