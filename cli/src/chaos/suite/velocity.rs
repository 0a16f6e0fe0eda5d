//! The card-velocity workload's end of a scenario: the wait for its last alerts and totals,
//! and the check against a batch recomputation of the input as written.
//!
//! Three stages can each lose or repeat an effect: the payments' batch (windows, triggers),
//! the repartition hop (merchant totals) and the outbox's applier (PostgreSQL). So the check
//! counts each stage's own output: every merchant's update count and last total (read
//! committed), the outbox's records (one per alert, among those not purged yet: the
//! instances purge every second), and the alert table, whose trigger logs every write so
//! that a row written twice shows even when the second write changes nothing (an outbox
//! record twice, purged or not, is a row written twice).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::{Duration, Instant};

use super::super::reader::verify_config;
use super::Run;
use crate::workloads::card_velocity::{self, Expected, Payment, ALERTS_TABLE, ALERT_AT};
use kafka_eos_testkit::verify::read_to_end;

/// The alert table, and a log of every write to it (by a trigger, in the writing
/// transaction: a rolled-back write leaves no line).
pub(crate) fn alerts_ddl() -> String {
    format!(
        "CREATE TABLE {ALERTS_TABLE} (card text, window_start bigint, payments bigint NOT NULL, \
           PRIMARY KEY (card, window_start)); \
         CREATE TABLE alert_writes (card text, window_start bigint); \
         CREATE FUNCTION log_alert_write() RETURNS trigger LANGUAGE plpgsql AS \
           $$ BEGIN INSERT INTO alert_writes VALUES (NEW.card, NEW.window_start); RETURN NEW; END $$; \
         CREATE TRIGGER alert_writes AFTER INSERT OR UPDATE ON {ALERTS_TABLE} \
           FOR EACH ROW EXECUTE FUNCTION log_alert_write()"
    )
}

/// What the stages left, as read at the end of a scenario.
#[derive(Debug, Default)]
pub(crate) struct Streamed {
    /// Rows of the alert table: (card, window start) → (payments, writes).
    pub alerts: BTreeMap<(String, i64), (i64, u64)>,
    /// Committed outbox records, and how many distinct values among them.
    pub outbox: (u64, u64),
    /// Per merchant: the last streamed total and the number of updates.
    pub totals: BTreeMap<String, (i64, u64)>,
    /// Committed records in the late-payments topic.
    pub late: u64,
}

/// Anomalies by class, with an example of each.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Verdict {
    pub lost: u64,
    pub duplicate: u64,
    pub other: u64,
    pub examples: Vec<String>,
}

impl Verdict {
    fn count(&mut self, class: fn(&mut Verdict) -> &mut u64, n: u64, example: impl FnOnce() -> String) {
        if n > 0 {
            *class(self) += n;
            if self.examples.len() < 10 {
                self.examples.push(example());
            }
        }
    }
}

/// Compares what the stages left with the recomputation: a missing alert or merchant
/// update is lost; an alert written or sent twice, or a merchant updated more often than
/// it was paid, is a duplicate; anything else that differs (an alert that should not be, a
/// wrong count or total, a row the write log missed, a late payment where none is late) is
/// other.
pub(crate) fn compare(want: &Expected, got: &Streamed) -> Verdict {
    let mut v = Verdict::default();
    for key in &want.alerts {
        v.count(|v| &mut v.lost, u64::from(!got.alerts.contains_key(key)), || format!("alert {key:?} missing"));
    }
    for (key, &(payments, writes)) in &got.alerts {
        v.count(|v| &mut v.other, u64::from(!want.alerts.contains(key)), || format!("alert {key:?} unexpected"));
        let wrong = payments != ALERT_AT as i64;
        v.count(|v| &mut v.other, u64::from(wrong), || format!("alert {key:?} with {payments} payments"));
        v.count(|v| &mut v.duplicate, writes.saturating_sub(1), || format!("alert {key:?} written {writes} times"));
        // A row without a logged write means the log is not working: nothing it says counts.
        v.count(|v| &mut v.other, u64::from(writes == 0), || format!("alert {key:?} with no logged write"));
    }
    let (sent, distinct) = got.outbox;
    v.count(|v| &mut v.duplicate, sent - distinct.min(sent), || format!("{sent} outbox records, {distinct} distinct"));
    for (merchant, &(total, count)) in &want.merchants {
        let (streamed, updates) = got.totals.get(merchant).copied().unwrap_or((0, 0));
        v.count(
            |v| &mut v.lost,
            count.saturating_sub(updates),
            || format!("merchant {merchant}: {updates} updates for {count} payments"),
        );
        v.count(
            |v| &mut v.duplicate,
            updates.saturating_sub(count),
            || format!("merchant {merchant}: {updates} updates for {count} payments"),
        );
        let off = updates == count && streamed != total;
        v.count(|v| &mut v.other, u64::from(off), || format!("merchant {merchant}: total {streamed}, want {total}"));
    }
    for merchant in got.totals.keys().filter(|m| !want.merchants.contains_key(*m)) {
        v.count(|v| &mut v.other, 1, || format!("merchant {merchant} unexpected"));
    }
    v.count(|v| &mut v.other, got.late, || format!("{} late payments, none expected", got.late));
    v
}

impl Run<'_, '_> {
    /// The payments as written (a failed write is not part of the input), recomputed.
    fn velocity_expected(&self) -> Result<(Expected, u64), String> {
        let vc = verify_config(self.ctx.client, &self.input_topic, &self.output_topic, Duration::from_secs(60));
        let mut payments: Vec<Payment> = Vec::new();
        let mut undecodable = 0;
        read_to_end(&vc, &self.input_topic, Instant::now() + Duration::from_secs(120), |m| {
            use rdkafka::Message;
            match serde_json::from_slice(m.payload().unwrap_or_default()) {
                Ok(p) => payments.push(p),
                Err(_) => undecodable += 1,
            }
        })
        .map_err(|e| format!("reading the payments: {e}"))?;
        if undecodable > 0 {
            return Err(format!("{undecodable} input records are not payments"));
        }
        let n = payments.len() as u64;
        Ok((card_velocity::expected_from(payments), n))
    }

    /// Reads what the three stages left.
    fn velocity_streamed(&self) -> Result<Streamed, String> {
        let pg = self.sink.as_ref().and_then(|s| s.postgres()).ok_or("card velocity without its PostgreSQL")?;
        let psql = |sql: &str| pg.psql("postgres", sql).map_err(|e| format!("psql: {e}"));
        let mut got = Streamed::default();
        let writes = psql("SELECT card, window_start, count(*) FROM alert_writes GROUP BY 1, 2")?;
        let writes: HashMap<(String, i64), u64> = rows(&writes)
            .map(|f| ((f[0].to_string(), f[1].parse().unwrap_or(i64::MIN)), f[2].parse().unwrap_or(0)))
            .collect();
        for f in rows(&psql(&format!("SELECT card, window_start, payments FROM {ALERTS_TABLE}"))?) {
            let key = (f[0].to_string(), f[1].parse().unwrap_or(i64::MIN));
            let n = writes.get(&key).copied().unwrap_or(0);
            got.alerts.insert(key, (f[2].parse().unwrap_or(-1), n));
        }
        let vc = verify_config(self.ctx.client, &self.input_topic, &self.output_topic, Duration::from_secs(60));
        let deadline = Instant::now() + Duration::from_secs(120);
        let mut values = BTreeSet::new();
        let outbox = format!("{}-alerts-outbox", self.app);
        read_to_end(&vc, &outbox, deadline, |m| {
            use rdkafka::Message;
            got.outbox.0 += 1;
            values.insert(m.payload().unwrap_or_default().to_vec());
        })
        .map_err(|e| format!("reading {outbox}: {e}"))?;
        got.outbox.1 = values.len() as u64;
        got.totals = card_velocity::streamed_totals(&vc, &self.output_topic).map_err(|e| format!("totals: {e}"))?;
        let late = format!("{}-late", self.output_topic);
        read_to_end(&vc, &late, deadline, |_| got.late += 1).map_err(|e| format!("reading {late}: {e}"))?;
        Ok(got)
    }

    /// Once the group has committed every payment: waits until the alerts and totals are
    /// complete (the repartitioned records and the outbox are read after their upstream
    /// commits), then 3 s more for anything a replay would add; `false` if something is
    /// still missing after 2 minutes.
    pub(super) fn wait_velocity(&mut self) -> Result<bool, String> {
        let (want, _) = self.velocity_expected()?;
        let (started, deadline) = (Instant::now(), Instant::now() + Duration::from_secs(120));
        loop {
            let lost = compare(&want, &self.velocity_streamed()?).lost;
            if lost == 0 {
                self.note(format!("every alert and update arrived {:.1} s after the catch-up", secs(started)));
                self.pause(Duration::from_secs(3))?;
                return Ok(true);
            }
            if Instant::now() >= deadline {
                self.note(format!("{lost} alerts or merchant updates still missing 2 minutes after the catch-up"));
                return Ok(false);
            }
            self.pause(Duration::from_secs(1))?;
        }
    }

    /// Card velocity's check (see the module doc).
    pub(super) fn check_velocity(self, caught_up: bool) -> Result<(), String> {
        let (want, payments) = self.velocity_expected()?;
        let got = self.velocity_streamed()?;
        let v = compare(&want, &got);
        let t = self.fleet.totals();
        let r = &mut *self.result;
        r.records = payments;
        (r.anomalies.lost.at_end, r.anomalies.duplicate.at_end, r.anomalies.other.at_end) =
            (v.lost, v.duplicate, v.other);
        r.notes.push(format!(
            "card velocity: {payments} payments; {} alerts expected, {} rows in PostgreSQL, {} outbox records not purged; {} merchants, {} updates expected, {} streamed",
            want.alerts.len(),
            got.alerts.len(),
            got.outbox.0,
            want.merchants.len(),
            want.merchants.values().map(|m| m.1).sum::<u64>(),
            got.totals.values().map(|m| m.1).sum::<u64>(),
        ));
        r.notes.extend(v.examples);
        r.notes.extend(super::checks::fleet_notes(&self.fleet, &t));
        if !caught_up {
            return Err("the pipeline did not catch up (see notes); the counts above are as found".into());
        }
        Ok(())
    }
}

fn rows(out: &str) -> impl Iterator<Item = Vec<&str>> {
    out.lines().filter(|l| !l.trim().is_empty()).map(|l| l.split('|').collect::<Vec<_>>()).filter(|f| f.len() == 3)
}

fn secs(since: Instant) -> f64 {
    since.elapsed().as_secs_f64()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn want() -> Expected {
        let mut e = Expected::default();
        e.alerts.insert(("hot-1".into(), 0));
        e.merchants.insert("m0".into(), (500, 2));
        e
    }

    fn exact() -> Streamed {
        let mut s = Streamed::default();
        s.alerts.insert(("hot-1".into(), 0), (ALERT_AT as i64, 1));
        s.outbox = (1, 1);
        s.totals.insert("m0".into(), (500, 2));
        s
    }

    #[test]
    fn exact_results_have_no_anomaly_and_nothing_at_all_is_lost() {
        assert_eq!(compare(&want(), &exact()), Verdict::default());
        let none = compare(&want(), &Streamed::default());
        assert_eq!((none.lost, none.duplicate, none.other), (3, 0, 0), "{none:?}");
        assert_eq!(compare(&Expected::default(), &Streamed::default()), Verdict::default());
    }

    #[test]
    fn each_stage_s_repeat_is_a_duplicate_and_each_wrong_value_is_other() {
        let mut s = exact();
        s.alerts.insert(("hot-1".into(), 0), (ALERT_AT as i64, 2));
        s.outbox = (3, 1);
        s.totals.insert("m0".into(), (900, 3));
        let v = compare(&want(), &s);
        assert_eq!((v.lost, v.duplicate, v.other), (0, 1 + 2 + 1, 0), "{v:?}");

        let mut s = exact();
        s.alerts.insert(("card-9".into(), 300), (7, 1));
        s.totals.insert("m0".into(), (499, 2));
        s.late = 2;
        let v = compare(&want(), &s);
        assert_eq!((v.lost, v.duplicate, v.other), (0, 0, 2 + 1 + 2), "{v:?}");

        let mut s = exact();
        s.alerts.insert(("hot-1".into(), 0), (ALERT_AT as i64, 0));
        let v = compare(&want(), &s);
        assert_eq!((v.lost, v.duplicate, v.other), (0, 0, 1), "{v:?}");
    }
}
