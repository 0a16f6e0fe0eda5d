//! `GET /state/{store}/{key}` on the ops server (feature `ops-server`): a store's committed
//! value as JSON, answered by the instance that owns the key's partition.
//!
//! | answer | when |
//! |---|---|
//! | `200`, the value as JSON | this instance owns the key's partition and the key has a value |
//! | `404` `{"error":"absent"}` | it owns the partition and the key has none |
//! | `307` to `http://<owner>/state/<store>/<key>?redirected=1` | another instance owns the partition |
//! | `503` (`Retry-After: 1`) | the partition is being restored here, or its owner is not known yet (a rebalance under way), or a redirected request did not find the owner either |
//! | `400` | the key does not parse as the store's key type |
//! | `404` `{"error":"unknown store"}` | no store of that name is served ([`serve_store`](crate::PipelineBuilder::serve_store)) |
//!
//! A **redirect, not a forward**: an instance never waits on another's answer (no request
//! holds two servers, and the server needs no HTTP client), and the client learns the owner
//! to ask next time. A redirected request is never redirected again: if the group moved
//! the partition in between, the client gets `503` and asks the first instance again,
//! rather than following the group around.
//!
//! The key is the URL's path segment, percent-decoded: the store's key type parses it
//! (`FromStr`), and its UTF-8 bytes are the input record key the partitioner is given
//! (a `String` key is its own text; other key types must be keyed by their text in the
//! input, as the financial close keys payments by the merchant's decimal id).

use std::fmt::Write;

use axum::extract::{Path, State};
use axum::http::{header, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};

use super::answer::QueryAnswer;
use super::error::QueryError;
use super::handle::StateQuery;
use super::served::HttpCodec;

/// The query parameter a redirect adds: the request was sent here as the owner.
const REDIRECTED: &str = "redirected=1";

/// The `/state` routes, answering from `query`.
pub(crate) fn router(query: StateQuery) -> Router {
    Router::new().route("/state/{store}/{key}", get(lookup)).with_state(query)
}

/// An answer other than a value.
#[derive(serde::Serialize)]
struct Problem {
    error: &'static str,
    detail: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    partition: Option<i32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    owner: Option<String>,
}

fn problem(status: StatusCode, error: &'static str, detail: String) -> Response {
    placed(status, error, detail, None, None)
}

fn placed(
    status: StatusCode,
    error: &'static str,
    detail: String,
    partition: Option<i32>,
    owner: Option<String>,
) -> Response {
    let body = Json(Problem { error, detail, partition, owner });
    if status == StatusCode::SERVICE_UNAVAILABLE {
        (status, [(header::RETRY_AFTER, "1")], body).into_response()
    } else {
        (status, body).into_response()
    }
}

async fn lookup(State(query): State<StateQuery>, Path((store, key)): Path<(String, String)>, uri: Uri) -> Response {
    let Some((index, version, codec)) = served(&query, &store) else {
        let detail = format!("no store named {store:?} is served (PipelineBuilder::serve_store)");
        return problem(StatusCode::NOT_FOUND, "unknown store", detail);
    };
    let encoded = match (codec.key)(key.as_str()) {
        Ok(encoded) => encoded,
        Err(why) => return problem(StatusCode::BAD_REQUEST, "bad key", why),
    };
    // A disk backend's read blocks: never on an async worker.
    let (q, input_key) = (query.clone(), key.clone().into_bytes());
    let answer = match tokio::task::spawn_blocking(move || q.get_raw(index, &encoded, &input_key)).await {
        Ok(answer) => answer,
        Err(e) => return problem(StatusCode::INTERNAL_SERVER_ERROR, "query failed", e.to_string()),
    };
    match answer {
        Ok(QueryAnswer::Found(bytes)) => match (codec.value)(version, bytes.as_slice()) {
            Ok(response) => response,
            Err(why) => problem(StatusCode::INTERNAL_SERVER_ERROR, "undecodable value", why),
        },
        Ok(QueryAnswer::Absent) => {
            problem(StatusCode::NOT_FOUND, "absent", format!("store {store:?} has no committed value for this key"))
        }
        Ok(QueryAnswer::NotReady { partition }) => placed(
            StatusCode::SERVICE_UNAVAILABLE,
            "not ready",
            format!("partition {partition} is being restored on this instance"),
            Some(partition),
            None,
        ),
        Ok(QueryAnswer::NotOwnedHere { partition: _, owner: Some(owner) }) if !redirected(&uri) => {
            redirect(&owner, &store, &key)
        }
        Ok(QueryAnswer::NotOwnedHere { partition, owner }) => {
            let detail = match owner {
                Some(_) => format!(
                    "partition {partition} is not owned by this instance either: it moved while the request was \
                     redirected; ask again"
                ),
                None => format!(
                    "partition {partition} is not owned by this instance, and its owner is not known yet (a \
                     rebalance under way)"
                ),
            };
            placed(StatusCode::SERVICE_UNAVAILABLE, "not owned here", detail, Some(partition), owner)
        }
        Err(e) => {
            let status = match &e {
                QueryError::NotRunning => StatusCode::SERVICE_UNAVAILABLE,
                QueryError::Unsupported { .. } => StatusCode::NOT_IMPLEMENTED,
                _ => StatusCode::INTERNAL_SERVER_ERROR,
            };
            problem(status, "query failed", e.to_string())
        }
    }
}

/// The index, schema version and codec of the served store named `store`.
fn served(query: &StateQuery, store: &str) -> Option<(usize, u8, HttpCodec)> {
    let stores = &query.config().stores;
    let (index, def) = stores.iter().enumerate().find(|(_, s)| &*s.name == store)?;
    Some((index, def.version, def.http.clone()?))
}

/// Whether the request came by a redirect.
fn redirected(uri: &Uri) -> bool {
    uri.query().is_some_and(|q| q.split('&').any(|p| p == REDIRECTED))
}

/// A redirect to the same question at `owner`.
fn redirect(owner: &str, store: &str, key: &str) -> Response {
    let location = format!("http://{owner}/state/{}/{}?{REDIRECTED}", escape(store), escape(key));
    (StatusCode::TEMPORARY_REDIRECT, [(header::LOCATION, location)]).into_response()
}

/// `segment` percent-encoded for a URL path: every byte but the unreserved ones.
fn escape(segment: &str) -> String {
    let mut out = String::with_capacity(segment.len());
    for b in segment.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(char::from(b));
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_escaped_for_the_redirect_and_a_redirect_is_told() {
        assert_eq!(escape("m-1_2.x~"), "m-1_2.x~");
        assert_eq!(escape("a b/é"), "a%20b%2F%C3%A9");
        let response = redirect("10.0.0.2:9100", "totals", "a/b");
        assert_eq!(response.status(), StatusCode::TEMPORARY_REDIRECT);
        let location = response.headers().get(header::LOCATION).unwrap().to_str().unwrap();
        assert_eq!(location, "http://10.0.0.2:9100/state/totals/a%2Fb?redirected=1");
        assert!(redirected(&"/state/totals/a?redirected=1".parse().unwrap()));
        assert!(!redirected(&"/state/totals/a".parse().unwrap()));
        assert!(!redirected(&"/state/totals/a?x=redirected=1".parse().unwrap()));
    }
}
