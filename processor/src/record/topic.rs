//! [`Topic`]: a topic name, cheap to clone.

use std::sync::Arc;

/// The name of a topic records are read from or written to: cheap to clone (a shared
/// `Arc<str>`).
///
/// It compares, hashes and orders like its `str` (and borrows as one), so a map keyed by
/// `Topic` is looked up with a `&str`:
///
/// ```
/// use std::collections::HashMap;
/// use kafka_eos::{InputRecord, Topic};
/// let rec = InputRecord::test("orders", 0, 7);
/// assert_eq!(rec.topic, "orders");
/// assert_eq!(rec.topic.as_str(), "orders");
/// let mut seen: HashMap<Topic, u64> = HashMap::new();
/// *seen.entry(rec.topic.clone()).or_default() += 1; // a reference count, no allocation
/// assert_eq!(seen.get("orders"), Some(&1));
/// ```
///
/// Declare the pipeline's fixed output topics with
/// [`PipelineBuilder::output_topic`](crate::PipelineBuilder::output_topic), which lists them
/// in [`PipelineConfig::output_topics`](crate::PipelineConfig::output_topics) (checked at
/// start-up). A topic chosen per record (routing by content) may be made with
/// [`Topic::new`] or from a `&str`/`String`: that allocates once per conversion, so keep
/// such topics in the processor rather than converting per record.
// The derived `Hash`, `Eq` and `Ord` are those of the `str` (`Arc<str>` delegates to it),
// as `Borrow<str>` requires.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Topic(pub(super) Arc<str>);

impl Topic {
    /// A topic named `name`.
    pub fn new(name: impl AsRef<str>) -> Topic {
        Topic(Arc::from(name.as_ref()))
    }

    /// The topic's name.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::ops::Deref for Topic {
    type Target = str;
    fn deref(&self) -> &str {
        &self.0
    }
}

impl AsRef<str> for Topic {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl std::borrow::Borrow<str> for Topic {
    fn borrow(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for Topic {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(&*self.0, f)
    }
}

impl std::fmt::Display for Topic {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl From<&Topic> for Topic {
    fn from(t: &Topic) -> Topic {
        t.clone()
    }
}

impl From<&str> for Topic {
    fn from(s: &str) -> Topic {
        Topic::new(s)
    }
}

impl From<String> for Topic {
    fn from(s: String) -> Topic {
        Topic(Arc::from(s))
    }
}

impl From<&String> for Topic {
    fn from(s: &String) -> Topic {
        Topic::new(s)
    }
}

impl PartialEq<str> for Topic {
    fn eq(&self, other: &str) -> bool {
        &*self.0 == other
    }
}

impl PartialEq<&str> for Topic {
    fn eq(&self, other: &&str) -> bool {
        &*self.0 == *other
    }
}

impl PartialEq<String> for Topic {
    fn eq(&self, other: &String) -> bool {
        *self.0 == **other
    }
}

impl PartialEq<Topic> for str {
    fn eq(&self, other: &Topic) -> bool {
        self == &*other.0
    }
}

impl PartialEq<Topic> for &str {
    fn eq(&self, other: &Topic) -> bool {
        *self == &*other.0
    }
}

impl PartialEq<Topic> for String {
    fn eq(&self, other: &Topic) -> bool {
        **self == *other.0
    }
}

impl From<Topic> for String {
    fn from(t: Topic) -> String {
        t.0.to_string()
    }
}
