//! `cargo bench --bench commit_latency -- --broker-breakdown`: where the commit step's time goes, the broker's share against ours.
//!
//! The broker runs with `kafka.request.logger` at DEBUG: every request it completes is logged
//! with its time inside the broker (`totalTimeMs`, split into request-queue, local, remote,
//! response-queue and send time). A commit step of ours is three requests to the
//! transaction and group coordinators, in order: `AddOffsetsToTxn`, `TxnOffsetCommit`,
//! `EndTxn`. With one input partition, one transactional.id runs them one transaction after
//! the other, so its k-th successful request of each kind belongs to the client's k-th
//! commit (matched by count, not by position: the broker logs a request when its response
//! has been sent, so one request's line can come after the next one's). The difference is
//! what the client, the network stack and the scheduling of both sides add, including the
//! backoff before a retried request (a failed attempt is counted, not matched).
//!
//! The request log costs the broker CPU on every request (fetches and produces too), so the
//! absolute figures are those of a slightly slower broker; the split is what this is for.

use std::collections::HashMap;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

/// The broker logger to turn up.
pub const LOGGER: (&str, &str) = ("kafka.request.logger", "DEBUG");

/// The requests of a commit step, in the order the client sends them.
const STEP: [&str; 3] = ["ADD_OFFSETS_TO_TXN", "TXN_OFFSET_COMMIT", "END_TXN"];

/// One completed request, as the broker logged it (times in ms).
#[derive(Debug, Clone, PartialEq)]
pub struct Completed {
    /// The request type as Kafka names it, e.g. `END_TXN`.
    pub api: String,
    /// The request's transactional.id, for the transactional requests.
    pub transactional_id: Option<String>,
    /// The response has no error code but 0 (every partition's, for `TxnOffsetCommit`).
    pub ok: bool,
    /// From the request's arrival to its response's send completing.
    pub total: f64,
    /// Waiting for a request handler thread.
    pub request_queue: f64,
    /// In the handler: validation, the log append.
    pub local: f64,
    /// Waiting in purgatory (replication, a coordinator's write).
    pub remote: f64,
    /// Waiting for a network thread to take the response.
    pub response_queue: f64,
    /// Writing the response to the socket.
    pub send: f64,
}

/// Parses one `Completed request:{json} (kafka.request.logger)` line; `None` for others.
pub fn parse(line: &str) -> Option<Completed> {
    let json = line.split_once("Completed request:")?.1;
    let json = json.rsplit_once(" (kafka.request.logger)").map_or(json, |(j, _)| j);
    let v: serde_json::Value = serde_json::from_str(json.trim()).ok()?;
    let f = |k: &str| v[k].as_f64().unwrap_or(0.0);
    let response = &v["response"];
    let partitions_ok =
        response["topics"].as_array().into_iter().flatten().all(|t| {
            t["partitions"].as_array().into_iter().flatten().all(|p| p["errorCode"].as_i64().unwrap_or(0) == 0)
        });
    Some(Completed {
        api: v["requestHeader"]["requestApiKeyName"].as_str()?.to_string(),
        transactional_id: v["request"]["transactionalId"].as_str().map(str::to_string),
        ok: response["errorCode"].as_i64().unwrap_or(0) == 0 && partitions_ok,
        total: f("totalTimeMs"),
        request_queue: f("requestQueueTimeMs"),
        local: f("localTimeMs"),
        remote: f("remoteTimeMs"),
        response_queue: f("responseQueueTimeMs"),
        send: f("sendTimeMs"),
    })
}

/// Reads what a node's log gained since the last read.
pub struct Cursor {
    path: PathBuf,
    offset: u64,
}

impl Cursor {
    /// A cursor at the log's current end.
    pub fn at_end(path: &Path) -> Cursor {
        let offset = std::fs::metadata(path).map(|m| m.len()).unwrap_or(0);
        Cursor { path: path.to_path_buf(), offset }
    }

    /// The requests completed since the last read.
    pub fn read_new(&mut self) -> std::io::Result<Vec<Completed>> {
        let mut file = std::fs::File::open(&self.path)?;
        file.seek(SeekFrom::Start(self.offset))?;
        let mut text = String::new();
        let read = file.read_to_string(&mut text)?;
        self.offset += read as u64;
        Ok(text.lines().filter_map(parse).collect())
    }
}

/// The broker's commit steps per transactional.id, in commit order: the k-th successful
/// request of each kind of `STEP` make the k-th step. Also the failed attempts per id.
pub fn commit_steps(requests: &[Completed]) -> HashMap<String, Vec<[Completed; 3]>> {
    let mut by_kind: HashMap<String, [Vec<Completed>; 3]> = HashMap::new();
    for r in requests {
        let Some(kind) = STEP.iter().position(|a| *a == r.api) else { continue };
        let Some(id) = &r.transactional_id else { continue };
        if r.ok {
            by_kind.entry(id.clone()).or_default()[kind].push(r.clone());
        }
    }
    by_kind
        .into_iter()
        .map(|(id, [a, t, e])| {
            let steps = a.into_iter().zip(t).zip(e).map(|((a, t), e)| [a, t, e]).collect();
            (id, steps)
        })
        .collect()
}

/// Failed attempts of the commit-step requests (retried by the client), per kind of `STEP`.
pub fn failed_attempts(requests: &[Completed]) -> [usize; 3] {
    let mut failed = [0; 3];
    for r in requests.iter().filter(|r| !r.ok) {
        if let Some(kind) = STEP.iter().position(|a| *a == r.api) {
            failed[kind] += 1;
        }
    }
    failed
}

/// The longest run of commit steps in `steps` (one subject's transactional.id).
pub fn longest(steps: HashMap<String, Vec<[Completed; 3]>>) -> Vec<[Completed; 3]> {
    steps.into_values().max_by_key(Vec::len).unwrap_or_default()
}

fn quantile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    sorted[((sorted.len() as f64 * q).ceil() as usize).clamp(1, sorted.len()) - 1]
}

fn sorted(mut v: Vec<f64>) -> Vec<f64> {
    v.sort_by(f64::total_cmp);
    v
}

/// Prints the client's commit steps (`client_ms`, in commit order, warm-up included) beside
/// the broker's (`broker`), paired one to one, leaving out the first `warmup`.
/// `failed`: the failed attempts ([`failed_attempts`]).
pub fn report(subject: &str, client_ms: &[f64], broker: &[[Completed; 3]], failed: [usize; 3], warmup: usize) {
    println!(
        "\nbroker breakdown, {subject}: {} client commits, {} broker commit steps; failed attempts (retried) \
         AddOffsetsToTxn {}, TxnOffsetCommit {}, EndTxn {}",
        client_ms.len(),
        broker.len(),
        failed[0],
        failed[1],
        failed[2]
    );
    let paired = client_ms.len() == broker.len() && client_ms.len() > warmup;
    if !paired {
        println!("  (not paired: the counts differ, or nothing past the warm-up; distributions only)");
    }
    let broker = &broker[warmup.min(broker.len())..];
    let client = &client_ms[warmup.min(client_ms.len())..];
    let sum = |s: &[Completed; 3]| s.iter().map(|r| r.total).sum::<f64>();
    let columns: Vec<(&str, Vec<f64>)> = vec![
        ("client commit", client.to_vec()),
        ("broker sum", broker.iter().map(sum).collect()),
        ("AddOffsetsToTxn", broker.iter().map(|s| s[0].total).collect()),
        ("TxnOffsetCommit", broker.iter().map(|s| s[1].total).collect()),
        ("EndTxn", broker.iter().map(|s| s[2].total).collect()),
        ("client - broker", if paired { client.iter().zip(broker).map(|(c, b)| c - sum(b)).collect() } else { vec![] }),
    ];
    print!("  {:<6}", "ms");
    for (name, _) in &columns {
        print!(" {name:>16}");
    }
    println!();
    let columns: Vec<(&str, Vec<f64>)> = columns.into_iter().map(|(n, v)| (n, sorted(v))).collect();
    for (label, q) in [("p50", 0.5), ("p90", 0.9), ("p99", 0.99), ("max", 1.0)] {
        print!("  {label:<6}");
        for (_, v) in &columns {
            print!(" {:>16.2}", quantile(v, q));
        }
        println!();
    }
    if !paired {
        return;
    }
    // The slowest 1 % of the client's commits (at least 2): how much of each was the broker's.
    let mut order: Vec<usize> = (0..client.len()).collect();
    order.sort_by(|a, b| client[*b].total_cmp(&client[*a]));
    let top = &order[..(client.len() / 100).max(2).min(client.len())];
    let mean = |f: &dyn Fn(usize) -> f64| top.iter().map(|&i| f(i)).sum::<f64>() / top.len() as f64;
    let part = |f: fn(&Completed) -> f64| mean(&|i| broker[i].iter().map(f).sum());
    println!(
        "  slowest {} client commits: client {:.2} ms, broker {:.2} ms (request queue {:.2}, local {:.2}, remote {:.2}, \
         response queue {:.2}, send {:.2}); per request {:.2} / {:.2} / {:.2}",
        top.len(),
        mean(&|i| client[i]),
        mean(&|i| sum(&broker[i])),
        part(|r| r.request_queue),
        part(|r| r.local),
        part(|r| r.remote),
        part(|r| r.response_queue),
        part(|r| r.send),
        mean(&|i| broker[i][0].total),
        mean(&|i| broker[i][1].total),
        mean(&|i| broker[i][2].total),
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(api: &str, id: &str, total: f64) -> String {
        line_with(api, id, total, 0)
    }

    fn line_with(api: &str, id: &str, total: f64, error: i32) -> String {
        format!(
            "[2026-12-01 22:38:33,358] DEBUG Completed request:{{\"isForwarded\":false,\"requestHeader\":{{\"requestApiKey\":26,\
             \"requestApiKeyName\":\"{api}\"}},\"request\":{{\"transactionalId\":\"{id}\"}},\"response\":{{\"errorCode\":{error}}},\"totalTimeMs\":{total},\
             \"requestQueueTimeMs\":0.1,\"localTimeMs\":0.5,\"remoteTimeMs\":0.2,\"responseQueueTimeMs\":0.1,\"sendTimeMs\":0.05}} \
             (kafka.request.logger)"
        )
    }

    #[test]
    fn a_completed_request_line_parses_and_others_do_not() {
        let r = parse(&line("END_TXN", "app-in:0", 3.25)).expect("parsed");
        assert_eq!(
            (r.api.as_str(), r.transactional_id.as_deref(), r.total, r.local),
            ("END_TXN", Some("app-in:0"), 3.25, 0.5)
        );
        let toc = "DEBUG Completed request:{\"requestHeader\":{\"requestApiKeyName\":\"TXN_OFFSET_COMMIT\"},\
                   \"request\":{\"transactionalId\":\"t\"},\"response\":{\"topics\":[{\"partitions\":\
                   [{\"errorCode\":0},{\"errorCode\":51}]}]},\"totalTimeMs\":1.5} (kafka.request.logger)";
        assert!(!parse(toc).expect("parsed").ok, "a partition's error fails the attempt");
        assert!(parse(&line("END_TXN", "t", 1.0)).expect("parsed").ok);
        assert_eq!(parse("[2026-12-01 22:38:33,358] INFO [KafkaRaftServer nodeId=1] started (kafka.server)"), None);
    }

    #[test]
    fn the_kth_successful_request_of_each_kind_make_the_kth_step() {
        let lines = [
            line("ADD_OFFSETS_TO_TXN", "a", 1.0),
            line("ADD_OFFSETS_TO_TXN", "b", 9.0),
            line("TXN_OFFSET_COMMIT", "a", 2.0),
            // Logged late: after the next request of its transaction.
            line("END_TXN", "b", 6.0),
            line("TXN_OFFSET_COMMIT", "b", 5.0),
            line("END_TXN", "a", 3.0),
            // A failed attempt, retried: counted, not matched.
            line_with("ADD_OFFSETS_TO_TXN", "a", 0.5, 51),
            line("ADD_OFFSETS_TO_TXN", "a", 4.0),
            line("TXN_OFFSET_COMMIT", "a", 5.0),
            line("END_TXN", "a", 6.0),
            line("FETCH", "a", 100.0),
        ];
        let reqs: Vec<Completed> = lines.iter().filter_map(|l| parse(l)).collect();
        let steps = commit_steps(&reqs);
        let totals =
            |id: &str| steps[id].iter().map(|s| s.iter().map(|r| r.total).collect::<Vec<_>>()).collect::<Vec<_>>();
        assert_eq!(totals("a"), vec![vec![1.0, 2.0, 3.0], vec![4.0, 5.0, 6.0]]);
        assert_eq!(totals("b"), vec![vec![9.0, 5.0, 6.0]]);
        assert_eq!(failed_attempts(&reqs), [1, 0, 0]);
    }
}
