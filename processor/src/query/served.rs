//! How a store served over HTTP reads its key from a URL and writes its value as JSON
//! (feature `ops-server`): made where the store's types are known
//! ([`PipelineBuilder::serve_store`](crate::PipelineBuilder::serve_store)), kept without them
//! in the store's declaration.

use std::str::FromStr;
use std::sync::Arc;

use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::state::format;

/// The key as the URL gives it -> its stored encoding; or why it is not a key.
type ParseKey = Arc<dyn Fn(&str) -> Result<Vec<u8>, String> + Send + Sync>;
/// A stored value of a schema version -> the response with its JSON; or why it does not decode.
type RenderValue = Arc<dyn Fn(u8, &[u8]) -> Result<Response, String> + Send + Sync>;

/// A served store's key parser and value renderer.
#[derive(Clone)]
pub(crate) struct HttpCodec {
    pub(crate) key: ParseKey,
    pub(crate) value: RenderValue,
}

impl HttpCodec {
    /// The codec of a store with key type `K` (parsed from the URL with `FromStr`) and value
    /// type `V` (written with serde as JSON).
    pub(crate) fn of<K, V>() -> HttpCodec
    where
        K: FromStr + Serialize + 'static,
        K::Err: std::fmt::Display,
        V: Serialize + DeserializeOwned + 'static,
    {
        let key: ParseKey = Arc::new(|text: &str| -> Result<Vec<u8>, String> {
            let key = K::from_str(text)
                .map_err(|e| format!("{text:?} is not a key of type {}: {e}", std::any::type_name::<K>()))?;
            format::encode_key(&key).map_err(|e| e.to_string())
        });
        let value: RenderValue = Arc::new(|version: u8, bytes: &[u8]| -> Result<Response, String> {
            let value: V = format::decode_value(version, bytes).map_err(|m| m.to_string())?;
            Ok(Json(value).into_response())
        });
        HttpCodec { key, value }
    }
}

impl std::fmt::Debug for HttpCodec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("HttpCodec")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_parse_from_text_and_values_render_as_json() {
        let codec = HttpCodec::of::<u32, String>();
        assert_eq!((codec.key)("42").unwrap(), format::encode_key(&42u32).unwrap());
        let bad = (codec.key)("forty-two").unwrap_err();
        assert!(bad.contains("u32"), "{bad}");
        let stored = format::encode_value(3, &"€ 12".to_string()).unwrap();
        let response = (codec.value)(3, stored.as_slice()).expect("decodes");
        assert_eq!(response.status(), axum::http::StatusCode::OK);
        assert!((codec.value)(2, stored.as_slice()).is_err(), "another schema version does not decode");
    }
}
