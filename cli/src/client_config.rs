//! Client configuration files: the `client.properties` that Kafka's own tools take
//! (`--command-config`), read for `--client-config FILE` and written for the chaos suite's
//! instances.
//!
//! The format is Java's properties format — `key=value`, `key: value` or `key value`,
//! comments with `#` or `!`, a trailing `\` continuing a line (a long `sasl.jaas.config`),
//! backslash escapes — so it is read and written with the `java-properties` crate rather
//! than split on `=` by hand: a value with a backslash or a continued line then means what
//! it means to the Java tools. (The crate brings `regex`; it lives here, in the tooling, not
//! in the library.)

use std::path::Path;

use kafka_eos::config::Properties;
use kafka_eos::Error;

/// Parses a client configuration's text.
///
/// # Errors
/// [`Error::Config`] for text that is not in the properties format, naming the line but
/// never quoting it (it may hold a secret).
pub fn parse(text: &str) -> Result<Properties, Error> {
    let map = java_properties::read(text.as_bytes()).map_err(|e| {
        let line = e.line_number().map_or(String::new(), |n| format!(" (line {n})"));
        Error::Config(format!("the client configuration is not in the properties format{line}"))
    })?;
    let mut props = Properties::default();
    let mut entries: Vec<_> = map.into_iter().collect();
    entries.sort();
    for (k, v) in entries {
        if k.trim().is_empty() {
            return Err(Error::Config("the client configuration has a property with an empty key".into()));
        }
        props.set(k, v);
    }
    Ok(props)
}

/// Reads and [parses](parse) a client configuration file.
pub fn read(path: &Path) -> Result<Properties, Error> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| Error::Config(format!("cannot read the client configuration {}: {e}", path.display())))?;
    parse(&text).map_err(|e| match e {
        Error::Config(m) => Error::Config(format!("{m} ({})", path.display())),
        e => e,
    })
}

/// The properties as a client configuration's text, secrets included (escaped as the
/// format needs): for handing them to a child process through a private file, never for
/// printing.
pub fn to_text(props: &Properties) -> String {
    let mut out = Vec::new();
    let map: std::collections::HashMap<String, String> =
        props.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
    // Writing to a Vec cannot fail.
    java_properties::write(&mut out, &map).expect("writing properties to memory");
    String::from_utf8(out).expect("java-properties writes UTF-8")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn java_properties_files_parse_as_the_java_tools_read_them() {
        let text = "# SASL over TLS\n\nsecurity.protocol = SASL_SSL\n! also a comment\n\
                    sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required \\\n    \
                    username=\"alice\" password=\"a=b\";\nsasl.mechanism: PLAIN\nssl.ca.location C\\:\\\\certs\\\\ca.pem\n";
        let p = parse(text).unwrap();
        assert_eq!(p.get("security.protocol"), Some("SASL_SSL"));
        assert_eq!(
            p.get("sasl.jaas.config"),
            Some(
                "org.apache.kafka.common.security.plain.PlainLoginModule required username=\"alice\" password=\"a=b\";"
            ),
            "a continued line joins, `=` inside the value stays"
        );
        assert_eq!(p.get("sasl.mechanism"), Some("PLAIN"), "`:` separates too");
        assert_eq!(p.get("ssl.ca.location"), Some("C:\\certs\\ca.pem"), "escapes are undone");
        assert_eq!(p.iter().count(), 4);
    }

    #[test]
    fn written_text_reads_back_the_same_secrets_included() {
        let mut p = Properties::default();
        p.set("sasl.password", "p@ss = w\\rd: #1 ");
        p.set("sasl.jaas.config", "x required password=\"y\";");
        p.set("security.protocol", "SASL_SSL");
        assert_eq!(parse(&to_text(&p)).unwrap(), p);
    }
}
