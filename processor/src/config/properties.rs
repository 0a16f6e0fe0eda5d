//! librdkafka properties passed through verbatim, and the redaction of their secrets.

use std::collections::BTreeMap;

use rdkafka::ClientConfig;

use crate::error::{Error, Result};

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
/// (rust-rdkafka's `Display` of a rejected property includes its value).
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
    /// Sets every property on `cfg` (after what it has: a later value wins).
    pub fn apply(&self, cfg: &mut ClientConfig) {
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

    /// Parses a client configuration file's text: one `key=value` a line, as in the
    /// `client.properties` files Kafka's own tools take (`--command-config`). Blank lines and
    /// lines starting with `#` or `!` are skipped; white space around the key and the value
    /// is trimmed; the value runs to the end of the line (it may contain `=`).
    ///
    /// # Errors
    /// [`Error::Config`] naming the line (never quoting it: it may hold a secret) when a
    /// line has no `=` or an empty key.
    pub fn parse(text: &str) -> Result<Properties> {
        let mut props = Properties::default();
        for (n, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') || line.starts_with('!') {
                continue;
            }
            match line.split_once('=') {
                Some((k, v)) if !k.trim().is_empty() => props.set(k.trim(), v.trim()),
                _ => {
                    return Err(Error::Config(format!("line {} of the client configuration is not `key=value`", n + 1)))
                }
            }
        }
        Ok(props)
    }

    /// Reads and [parses](Self::parse) a client configuration file.
    ///
    /// # Errors
    /// [`Error::Config`] when the file cannot be read or a line is not `key=value`.
    pub fn from_file(path: &std::path::Path) -> Result<Properties> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| Error::Config(format!("cannot read the client configuration {}: {e}", path.display())))?;
        Properties::parse(&text).map_err(|e| match e {
            Error::Config(m) => Error::Config(format!("{m} ({})", path.display())),
            e => e,
        })
    }

    /// The properties as the text [`parse`](Self::parse) reads, secrets included: for
    /// handing them to a child process through a private file, never for printing.
    pub fn to_file_text(&self) -> String {
        self.iter().map(|(k, v)| format!("{k}={v}\n")).collect()
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
    fn client_configuration_files_parse_and_round_trip() {
        let text = "# SASL over TLS\n\nsecurity.protocol = SASL_SSL\n! also a comment\nsasl.jaas.config=a=b c=d\n  sasl.password=hunter2  \n";
        let p = Properties::parse(text).unwrap();
        assert_eq!(p.get("security.protocol"), Some("SASL_SSL"));
        assert_eq!(p.get("sasl.jaas.config"), Some("a=b c=d"), "the value runs to the end of the line");
        assert_eq!(p.get("sasl.password"), Some("hunter2"));
        assert_eq!(p.iter().count(), 3);
        assert_eq!(Properties::parse(&p.to_file_text()).unwrap(), p);
        let e = Properties::parse("security.protocol=SSL\nhunter2\n").unwrap_err().to_string();
        assert!(e.contains("line 2") && !e.contains("hunter2"), "names the line, never quotes it: {e}");
        assert!(Properties::parse("=value").is_err());
        let mut q = Properties::default();
        q.set("security.protocol", "PLAINTEXT");
        q.set("linger.ms", "1");
        q.extend(&p);
        assert_eq!((q.get("security.protocol"), q.get("linger.ms")), (Some("SASL_SSL"), Some("1")));
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
